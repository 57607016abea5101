"""Where a problem was written (spec/11 §1.6): the line and column, in a YAML or JSON file,
of the value a problem's JSON path names (`$.workflow[2].tool.args.y` -> 29:12).

Problems are found on the parsed value, which has no positions; the file is composed again
(under the reader's own bounds, `kernel/yamltext.compose`) only when a problem is shown, and
the path is followed down its node tree: no table of every path is built. A path that goes
further than the file (a default the compiler filled in) stops at the deepest value written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from aos.kernel.errors import InvalidInputError
from aos.kernel.text import yamltext

_SEGMENT = re.compile(
    r"\.(?P<key>[A-Za-z_][A-Za-z0-9_-]*)|\[(?P<index>\d+)\]|\['(?P<quoted>(?:[^'\\]|\\.)*)'\]"
)
Parts = list[str | int]


@dataclass(frozen=True)
class Position:
    """1-based line and column."""

    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"


def path_parts(path: str) -> Parts | None:
    """The keys and indexes of a JSON path as `flows.errors.json_path` writes them (None: not
    such a path, e.g. a `.flow` error's FILE:LINE:COLUMN)."""
    if not path.startswith("$"):
        return None
    parts: Parts = []
    at = 1
    while at < len(path):
        found = _SEGMENT.match(path, at)
        if found is None:
            return None
        if found["key"] is not None:
            parts.append(found["key"])
        elif found["index"] is not None:
            parts.append(int(found["index"]))
        else:
            parts.append(re.sub(r"\\(.)", r"\1", found["quoted"]))
        at = found.end()
    return parts


class SourcePositions:
    """Positions in one YAML or JSON text (JSON is read as the YAML it also is)."""

    def __init__(self, text: str) -> None:
        try:
            self._root = yamltext.compose(text)
        except InvalidInputError:
            self._root = None  # the text's own error already says where

    def of(self, path: str) -> Position | None:
        """Where the value at `path` (or its deepest written ancestor) starts."""
        parts = path_parts(path)
        if parts is None or self._root is None:
            return None
        node = written = self._root
        for part in parts:
            child = _child(node, part)
            if child is None:
                break
            written, node = child
        mark = written.start_mark
        return Position(mark.line + 1, mark.column + 1)


def _child(node: yaml.Node, part: str | int) -> tuple[yaml.Node, yaml.Node] | None:
    """Where `part` of `node` is written (a map entry's key: the name the author wrote) and
    its value."""
    if isinstance(node, yaml.MappingNode):
        if isinstance(part, int):
            # A playbook step's one `tool:` map is its list of one task: `tool[0]`.
            return (node, node) if part == 0 else None
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == part:
                return key, value
        return None
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        return (node.value[part],) * 2 if part < len(node.value) else None
    return None
