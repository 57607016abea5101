"""The code-first `three_steps` workflow of bench/bench_restate.py, keyed by execution id:
`Start {id, message}` emits the first of three effects (greet, shout, end: the steps of
bench/playbooks/hello_world.yaml); each receipt records its step's result and emits the next
step's effect. The steps themselves are Python functions the adapter runs
(bench/peers/aos_steps_adapter.py); a receipt that is not `ok` ends the cell with `failed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aos_sdk import Context, Variant, Workflow, cbor, export

STEPS = ("greet", "shout", "end")
EFFECTS = {step: f"bench/three_steps.{step}@1" for step in STEPS}
STEP_OF_EFFECT = {effect: step for step, effect in EFFECTS.items()}


@dataclass
class ThreeSteps:
    id: str = ""
    message: str = ""
    greet: dict[str, Any] | None = None
    shout: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    failed: str | None = None


@dataclass
class Start(Variant):
    """The `Start` arm of `bench/ThreeStepsEvent@1` (`bench/ThreeStepsStart@1`)."""

    id: str
    message: str


@dataclass
class Receipt(Variant):
    """The `Receipt` arm: `sys/EffectReceiptEnvelope@1`, as the kernel delivers it."""

    origin_workflow: str
    intent_hash: str
    effect: str
    adapter: str
    status: dict[str, Any]  # sys/EffectReceiptStatus@1: {"$tag": "ok" | "error" | "timeout"}
    payload: bytes
    emitted_seq: int
    origin_key: bytes | None = None
    issuer_ref: str | None = None


three_steps = Workflow("bench/three_steps@1", state=ThreeSteps)


@three_steps.on("bench/ThreeStepsEvent@1", Start | Receipt)
def on_event(state: ThreeSteps, event: Start | Receipt, ctx: Context) -> ThreeSteps:
    if isinstance(event, Start):
        if state.message:
            return state  # a second start of the same execution changes nothing
        ctx.effect(EFFECTS["greet"], {"message": event.message})
        return ThreeSteps(event.id, event.message)
    step = STEP_OF_EFFECT.get(event.effect)
    if step is None or state.failed is not None or getattr(state, step) is not None:
        return state  # not one of ours, or already settled: nothing to do
    if event.status.get("$tag") != "ok":
        state.failed = step
        return state
    setattr(state, step, cbor.decode(event.payload))
    following = STEPS.index(step) + 1
    if following < len(STEPS):
        ctx.effect(EFFECTS[STEPS[following]], {"message": state.message})
    return state


WitWorld = export(three_steps)
