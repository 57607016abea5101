"""Drawing a flow as SVG, server-side (the web inspector's execution page): the steps laid out
in layers by their distance from the entry step, one arrow per arc labelled with its guard,
and an execution's marking on top (where its tokens are, which steps are done or failed).

Like draw.py's Mermaid it is a pure, deterministic function of the definition (and the
marking); unlike Mermaid it needs no script in the browser. Every text is XML-escaped.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from html import escape
from typing import Any

from aos.flows.define.cfd import FlowDefinition, Step
from aos.flows.define.draw import LABEL_LENGTH_MAX

BOX_WIDTH = 190
BOX_HEIGHT = 46
GAP_X = 50
GAP_Y = 62
MARGIN = 28
BACK_ARC_OFFSET = 34
ARC_LABEL_CHARS_MAX = 32
STEP_LABEL_CHARS_MAX = 26
STEPS_DRAWN_MAX = 200
"""A larger definition is drawn only up to this many steps (the text outline has the rest)."""


@dataclass(frozen=True)
class Marking:
    """Where an execution is: tokens per step, steps done, steps that failed."""

    tokens: dict[str, int] = field(default_factory=dict)
    done: frozenset[str] = frozenset()
    failed: frozenset[str] = frozenset()

    @staticmethod
    def of_state(state: dict[str, Any]) -> Marking:
        """The marking of an execution state (`aos/FlowExecState@1`, spec/11 §3.1)."""
        engine = state.get("engine") if isinstance(state.get("engine"), dict) else {}
        tokens: dict[str, int] = {}
        for token in (engine or {}).get("tokens", {}).values():
            if isinstance(token, dict) and isinstance(token.get("step"), str):
                tokens[token["step"]] = tokens.get(token["step"], 0) + 1
        business = state.get("business") if isinstance(state.get("business"), dict) else {}
        steps = (business or {}).get("steps")
        summary = (engine or {}).get("summary") or {}
        failures = summary.get("failures", []) if isinstance(summary, dict) else []
        failed = {str(f.get("step")) for f in failures if isinstance(f, dict) and f.get("step")}
        return Marking(
            tokens,
            frozenset(str(s) for s in steps) if isinstance(steps, dict) else frozenset(),
            frozenset(failed),
        )


@dataclass(frozen=True)
class _Box:
    x: int
    y: int
    layer: int


def to_svg(defn: FlowDefinition, marking: Marking | None = None) -> str:
    """An `<svg>` element (no XML prologue) drawing the flow, marked when `marking` is given."""
    marking = marking or Marking()
    steps = defn.steps[:STEPS_DRAWN_MAX]
    boxes = _layout(defn, steps)
    width = max(b.x for b in boxes.values()) + BOX_WIDTH + MARGIN + BACK_ARC_OFFSET * 2
    height = max(b.y for b in boxes.values()) + BOX_HEIGHT + MARGIN
    parts = [
        f'<svg class="flow" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(defn.name)}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#7b8794"/></marker></defs>',
    ]
    entry = boxes[defn.entry]
    centre = entry.x + BOX_WIDTH // 2
    parts.append(f'<circle class="start" cx="{centre}" cy="{MARGIN // 2}" r="6"/>')
    parts.append(_line(centre, MARGIN // 2 + 6, centre, entry.y))
    for step in steps:
        for arc in step.next.arcs:
            if arc.to in boxes:
                label = (
                    _cut(" ".join(arc.when.text.split()), ARC_LABEL_CHARS_MAX) if arc.when else ""
                )
                parts.append(_arc(boxes[step.name], boxes[arc.to], label))
    for step in steps:
        parts.append(_step_box(defn, step, boxes[step.name], marking))
    parts.append("</svg>")
    return "".join(parts)


def _layout(defn: FlowDefinition, steps: list[Step]) -> dict[str, _Box]:
    """Layers by breadth-first distance from the entry (unreachable steps last), each layer
    centred, steps in definition order within it."""
    by_name = {s.name: s for s in steps}
    layer_of = {defn.entry: 0}
    queue = deque([defn.entry])
    while queue:
        name = queue.popleft()
        for arc in by_name[name].next.arcs if name in by_name else []:
            if arc.to in by_name and arc.to not in layer_of:
                layer_of[arc.to] = layer_of[name] + 1
                queue.append(arc.to)
    last = max(layer_of.values()) + 1
    layers: dict[int, list[str]] = {}
    for step in steps:
        layers.setdefault(layer_of.get(step.name, last), []).append(step.name)
    widest = max(len(names) for names in layers.values())
    boxes: dict[str, _Box] = {}
    for row, layer in enumerate(sorted(layers)):
        names = layers[layer]
        indent = (widest - len(names)) * (BOX_WIDTH + GAP_X) // 2
        for column, name in enumerate(names):
            x = MARGIN + indent + column * (BOX_WIDTH + GAP_X)
            y = MARGIN + 10 + row * (BOX_HEIGHT + GAP_Y)
            boxes[name] = _Box(x, y, row)
    return boxes


def _step_box(defn: FlowDefinition, step: Step, box: _Box, marking: Marking) -> str:
    classes = ["step"]
    tokens = marking.tokens.get(step.name, 0)
    if step.name in marking.failed:
        classes.append("failed")
    elif tokens:
        classes.append("active")
    elif step.name in marking.done:
        classes.append("done")
    notes = []
    if step.join == "all":
        notes.append("join all")
    if step.loop is not None:
        notes.append(f"loop {step.loop.mode}")
    if step.name == defn.policy.final_step:
        notes.append("final")
    if not step.next.arcs:
        notes.append("end")
    if tokens:
        notes.append(f"{tokens} token{'s' if tokens != 1 else ''} here")
    elif step.name in marking.done:
        notes.append("done")
    centre = box.x + BOX_WIDTH // 2
    return (
        f'<g class="{" ".join(classes)}" data-step="{escape(step.name)}">'
        f'<rect x="{box.x}" y="{box.y}" width="{BOX_WIDTH}" height="{BOX_HEIGHT}" rx="7"/>'
        f'<text x="{centre}" y="{box.y + 19}" text-anchor="middle">'
        f"{escape(_cut(step.name, STEP_LABEL_CHARS_MAX))}</text>"
        f'<text class="note" x="{centre}" y="{box.y + 36}" text-anchor="middle">'
        f"{escape(', '.join(notes))}</text></g>"
    )


def _arc(source: _Box, target: _Box, label: str) -> str:
    if target.layer > source.layer:
        x1, y1 = source.x + BOX_WIDTH // 2, source.y + BOX_HEIGHT
        x2, y2 = target.x + BOX_WIDTH // 2, target.y
        middle = (y1 + y2) // 2
        path = f"M {x1} {y1} C {x1} {middle}, {x2} {middle}, {x2} {y2}"
        label_x, label_y = (x1 + x2) // 2 + 4, middle - 2
    else:  # back to an earlier layer (a loop) or within one: around the right-hand side
        x1, y1 = source.x + BOX_WIDTH, source.y + BOX_HEIGHT // 2
        x2, y2 = target.x + BOX_WIDTH, target.y + BOX_HEIGHT // 2
        out = max(x1, x2) + BACK_ARC_OFFSET
        path = f"M {x1} {y1} C {out} {y1}, {out} {y2}, {x2} {y2}"
        label_x, label_y = out + 2, (y1 + y2) // 2
    text = (
        f'<text class="arc-label" x="{label_x}" y="{label_y}">{escape(label)}</text>'
        if label
        else ""
    )
    return f'<path class="arc" d="{path}" marker-end="url(#arrow)"/>{text}'


def _line(x1: int, y1: int, x2: int, y2: int) -> str:
    return f'<path class="arc" d="M {x1} {y1} L {x2} {y2}" marker-end="url(#arrow)"/>'


def _cut(text: str, length: int = LABEL_LENGTH_MAX) -> str:
    return text if len(text) <= length else text[: length - 3] + "..."
