"""A step's own `set_ctx` (spec/11 §3.4, `aos.flow/2`): applied once the step's tasks are
done — after a success or a failure, before its arcs are evaluated — in a scope that holds
the step's own result, as NoETL applies a step's `set_ctx` on the step's call completing. A
loop step applies it after each iteration, the step's name then holding that iteration's
result; its arcs run at `loop.done`, after every iteration's.

It renders as NoETL's server renders it: with strict undefined (the routing contexts). A value
that cannot be rendered fails a step that succeeded (`expression`, `step.set_ctx`), and is
recorded (`template.failed`) on one that had already failed, which keeps its own error."""

from __future__ import annotations

from typing import Any

from aos_flow.errors import ExprError
from aos_flow.run import Run, error_value

CODE = "step.set_ctx"


def apply(
    run: Run, token: dict[str, Any], frame: dict[str, Any] | None, ok: bool, value: Any
) -> tuple[bool, Any]:
    """Write the step's `set_ctx` after the outcome `(ok, value)` (the result, or the
    error); the outcome to go on with."""
    name = token["step"]
    assignments = run.defn.step(name)["set_ctx"]
    if not assignments:
        return ok, value
    iteration = token["loop"] is not None or token["single"] is not None
    event = ("loop.iteration." if iteration else "step.") + ("done" if ok else "failed")
    steps = {**run.business["steps"], name: value} if ok else run.business["steps"]
    payload = {"name": event, "step": name, "payload": value}
    scope = run.scope(token, frame, steps=steps, event=payload)
    try:
        values = {path: run.render_routing(text, scope) for path, text in assignments.items()}
        for path, rendered in values.items():
            run.set_ctx(path, rendered)
    except ExprError as error:
        if not ok:
            run.history.add("template.failed", error=error.message, step=name, token=token["id"])
            return ok, value
        return False, error_value("expression", CODE, f"set_ctx: {error.message}")
    return ok, value
