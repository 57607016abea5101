"""Reading a flow document: YAML or JSON text into plain data, strictly and within bounds
(spec/11-flows.md §1).

Strict means: UTF-8, one document, no duplicate map keys, no YAML-only value types
(timestamps, binary, sets), no non-finite numbers, text map keys. Bounded means: the size is
checked before parsing; the nesting and the number of values while parsing, YAML aliases
counted as the values they repeat (kernel/text/yamltext.py, so a small file can never expand into
an exponential walk); and both again while walking the values.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from aos.flows.errors import FlowCheckError, FlowDecodeError, FlowTooLargeError, Problem, json_path
from aos.flows.limits import DefinitionLimits
from aos.kernel.cbor import INT_MAX, INT_MIN
from aos.kernel.text import yamltext

if TYPE_CHECKING:
    from aos.flows.define.cfd import FlowDefinition

_BOM = "\ufeff"
_YAML_TYPE_HINTS = {
    "datetime": "a YAML timestamp; quote it to keep it as text",
    "date": "a YAML date; quote it to keep it as text",
    "bytes": "YAML binary data; flows hold text, numbers, booleans, null, lists and maps",
    "set": "a YAML set; write a list",
    "tuple": "a YAML ordered map or pairs; write a map or a list",
}


def read_document(data: bytes | str, *, source: str, limits: DefinitionLimits) -> Any:
    """Parse one YAML or JSON document (JSON when it starts with `{` or `[` and parses as
    JSON, YAML otherwise), or compile a `.flow` file (by its name) to one. Raises
    FlowTooLargeError, FlowDecodeError, or FlowCheckError (`flow.limit`) for a document nested
    too deeply; a `.flow` file's own errors are FlowLangErrors (`flow.lang.*`)."""
    text = _text(data, source, limits.definition_bytes_max)
    if source.endswith(".flow"):
        return _flow_language(text, source, limits)
    try:
        if text.lstrip()[:1] in ("{", "["):
            try:
                return _parse_json(text, limits.depth_max)
            except _DuplicateKeyError as error:
                raise _UnreadableError(f"duplicate key {error.key!r}") from None
            except ValueError as json_error:
                # Not JSON; perhaps YAML's flow style (`{name: x, steps: [...]}`).
                try:
                    return _parse_yaml(text, limits)
                except _UnreadableError as yaml_error:
                    what = f"neither JSON ({_json_problem(json_error)}) nor YAML ({yaml_error})"
                    raise _UnreadableError(what) from None
        return _parse_yaml(text, limits)
    except _UnreadableError as error:
        raise FlowDecodeError(f"{source}: {error}", source=source) from None
    except _OverBoundError as error:
        raise FlowCheckError([Problem("flow.limit", "$", str(error))], source=source) from None


def _flow_language(text: str, source: str, limits: DefinitionLimits) -> Any:
    """A `.flow` file (spec/11 §11) compiles to the plain data of a CFD. Imported here, not
    above: the language reads its literals with `read_document`."""
    from aos.flows.define.flowlang import compile_text

    return compile_text(text, source=source, limits=limits)


def load_flow(
    data: bytes | str, *, source: str, limits: DefinitionLimits | None = None
) -> FlowDefinition:
    """Any flow document as a checked canonical definition: a `.flow` file (or arrow text) is
    compiled by `aos.flows.define.flowlang`, a NoETL playbook (`kind: Playbook` or a `noetl.io/...`
    apiVersion) by `aos.flows.define.playbook`, anything else is read as a canonical flow definition
    (spec/11). The CLI and the HTTP API read files through this."""
    # Imported here: both front ends import this module's reader.
    from aos.flows.define import playbook
    from aos.flows.define.cfd import DEFAULT_LIMITS, definition_from_value, looks_like_flow_language

    bounds = limits or DEFAULT_LIMITS
    value = read_document(data, source=source, limits=bounds)
    if isinstance(value, str) and looks_like_flow_language(value):
        # Arrow text with no `.flow` name (an HTTP deploy without one, say): YAML reads it as
        # one string, which is never a definition.
        value = _flow_language(value, source, bounds)
    if playbook.is_playbook(value):
        return playbook.definition_of(value, source=source, limits=bounds)
    return definition_from_value(value, source=source, limits=bounds)


def source_warnings(
    data: bytes | str, defn: FlowDefinition, *, source: str, limits: DefinitionLimits | None = None
) -> list[Problem]:
    """What `aos flow check` warns of in a document `load_flow` accepted as `defn`: template
    references nothing provides (flows/define/checks.py), at the paths of the document as written."""
    from aos.flows.define import flowlang, playbook
    from aos.flows.define.cfd import DEFAULT_LIMITS
    from aos.flows.define.checks import reference_warnings

    bounds = limits or DEFAULT_LIMITS
    found = reference_warnings(defn, bounds)
    if not found or flowlang.is_flow_source(source):
        return found
    if playbook.is_playbook(read_document(data, source=source, limits=bounds)):
        return [playbook.playbook_problem(problem) for problem in found]
    return found


class _UnreadableError(Exception):
    """Why a text is not a document; becomes a FlowDecodeError naming the source."""


class _OverBoundError(Exception):
    """A document nested too deeply, or with too many values counting its aliases expanded;
    becomes a `flow.limit` problem."""


def _text(data: bytes | str, source: str, bytes_max: int) -> str:
    # A str is at least as many bytes as characters: refuse a huge one before encoding it.
    size = len(data)
    if size <= bytes_max and isinstance(data, str):
        try:
            size = len(data.encode("utf-8"))
        except UnicodeEncodeError:
            raise FlowDecodeError(
                f"{source}: the text is not valid Unicode", source=source
            ) from None
    if size > bytes_max:
        raise FlowTooLargeError(
            f"{source}: the definition is {size} bytes; the limit is {bytes_max}",
            source=source,
            size=size,
            limit=bytes_max,
        )
    if isinstance(data, str):
        text = data
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            message = f"{source}: not UTF-8 (byte {error.start})"
            raise FlowDecodeError(message, source=source) from None
    return text[1:] if text.startswith(_BOM) else text


# --------------------------------------------------------------------------------------------
# JSON


class _DuplicateKeyError(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise _DuplicateKeyError(key)
        mapping[key] = value
    return mapping


def _refuse_constant(name: str) -> Any:
    # Not a ValueError: the text is JSON, so it must not fall back to YAML (which reads
    # NaN as text).
    raise _UnreadableError(f"{name} is not a JSON number (numbers are finite)")


def _parse_json(text: str, depth_max: int) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_refuse_constant)
    except RecursionError:
        # Deeper than the interpreter's stack allows, hence far deeper than depth_max.
        raise _OverBoundError(
            f"the document nests deeper than {depth_max} maps and lists"
        ) from None


def _json_problem(error: Exception) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"line {error.lineno}, column {error.colno}: {error.msg}"
    return str(error)


# --------------------------------------------------------------------------------------------
# YAML


def _parse_yaml(text: str, limits: DefinitionLimits) -> Any:
    """The bounded YAML reader (kernel/text/yamltext.py), its aliases counted expanded against the
    definition's own value bound; timestamps are read as such, to be refused with a hint."""
    try:
        return yamltext.parse(
            text,
            depth_max=limits.depth_max,
            nodes_max=limits.value_nodes_max,
            timestamps=True,
        )
    except (yamltext.YamlTooDeepError, yamltext.YamlTooLargeError) as error:
        raise _OverBoundError(error.message) from None
    except yamltext.YamlInvalidError as error:
        raise _UnreadableError(error.message) from None


# --------------------------------------------------------------------------------------------
# The values


def check_values(value: Any, limits: DefinitionLimits) -> list[Problem]:
    """Every problem of the parsed values: types a flow cannot hold, text too long. Raises
    FlowCheckError at once when the nesting or the number of values is over its bound, since
    walking further would be unbounded."""
    walk = _Walk(limits)
    walk.visit(value, 1)
    return walk.problems


class _Walk:
    def __init__(self, limits: DefinitionLimits) -> None:
        self.limits = limits
        self.nodes = 0
        self.parts: list[str | int] = []
        self.problems: list[Problem] = []

    def add(self, code: str, message: str) -> None:
        self.problems.append(Problem(code, json_path(self.parts), message))

    def stop(self, message: str) -> FlowCheckError:
        return FlowCheckError(
            [*self.problems, Problem("flow.limit", json_path(self.parts), message)]
        )

    def visit(self, value: Any, depth: int) -> None:
        self.nodes += 1
        if self.nodes > self.limits.value_nodes_max:
            raise self.stop(f"the document has more than {self.limits.value_nodes_max} values")
        kind = type(value)
        if kind is dict or kind is list:
            if depth > self.limits.depth_max:
                raise self.stop(f"nested deeper than {self.limits.depth_max} maps and lists")
            if kind is dict:
                self.visit_map(value, depth)
            else:
                self.visit_list(value, depth)
        else:
            self.visit_scalar(value)

    def visit_map(self, value: dict[Any, Any], depth: int) -> None:
        for key, item in value.items():
            if type(key) is not str:
                self.add("flow.schema", f"the map key {key!r} is not text{_key_hint(key)}")
                continue
            self.parts.append(key)
            if len(key) > self.limits.text_length_max:
                self.add("flow.limit", f"a key over {self.limits.text_length_max} characters")
            self.visit(item, depth + 1)
            self.parts.pop()

    def visit_list(self, value: list[Any], depth: int) -> None:
        for index, item in enumerate(value):
            self.parts.append(index)
            self.visit(item, depth + 1)
            self.parts.pop()

    def visit_scalar(self, value: Any) -> None:
        kind = type(value)
        if kind is str:
            if len(value) > self.limits.text_length_max:
                limit = self.limits.text_length_max
                self.add("flow.limit", f"text of {len(value)} characters; the limit is {limit}")
        elif kind is int:
            if not INT_MIN <= value <= INT_MAX:
                self.add("flow.schema", "an integer outside -2**64 .. 2**64-1")
        elif kind is float:
            if not math.isfinite(value):
                self.add("flow.schema", f"{value} is not a finite number")
        elif value is not None and kind is not bool:
            hint = _YAML_TYPE_HINTS.get(kind.__name__, f"a value of type {kind.__name__}")
            self.add("flow.schema", f"not a flow value: {hint}")


def _key_hint(key: Any) -> str:
    if isinstance(key, bool) or key is None:
        return " (YAML reads on/off/yes/no/null unquoted as booleans or null: quote the key)"
    return " (quote it)"
