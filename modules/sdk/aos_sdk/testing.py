"""Native test harness: run a workflow's step on the host CPython, on the same envelope bytes
a component would get, so transition tests are plain pytest.

    from aos_sdk.testing import Event, run
    state, events, effects = run(counter, None, Event("demo/CounterEvent@1", {...}))

`compare` and `compare_sequence` run the same inputs natively and through a WASM step callable
(`wasm_step(input_bytes) -> output_bytes`, e.g. the engine's runner) and fail on the first
output that differs by a byte.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from aos_sdk import cbor, envelope, schema
from aos_sdk.envelope import DomainEvent, EffectIntent
from aos_sdk.workflow import DELETE, Workflow

WasmStep = Callable[[bytes], bytes]

ENTROPY_BYTES = 64
MANIFEST_HASH_ZERO = "blake3:" + "0" * 64
_NO_KEY: Any = object()


@dataclass(frozen=True)
class Event:
    """An event to feed a step: its schema, its value (dataclass or plain), and its cell key."""

    schema: str
    value: Any
    key: Any = _NO_KEY

    @property
    def has_key(self) -> bool:
        return self.key is not _NO_KEY


class Outcome(NamedTuple):
    """The result of one step: the new state (`DELETE` if the cell was deleted), the domain
    events and the effect intents, in emission order."""

    state: Any
    events: list[DomainEvent]
    effects: list[EffectIntent]


def make_ctx(
    *,
    workflow: str = "",
    now_ns: int = 0,
    entropy: bytes = bytes(ENTROPY_BYTES),
    journal_height: int = 0,
    manifest_hash: str = MANIFEST_HASH_ZERO,
    key: Any = _NO_KEY,
    cell_mode: bool | None = None,
) -> dict[str, Any]:
    """A ctx value as the host builds it (logical time and entropy are whatever you say)."""
    if len(entropy) != ENTROPY_BYTES:
        raise ValueError(f"entropy is {ENTROPY_BYTES} bytes, not {len(entropy)}")
    ctx: dict[str, Any] = {
        "now_ns": now_ns,
        "entropy": entropy,
        "journal_height": journal_height,
        "manifest_hash": manifest_hash,
        "workflow": workflow,
        "cell_mode": key is not _NO_KEY if cell_mode is None else cell_mode,
    }
    if key is not _NO_KEY:
        ctx["key"] = cbor.encode(schema.to_value(key))
    return ctx


def input_bytes(state: Any, event: Event, ctx: dict[str, Any] | None = None) -> bytes:
    """The input envelope for `state` (None: a fresh cell) and `event`."""
    return envelope.encode_input(
        schema.to_value(state),
        event.schema,
        schema.to_value(event.value),
        has_state=state is not None,
        key=schema.to_value(event.key) if event.has_key else None,
        has_key=event.has_key,
        ctx=ctx,
    )


def step_bytes(workflow: Workflow[Any], data: bytes) -> bytes:
    """Exactly what the component's `step` export computes, run natively."""
    return workflow.step_bytes(data)


def run(
    workflow: Workflow[Any], state: Any, event: Event, ctx: dict[str, Any] | None = None
) -> Outcome:
    """One step through the byte-level ABI. Without `ctx`, a ctx at logical time 0 with zero
    entropy is sent."""
    if ctx is None:
        key = event.key if event.has_key else _NO_KEY
        ctx = make_ctx(workflow=workflow.name, key=key)
    output = envelope.decode_output(step_bytes(workflow, input_bytes(state, event, ctx)))
    new_state = (
        schema.from_value(workflow.state_type, output.state, "$state")
        if output.has_state
        else DELETE
    )
    return Outcome(new_state, output.domain_events, output.effects)


READ_ROUNDS_MAX = 2


def step(
    workflow: Workflow[Any],
    state: Any,
    event: Event,
    ctx: dict[str, Any] | None = None,
    *,
    blobs: dict[str, bytes] | None = None,
) -> envelope.StepOutput:
    """One step as the host runs it, requests included: a step that asks for CAS blobs, or
    for the hashes of blobs it writes, runs again with them (at most two rounds, as the host),
    reading from `blobs`, where what it writes is stored. Returns the whole decoded output
    (state, events, effects, `ann`, `cancel`, `writes`); `state` is the plain value."""
    if ctx is None:
        ctx = make_ctx(workflow=workflow.name, key=event.key if event.has_key else _NO_KEY)
    data = input_bytes(state, event, ctx)
    given: dict[str, bytes] = {}
    output = envelope.decode_output(step_bytes(workflow, data))
    for _ in range(READ_ROUNDS_MAX):
        if not output.reads and not output.hash_request:
            break
        for hash_ in output.reads:
            if blobs is None or hash_ not in blobs:
                raise KeyError(f"the step asked to read {hash_}, which `blobs` does not have")
            given[hash_] = blobs[hash_]
        for blob in output.hash_request:
            given[blob_hash(blob)] = blob
        probe: dict[str, Any] = cbor.decode(data)
        probe["data"] = dict(given)
        output = envelope.decode_output(step_bytes(workflow, cbor.encode(probe)))
    if output.reads or output.hash_request:
        raise RuntimeError(f"the step still asks after {READ_ROUNDS_MAX} rounds")
    if blobs is not None:
        for blob in output.writes:
            blobs[blob_hash(blob)] = blob
    return output


def blob_hash(blob: bytes) -> str:
    """A blob's CAS hash, as the host computes it (natively: a guest has no BLAKE3)."""
    from blake3 import blake3  # the host's; imported here, so a guest never imports it

    return "blake3:" + blake3(blob).hexdigest()


def explain(workflow: Workflow[Any], data: bytes) -> str | None:
    """Why a step faults: run `data` natively and return the traceback, or None if the native
    step succeeds. A component reports only the exception's type, message and innermost frame
    (`step.guest_exception`); this gives the whole traceback."""
    try:
        workflow.step_bytes(data)
    except Exception:
        return traceback.format_exc()
    return None


class Divergence(AssertionError):  # noqa: N818 - a finding, named as the spec names it
    """The WASM step and the native step gave different bytes for the same input."""

    def __init__(self, index: int, data: bytes, native: bytes, wasm: bytes) -> None:
        super().__init__(
            f"input #{index}: native and wasm outputs differ\n"
            f"  input  {data.hex()}\n  native {native.hex()}\n  wasm   {wasm.hex()}"
        )
        self.index = index
        self.input = data
        self.native = native
        self.wasm = wasm


def compare(workflow: Workflow[Any], wasm_step: WasmStep, inputs: Iterable[bytes]) -> int:
    """Feed every input to both steps; raise `Divergence` on the first difference. Returns
    the number of inputs compared."""
    count = 0
    for index, data in enumerate(inputs):
        native, wasm = step_bytes(workflow, data), wasm_step(data)
        if native != wasm:
            raise Divergence(index, data, native, wasm)
        count += 1
    return count


def compare_sequence(
    workflow: Workflow[Any],
    wasm_step: WasmStep,
    events: Sequence[Event],
    *,
    state: Any = None,
    ctx_for: Callable[[int, Event], dict[str, Any] | None] | None = None,
) -> list[bytes]:
    """Run `events` in order, threading the state from each output into the next input (per
    cell key), on both steps; raise `Divergence` on the first difference. Returns the outputs."""
    states: dict[bytes, bytes | None] = {}
    initial = cbor.encode(schema.to_value(state)) if state is not None else None
    outputs: list[bytes] = []
    for index, event in enumerate(events):
        cell = cbor.encode(schema.to_value(event.key)) if event.has_key else b""
        ctx = ctx_for(index, event) if ctx_for is not None else _default_ctx(workflow, index, event)
        data = _input_with_state_bytes(states.get(cell, initial), event, ctx)
        native, wasm = step_bytes(workflow, data), wasm_step(data)
        if native != wasm:
            raise Divergence(index, data, native, wasm)
        outputs.append(native)
        states[cell] = cbor.decode(native)["state"]
    return outputs


def _default_ctx(workflow: Workflow[Any], index: int, event: Event) -> dict[str, Any]:
    key = event.key if event.has_key else _NO_KEY
    return make_ctx(workflow=workflow.name, now_ns=index, journal_height=index, key=key)


def _input_with_state_bytes(state: bytes | None, event: Event, ctx: dict[str, Any] | None) -> bytes:
    # The state bytes go through untouched: what the previous step wrote is what the next
    # step reads, as in the kernel.
    probe: dict[str, Any] = cbor.decode(input_bytes(None, event, ctx))
    probe["state"] = state
    return cbor.encode(probe)
