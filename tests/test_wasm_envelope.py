"""Step envelopes and step limits, without a guest: the host's side of the contract."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aos.kernel import cbor
from aos.kernel.errors import KernelInvariantError
from aos.kernel.wasm import (
    EmittedEffect,
    EmittedEvent,
    StepInput,
    StepLimits,
    StepOutput,
    StepOutputMalformedError,
    StepOutputTooLargeError,
    StepTooManyEffectsError,
    StepTooManyEventsError,
    WorkflowContext,
    decode_input,
    decode_output,
    encode_input,
    encode_output,
)
from aos.kernel.wasm.faults import WasmUsageError, short_reason, trap_frames
from aos.kernel.wasm.limits import (
    EFFECTS_PER_STEP_MAX_DEFAULT,
    EVENTS_PER_STEP_MAX_DEFAULT,
    FUEL_PER_STEP_MAX_DEFAULT,
    MEMORY_BYTES_MAX_DEFAULT,
    OUTPUT_BYTES_MAX_DEFAULT,
)

NULL = cbor.encode(None)
LIMITS = StepLimits()


def _effect(index: int = 0) -> EmittedEffect:
    return EmittedEffect("demo/E@1", cbor.encode({"n": index}))


def _event(index: int = 0) -> EmittedEvent:
    return EmittedEvent("demo/Ev@1", cbor.encode(index))


# ---------------------------------------------------------------------------------------------
# Input


def test_input_envelope_has_the_contract_shape() -> None:
    state, value, key, ctx = cbor.encode({"a": 1}), cbor.encode("v"), cbor.encode("k"), NULL
    data = encode_input(state=state, event_schema="demo/E@1", event_value=value, key=key, ctx=ctx)
    assert cbor.decode(data) == {
        "version": 1,
        "state": state,
        "event": {"schema": "demo/E@1", "value": value, "key": key},
        "ctx": ctx,
    }
    assert decode_input(data) == StepInput(state, "demo/E@1", value, key, ctx)


def test_input_envelope_leaves_absent_optionals_out() -> None:
    data = encode_input(state=None, event_schema="demo/E@1", event_value=NULL)
    assert cbor.decode(data) == {
        "version": 1,
        "state": None,
        "event": {"schema": "demo/E@1", "value": NULL},
    }


@pytest.mark.parametrize("field", ["state", "event_value", "key", "ctx"])
@pytest.mark.parametrize("embedded", [b"\x01", "text"])
def test_input_with_an_embedded_value_that_is_no_encoding_is_a_kernel_bug(
    field: str, embedded: object
) -> None:
    arguments: dict[str, Any] = {"state": None, "event_schema": "demo/E@1", "event_value": NULL}
    arguments[field] = embedded  # a raw value or bytes without the self-describe prefix
    # Text where bytes are declared: compiled (spec/09 §5), the call's own type check refuses
    # it (TypeError) before the body's; either way the step stops.
    refusals = (
        (KernelInvariantError, TypeError) if isinstance(embedded, str) else KernelInvariantError
    )
    with pytest.raises(refusals):
        encode_input(**arguments)


_embedded_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64 - 1) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
).map(cbor.encode)


@given(
    state=st.none() | _embedded_values,
    schema=st.text(max_size=300),
    value=_embedded_values,
    key=st.none() | _embedded_values,
    ctx=st.none() | _embedded_values,
    data=st.dictionaries(st.text(max_size=80), st.binary(max_size=300), max_size=4),
)
def test_input_envelope_is_the_generic_canonical_encoding(
    state: bytes | None,
    schema: str,
    value: bytes,
    key: bytes | None,
    ctx: bytes | None,
    data: dict[str, bytes],
) -> None:
    """The envelope is written by hand (its embedded values are not walked again); it must be
    byte for byte what the canonical encoder makes of the same map, and decode strictly."""
    written = encode_input(
        state=state, event_schema=schema, event_value=value, key=key, ctx=ctx, data=data
    )
    event: dict[str, Any] = {"schema": schema, "value": value}
    if key is not None:
        event["key"] = key
    envelope: dict[str, Any] = {"version": 1, "state": state, "event": event}
    if ctx is not None:
        envelope["ctx"] = ctx
    if data:
        envelope["data"] = data
    assert written == cbor.encode(envelope)
    assert cbor.decode(written) == envelope


def test_context_encodes_the_workflow_context_schema() -> None:
    ctx = WorkflowContext(
        now_ns=5,
        entropy=bytes(64),
        journal_height=9,
        manifest_hash="blake3:" + "0" * 64,
        workflow="demo/Counter@1",
    )
    assert cbor.decode(ctx.encode()) == {
        "now_ns": 5,
        "entropy": bytes(64),
        "journal_height": 9,
        "manifest_hash": "blake3:" + "0" * 64,
        "workflow": "demo/Counter@1",
        "cell_mode": False,
    }
    keyed = WorkflowContext(5, bytes(64), 9, "m", "w", key=cbor.encode("k"), cell_mode=True)
    assert cbor.decode(keyed.encode())["key"] == cbor.encode("k")  # type: ignore[index]
    with pytest.raises(KernelInvariantError):
        WorkflowContext(5, bytes(63), 9, "m", "w").encode()


# ---------------------------------------------------------------------------------------------
# Output: what is accepted


def test_output_round_trips() -> None:
    output = StepOutput(
        state=cbor.encode({"count": 1}),
        domain_events=(_event(1), _event(2)),
        effects=(
            _effect(),
            EmittedEffect("demo/E@1", NULL, idempotency_key=b"\x01", issuer_ref="r"),
        ),
        ann=cbor.encode("note"),
    )
    assert decode_output(encode_output(output), LIMITS) == output


def test_absent_lists_mean_empty() -> None:
    data = cbor.encode({"state": None})
    assert decode_output(data, LIMITS) == StepOutput(state=None)


@given(
    st.integers(0, EVENTS_PER_STEP_MAX_DEFAULT),
    st.integers(0, EFFECTS_PER_STEP_MAX_DEFAULT),
    st.one_of(st.none(), st.binary(max_size=40)),
)
def test_counts_up_to_the_limits_are_accepted(
    events: int, effects: int, state: bytes | None
) -> None:
    output = StepOutput(
        state=None if state is None else cbor.encode(state),
        domain_events=tuple(_event(i) for i in range(events)),
        effects=tuple(_effect(i) for i in range(effects)),
    )
    assert decode_output(encode_output(output), LIMITS) == output


# ---------------------------------------------------------------------------------------------
# Output: limits at their edges


def test_output_bytes_edge() -> None:
    data = encode_output(StepOutput(state=cbor.encode(b"x" * 100)))
    assert decode_output(data, StepLimits(output_bytes_max=len(data))).state is not None
    with pytest.raises(StepOutputTooLargeError) as caught:
        decode_output(data, StepLimits(output_bytes_max=len(data) - 1), module_hash="blake3:m")
    assert caught.value.code == "step.output_too_large"
    assert caught.value.detail["output_bytes"] == len(data)
    assert caught.value.module_hash == "blake3:m"


def test_effects_edge() -> None:
    at_limit = StepOutput(state=None, effects=tuple(_effect(i) for i in range(64)))
    assert len(decode_output(encode_output(at_limit), LIMITS).effects) == 64
    over = StepOutput(state=None, effects=tuple(_effect(i) for i in range(65)))
    with pytest.raises(StepTooManyEffectsError) as caught:
        decode_output(encode_output(over), LIMITS)
    assert caught.value.detail["effects"] == 65


def test_events_edge() -> None:
    at_limit = StepOutput(state=None, domain_events=tuple(_event(i) for i in range(64)))
    assert len(decode_output(encode_output(at_limit), LIMITS).domain_events) == 64
    over = StepOutput(state=None, domain_events=tuple(_event(i) for i in range(65)))
    with pytest.raises(StepTooManyEventsError) as caught:
        decode_output(encode_output(over), LIMITS)
    assert caught.value.detail["events"] == 65


def test_zero_effects_allowed_means_none() -> None:
    limits = StepLimits(effects_per_step_max=0, events_per_step_max=0)
    assert decode_output(encode_output(StepOutput(state=None)), limits) == StepOutput(None)
    with pytest.raises(StepTooManyEffectsError):
        decode_output(encode_output(StepOutput(state=None, effects=(_effect(),))), limits)


# ---------------------------------------------------------------------------------------------
# Output: malformed

NON_CANONICAL = b"\xd9\xd9\xf7\x18\x01"
EVENT = {"schema": "s", "value": NULL}
EFFECT = {"effect": "e", "params": NULL}

MALFORMED: list[tuple[str, Any]] = [
    ("not a map", ["state"]),
    ("no state", {"effects": []}),
    ("unknown key", {"state": None, "extra": 1}),
    ("integer key", {"state": None, 1: 2}),
    ("state text", {"state": "x"}),
    ("state not canonical", {"state": NON_CANONICAL}),
    ("state without prefix", {"state": b"\xf6"}),
    ("events not a list", {"state": None, "domain_events": {}}),
    ("effects null", {"state": None, "effects": None}),
    ("event not a map", {"state": None, "domain_events": [1]}),
    ("event without schema", {"state": None, "domain_events": [{"value": NULL}]}),
    ("event extra key", {"state": None, "domain_events": [{**EVENT, "key": NULL}]}),
    ("event schema bytes", {"state": None, "domain_events": [{"schema": b"s", "value": NULL}]}),
    (
        "event value not canonical",
        {"state": None, "domain_events": [{"schema": "s", "value": NON_CANONICAL}]},
    ),
    ("effect without params", {"state": None, "effects": [{"effect": "e"}]}),
    ("effect params text", {"state": None, "effects": [{"effect": "e", "params": "p"}]}),
    ("idempotency key text", {"state": None, "effects": [{**EFFECT, "idempotency_key": "k"}]}),
    ("issuer ref bytes", {"state": None, "effects": [{**EFFECT, "issuer_ref": b"r"}]}),
    ("effect extra key", {"state": None, "effects": [{**EFFECT, "receipt": NULL}]}),
    ("ann not canonical", {"state": None, "ann": NON_CANONICAL}),
    ("ann text", {"state": None, "ann": "a"}),
]


@pytest.mark.parametrize(("name", "envelope"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_output_is_refused(name: str, envelope: Any) -> None:
    with pytest.raises(StepOutputMalformedError) as caught:
        decode_output(cbor.encode(envelope), LIMITS, module_hash="blake3:m")
    assert caught.value.code == "step.output_malformed"
    assert caught.value.module_hash == "blake3:m"
    assert caught.value.path is not None and caught.value.path.startswith("$")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not cbor",
        b"\xa1\x65state\xf6",  # no self-describe prefix
        b"\xd9\xd9\xf7\xa1\x78\x05state\xf6",  # a key length in a two-byte head
        b"\xd9\xd9\xf7\xa1\x65state\xf6\x00",  # trailing byte
        b"\xd9\xd9\xf7\xbf\x65state\xf6\xff",  # indefinite-length map
        b"\xd9\xd9\xf7\xa2\x65state\xf6\x65state\xf6",  # duplicate key
    ],
)
def test_non_canonical_outer_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(StepOutputMalformedError):
        decode_output(data, LIMITS)


@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_escape_as_another_error(data: bytes) -> None:
    with contextlib.suppress(StepOutputMalformedError, StepOutputTooLargeError):
        decode_output(data, LIMITS)


# ---------------------------------------------------------------------------------------------
# Limits


def test_limit_defaults() -> None:
    limits = StepLimits()
    assert limits.fuel_per_step_max == FUEL_PER_STEP_MAX_DEFAULT == 1_000_000_000
    assert limits.memory_bytes_max == MEMORY_BYTES_MAX_DEFAULT == 128 * 1024 * 1024
    assert limits.output_bytes_max == OUTPUT_BYTES_MAX_DEFAULT == 1024 * 1024
    assert (limits.effects_per_step_max, limits.events_per_step_max) == (64, 64)


def test_limit_overrides_from_a_manifest() -> None:
    limits = StepLimits.from_overrides({"fuel_per_step_max": 5, "events_per_step_max": 0})
    assert (limits.fuel_per_step_max, limits.events_per_step_max) == (5, 0)
    with pytest.raises(WasmUsageError) as caught:
        StepLimits.from_overrides({"fuel_max": 5})
    assert caught.value.code == "wasm.usage"


@pytest.mark.parametrize(
    "overrides",
    [
        {"fuel_per_step_max": 0},
        {"fuel_per_step_max": 2**62 + 1},
        {"memory_bytes_max": 65535},
        {"memory_bytes_max": 4 * 1024**3 + 1},
        {"output_bytes_max": 0},
        {"effects_per_step_max": -1},
        {"events_per_step_max": 65537},
        {"fuel_per_step_max": 1.5},
        {"effects_per_step_max": True},
    ],
)
def test_limits_out_of_range_are_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(WasmUsageError):
        StepLimits(**overrides)


def test_limit_ranges_are_inclusive() -> None:
    StepLimits(fuel_per_step_max=1, memory_bytes_max=65536, output_bytes_max=1)
    StepLimits(memory_bytes_max=4 * 1024**3, effects_per_step_max=65536)


# ---------------------------------------------------------------------------------------------
# Trap reasons


def test_short_reason_keeps_the_root_cause_only() -> None:
    text = (
        "error while executing at wasm backtrace:\n    0:     0x8d - m!<wasm function 1>\n\n"
        "Caused by:\n    wasm trap: wasm `unreachable` instruction executed\n"
    )
    assert short_reason(RuntimeError(text)) == "wasm `unreachable` instruction executed"
    assert short_reason(RuntimeError("x" * 500)) == "x" * 200
    assert short_reason(RuntimeError("")) == "RuntimeError"


def test_trap_frames_keep_names_only() -> None:
    text = (
        "error while executing at wasm backtrace:\n"
        "    0: 0xb05993 - <unknown>!<wasm function 0>\n"
        "    2: 0xb19507 - libc.so!stderr_get_stderr\n\nCaused by:\n    wasm trap: x\n"
    )
    assert trap_frames(RuntimeError(text)) == [
        "<unknown>!<wasm function 0>",
        "libc.so!stderr_get_stderr",
    ]
    many = "\n".join(f"  {i}: 0x{i:x} - m!f{i}" for i in range(20))
    assert trap_frames(RuntimeError(many)) == [f"m!f{i}" for i in range(8)]


def test_decode_output_keeps_the_values_it_decoded() -> None:
    """The world reads state and ann from the output without decoding them again."""
    state, ann = {"n": [1, {"m": None}]}, {"events": [{"event": "x"}]}
    data = encode_output(StepOutput(state=cbor.encode(state), ann=cbor.encode(ann)))
    output = decode_output(data, StepLimits())
    assert output.state_value() == state and output.ann_value() == ann
    bare = StepOutput(state=cbor.encode(state))  # built by hand: decoded on demand
    assert bare.state_value() == state and bare.ann_value() is None
    assert StepOutput(None).state_value() is None
    assert output == StepOutput(state=cbor.encode(state), ann=cbor.encode(ann))
