"""Templates and guards (spec/11 §1.3, §3.6).

A string is a template iff it contains `{{` or `{%`. A whole-string plain path
(`{{ a.b[0].c }}`) is resolved natively and yields the value itself; anything else renders
in a sandboxed Jinja2 environment and the text is read back as a literal when it looks like
one. Guards are templates (truthy) or JSONPath queries over the namespace.

Each rendering has a `Mode` (spec/11 §3.6): `CLASSIC` (an `aos.flow/1` definition: strict
undefined, `| tojson` read back like any text), and for `aos.flow/2` NoETL 2.13.1's two
contexts, `ROUTING` (strict undefined, as its server renders admission, arcs and a step's
`set_ctx`) and `PIPELINE` (Jinja's lenient undefined, as its worker renders a task's fields
and policies); in both a template using `| tojson` stays the text it rendered.

Compiled templates and compiled JSONPath queries are memoized by their source text (pure,
bounded). One Jinja2 environment per mode serves every step (made at import, so they are in
the component's snapshot): making one costs about as much as a small step inside a component.
Each step hands it that step's blob reader before it renders, so that a template walking into
a `{"$ref"}` result loads it; nothing else in it changes between steps."""

from __future__ import annotations

import ast
import base64
import encodings.unicode_escape  # noqa: F401 -- see below
import json
import math
import re
from typing import Any

import jinja2.debug  # noqa: F401 -- see below
import jsonpath
from jinja2 import ChainableUndefined, StrictUndefined, Undefined, nodes
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

# A component has no filesystem after its snapshot: what Jinja2 imports lazily must be
# imported here. Its lexer decodes string literals with the `unicode_escape` codec, and a
# template that raises goes through `jinja2.debug` (found by running the tests with every
# import after `import app` flagged).
from aos_flow.blobs import Blobs, is_ref, remember
from aos_flow.errors import ExprError

CODE_MAX = 1024
JSONPATH_MAX = 1024
_CODE: dict[str, Any] = {}
_TEMPLATES: dict[str, Any] = {}  # by mode and source text, bound to the mode's environment
_JSONPATH: dict[str, Any] = {}
_NAMES_READ: dict[str, tuple[str, ...]] = {}  # by namespace and source text

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_PLAIN_PATH = re.compile(r"\{\{\s*(" + _NAME + r"(?:\." + _NAME + r"|\[\d+\])*)\s*\}\}")
_SEGMENT = re.compile(r"\.(" + _NAME + r")|\[(\d+)\]")
_INT = re.compile(r"[-+]?\d+")
_FLOAT = re.compile(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?")
_TOJSON = re.compile(r"\|\s*tojson\b")
_FALSY_TEXT = ("false", "0", "no", "none", "")
_LITERAL_NAMES = frozenset({"true", "false", "none", "True", "False", "None"})
"""Jinja2's literals: `{{ true }}` is the constant, never a lookup of a name `true`."""
CBOR_INT_MIN = -(2**64)
CBOR_INT_MAX = 2**64 - 1


def is_template(value: Any) -> bool:
    return type(value) is str and ("{{" in value or "{%" in value)


def truthy(value: Any) -> bool:
    """Booleans as they are; text `false/0/no/none/""` (any case) is false."""
    if value is None or value is False:
        return False
    if value is True:
        return True
    if type(value) is str:
        return value.strip().lower() not in _FALSY_TEXT
    if type(value) in (int, float):
        return value != 0
    if type(value) in (list, dict, bytes):
        return len(value) > 0
    return True


class Mode:
    """How a context renders: with Jinja's lenient undefined or strict, NoETL's `tojson`
    (its text kept as text) or aos's (read back like any other text), and whether a result
    reads as NoETL's `TaskResultProxy` (`proxy`: `x.data` and `x.result` of a map without
    that key are the map, `x.result` of a list the list). Each mode has its own environment,
    made at import."""

    __slots__ = ("env", "lenient", "name", "noetl", "proxy")

    def __init__(self, name: str, *, lenient: bool, noetl: bool, proxy: bool = False) -> None:
        self.name = name
        self.lenient = lenient
        self.noetl = noetl
        self.proxy = proxy
        self.env = _Environment(
            _LenientUndefined if lenient else _ChainedUndefined,
            _noetl_tojson if noetl else _tojson,
            proxy,
        )


class Evaluator:
    """Renders templates and evaluates guards for one step."""

    def __init__(self, blobs: Blobs) -> None:
        self.blobs = blobs

    def env(self, mode: Mode) -> _Environment:
        """The mode's shared environment, reading this step's blobs."""
        mode.env.blobs = self.blobs
        return mode.env

    def render(self, value: Any, scope: dict[str, Any], mode: Mode | None = None) -> Any:
        """A TEMPLATE: strings that are templates render, containers are rebuilt (so a value
        taken from the definition is never shared with the state), the rest is kept."""
        mode = mode or CLASSIC
        if type(value) is str:
            return self.render_text(value, scope, mode) if is_template(value) else value
        if type(value) is dict:
            return {key: self.render(item, scope, mode) for key, item in value.items()}
        if type(value) is list:
            return [self.render(item, scope, mode) for item in value]
        return value

    def render_text(self, text: str, scope: dict[str, Any], mode: Mode | None = None) -> Any:
        mode = mode or CLASSIC
        plain = _PLAIN_PATH.fullmatch(text)
        if plain is not None and plain.group(1) not in _LITERAL_NAMES:
            try:
                return self.resolve(plain.group(1), scope, mode.proxy)
            except ExprError:
                if not mode.lenient:
                    raise  # lenient: Jinja renders what is not there (as "")
        env = self.env(mode)
        template = _template(env, text, mode.name)
        if mode.proxy:  # NoETL's namespaces are plain maps: no proxy reading on them
            env.plain = frozenset(id(scope[name]) for name in PLAIN_NAMESPACES if name in scope)
        try:
            rendered = template.render(scope)
        except Exception as error:  # Jinja raises many types; each is an expression error
            raise ExprError(f"{type(error).__name__}: {error}") from None
        if mode.noetl and _TOJSON.search(text) is not None:
            return rendered  # NoETL: "the user explicitly requested JSON string format"
        return read_back(rendered)

    def resolve(self, path: str, scope: dict[str, Any], proxy: bool = False) -> Any:
        """A plain dotted path, natively: map keys before attributes, refs dereferenced
        when the path walks into them; with `proxy`, `.data` and `.result` as NoETL's
        `TaskResultProxy` reads them (but not from its plain namespaces)."""
        head = re.match(_NAME, path)
        assert head is not None
        if head.group(0) not in scope:
            raise ExprError(f"'{head.group(0)}' is undefined")
        value = scope[head.group(0)]
        proxy = proxy and head.group(0) not in PLAIN_NAMESPACES
        for match in _SEGMENT.finditer(path, head.end()):
            key: Any = match.group(1) if match.group(1) is not None else int(match.group(2))
            if proxy and match.group(1) is not None and _proxied(self.blobs, value, key):
                continue
            value = _step_into(self.blobs, value, key, path)
        return value

    def guard(
        self, guard: dict[str, str] | None, scope: dict[str, Any], mode: Mode | None = None
    ) -> bool:
        """Whether a guard holds (null holds). Raises ExprError when it cannot be evaluated:
        the caller decides that this is false and records it."""
        if guard is None:
            return True
        if "jsonpath" in guard:
            query = _jsonpath(guard["jsonpath"])
            try:
                nodes = query.findall(scope)
            except Exception as error:
                raise ExprError(f"{type(error).__name__}: {error}") from None
            return any(node is not None and node is not False for node in nodes)
        text = guard["template"]
        if not is_template(text):  # a bare guard is an expression: `x > 1` means `{{ x > 1 }}`
            text = "{{ " + text + " }}"
        return truthy(self.render_text(text, scope, mode))


def _template(env: _Environment, text: str, mode: str) -> Any:
    """The template of `text` bound to the mode's `env` (Jinja's compiled code is the same in
    every mode's environment: the undefined class and filters are looked up when it renders)."""
    key = f"{mode}\0{text}"  # no mode's name holds a NUL: the key's first one ends it
    template = _TEMPLATES.get(key)
    if template is None:
        code = _compiled(env, text)
        template = env.template_class.from_code(env, code, env.make_globals(None))
        remember(_TEMPLATES, key, template, CODE_MAX)
    return template


def names_read(text: str, namespace: str) -> tuple[str, ...]:
    """The names a template's own text reads of `namespace` literally (`NS.NAME`,
    `NS['NAME']`), sorted; none when it does not parse. What the template reaches of the
    namespace any other way (`NS[x]`, `NS | tojson`) names nothing: only literal names are
    the definition's (spec/11 §1.7)."""
    key = f"{namespace}\0{text}"
    found = _NAMES_READ.get(key)
    if found is None:
        try:
            tree = CLASSIC.env.parse(text)
        except Exception:  # the rendering reports it; a template that does not parse names none
            tree = None
        found = () if tree is None else _literal_names(tree, namespace)
        remember(_NAMES_READ, key, found, CODE_MAX)
    return found


def _literal_names(tree: Any, namespace: str) -> tuple[str, ...]:
    names: set[str] = set()
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        target = node.node
        if type(target) is not nodes.Name or target.name != namespace:
            continue
        if type(node) is nodes.Getattr:
            names.add(node.attr)
        elif type(node.arg) is nodes.Const and type(node.arg.value) is str:
            names.add(node.arg.value)
    return tuple(sorted(names))


def _step_into(blobs: Blobs, value: Any, key: Any, path: str) -> Any:
    if is_ref(value) and key not in ("$ref", "size", "schema_hint"):
        value = blobs.deref(value)
    if type(value) is dict and key in value:
        return value[key]
    if type(value) is list and type(key) is int and key < len(value):
        return value[key]
    raise ExprError(f"{path}: no {key!r} in {_describe(value)}")


PLAIN_NAMESPACES = frozenset(
    {"work", "workload", "context", "env", "job", "input", "data", "results", "ctx", "iter"}
    | {"loop", "event"}
)
"""The names NoETL's `render_template` keeps plain maps (`noetl/core/dsl/render.py`): every
other map at the top of the scope reads as a `TaskResultProxy`."""
PROXY_KEYS = ("data", "result")


def _proxied(blobs: Blobs, value: Any, key: str) -> bool:
    """Whether `value.key` is `value` itself, as NoETL's `TaskResultProxy` reads it: `data`
    and `result` of a map without that key, `result` of a list."""
    if key not in PROXY_KEYS:
        return False
    if is_ref(value):
        value = blobs.deref(value)
    if type(value) is dict:
        return key not in value
    return type(value) is list and key == "result"


def _describe(value: Any) -> str:
    return type(value).__name__ if value is not None else "null"


def _compiled(env: Any, text: str) -> Any:
    cached = _CODE.get(text)
    if cached is None:
        try:
            cached = ("ok", env.compile(text))
        except Exception as error:
            cached = ("error", f"{type(error).__name__}: {error}")
        remember(_CODE, text, cached, CODE_MAX)
    if cached[0] == "error":
        raise ExprError(cached[1])
    return cached[1]


def _jsonpath(text: str) -> Any:
    cached = _JSONPATH.get(text)
    if cached is None:
        try:
            cached = ("ok", jsonpath.compile(text))
        except Exception as error:
            cached = ("error", f"{type(error).__name__}: {error}")
        remember(_JSONPATH, text, cached, JSONPATH_MAX)
    if cached[0] == "error":
        raise ExprError(cached[1])
    return cached[1]


# -- literal read-back --------------------------------------------------------------------------


def read_back(text: str) -> Any:
    """Rendered text as the literal it looks like (JSON or Python literal, booleans, numbers,
    null/none), else the text itself."""
    stripped = text.strip()
    lowered = stripped.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none"):
        return None
    if _INT.fullmatch(stripped):
        number = int(stripped)
        return number if CBOR_INT_MIN <= number <= CBOR_INT_MAX else text
    if _FLOAT.fullmatch(stripped):
        real = float(stripped)
        return real if math.isfinite(real) else text
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        return _structured(stripped, text)
    return text


def _structured(stripped: str, text: str) -> Any:
    try:
        value = json.loads(stripped, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        try:
            value = ast.literal_eval(stripped)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return text
    try:
        return _plain(value)
    except ValueError:
        return text


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a value")


def _plain(value: Any) -> Any:
    """The CBOR data model only: tuples become lists; sets, complex and non-finite floats
    are not values (the text is kept instead)."""
    if value is None or type(value) in (bool, str, bytes):
        return value
    if type(value) is int:
        if not CBOR_INT_MIN <= value <= CBOR_INT_MAX:
            raise ValueError("integer out of range")
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise ValueError("not finite")
        return value
    if type(value) in (list, tuple):
        return [_plain(item) for item in value]
    if type(value) is dict:
        if not all(type(key) in (str, int) for key in value):
            raise ValueError("map keys are text or integers")
        return {key: _plain(item) for key, item in value.items()}
    raise ValueError(f"{type(value).__name__} is not a value")


# -- the Jinja2 environment -------------------------------------------------------------------


class _ChainedUndefined(StrictUndefined):
    """Strict wherever it is used (printed, compared, tested for truth, iterated), but a path
    walks on through it, so `a.b.c | default(x)` holds when `a` has no `b` (seed 003 §12 reads
    `outcome.result.data.paging.hasMore | default(false)` of outcomes that have no result)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __getitem__(self, _name: Any) -> Any:
        return self


class _LenientUndefined(ChainableUndefined):
    """Jinja's lenient undefined (printed as nothing, false, empty when iterated, unequal to
    every value; NoETL's worker renders with it), through which a path walks on too."""

    __slots__ = ()


class _LoadingContext(Context):
    """A name that holds a result stored by reference stands for the result (loaded)."""

    def resolve_or_missing(self, key: str) -> Any:
        found = super().resolve_or_missing(key)
        return self.environment.loaded(found)  # type: ignore[attr-defined]


class _Environment(ImmutableSandboxedEnvironment):
    """Sandboxed; map keys win over attributes (`r.items` is the key `items`), and
    references are loaded wherever a template reaches them (a name, an attribute, an item),
    so a result stored by reference reads as the result itself."""

    context_class = _LoadingContext

    def __init__(self, undefined: type[Undefined], tojson: Any, proxy: bool) -> None:
        super().__init__(undefined=undefined, autoescape=False, keep_trailing_newline=True)
        self.blobs: Blobs | None = None  # the rendering step's (`Evaluator.env`)
        self.proxy = proxy
        self.plain: frozenset[int] = frozenset()  # the rendering scope's plain namespaces
        self.filters.update(FILTERS, tojson=tojson)
        self.globals.update(FUNCTIONS, tojson=tojson)

    def getattr(self, obj: Any, attribute: str) -> Any:
        obj = self._loaded(obj, attribute)
        if type(obj) is dict and attribute in obj:
            return self.loaded(obj[attribute])
        proxied = type(obj) is dict or (type(obj) is list and attribute == "result")
        if self.proxy and proxied and attribute in PROXY_KEYS and id(obj) not in self.plain:
            return obj  # NoETL's `TaskResultProxy`
        return self.loaded(super().getattr(obj, attribute))

    def getitem(self, obj: Any, argument: Any) -> Any:
        return self.loaded(super().getitem(self._loaded(obj, argument), argument))

    def loaded(self, value: Any) -> Any:
        """`value`, or what it references."""
        return self.blobs.deref(value) if is_ref(value) and self.blobs is not None else value

    def _loaded(self, obj: Any, key: Any) -> Any:
        if key in ("$ref", "size", "schema_hint"):
            return obj
        return self.loaded(obj)


def _defined(value: Any) -> bool:
    return value is not None and not isinstance(value, Undefined)


def _tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(
        value,
        sort_keys=True,
        ensure_ascii=False,
        indent=indent,
        separators=None if indent else (",", ":"),
        default=_json_default,
    )


def _noetl_tojson(value: Any, indent: int | None = None) -> str:
    """NoETL's `tojson` (`noetl/core/dsl/render.py`, `add_b64encode_filter`): Python's
    `json.dumps` as it is (keys in order, `", "` and `": "`, non-ASCII escaped), `null` for
    what is not there."""
    return json.dumps(value, indent=indent, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, _LenientUndefined):
        return None  # as NoETL's `tojson`: what is not there is `null`
    if type(value) is bytes:
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON")


def _b64encode(value: Any) -> str:
    data = value if type(value) is bytes else str(value).encode("utf-8")
    return base64.b64encode(data).decode("ascii")


def _coalesce(*values: Any) -> Any:
    for value in values:
        if _defined(value):
            return value
    return None


def _concat(*values: Any) -> Any:
    if values and all(type(value) is list for value in values):
        return [item for value in values for item in value]
    return "".join("" if not _defined(value) else str(value) for value in values)


def _add(left: Any, right: Any) -> Any:
    if type(left) is dict and type(right) is dict:
        return {**left, **right}
    return left + right


def _if(condition: Any, then: Any = None, otherwise: Any = None) -> Any:
    return then if truthy(condition) else otherwise


def _is_null_or_whitespace(value: Any) -> bool:
    return not _defined(value) or (type(value) is str and not value.strip())


def _length(value: Any) -> int:
    return len(value) if _defined(value) else 0


def _upper(value: Any) -> str:
    return str(value).upper()


def _first(value: Any) -> Any:
    for item in value:
        return item
    return None


def merge_objects(*values: Any) -> dict[str, Any]:
    """Deep merge of maps, left to right: maps merge, anything else the right side wins."""
    merged: dict[str, Any] = {}
    for value in values:
        if type(value) is dict:
            merged = deep_merge(merged, value)
    return merged


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """A new map: `over` deep-merged onto `base` (neither is modified)."""
    merged = dict(base)
    for key, value in over.items():
        if type(value) is dict and type(merged.get(key)) is dict:
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


FILTERS = {
    "tojson": _tojson,
    "b64encode": _b64encode,
    "coalesce": _coalesce,
    "concat": _concat,
    "add": _add,
    "if": _if,
    "is_null_or_whitespace": _is_null_or_whitespace,
    "merge_objects": merge_objects,
}
FUNCTIONS = {
    **FILTERS,
    "length": _length,
    "upper": _upper,
    "first": _first,
}

CLASSIC = Mode("classic", lenient=False, noetl=False)
"""Every context of an `aos.flow/1` definition."""
ROUTING = Mode("routing", lenient=False, noetl=True)
"""`aos.flow/2`: admission, arcs (`when`, `args`), a loop's `in`, a step's `set_ctx`."""
PIPELINE = Mode("pipeline", lenient=True, noetl=True)
"""`aos.flow/2`: a step's tasks' `when` and policy rules."""
TASK = Mode("task", lenient=True, noetl=True, proxy=True)
"""`aos.flow/2`: a task's tool fields and `args`, which NoETL renders with `render_template`
(results read as its `TaskResultProxy`)."""
