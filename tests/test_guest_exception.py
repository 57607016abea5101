"""A workflow that raises: the SDK returns the exception instead of a result, the host turns it
into `step.guest_exception` with the type, message and place, each cut to a named limit."""

from __future__ import annotations

from typing import Any

import pytest

from aos.kernel import cbor
from aos.kernel.wasm import StepGuestExceptionError, StepOutputMalformedError
from aos.kernel.wasm.envelope import decode_output
from aos.kernel.wasm.limits import GUEST_FAULT_CHARS_MAX_DEFAULT, StepLimits
from aos_sdk import Workflow, export
from aos_sdk.envelope import FAULT_TEXT_CHARS_MAX, encode_fault
from aos_sdk.testing import Event, input_bytes

broken = Workflow("demo/broken@1")


@broken.on("demo/Ping@1")
def on_ping(state: Any, event: Any, ctx: Any) -> Any:
    if event["n"] == 0:
        raise ZeroDivisionError("no zero pings")
    if event["n"] == 1:
        raise MemoryError("out of heap")
    return {"n": event["n"]}


def _fault(data: bytes, limits: StepLimits | None = None) -> StepGuestExceptionError:
    with pytest.raises(StepGuestExceptionError) as caught:
        decode_output(data, limits or StepLimits())
    return caught.value


def test_the_sdk_returns_the_exception_with_its_type_and_place() -> None:
    step = export(broken)().step
    fault = _fault(step(input_bytes(None, Event("demo/Ping@1", {"n": 0}))))
    assert fault.code == "step.guest_exception"
    assert fault.guest["type"] == "ZeroDivisionError"
    assert fault.guest["message"] == "no zero pings"
    assert fault.guest["where"].startswith("on_ping:")
    assert str(fault).startswith("ZeroDivisionError: no zero pings (at on_ping:")


def test_running_out_of_memory_still_traps_outside_the_envelope() -> None:
    step = export(broken)().step
    with pytest.raises(MemoryError):
        step(input_bytes(None, Event("demo/Ping@1", {"n": 1})))


def test_a_good_step_is_unchanged() -> None:
    output = decode_output(
        export(broken)().step(input_bytes(None, Event("demo/Ping@1", {"n": 5}))), StepLimits()
    )
    assert output.state is not None and cbor.decode(output.state) == {"n": 5}


def test_texts_are_cut_at_the_host_limit_edge() -> None:
    limits = StepLimits(guest_fault_chars_max=10)
    at_limit = _fault(encode_fault("E", "m" * 10, "f:1"), limits)
    assert at_limit.guest["message"] == "m" * 10
    over = _fault(encode_fault("E" * 11, "m" * 11, "w" * 11), limits)
    assert over.guest == {"type": "E" * 10, "message": "m" * 10, "where": "w" * 10}
    assert GUEST_FAULT_CHARS_MAX_DEFAULT == FAULT_TEXT_CHARS_MAX == 1000


def test_the_sdk_cuts_long_texts_too() -> None:
    body = cbor.decode(encode_fault("E", "x" * 5000, ""))
    assert len(body["fault"]["message"]) == FAULT_TEXT_CHARS_MAX


@pytest.mark.parametrize(
    "envelope",
    [
        {"state": cbor.encode({"n": 1}), "fault": {"type": "E", "message": "m"}},
        {"state": None, "fault": {"type": "E"}},
        {"state": None, "fault": {"type": "E", "message": "m", "extra": "x"}},
        {"state": None, "fault": {"type": 1, "message": "m"}},
        {"state": None, "fault": "E: m"},
        {"state": None, "fault": {"type": "E", "message": "m"}, "effects": []},
    ],
)
def test_a_malformed_fault_is_a_malformed_output(envelope: dict[str, Any]) -> None:
    with pytest.raises(StepOutputMalformedError):
        decode_output(cbor.encode(envelope), StepLimits())


def test_the_limit_is_overridable_and_range_checked() -> None:
    assert StepLimits.from_overrides({"guest_fault_chars_max": 5}).guest_fault_chars_max == 5
    with pytest.raises(Exception) as caught:
        StepLimits(guest_fault_chars_max=0)
    assert getattr(caught.value, "code", "") == "wasm.usage"
