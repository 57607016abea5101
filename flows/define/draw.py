"""Drawing a flow (spec/11-flows.md §9, `aos flow draw`): a Mermaid state diagram of its steps
and arcs, or an indented outline for the terminal.

Both are pure functions of the definition and deterministic (definition order throughout), so
a drawing can be checked in beside its flow and diffed.
"""

from __future__ import annotations

import re

from aos.flows.define.cfd import Arc, FlowDefinition, Guard, Step, Task

LABEL_LENGTH_MAX = 60
"""Longer guard texts are cut (with `...`) so edges stay readable."""

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_SPACES = re.compile(r"\s+")
_INDENT = "    "


# --------------------------------------------------------------------------------------------
# Mermaid


def to_mermaid(defn: FlowDefinition) -> str:
    """A Mermaid `stateDiagram-v2`: `[*]` into the entry step, one state per step (loop and
    final steps noted in the label), one edge per arc labelled with its guard, a `<<fork>>`
    for each inclusive step with several arcs, a `<<join>>` before each `join: all` step, and
    `STEP --> [*]` for every step without arcs."""
    ids = _Ids(defn)
    lines = ["stateDiagram-v2", f"{_INDENT}[*] --> {ids.step(defn.entry)}"]
    for step in defn.steps:
        lines.append(f'{_INDENT}state "{_state_label(defn, step)}" as {ids.step(step.name)}')
    for step in defn.steps:
        if step.join == "all":
            join = ids.join(step.name)
            lines += [
                f"{_INDENT}state {join} <<join>>",
                f"{_INDENT}{join} --> {ids.step(step.name)}",
            ]
    for step in defn.steps:
        lines += _step_edges(defn, step, ids)
    return "\n".join(lines) + "\n"


class _Ids:
    """Mermaid ids: step names made safe (`a.b-c` -> `a_b_c`), fork and join pseudo-states
    beside them, all distinct."""

    def __init__(self, defn: FlowDefinition) -> None:
        self.taken: set[str] = set()
        self.steps = {step.name: self._allocate(step.name) for step in defn.steps}
        self.forks = {step.name: self._allocate(f"fork_{step.name}") for step in defn.steps}
        self.joins = {step.name: self._allocate(f"join_{step.name}") for step in defn.steps}

    def _allocate(self, name: str) -> str:
        base = _ID_UNSAFE.sub("_", name)
        candidate, number = base, 1
        while candidate in self.taken:
            number += 1
            candidate = f"{base}_{number}"
        self.taken.add(candidate)
        return candidate

    def step(self, name: str) -> str:
        return self.steps.get(name) or self._allocate(name)

    def fork(self, name: str) -> str:
        return self.forks[name]

    def join(self, name: str) -> str:
        return self.joins[name]


def _state_label(defn: FlowDefinition, step: Step) -> str:
    notes = []
    if step.loop is not None:
        notes.append(f"loop {step.loop.mode}")
        if step.loop.exec == "distributed":
            notes.append("distributed")
    if step.name == defn.policy.final_step:
        notes.append("final")
    label = f"{step.name} ({', '.join(notes)})" if notes else step.name
    return _mermaid_text(label)


def _step_edges(defn: FlowDefinition, step: Step, ids: _Ids) -> list[str]:
    source = ids.step(step.name)
    arcs = step.next.arcs
    if not arcs:
        return [f"{_INDENT}{source} --> [*]"]
    lines = []
    if step.next.mode == "inclusive" and len(arcs) > 1:
        fork = ids.fork(step.name)
        lines += [f"{_INDENT}state {fork} <<fork>>", f"{_INDENT}{source} --> {fork}"]
        source = fork
    joins = {target.name for target in defn.steps if target.join == "all"}
    for arc in arcs:
        target = ids.join(arc.to) if arc.to in joins else ids.step(arc.to)
        lines.append(f"{_INDENT}{source} --> {target}{_edge_label(arc)}")
    return lines


def _edge_label(arc: Arc) -> str:
    if arc.when is None:
        return ""
    return f" : {_mermaid_text(_cut(_guard_text(arc.when)))}"


def _mermaid_text(text: str) -> str:
    # A quote would end a state label; `;` ends a Mermaid statement. Semicolons first: the
    # entities written for quotes end in one.
    return text.replace(";", "#59;").replace('"', "#quot;")


# --------------------------------------------------------------------------------------------
# Text


def to_text(defn: FlowDefinition) -> str:
    """An indented outline: the flow, then each step with its tasks (nested lists indented
    under their task) and its arcs."""
    lines = [f"flow {defn.name}  ({defn.format}, entry {defn.entry})"]
    if defn.policy.final_step is not None:
        lines.append(f"final step {defn.policy.final_step}")
    for step in defn.steps:
        lines += _step_outline(step)
    return "\n".join(lines) + "\n"


def _step_outline(step: Step) -> list[str]:
    notes = []
    if step.join == "all":
        notes.append("join all")
    if step.loop is not None:
        notes.append(f"loop {step.loop.mode} as {step.loop.iterator}")
    if step.admit is not None:
        notes.append(f"admit {_cut(_guard_text(step.admit))}")
    lines = [f"step {step.name}" + (f"  [{'; '.join(notes)}]" if notes else "")]
    lines += _tasks_outline(step.tasks, 1)
    if step.next.arcs:
        lines.append(f"{_INDENT}next {step.next.mode}")
        for arc in step.next.arcs:
            guard = f"  when {_cut(_guard_text(arc.when))}" if arc.when is not None else ""
            lines.append(f"{_INDENT * 2}-> {arc.to}{guard}")
    else:
        lines.append(f"{_INDENT}end")
    return lines


def _tasks_outline(tasks: list[Task], depth: int) -> list[str]:
    lines = []
    for task in tasks:
        lines.append(f"{_INDENT * depth}{task.name}: {_task_summary(task)}")
        for parts, nested in task.task_lists():
            if nested:
                label = _list_label(parts)
                lines.append(f"{_INDENT * (depth + 1)}{label}:")
                lines += _tasks_outline(nested, depth + 2)
    return lines


def _list_label(parts: tuple[str | int, ...]) -> str:
    """`ok` for a call branch, `case 2` for a branch case, `else`, `each` for a repeat."""
    if parts[0] == "cases":
        return f"case {int(parts[1]) + 1}"
    if parts == ("tasks",):
        return "each"
    return str(parts[-1])


def _task_summary(task: Task) -> str:
    summary: str = task.do
    if task.do == "call":
        summary += f" {task.tool.kind}"
        if task.timeout_ms is not None:
            summary += f", timeout {task.timeout_ms} ms"
    elif task.do == "wait_signal":
        summary += f" {task.signal}"
    elif task.do == "wait_timer" and task.duration_ms is not None:
        summary += f" {task.duration_ms} ms"
    elif task.do in ("subflow", "continue_with"):
        summary += f" {task.flow}"
    if task.when is not None:
        summary += f"  when {_cut(_guard_text(task.when))}"
    if task.policy is not None:
        count = len(task.policy.rules)
        summary += f"  [{count} rule{'s' if count != 1 else ''}]"
    return summary


# --------------------------------------------------------------------------------------------
# Guards as text


def _guard_text(guard: Guard) -> str:
    return _SPACES.sub(" ", guard.text).strip()


def _cut(text: str) -> str:
    if len(text) <= LABEL_LENGTH_MAX:
        return text
    return text[: LABEL_LENGTH_MAX - 3] + "..."
