"""The keyed counter, in Python. Byte for byte the same step as the C counter
(modules/examples/counter_c): same state, same threshold events, no effects.

Events `demo/CounterEvent@1`: `{"$tag": "Increment", "$value": {"id": text, "by": nat}}` or
`{"$tag": "Reset", "$value": {"id": text}}`. State `demo/CounterState@1`:
`{"count": nat, "resets": nat}` (a new cell starts at zero). When an increment crosses a
multiple of ten, it emits `demo/CounterThreshold@1` `{"id", "count", "threshold"}`.
"""

from __future__ import annotations

from dataclasses import dataclass

from aos_sdk import Context, Variant, Workflow, export

THRESHOLD_STEP = 10


@dataclass
class CounterState:
    count: int = 0
    resets: int = 0


@dataclass
class Increment(Variant):
    id: str
    by: int


@dataclass
class Reset(Variant):
    id: str


@dataclass
class CounterThreshold:
    id: str
    count: int
    threshold: int


counter = Workflow("demo/Counter@1", state=CounterState)


@counter.on("demo/CounterEvent@1", Increment | Reset)
def on_counter_event(state: CounterState, event: Increment | Reset, ctx: Context) -> CounterState:
    if isinstance(event, Reset):
        return CounterState(count=0, resets=state.resets + 1)
    if event.by < 0:
        raise ValueError(f"Increment.by is a nat, got {event.by}")
    count = state.count + event.by
    if state.count // THRESHOLD_STEP < count // THRESHOLD_STEP:
        threshold = count // THRESHOLD_STEP * THRESHOLD_STEP
        ctx.emit("demo/CounterThreshold@1", CounterThreshold(event.id, count, threshold))
    return CounterState(count=count, resets=state.resets)


WitWorld = export(counter)
