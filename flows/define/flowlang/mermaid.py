"""Mermaid `stateDiagram-v2` of a flow graph, in seed 004's layout: `direction LR`, one
`state "NAME" as NAME.N` per invocation, `<<fork>>` / `<<join>>` states for subflows
(`_start_N_`, `_end_N_`), `[*]` for the flow's own start and end, then the edges (an edge into
a guarded subflow labelled with the guard)."""

from __future__ import annotations

import re

from aos.flows.define.flowlang.graph import END, START, Graph, Node

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_INDENT = "  "


def to_mermaid(graph: Graph) -> str:
    lines = ["stateDiagram-v2", f"{_INDENT}direction LR"]
    numbered = [n for n in graph.nodes.values() if n.number not in (START, END)]
    numbered.sort(key=lambda n: n.number)
    for node in numbered:
        lines.append(_INDENT + _state(node))
    order = {number: graph.order(number) for number in graph.nodes}
    for a, b in sorted(graph.edges, key=lambda edge: (order[edge[0]], order[edge[1]])):
        target = graph.nodes[b]
        # A guarded subflow's fork has no label of its own: its guard is on the edges in.
        label = f" : {_text('? ' + target.guard)}" if target.kind == "fork" and target.guard else ""
        lines.append(f"{_INDENT}{state_id(graph.nodes[a])}-->{state_id(target)}{label}")
    return "\n".join(lines) + "\n"


def state_id(node: Node) -> str:
    if node.kind in ("start", "end"):
        return "[*]"
    if node.kind == "fork":
        return f"_start_{node.number}_"
    if node.kind == "join":
        return f"_end_{node.number}_"
    base = _ID_UNSAFE.sub("_", node.name if node.kind == "task" else node.kind)
    return f"{base}.{node.number}"


def state_label(node: Node) -> str:
    """The task's name as written in the flow (after aliases), with its operators: `? ` for
    a guard, `* ` for iteration, `> ` for a merge; resources show their URI."""
    if node.kind == "literal":
        text = "literal"
    elif node.kind in ("source", "sink"):
        text = f"<{node.name}>"
    else:
        text = node.name
    prefix = (
        ("? " if node.guard else "") + ("* " if node.iterate else "") + ("> " if node.merge else "")
    )
    return _text(prefix + text)


def _state(node: Node) -> str:
    if node.kind == "fork":
        return f"state {state_id(node)} <<fork>>"
    if node.kind == "join":
        return f"state {state_id(node)} <<join>>"
    return f'state "{state_label(node)}" as {state_id(node)}'


def _text(text: str) -> str:
    # Mermaid entity codes: a quote would end the label, `;` the statement, `<` `>` are HTML.
    return (
        text.replace(";", "#59;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
    )
