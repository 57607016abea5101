"""Issue 3 acceptance: the C counter (core ABI) and the Python counter (component ABI) give
byte-identical outputs for the same generated event sequences, natively and in WASM, under
both determinism profiles."""

from __future__ import annotations

from functools import cache
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aos.kernel import cbor
from aos.kernel.wasm import LoadedModule, StepRunner, WasmEngine
from aos.kernel.wasm.build import build_python
from tests.wasm_guests import EXAMPLES, counter_c, counter_input, counter_py, increment, reset


@cache
def _engine() -> WasmEngine:
    # The default on-disk compile cache: a Python component takes seconds to compile once.
    return WasmEngine()


@cache
def _python_counter() -> LoadedModule:
    build = build_python(EXAMPLES / "counter_py")
    return _engine().load(build.wasm_path.read_bytes(), abi="component")


@cache
def _c_counter() -> LoadedModule:
    return _engine().load(counter_c(), abi="core")


def _run(step: Any, events: list[dict[str, Any]]) -> list[bytes]:
    outputs: list[bytes] = []
    state: bytes | None = None
    for event in events:
        output = step(counter_input(state, event), len(outputs))
        outputs.append(output)
        decoded = cbor.decode(output)
        assert isinstance(decoded, dict)
        state = decoded["state"]  # type: ignore[assignment]
    return outputs


def _wasm(runner: StepRunner) -> Any:
    return lambda data, seq: runner.step(data, seq=seq).output_bytes


def _native(data: bytes, _seq: int) -> bytes:
    return bytes(counter_py().counter.step_bytes(data))


ids = st.sampled_from(["a", "b", "ünï", ""])
events = st.lists(
    st.one_of(
        st.builds(increment, ids, st.integers(0, 30)),
        st.builds(increment, ids, st.integers(0, 2**40)),
        st.builds(reset, ids),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=25)  # costly: each example runs four counters, two in WASM
@given(events)
def test_c_and_python_counters_agree_natively_and_in_wasm(sequence: list[dict[str, Any]]) -> None:
    reference = _run(_native, sequence)
    runs = {
        "c strict": StepRunner(_c_counter(), determinism="strict"),
        "c checked": StepRunner(_c_counter(), determinism="checked", sample_rate=0.5),
        "py strict": StepRunner(_python_counter(), determinism="strict"),
        "py checked": StepRunner(_python_counter(), determinism="checked", sample_rate=0.5),
    }
    for name, runner in runs.items():
        assert _run(_wasm(runner), sequence) == reference, name
