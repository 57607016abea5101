"""Reading a flow document: YAML or JSON text into plain data, strictly and within bounds
(spec/11-flows.md §1).

Strict means: UTF-8, one document, no duplicate map keys, no YAML-only value types
(timestamps, binary, sets), no non-finite numbers, text map keys. Bounded means: the size is
checked before parsing, the nesting while parsing (so a deep document never reaches Python's
recursion limit), and the number of values while walking them (YAML aliases share nodes, so a
small file could otherwise expand into an exponential walk).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import yaml

from aos.flows.errors import FlowCheckError, FlowDecodeError, FlowTooLargeError, Problem, json_path
from aos.flows.limits import DefinitionLimits
from aos.kernel.cbor import INT_MAX, INT_MIN

if TYPE_CHECKING:
    from aos.flows.cfd import FlowDefinition

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
                return _parse_json(text)
            except _DuplicateKeyError as error:
                raise _UnreadableError(f"duplicate key {error.key!r}") from None
            except ValueError as json_error:
                # Not JSON; perhaps YAML's flow style (`{name: x, steps: [...]}`).
                try:
                    return _parse_yaml(text, limits.depth_max)
                except _UnreadableError as yaml_error:
                    what = f"neither JSON ({_json_problem(json_error)}) nor YAML ({yaml_error})"
                    raise _UnreadableError(what) from None
        return _parse_yaml(text, limits.depth_max)
    except _UnreadableError as error:
        raise FlowDecodeError(f"{source}: {error}", source=source) from None
    except _TooDeepError as error:
        message = f"{error.where}the document nests deeper than {limits.depth_max} maps and lists"
        raise FlowCheckError([Problem("flow.limit", "$", message)], source=source) from None


def _flow_language(text: str, source: str, limits: DefinitionLimits) -> Any:
    """A `.flow` file (spec/11 §11) compiles to the plain data of a CFD. Imported here, not
    above: the language reads its literals with `read_document`."""
    from aos.flows.flowlang import compile_text

    return compile_text(text, source=source, limits=limits)


def load_flow(
    data: bytes | str, *, source: str, limits: DefinitionLimits | None = None
) -> FlowDefinition:
    """Any flow document as a checked canonical definition: a `.flow` file (or arrow text) is
    compiled by `aos.flows.flowlang`, a NoETL playbook (`kind: Playbook` or a `noetl.io/...`
    apiVersion) by `aos.flows.playbook`, anything else is read as a canonical flow definition
    (spec/11). The CLI and the HTTP API read files through this."""
    # Imported here: both front ends import this module's reader.
    from aos.flows import playbook
    from aos.flows.cfd import DEFAULT_LIMITS, definition_from_value, looks_like_flow_language

    bounds = limits or DEFAULT_LIMITS
    value = read_document(data, source=source, limits=bounds)
    if isinstance(value, str) and looks_like_flow_language(value):
        # Arrow text with no `.flow` name (an HTTP deploy without one, say): YAML reads it as
        # one string, which is never a definition.
        value = _flow_language(value, source, bounds)
    if playbook.is_playbook(value):
        return playbook.definition_of(value, source=source, limits=bounds)
    return definition_from_value(value, source=source, limits=bounds)


class _UnreadableError(Exception):
    """Why a text is not a document; becomes a FlowDecodeError naming the source."""


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


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_refuse_constant)
    except RecursionError:
        # Deeper than the interpreter's stack allows, hence far deeper than depth_max.
        raise _TooDeepError(None) from None


def _json_problem(error: Exception) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"line {error.lineno}, column {error.colno}: {error.msg}"
    return str(error)


# --------------------------------------------------------------------------------------------
# YAML


class _TooDeepError(yaml.YAMLError):
    def __init__(self, mark: Any) -> None:
        super().__init__("too deep")
        self.where = _where(mark)


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate keys and counting nesting as it composes."""

    def __init__(self, stream: str, depth_max: int) -> None:
        super().__init__(stream)
        self.depth_max = depth_max
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > self.depth_max:
                parser: Any = self  # PyYAML's parser methods are untyped
                raise _TooDeepError(parser.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base` merges; keys written beside it override those
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # an unhashable key: the base class refuses it
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


def _parse_yaml(text: str, depth_max: int) -> Any:
    try:
        # The reader checks the characters as it is constructed: inside the `try` too.
        loader = _StrictLoader(text, depth_max)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except _TooDeepError:
        raise
    except RecursionError:
        raise _TooDeepError(None) from None
    except (yaml.YAMLError, ValueError) as error:
        # ValueError: an integer too long to convert, text the reader cannot decode.
        raise _UnreadableError(_yaml_problem(error)) from None


def _yaml_problem(error: Exception) -> str:
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        what = error.problem or error.context or "invalid YAML"
        return f"{_where(mark)}{what}"
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _where(mark: Any) -> str:
    if mark is None:
        return ""
    return f"line {mark.line + 1}, column {mark.column + 1}: "


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
