"""The effect-chain bench workflow: `Start {id, n}` emits the first of n `bench/noop@1`
effects; each receipt emits the next until n are done."""

from __future__ import annotations

from typing import Any

from aos_sdk import Context, Workflow, export

EFFECT = "bench/noop@1"

chain = Workflow("bench/chain@1")


@chain.on("bench/ChainEvent@1")
def on_event(state: Any, event: Any, ctx: Context) -> Any:
    if event["$tag"] == "Start":
        start = event["$value"]
        if start["n"] == 0:
            return {"id": start["id"], "left": 0, "done": 0}
        ctx.effect(EFFECT, {"i": 0})
        return {"id": start["id"], "left": start["n"] - 1, "done": 0}
    done = state["done"] + 1
    left = state["left"]
    if left:
        ctx.effect(EFFECT, {"i": done})
        left -= 1
    return {"id": state["id"], "left": left, "done": done}


WitWorld = export(chain)
