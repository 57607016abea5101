"""The SDK's compiled codec (`aos_sdk/_cbor_c.c`, linked into every Python component) against
its reference, the SDK's pure-Python codec: inside a component, the same values, bytes and
errors for every value and every input, valid or not; and the flow interpreter built with it
gives, on the inputs of real executions, the output bytes its Python code gives natively."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
from aos_flow import workflow as app
from hypothesis import given
from hypothesis import strategies as st

from aos.flows.interpreter import InterpreterSources
from aos.kernel import cbor as kernel_cbor
from aos.kernel.wasm import WasmEngine
from aos.kernel.wasm.abi_component import ComponentInstance
from aos.kernel.wasm.build import build_python
from aos.kernel.wasm.envelope import with_data
from aos_sdk import cbor as sdk_cbor
from aos_sdk import envelope as sdk_envelope
from bench import profile_interp
from tests.test_sdk_cbor import INT_EDGES, values

PARITY_GUEST = Path(__file__).parent / "fixtures" / "cbor_parity"
FUEL_MAX = 10_000_000_000
MEMORY_BYTES_MAX = 256 * 1024 * 1024
OUTPUT_BYTES_MAX = 16 * 1024 * 1024
ANSWER_DEPTH_MAX = 512  # the guest's answers wrap a value in three more levels


def _instance(wasm_path: Path) -> ComponentInstance:
    module = WasmEngine().load(wasm_path.read_bytes(), abi="component")
    return ComponentInstance(module, fuel_max=FUEL_MAX, memory_bytes_max=MEMORY_BYTES_MAX)


@cache
def _parity_guest() -> ComponentInstance:
    return _instance(build_python(PARITY_GUEST).wasm_path)


def _both(op: str, data: bytes, *, depth_max: int = 64, trusted: bool = False) -> list[Any]:
    """The compiled codec's outcome and the reference's, as the guest reports them."""
    request = {"op": op, "data": data, "depth_max": depth_max, "trusted": trusted}
    answer = _parity_guest().call(kernel_cbor.encode(request), output_bytes_max=OUTPUT_BYTES_MAX)
    decoded = sdk_cbor.decode(answer, depth_max=ANSWER_DEPTH_MAX)
    assert decoded["compiled"], "the component was built without the compiled codec"
    results: list[Any] = [*decoded["results"], decoded["declined"]]
    return results


def _agree(op: str, data: bytes, *, compiled_ok: bool = False, **options: Any) -> list[Any]:
    """The two codecs' outcome, the same; `compiled_ok`: the compiled one did the work."""
    compiled, reference, declined = _both(op, data, **options)
    assert not (compiled_ok and declined)
    # Compared by their canonical encodings: a NaN is then equal to itself.
    depth_max = ANSWER_DEPTH_MAX
    assert sdk_cbor.encode(compiled, depth_max=depth_max) == sdk_cbor.encode(
        reference, depth_max=depth_max
    )
    return compiled


def test_natively_the_sdk_has_no_compiled_codec() -> None:
    # The native interpreter is the reference every comparison below runs against.
    assert sdk_cbor.COMPILED is None


@given(values)
def test_every_value_encodes_and_decodes_as_the_reference_does(value: Any) -> None:
    data = kernel_cbor.encode(value)
    assert _agree("encode", data, compiled_ok=True) == ["ok", data]
    for trusted in (False, True):
        outcome = _agree("decode", data, trusted=trusted, compiled_ok=True)
        assert outcome[0] == "ok"
        assert sdk_cbor.encode(outcome[1]) == data


@given(values, st.data())
def test_damaged_bytes_are_refused_or_read_as_the_reference_does(value: Any, data: Any) -> None:
    raw = bytearray(kernel_cbor.encode(value))
    kind = data.draw(st.sampled_from(["flip", "cut", "append", "insert"]))
    at = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    if kind == "flip":
        raw[at] ^= data.draw(st.integers(min_value=1, max_value=255))
    elif kind == "cut":
        del raw[at:]
    elif kind == "append":
        raw += data.draw(st.binary(min_size=1, max_size=4))
    else:
        raw[at:at] = data.draw(st.binary(min_size=1, max_size=3))
    for trusted in (False, True):
        _agree("decode", bytes(raw), trusted=trusted)


NON_CANONICAL = {
    "an integer in a longer head": "d9d9f71817",
    "a length in a longer head": "d9d9f7780161",
    "keys out of order": "d9d9f7a2616201616101",
    "longer key first": "d9d9f7a2626161016162",
    "a duplicate key": "d9d9f7a2616101616102",
    "a float wider than it needs": "d9d9f7fa3fc00000",
    "a double that is a half": "d9d9f7fb3ff8000000000000",
    "a NaN with a payload": "d9d9f7f97e01",
    "a wide NaN": "d9d9f7fb7ff8000000000000",
    "an indefinite list": "d9d9f79f01ff",
    "a tag inside": "d9d9f7c101",
    "undefined": "d9d9f7f7",
    "a simple value": "d9d9f7f820",
    "a reserved head": "d9d9f71c",
    "trailing bytes": "d9d9f70101",
    "truncated text": "d9d9f76361",
    "invalid UTF-8": "d9d9f762c328",
    "an encoded surrogate": "d9d9f763eda080",
    "a bytes key": "d9d9f7a1410101",
    "a float key": "d9d9f7a1f93c0001",
    "a list key": "d9d9f7a1800101",
    "no prefix": "01",
    "a huge list count": "d9d9f79bffffffffffffffff",
    "a huge map count": "d9d9f7bbffffffffffffffff",
    "a huge text length": "d9d9f77bffffffffffffffff",
    "empty": "",
}


@pytest.mark.parametrize("name", sorted(NON_CANONICAL))
def test_each_fault_is_reported_as_the_reference_reports_it(name: str) -> None:
    for trusted in (False, True):
        _agree("decode", bytes.fromhex(NON_CANONICAL[name]), trusted=trusted)


@pytest.mark.parametrize("depth", [62, 63, 64, 65, 70])
def test_the_depth_limit_is_the_references(depth: int) -> None:
    value: Any = 1
    for n in range(depth):
        value = [value] if n % 2 else {"k": value}
    data = sdk_cbor.encode_python(value, depth_max=ANSWER_DEPTH_MAX)
    for depth_max in (1, 63, 64):
        _agree("encode", data, depth_max=depth_max)
        _agree("decode", data, depth_max=depth_max)


def test_a_limit_deeper_than_the_compiled_codec_takes_is_left_to_the_reference() -> None:
    value: Any = 1
    for _ in range(300):
        value = [value]
    data = sdk_cbor.encode_python(value, depth_max=400)
    # The compiled codec recurses on the component's stack: past its own bound it declines.
    assert _agree("encode", data, depth_max=400) == ["ok", data]
    assert _agree("decode", data, depth_max=400)[0] == "ok"
    assert _both("decode", data, depth_max=400)[2]  # declined


@pytest.mark.parametrize("value", [*INT_EDGES, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1])
def test_integer_edges(value: int) -> None:
    data = kernel_cbor.encode({"n": value, "l": [value]})
    assert _agree("encode", data, compiled_ok=True) == ["ok", data]
    assert _agree("decode", data, compiled_ok=True) == ["ok", {"l": [value], "n": value}]


# ------------------------------------------------------------------------------------------
# The flow interpreter with the compiled codec, on recorded inputs


@cache
def _recorded(case: str, executions: int) -> profile_interp.Split:
    """Every interpreter step input of `executions` runs of a bench playbook on a flow world
    (the interpreter component built from these sources), with the blobs they may read."""
    return profile_interp.run(case, executions, sync=False)


def _native(data: bytes, blobs: dict[str, bytes]) -> bytes:
    output = app.flow.step_bytes(data)
    if sdk_envelope.decode_output(output).reads:
        output = app.flow.step_bytes(with_data(data, blobs))
    return output


@pytest.mark.parametrize(("case", "executions"), [("hello_world", 4), ("loop20", 1)])
def test_the_interpreter_gives_its_native_outputs_on_recorded_inputs(
    case: str, executions: int
) -> None:
    split = _recorded(case, executions)
    assert split.inputs
    component = _instance(InterpreterSources.installed().build().wasm_path)
    for data in split.inputs:
        output = component.call(data, output_bytes_max=OUTPUT_BYTES_MAX)
        if sdk_envelope.decode_output(output).reads:
            output = component.call(with_data(data, split.blobs), output_bytes_max=OUTPUT_BYTES_MAX)
        assert output == _native(data, split.blobs)
