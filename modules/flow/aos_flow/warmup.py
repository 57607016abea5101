"""Warming the guest's CBOR memos when the module is imported.

componentize-py snapshots the component after importing it, so whatever the import leaves in
memory is where every instance starts, a fresh one (`checked` re-runs a sample of steps on
one) included. A fresh instance otherwise encodes its one output with cold memos: every text
and every map shape of the state and the history encoded and sorted from scratch. Running a
tiny execution here (a start, a tool call, its receipt) leaves the interpreter's usual texts
and shapes memoized. The memos never change a byte; the definition and blob memos this fills
are emptied again, so a fresh instance still reads its definition as before."""

from __future__ import annotations

import contextlib
from typing import Any

from aos_flow import blobs, definition
from aos_sdk import Workflow, cbor, envelope, testing

WARMUP_HASH = "blake3:" + "0" * 64
WARMUP_EXEC = "warmup"
_DEFINITION = {
    "format": "aos.flow/1",
    "name": "aos/warmup",
    "steps": [
        {
            "name": "call",
            "tasks": [{"do": "call", "tool": {"kind": "echo"}, "args": {"n": 1}}],
            "next": "done",
        },
        {"name": "done", "tasks": [{"do": "noop", "result": "{{ steps.call.n }}"}]},
    ],
}


def warm(flow: Workflow[Any], event_schema: str) -> None:
    """Run a start and one receipt of a two-step flow through `flow`; best effort: a failure
    here only leaves the memos cold, so it must never stop the module from loading."""
    try:
        with contextlib.suppress(Exception):  # a warm-up must never break the import
            execute(flow, event_schema)
    finally:
        definition.forget()
        blobs.forget()


def execute(flow: Workflow[Any], event_schema: str) -> Any:
    """The warm-up execution, start to end; its last state."""
    state, effects = _step(flow, event_schema, None, "Start", _start())
    for effect in effects:
        state, _ = _step(flow, event_schema, state, "Receipt", _receipt(effect))
    return state


def _start() -> dict[str, Any]:
    return {"exec": WARMUP_EXEC, "flow": "aos/warmup", "version": 1, "definition": WARMUP_HASH}


def _receipt(effect: envelope.EffectIntent) -> dict[str, Any]:
    return {
        "effect": effect.effect,
        "issuer_ref": effect.issuer_ref,
        "status": {"$tag": "ok"},
        "payload": cbor.encode(effect.params.get("args") if type(effect.params) is dict else None),
    }


def _step(
    flow: Workflow[Any], event_schema: str, state: Any, tag: str, value: dict[str, Any]
) -> tuple[Any, list[envelope.EffectIntent]]:
    ctx = testing.make_ctx(workflow="aos/FlowExec@1", now_ns=1, journal_height=1, key=WARMUP_EXEC)
    data = {WARMUP_HASH: cbor.encode(_DEFINITION)}
    step_input = envelope.encode_input(
        state,
        event_schema,
        {"$tag": tag, "$value": value},
        has_state=state is not None,
        key=WARMUP_EXEC,
        has_key=True,
        ctx=ctx,
        data=data,
    )
    output = envelope.decode_output(flow.step_bytes(step_input))
    return output.state, output.effects
