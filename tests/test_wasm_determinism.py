"""Determinism profiles: `checked` applies exactly what `strict` applies, catches hidden state
when it compares, and samples steps by a pure function. The C counter matches the Python
counter of the SDK byte for byte."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aos.kernel import cbor
from aos.kernel.hashing import hash_bytes
from aos.kernel.wasm import (
    Determinism,
    LoadedModule,
    StepNondeterministicError,
    StepRunner,
    StepTrapError,
    WasmEngine,
    WasmUsageError,
    encode_input,
    is_sampled,
)
from tests.wasm_guests import (
    counter_c,
    counter_input,
    counter_py,
    increment,
    reset,
    shared_engine,
    wat,
)


@pytest.fixture
def engine() -> WasmEngine:
    return shared_engine()


def _counter() -> LoadedModule:
    return shared_engine().load(counter_c(), abi="core")


def _any_input() -> bytes:
    return encode_input(state=None, event_schema="demo/E@1", event_value=cbor.encode(None))


counter_ids = st.text(min_size=0, max_size=12)
counter_events = st.one_of(
    st.builds(increment, counter_ids, st.integers(0, 25)),
    st.builds(increment, counter_ids, st.integers(0, 2**40)),
    st.builds(reset, counter_ids),
)


def _replay(runner: StepRunner, events: list[dict[str, Any]]) -> list[bytes]:
    outputs: list[bytes] = []
    state: bytes | None = None
    for seq, event in enumerate(events):
        result = runner.step(counter_input(state, event), seq=seq)
        outputs.append(result.output_bytes)
        state = result.output.state
    return outputs


def _native(events: list[dict[str, Any]]) -> list[bytes]:
    workflow = counter_py().counter
    outputs: list[bytes] = []
    state: bytes | None = None
    for event in events:
        outputs.append(workflow.step_bytes(counter_input(state, event)))
        state = cbor.decode(outputs[-1])["state"]  # type: ignore[index,call-overload]
    return outputs


@settings(max_examples=60)  # costly: each example steps a WASM module twice per event
@given(st.lists(counter_events, max_size=25))
def test_checked_applies_exactly_what_strict_applies(events: list[dict[str, Any]]) -> None:
    module = _counter()
    strict = _replay(StepRunner(module, determinism="strict"), events)
    assert _replay(StepRunner(module, determinism="checked", sample_rate=1.0), events) == strict
    assert _replay(StepRunner(module, determinism="checked", sample_rate=0.0), events) == strict
    assert _replay(StepRunner(module, determinism="checked", warm_steps_max=3), events) == strict
    assert strict == _native(events)


def test_counter_semantics() -> None:
    runner = StepRunner(_counter())
    events = [
        increment("a", 7),
        increment("a", 5),
        increment("a", 30),
        reset("a"),
        increment("b", 9),
    ]
    outputs = [cbor.decode(o) for o in _replay(runner, events)]
    states = [cbor.decode(o["state"]) for o in outputs]  # type: ignore[index,call-overload]
    assert states == [
        {"count": 7, "resets": 0},
        {"count": 12, "resets": 0},
        {"count": 42, "resets": 0},
        {"count": 0, "resets": 1},
        {"count": 9, "resets": 1},
    ]
    emitted = [[cbor.decode(e["value"]) for e in o["domain_events"]] for o in outputs]  # type: ignore[index]
    assert emitted == [
        [],
        [{"id": "a", "count": 12, "threshold": 10}],
        [{"id": "a", "count": 42, "threshold": 40}],
        [],
        [],
    ]
    assert all(o["effects"] == [] for o in outputs)  # type: ignore[index]


def test_counter_refuses_what_it_does_not_understand() -> None:
    runner = StepRunner(_counter())
    bad = [
        counter_input(None, {"$tag": "Double", "$value": {"id": "a"}}),
        counter_input(None, {"$tag": "Increment", "$value": {"id": "a", "by": -1}}),
        counter_input(cbor.encode({"count": 2**64 - 1, "resets": 0}), increment("a", 1)),
        encode_input(
            state=None, event_schema="demo/Other@1", event_value=cbor.encode(increment("a", 1))
        ),
    ]
    for seq, data in enumerate(bad):
        with pytest.raises(StepTrapError):
            runner.step(data, seq=seq)


# ---------------------------------------------------------------------------------------------
# Hidden state


def test_strict_never_sees_hidden_state(engine: WasmEngine) -> None:
    runner = StepRunner(engine.load(wat("hidden_state"), abi="core"), determinism="strict")
    states = [runner.step(_any_input(), seq=seq).output.state for seq in range(5)]
    assert states == [cbor.encode(1)] * 5


def test_a_pre_instantiated_strict_module_gets_a_fresh_instance_every_step(
    engine: WasmEngine,
) -> None:
    """Strict instances come from one `InstancePre` per loaded module; each step still gets a
    new store, so a new linear memory (contents and size) and new globals. Two runners of one
    module share the `InstancePre` and still see nothing of each other."""
    module = engine.load(wat("leftovers"), abi="core")
    assert module.instance_pre is not None
    fresh = cbor.encode([1, 1, 1])
    one, two = (StepRunner(module, determinism="strict") for _ in range(2))
    states = [
        runner.step(_any_input(), seq=seq).output.state for seq in range(4) for runner in (one, two)
    ]
    assert states == [fresh] * 8
    # The probe does see leftovers when there are some: a warm instance reports them.
    warm = StepRunner(module, determinism="checked", sample_rate=0.0)
    states = [warm.step(_any_input(), seq=seq).output.state for seq in range(3)]
    assert states == [fresh, cbor.encode([2, 2, 2]), cbor.encode([3, 3, 3])]


def test_checked_catches_hidden_state_when_it_compares(engine: WasmEngine) -> None:
    module = engine.load(wat("hidden_state"), abi="core")
    runner = StepRunner(module, determinism="checked", sample_rate=1.0)
    first = runner.step(_any_input(), seq=0)
    assert (first.output.state, first.verified) == (cbor.encode(1), True)
    with pytest.raises(StepNondeterministicError) as caught:
        runner.step(_any_input(), seq=1)
    fault = caught.value
    assert fault.code == "step.nondeterministic"
    assert fault.module_hash == str(hash_bytes(wat("hidden_state")))
    assert fault.detail["seq"] == 1
    assert fault.detail["warm_output_hash"] != fault.detail["fresh_output_hash"]
    # the diverged warm instance is gone: the next step starts fresh again
    assert runner.step(_any_input(), seq=2).output.state == cbor.encode(1)


def test_unsampled_steps_trust_the_warm_instance(engine: WasmEngine) -> None:
    module = engine.load(wat("hidden_state"), abi="core")
    runner = StepRunner(module, determinism="checked", sample_rate=0.0)
    results = [runner.step(_any_input(), seq=seq) for seq in range(3)]
    assert [r.output.state for r in results] == [cbor.encode(n) for n in (1, 2, 3)]
    assert [(r.verified, r.warm) for r in results] == [(True, False), (False, True), (False, True)]
    with pytest.raises(StepNondeterministicError):
        runner.step(_any_input(), seq=3, verify=True)  # a replay audit compares every step


def test_sampling_finds_hidden_state_eventually(engine: WasmEngine) -> None:
    module = engine.load(wat("hidden_state"), abi="core")
    runner = StepRunner(module, determinism="checked", sample_rate=0.25)
    first_sampled = next(s for s in range(1, 100) if is_sampled(str(module.module_hash), s, 0.25))
    for seq in range(first_sampled):
        runner.step(_any_input(), seq=seq)
    with pytest.raises(StepNondeterministicError):
        runner.step(_any_input(), seq=first_sampled)


def test_warm_instances_are_recycled(engine: WasmEngine) -> None:
    module = engine.load(wat("hidden_state"), abi="core")
    runner = StepRunner(module, determinism="checked", sample_rate=0.0, warm_steps_max=2)
    states = [runner.step(_any_input(), seq=seq).output.state for seq in range(5)]
    assert states == [cbor.encode(n) for n in (1, 2, 1, 2, 1)]


def test_a_warm_trap_is_decided_by_a_fresh_instance(engine: WasmEngine) -> None:
    # hidden_state's counter wraps at 24, and 0 is fine; a guest that traps only when warm:
    source = "(i32.store8 (i32.const 14) (global.get $steps))"
    warm_trap = wat(
        "hidden_state",
        **{
            source: f"(if (i32.gt_u (global.get $steps) (i32.const 1)) (then unreachable)) {source}"
        },
    )
    runner = StepRunner(engine.load(warm_trap, abi="core"), determinism="checked", sample_rate=0.0)
    results = [runner.step(_any_input(), seq=seq) for seq in range(3)]
    assert [r.output.state for r in results] == [cbor.encode(1)] * 3
    assert [r.warm for r in results] == [False, False, False]


def test_a_warm_bad_output_with_a_fresh_good_one_is_nondeterministic(engine: WasmEngine) -> None:
    source = "(i64.const 15)"
    warm_bad = wat(
        "hidden_state",
        **{
            source: "(select (i64.const 15) (i64.const 3) (i32.eq (global.get $steps) (i32.const 1)))"
        },
    )
    runner = StepRunner(engine.load(warm_bad, abi="core"), determinism="checked", sample_rate=0.0)
    runner.step(_any_input(), seq=0)
    with pytest.raises(StepNondeterministicError) as caught:
        runner.step(_any_input(), seq=1)
    assert caught.value.detail["warm_fault"] == "step.output_malformed"


# ---------------------------------------------------------------------------------------------
# Sampling


def test_sampling_is_a_pure_function() -> None:
    module_hash = str(hash_bytes(b"m"))
    picks = [is_sampled(module_hash, seq, 0.1) for seq in range(2000)]
    assert picks == [is_sampled(module_hash, seq, 0.1) for seq in range(2000)]
    assert 150 < sum(picks) < 250
    assert not any(is_sampled(module_hash, seq, 0.0) for seq in range(2000))
    assert all(is_sampled(module_hash, seq, 1.0) for seq in range(2000))
    other = [is_sampled(str(hash_bytes(b"n")), seq, 0.1) for seq in range(2000)]
    assert other != picks


def test_runner_settings_are_checked() -> None:
    module = _counter()
    with pytest.raises(WasmUsageError):
        StepRunner(module, sample_rate=1.5)
    with pytest.raises(WasmUsageError):
        StepRunner(module, warm_steps_max=0)
    with pytest.raises(WasmUsageError):
        StepRunner(module, determinism="relaxed")
    assert StepRunner(module, determinism="checked").determinism is Determinism.CHECKED
