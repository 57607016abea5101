"""A Mermaid stateDiagram-v2 read back as a graph: its states (id -> label or fork/join)
and its edges, so diagrams compare as graphs, not as text."""

from __future__ import annotations

import re

_STATE = re.compile(r'state\s+"([^"]*)"\s+as\s+(\S+)')
_PSEUDO = re.compile(r"state\s+(\S+)\s+<<(fork|join)>>")
_EDGE = re.compile(r"(\S+?)\s*-->\s*(\S+)(?:\s+:\s+(.*))?")


def read(diagram: str) -> tuple[dict[str, str], set[tuple[str, str]]]:
    states: dict[str, str] = {}
    edges: set[tuple[str, str]] = set()
    for raw in diagram.splitlines():
        line = raw.strip()
        if match := _STATE.fullmatch(line):
            states[match.group(2)] = match.group(1)
        elif match := _PSEUDO.fullmatch(line):
            states[match.group(1)] = f"<<{match.group(2)}>>"
        elif match := _EDGE.fullmatch(line):
            edges.add((match.group(1), match.group(2)))
    return states, edges
