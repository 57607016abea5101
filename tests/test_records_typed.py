"""The typed records of the hot path (kernel/world/records.py) encode to exactly the bytes of
the dict records they replaced, and read back from those bytes unchanged.

The `_legacy_*` builders below are the dict builders as they were before the records were
typed, kept here verbatim as the reference: a journal written by either is the same bytes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from aos.kernel import cbor
from aos.kernel.world import records
from tests.strategies import values

STEP, DOMAIN_EVENT, EFFECT_RECEIPT = "step", "domain_event", "effect_receipt"


def _legacy_step(**fields: Any) -> dict[str, Any]:
    """The step builder's body as it was (its keyword arguments are StepRecord's fields)."""
    record: dict[str, Any] = {
        "kind": STEP,
        "input": fields["input_seq"],
        "delivery": fields["delivery"],
        "workflow": fields["workflow"],
        "key": fields["key"],
        "state": fields["state"],
        "events": fields["events"],
        "intents": fields["intents"],
    }
    cancelled, ann, writes = fields.get("cancelled"), fields.get("ann"), fields.get("writes")
    if cancelled:
        record["cancelled"] = cancelled
    if ann is not None:
        record["ann"] = ann
    if writes:
        record["writes"] = writes
    return record


def _legacy_ingress_event(
    schema: str, value: Any, stamp: dict[str, Any], idempotency_key: str | None = None
) -> dict[str, Any]:
    record = {"kind": DOMAIN_EVENT, "schema": schema, "value": value, "stamp": stamp}
    if idempotency_key is not None:
        record["idempotency_key"] = idempotency_key
    return record


def _legacy_derived_event(schema: str, value: Any, cause: int, index: int) -> dict[str, Any]:
    return {"kind": DOMAIN_EVENT, "schema": schema, "value": value, "cause": cause, "index": index}


def _legacy_effect_receipt(
    *,
    body: dict[str, Any],
    signature: bytes | None,
    stamp: dict[str, Any] | None,
    cause: int | None,
    payload_error: tuple[str, str] | None,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "kind": EFFECT_RECEIPT,
        "intent": body["intent"],
        "body": body,
        "signature": signature,
    }
    if stamp is not None:
        record["stamp"] = stamp
    if cause is not None:
        record["cause"] = cause
    if payload_error is not None:
        record["payload_error"] = {
            "code": payload_error[0],
            "message": records.clip_message(payload_error[1]),
        }
    return record


naturals = st.integers(min_value=0, max_value=cbor.INT_MAX)
texts = st.text(max_size=20)
hashes = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64).map(lambda h: "blake3:" + h)
keys = st.one_of(st.none(), st.binary(max_size=12))
stamps = st.fixed_dictionaries(
    {
        "wall_ns": naturals,
        "logical_ns": naturals,
        "entropy": st.binary(min_size=32, max_size=32),
        "height": naturals,
        "manifest": hashes,
    }
)


def _check(typed: records.TypedRecord, legacy: dict[str, Any], reread: Any) -> None:
    """Same bytes as the legacy dict, the same map, and read back to an equal encoding."""
    raw = typed.encode()
    assert raw == cbor.encode(legacy)
    assert cbor.encode(typed.to_cbor_value()) == raw
    assert cbor.is_canonical(raw)
    decoded = cbor.decode(raw)
    assert decoded["kind"] == typed.kind
    assert reread(decoded).encode() == raw


@given(
    input_seq=naturals,
    delivery=naturals,
    workflow=texts,
    key=keys,
    state=st.one_of(st.none(), hashes),
    events=naturals,
    intents=st.lists(hashes, max_size=3),
    cancelled=st.one_of(st.none(), st.lists(hashes, max_size=3)),
    ann=st.one_of(st.none(), values),
    writes=st.one_of(st.none(), st.lists(hashes, max_size=3)),
)
def test_step_record_bytes_are_the_dict_records(**fields: Any) -> None:
    typed = records.StepRecord(**fields)
    _check(typed, _legacy_step(**fields), records.StepRecord.from_value)
    assert records.step(**fields) == _legacy_step(**fields)


@given(texts, values, stamps, st.one_of(st.none(), texts))
def test_ingress_event_bytes_are_the_dict_records(
    schema: str, value: Any, stamp: dict[str, Any], idempotency_key: str | None
) -> None:
    typed = records.IngressEvent(schema, value, stamp, idempotency_key)
    legacy = _legacy_ingress_event(schema, value, stamp, idempotency_key)
    _check(typed, legacy, records.IngressEvent.from_value)
    assert typed.encode() == cbor.encode(
        records.ingress_event(schema, value, stamp, idempotency_key)
    )


@given(texts, values, naturals, naturals)
def test_derived_event_bytes_are_the_dict_records(
    schema: str, value: Any, cause: int, index: int
) -> None:
    typed = records.DerivedEvent(schema, value, cause, index)
    legacy = _legacy_derived_event(schema, value, cause, index)
    _check(typed, legacy, records.DerivedEvent.from_value)
    assert typed.encode() == cbor.encode(records.derived_event(schema, value, cause, index))


@given(
    body=st.fixed_dictionaries(
        {"intent": hashes, "adapter": texts, "status": st.sampled_from(["ok", "error"])},
        optional={"payload": values},
    ),
    signature=st.one_of(st.none(), st.binary(max_size=64)),
    stamp=st.one_of(st.none(), stamps),
    cause=st.one_of(st.none(), naturals),
    payload_error=st.one_of(st.none(), st.tuples(texts, st.text(max_size=1500))),
)
def test_effect_receipt_bytes_are_the_dict_records(**fields: Any) -> None:
    typed = records.receipt(**fields)
    _check(typed, _legacy_effect_receipt(**fields), records.EffectReceipt.from_value)
    assert typed.intent == fields["body"]["intent"]


def test_a_step_without_cancels_or_annotation_keeps_its_old_form() -> None:
    typed = records.StepRecord(1, 0, "demo/w@1", None, None, 0, [], cancelled=[], ann=None)
    value = typed.to_cbor_value()
    assert "cancelled" not in value and "ann" not in value
    assert value == _legacy_step(**typed._asdict())


def test_value_of_gives_the_map_of_a_typed_record_and_a_dict_as_it_is() -> None:
    record = records.time({"logical_ns": 1})
    assert records.value_of(record) is record
    typed = records.DerivedEvent("demo/E@1", {"n": 1}, 3, 0)
    assert records.value_of(typed) == records.derived_event("demo/E@1", {"n": 1}, 3, 0)
