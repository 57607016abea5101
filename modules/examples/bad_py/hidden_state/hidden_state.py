"""Keeps hidden state in a module global: every step on a warm instance sees the calls before
it, so a warm instance and a fresh one disagree from the second step on. The SDK cannot see
this and the build accepts it; `determinism: checked` catches it by re-running steps on fresh
instances and comparing bytes."""

from __future__ import annotations

from typing import Any

from aos_sdk import Context, Workflow, export

_calls = 0

hidden_state = Workflow("demo/HiddenState@1")


@hidden_state.on("demo/Tick@1")
def on_tick(state: Any, event: Any, ctx: Context) -> Any:
    global _calls
    _calls += 1
    return {"calls_seen": _calls}


WitWorld = export(hidden_state)
