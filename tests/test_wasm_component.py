"""The component ABI: hand-written WAT components for the edges and faults, and the Python
counter built with componentize-py, which must match its native run byte for byte."""

from __future__ import annotations

import pytest

from aos.kernel import cbor
from aos.kernel.wasm import (
    LoadedModule,
    StepFault,
    StepFuelExhaustedError,
    StepGuestExceptionError,
    StepLimits,
    StepMemoryExhaustedError,
    StepOutput,
    StepOutputMalformedError,
    StepOutputTooLargeError,
    StepRunner,
    StepTrapError,
    WasmEngine,
    encode_output,
)
from aos.kernel.wasm.build import build_python
from aos.kernel.wasm.limits import WASM_PAGE_BYTES
from tests.wasm_guests import (
    COUNTER_PY,
    counter_input,
    counter_py,
    increment,
    reset,
    shared_engine,
    wat,
)

MIB = 1024 * 1024
# The echo component's realloc starts at byte 1024 (see probe/echo_component.wat).
ECHO_INPUT_OFFSET = 1024


@pytest.fixture
def engine() -> WasmEngine:
    return shared_engine()


@pytest.fixture
def echo(engine: WasmEngine) -> LoadedModule:
    return engine.load(wat("echo_component"), abi="component")


def _step(module: LoadedModule, data: bytes, **limits: int) -> bytes:
    return StepRunner(module, limits=StepLimits(**limits)).step(data, seq=1).output_bytes


@pytest.mark.parametrize("size", [0, 1, 1000, 300_000])
@pytest.mark.parametrize("determinism", ["strict", "checked"])
def test_bytes_cross_the_component_boundary_unchanged(
    echo: LoadedModule, size: int, determinism: str
) -> None:
    data = encode_output(StepOutput(state=cbor.encode(bytes(range(256)) * (size // 256) + b"!")))
    runner = StepRunner(echo, determinism=determinism, sample_rate=1.0)
    for seq in range(3):
        assert runner.step(data, seq=seq).output_bytes == data


def test_a_warm_instance_passes_inputs_of_changing_length_exactly(echo: LoadedModule) -> None:
    """The lowering buffer is kept between calls: a short input after a long one must carry
    nothing of the long one, and a longer one after it must be laid out whole."""
    runner = StepRunner(echo, determinism="checked", sample_rate=0.0)
    sizes = [5000, 10, 0, 300, 20_000, 1]
    for seq, size in enumerate(sizes):
        data = encode_output(StepOutput(state=cbor.encode(bytes([seq + 1]) * size)))
        result = runner.step(data, seq=seq)
        assert result.output_bytes == data
        assert result.warm == (seq > 0)


def test_an_empty_output_is_malformed(echo: LoadedModule) -> None:
    with pytest.raises(StepOutputMalformedError):
        _step(echo, b"")


def test_output_bytes_edge(echo: LoadedModule) -> None:
    data = encode_output(StepOutput(state=cbor.encode("o" * 5000)))
    assert _step(echo, data, output_bytes_max=len(data)) == data
    with pytest.raises(StepOutputTooLargeError):
        _step(echo, data, output_bytes_max=len(data) - 1)


def test_fuel_edge(echo: LoadedModule) -> None:
    data = encode_output(StepOutput(state=None))
    fuel = StepRunner(echo).step(data, seq=1).fuel_used
    assert _step(echo, data, fuel_per_step_max=fuel) == data
    with pytest.raises(StepFuelExhaustedError):
        _step(echo, data, fuel_per_step_max=fuel - 1)


def test_memory_edge(echo: LoadedModule) -> None:
    data = encode_output(StepOutput(state=cbor.encode(b"m" * 150_000)))
    limit = -(-(ECHO_INPUT_OFFSET + len(data)) // WASM_PAGE_BYTES) * WASM_PAGE_BYTES
    assert _step(echo, data, memory_bytes_max=limit) == data
    with pytest.raises(StepMemoryExhaustedError):
        _step(echo, data, memory_bytes_max=limit - 1)


@pytest.mark.parametrize(
    ("guest", "fault", "limits"),
    [
        ("component_trap", StepTrapError, {}),
        ("component_loop", StepFuelExhaustedError, {}),
        ("component_memory_bomb", StepMemoryExhaustedError, {"memory_bytes_max": 8 * MIB}),
    ],
)
@pytest.mark.parametrize("determinism", ["strict", "checked"])
def test_bad_components_get_their_own_fault(
    engine: WasmEngine, guest: str, fault: type[StepFault], limits: dict[str, int], determinism: str
) -> None:
    module = engine.load(wat(guest), abi="component")
    runner = StepRunner(module, limits=StepLimits(**limits), determinism=determinism)
    for seq in range(2):
        with pytest.raises(fault) as caught:
            runner.step(encode_output(StepOutput(None)), seq=seq)
        assert type(caught.value) is fault
        assert caught.value.module_hash == str(module.module_hash)


# ---------------------------------------------------------------------------------------------
# The Python counter, compiled with componentize-py (cached by source hash, then by wasm hash:
# the first run takes about 20 s, later ones well under a second)


@pytest.fixture(scope="module")
def counter_component() -> LoadedModule:
    built = build_python(COUNTER_PY)
    return WasmEngine().load(built.wasm_path.read_bytes(), abi="component")


@pytest.mark.slow
@pytest.mark.parametrize("determinism", ["strict", "checked"])
def test_python_counter_matches_its_native_run(
    counter_component: LoadedModule, determinism: str
) -> None:
    runner = StepRunner(counter_component, determinism=determinism, sample_rate=0.5)
    events = [
        increment("a", 7),
        increment("a", 5),
        reset("a"),
        increment("ü", 10**12),
        increment("", 0),
    ]
    state: bytes | None = None
    for seq, event in enumerate(events):
        data = counter_input(state, event)
        result = runner.step(data, seq=seq)
        assert result.output_bytes == counter_py().counter.step_bytes(data)
        state = result.output.state


@pytest.mark.slow
def test_python_counter_exception_is_reported_with_its_type_and_place(
    counter_component: LoadedModule,
) -> None:
    with pytest.raises(StepGuestExceptionError) as caught:
        StepRunner(counter_component).step(
            counter_input(None, {"$tag": "Double", "$value": {}}), seq=1
        )
    # aos_sdk catches the exception and returns it instead of a result (no trap)
    guest = caught.value.guest
    assert guest["type"] and guest["message"] and ":" in guest["where"]
    assert str(caught.value).startswith(f"{guest['type']}: {guest['message']}")
