"""Bad guests: each one ends in its own typed step fault, within its limit, and the host (and
the runner) go on as if nothing happened. Limits are tested at their edges."""

from __future__ import annotations

import pytest

from aos.kernel import cbor
from aos.kernel.hashing import hash_bytes
from aos.kernel.wasm import (
    EmittedEffect,
    EmittedEvent,
    LoadedModule,
    StepFault,
    StepFuelExhaustedError,
    StepLimits,
    StepMemoryExhaustedError,
    StepOutput,
    StepOutputMalformedError,
    StepOutputTooLargeError,
    StepRunner,
    StepTooManyEffectsError,
    StepTooManyEventsError,
    StepTrapError,
    WasmEngine,
    encode_input,
    encode_output,
)
from aos.kernel.wasm.limits import WASM_PAGE_BYTES
from tests.wasm_guests import counter_c, counter_input, increment, shared_engine, wat

MIB = 1024 * 1024
# The echo probe puts its input at byte 1024 (see probe/echo.wat).
ECHO_INPUT_OFFSET = 1024


@pytest.fixture
def engine() -> WasmEngine:
    return shared_engine()


def _any_input() -> bytes:
    return encode_input(state=None, event_schema="demo/E@1", event_value=cbor.encode(None))


def _run(module: LoadedModule, data: bytes | None = None, **limits: int) -> StepOutput:
    runner = StepRunner(module, limits=StepLimits(**limits))
    return runner.step(_any_input() if data is None else data, seq=1).output


BAD_GUESTS: list[tuple[str, type[StepFault], dict[str, int]]] = [
    ("loop", StepFuelExhaustedError, {}),
    ("memory_bomb", StepMemoryExhaustedError, {"memory_bytes_max": 8 * MIB}),
    ("memory_bomb", StepMemoryExhaustedError, {}),
    ("trap", StepTrapError, {}),
    ("oversized_output", StepOutputTooLargeError, {}),
    ("too_many_effects", StepTooManyEffectsError, {}),
    ("too_many_events", StepTooManyEventsError, {}),
    ("malformed_not_cbor", StepOutputMalformedError, {}),
    ("malformed_non_canonical", StepOutputMalformedError, {}),
    ("out_of_bounds_output", StepOutputMalformedError, {}),
]


@pytest.mark.parametrize(
    ("guest", "fault", "limits"), BAD_GUESTS, ids=[f"{g[0]}-{len(g[2])}" for g in BAD_GUESTS]
)
@pytest.mark.parametrize("determinism", ["strict", "checked"])
def test_each_bad_guest_gets_its_own_fault(
    engine: WasmEngine,
    guest: str,
    fault: type[StepFault],
    limits: dict[str, int],
    determinism: str,
) -> None:
    module = engine.load(wat(guest), abi="core")
    runner = StepRunner(module, limits=StepLimits(**limits), determinism=determinism)
    for seq in range(2):  # the second step proves the runner survived the first
        with pytest.raises(fault) as caught:
            runner.step(_any_input(), seq=seq)
        assert type(caught.value) is fault
        assert caught.value.module_hash == str(hash_bytes(wat(guest)))
        assert "backtrace" not in caught.value.message


def test_the_host_survives_every_bad_guest(engine: WasmEngine) -> None:
    for guest, fault, limits in BAD_GUESTS:
        with pytest.raises(fault):
            _run(engine.load(wat(guest), abi="core"), **limits)
    counter = engine.load(counter_c(), abi="core")
    output = _run(counter, counter_input(None, increment("c", 3)))
    assert output.state == cbor.encode({"count": 3, "resets": 0})


def test_a_trap_says_why_in_one_line(engine: WasmEngine) -> None:
    with pytest.raises(StepTrapError) as caught:
        _run(engine.load(wat("trap"), abi="core"))
    assert caught.value.reason == "wasm `unreachable` instruction executed"
    assert caught.value.detail["phase"] == "the step"
    assert "\n" not in caught.value.message


def test_a_memory_fault_keeps_the_trap_reason(engine: WasmEngine) -> None:
    with pytest.raises(StepMemoryExhaustedError) as caught:
        _run(engine.load(wat("memory_bomb"), abi="core"), memory_bytes_max=4 * MIB)
    assert caught.value.detail["reason"] == "wasm `unreachable` instruction executed"
    assert caught.value.detail["memory_bytes_max"] == 4 * MIB


def test_a_trap_at_the_memory_ceiling_stays_a_trap(engine: WasmEngine) -> None:
    # With no higher limit to compare against, the runner cannot blame memory.
    with pytest.raises(StepTrapError):
        _run(engine.load(wat("trap"), abi="core"), memory_bytes_max=4 * 1024**3)


# ---------------------------------------------------------------------------------------------
# Edges, through a guest


def test_fuel_edge(engine: WasmEngine) -> None:
    module = engine.load(counter_c(), abi="core")
    data = counter_input(None, increment("c", 12))
    fuel = StepRunner(module).step(data, seq=1).fuel_used
    assert 0 < fuel < 100_000
    exact = StepRunner(module, limits=StepLimits(fuel_per_step_max=fuel)).step(data, seq=1)
    assert exact.fuel_used == fuel
    with pytest.raises(StepFuelExhaustedError) as caught:
        StepRunner(module, limits=StepLimits(fuel_per_step_max=fuel - 1)).step(data, seq=1)
    assert caught.value.detail["fuel_per_step_max"] == fuel - 1


def test_fuel_of_instantiation_is_not_charged_to_the_step(engine: WasmEngine) -> None:
    module = engine.load(wat("echo"), abi="core")
    first = StepRunner(module).step(encode_output(StepOutput(None)), seq=1)
    again = StepRunner(module, determinism="checked").step(encode_output(StepOutput(None)), seq=1)
    assert first.fuel_used == again.fuel_used


def _echo_pages(data: bytes) -> int:
    return -(-(ECHO_INPUT_OFFSET + len(data)) // WASM_PAGE_BYTES)


def test_memory_edge_when_growing(engine: WasmEngine) -> None:
    module = engine.load(wat("echo"), abi="core")
    data = encode_output(StepOutput(state=cbor.encode(b"x" * 200_000)))
    limit = _echo_pages(data) * WASM_PAGE_BYTES
    output = _run(module, data, memory_bytes_max=limit)
    assert output.state == cbor.encode(b"x" * 200_000)
    with pytest.raises(StepMemoryExhaustedError):
        _run(module, data, memory_bytes_max=limit - 1)


def test_memory_edge_at_instantiation(engine: WasmEngine) -> None:
    wasm = wat("echo", **{'(memory (export "memory") 1)': '(memory (export "memory") 3)'})
    module = engine.load(wasm, abi="core")
    data = encode_output(StepOutput(None))
    assert _run(module, data, memory_bytes_max=3 * WASM_PAGE_BYTES) == StepOutput(None)
    with pytest.raises(StepMemoryExhaustedError):
        _run(module, data, memory_bytes_max=3 * WASM_PAGE_BYTES - 1)


def test_output_bytes_edge_through_a_guest(engine: WasmEngine) -> None:
    module = engine.load(wat("echo"), abi="core")
    data = encode_output(StepOutput(state=cbor.encode("y" * 1000)))
    assert _run(module, data, output_bytes_max=len(data)).state == cbor.encode("y" * 1000)
    with pytest.raises(StepOutputTooLargeError):
        _run(module, data, output_bytes_max=len(data) - 1)


def _output_of_size(size: int) -> bytes:
    # Both byte-string heads are 5 bytes long from 65 536 bytes on, so the overhead is fixed.
    overhead = len(encode_output(StepOutput(state=cbor.encode(b"z" * 70_000)))) - 70_000
    data = encode_output(StepOutput(state=cbor.encode(b"z" * (size - overhead))))
    assert len(data) == size
    return data


def test_default_output_limit_through_a_guest(engine: WasmEngine) -> None:
    module = engine.load(wat("echo"), abi="core")
    assert _run(module, _output_of_size(MIB)).state is not None
    with pytest.raises(StepOutputTooLargeError):
        _run(module, _output_of_size(MIB + 1))


def test_effect_and_event_edges_through_a_guest(engine: WasmEngine) -> None:
    module = engine.load(wat("echo"), abi="core")
    effects = tuple(EmittedEffect("demo/E@1", cbor.encode(i)) for i in range(3))
    events = tuple(EmittedEvent("demo/Ev@1", cbor.encode(i)) for i in range(3))
    output = StepOutput(None, domain_events=events, effects=effects)
    data = encode_output(output)
    assert _run(module, data, effects_per_step_max=3, events_per_step_max=3) == output
    with pytest.raises(StepTooManyEffectsError):
        _run(module, data, effects_per_step_max=2)
    with pytest.raises(StepTooManyEventsError):
        _run(module, data, events_per_step_max=2)


def test_a_faulted_step_leaves_the_runner_usable(engine: WasmEngine) -> None:
    module = engine.load(wat("echo"), abi="core")
    runner = StepRunner(module, determinism="checked", sample_rate=1.0)
    good = encode_output(StepOutput(cbor.encode(1)))
    assert runner.step(good, seq=1).output.state == cbor.encode(1)
    with pytest.raises(StepOutputMalformedError):
        runner.step(b"\xd9\xd9\xf7\xf6", seq=2)  # null is not an output map
    assert runner.step(good, seq=3).output.state == cbor.encode(1)
