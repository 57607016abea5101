"""Bounded YAML text: the one reader for YAML that comes from outside (AIR manifests and
definition files, flow documents, the tool config, secrets files).

PyYAML's safe loader builds each node once and lets aliases share it, so a few hundred bytes
of nested aliases (a "billion laughs") parse at once into a value whose every later walk
(pydantic, `cbor.from_json`, a hash, a merge key's flattening) is exponential. This reader
counts, as it composes, every node **with aliases expanded**: an alias adds the size of the
node it names, known once that node is composed, so the count costs one addition per alias
and a document past `nodes_max` is refused before anything walks it. Nesting is counted the
same way (`depth_max`: an alias reaches as deep as the node it names, from where it stands),
so no walk of a document reaches Python's recursion limit, and an alias to a node that
contains it (a cycle, which PyYAML would build) is refused.

Strict as well: no duplicate map keys (YAML would keep the last), merge keys (`<<: *base`)
allowed; dates stay text unless the caller asks for YAML's timestamps.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from aos.kernel.errors import InvalidInputError

YAML_DEPTH_MAX_DEFAULT = 64
"""Most nested maps and lists (the JSON reader's bound, kernel/text/jsontext.py)."""
YAML_NODES_MAX_DEFAULT = 1_000_000
"""Most nodes of one stream, every alias counted as the nodes it stands for."""
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlInvalidError(InvalidInputError):
    """Text that is not YAML the reader accepts (syntax, duplicate keys, undefined aliases)."""

    code = "input.invalid_yaml"
    hint = "one YAML document of maps, lists and scalars, no duplicate keys"


class YamlTooDeepError(InvalidInputError):
    """YAML nested more deeply than the reader's bound."""

    code = "input.yaml_too_deep"
    hint = "YAML values nest at most 64 levels (yaml_depth_max)"


class YamlTooLargeError(InvalidInputError):
    """YAML whose nodes, with every alias expanded, are more than the reader's bound: an
    alias bomb, or a document far larger than any the reader's callers take."""

    code = "input.yaml_too_large"
    hint = (
        "a YAML stream has at most 1,000,000 values counting each alias as the values it "
        "repeats (yaml_nodes_max): write the data out, or use fewer nested aliases"
    )


def parse(
    text: str,
    *,
    depth_max: int = YAML_DEPTH_MAX_DEFAULT,
    nodes_max: int = YAML_NODES_MAX_DEFAULT,
    timestamps: bool = False,
) -> Any:
    """The one document `text` holds (None when it is empty), or a typed error."""
    documents = parse_all(text, depth_max=depth_max, nodes_max=nodes_max, timestamps=timestamps)
    if len(documents) > 1:
        raise YamlInvalidError(f"{len(documents)} documents; one was expected")
    return documents[0] if documents else None


def parse_all(
    text: str,
    *,
    depth_max: int = YAML_DEPTH_MAX_DEFAULT,
    nodes_max: int = YAML_NODES_MAX_DEFAULT,
    timestamps: bool = False,
) -> list[Any]:
    """Every document of a YAML stream, in order (the bounds hold for the stream as a whole)."""
    loader_class = _TimestampLoader if timestamps else _BoundedLoader
    with _read_errors(depth_max):
        # The reader checks the characters as it is constructed: inside the `with` too.
        loader: Any = loader_class(text, depth_max, nodes_max)  # PyYAML's methods are untyped
        try:
            documents = []
            while loader.check_data():
                documents.append(loader.get_data())
            return documents
        finally:
            loader.dispose()


def compose(
    text: str,
    *,
    depth_max: int = YAML_DEPTH_MAX_DEFAULT,
    nodes_max: int = YAML_NODES_MAX_DEFAULT,
) -> yaml.Node | None:
    """The node tree of the one document `text` holds (None when empty), under the same
    bounds as `parse`: for readers that need where a value was written (its `start_mark`)."""
    with _read_errors(depth_max):
        loader: Any = _BoundedLoader(text, depth_max, nodes_max)  # PyYAML's methods are untyped
        try:
            node: yaml.Node | None = loader.get_single_node()
            return node
        finally:
            loader.dispose()


@contextmanager
def _read_errors(depth_max: int) -> Iterator[None]:
    """PyYAML's errors as the reader's typed ones."""
    try:
        yield
    except (YamlTooDeepError, YamlTooLargeError):
        raise
    except RecursionError:
        raise _too_deep(None, depth_max) from None
    except (yaml.YAMLError, ValueError, TypeError) as error:
        # ValueError: an integer too long to convert, text the reader cannot decode;
        # TypeError: a key PyYAML cannot hash while merging.
        mark = _mark(error)
        raise YamlInvalidError(f"{_where(mark)}{_problem(error)}", **_line(mark)) from None


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, counting nesting and alias-expanded nodes as it composes, and
    refusing duplicate keys as it constructs. Dates stay text."""

    yaml_implicit_resolvers = {  # noqa: RUF012 (PyYAML reads this class attribute)
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str, depth_max: int, nodes_max: int) -> None:
        super().__init__(stream)
        self.depth_max = depth_max
        self.nodes_max = nodes_max
        self._depth = 0
        self._nodes = 0
        self._deepest = 0  # the deepest level reached so far, aliases expanded
        # id(node) -> (its nodes, its height), aliases expanded: what an alias to it repeats.
        self._shapes: dict[int, tuple[int, int]] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        parser: Any = self  # PyYAML's parser methods are untyped
        event = parser.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self._alias(event)
            return super().compose_node(parent, index)
        self._depth += 1
        outer_deepest = self._deepest
        try:
            if self._depth > self.depth_max:
                raise _too_deep(event.start_mark, self.depth_max)
            before, self._deepest = self._nodes, self._depth
            self._count(1, event.start_mark)
            node = super().compose_node(parent, index)
            self._shapes[id(node)] = (self._nodes - before, self._deepest - self._depth + 1)
        finally:
            self._deepest = max(outer_deepest, self._deepest)
            self._depth -= 1
        return node

    def _alias(self, event: Any) -> None:
        """Count what an alias repeats, where it repeats it."""
        target = self.anchors.get(event.anchor)
        if target is None:
            return  # an undefined alias: the composer names it
        shape = self._shapes.get(id(target))
        if shape is None:
            raise YamlInvalidError(
                f"{_where(event.start_mark)}the alias *{event.anchor} is inside the node it "
                "names (a cycle)",
                **_line(event.start_mark),
            )
        nodes, height = shape
        reach = self._depth + height
        if reach > self.depth_max:
            raise _too_deep(event.start_mark, self.depth_max)
        self._deepest = max(self._deepest, reach)
        self._count(nodes, event.start_mark)

    def compose_document(self) -> Any:
        try:
            return super().compose_document()
        finally:
            # Each document's anchors are its own; its nodes are counted in the stream's total.
            self._shapes.clear()

    def _count(self, nodes: int, mark: Any) -> None:
        self._nodes += nodes
        if self._nodes > self.nodes_max:
            raise YamlTooLargeError(
                f"{_where(mark)}more than {self.nodes_max} values with aliases expanded "
                "(yaml_nodes_max)",
                limit=self.nodes_max,
                **_line(mark),
            )

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
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


class _TimestampLoader(_BoundedLoader):
    """The bounded loader with YAML's implicit timestamps (a flow document reports them as
    values a flow cannot hold, with a hint to quote them)."""

    yaml_implicit_resolvers = yaml.SafeLoader.yaml_implicit_resolvers


def _too_deep(mark: Any, depth_max: int) -> YamlTooDeepError:
    return YamlTooDeepError(
        f"{_where(mark)}the document nests deeper than {depth_max} maps and lists",
        limit=depth_max,
        **_line(mark),
    )


def _mark(error: Exception) -> Any:
    if isinstance(error, yaml.MarkedYAMLError):
        return error.problem_mark or error.context_mark
    return None


def _problem(error: Exception) -> str:
    if isinstance(error, yaml.MarkedYAMLError):
        return str(error.problem or error.context or "invalid YAML")
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _line(mark: Any) -> dict[str, Any]:
    """The error's `line` detail (1-based), when the reader knows it."""
    return {} if mark is None else {"line": mark.line + 1}


def _where(mark: Any) -> str:
    if mark is None:
        return ""
    return f"line {mark.line + 1}, column {mark.column + 1}: "
