"""The journal records (kernel/world/records.py), one class per kind, encode to exactly the
bytes of the dict records they replaced, read back from those bytes unchanged, and refuse a
map that is not a record of their kind.

The `_legacy_*` builders below are the dict builders as they were before the records were
typed, kept here verbatim as the reference: a journal written by either is the same bytes.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aos.kernel import cbor
from aos.kernel.world import records
from aos.kernel.world.errors import OperationInvalidError, RecordMalformedError
from aos.kernel.world.operations import Operation
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


def _check(typed: records.Record, legacy: dict[str, Any], reread: Any) -> None:
    """Same bytes as the legacy dict, the same map, and read back to an equal encoding."""
    raw = typed.encode()
    assert raw == cbor.encode(legacy)
    assert cbor.encode(typed.to_value()) == raw
    assert cbor.is_canonical(raw)
    decoded = cbor.decode(raw)
    assert decoded["kind"] == typed.kind
    assert reread(decoded).encode() == raw
    assert records.parse(decoded).to_value() == decoded


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


@given(texts, values, stamps, st.one_of(st.none(), texts))
def test_ingress_event_bytes_are_the_dict_records(
    schema: str, value: Any, stamp: dict[str, Any], idempotency_key: str | None
) -> None:
    typed = records.IngressEvent(schema, value, stamp, idempotency_key)
    legacy = _legacy_ingress_event(schema, value, stamp, idempotency_key)
    _check(typed, legacy, records.IngressEvent.from_value)


@given(texts, values, naturals, naturals)
def test_derived_event_bytes_are_the_dict_records(
    schema: str, value: Any, cause: int, index: int
) -> None:
    typed = records.DerivedEvent(schema, value, cause, index)
    legacy = _legacy_derived_event(schema, value, cause, index)
    _check(typed, legacy, records.DerivedEvent.from_value)


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
    typed = records.EffectReceipt.of(**fields)
    _check(typed, _legacy_effect_receipt(**fields), records.EffectReceipt.from_value)
    assert typed.intent == fields["body"]["intent"]


def test_a_step_without_cancels_or_annotation_keeps_its_old_form() -> None:
    typed = records.StepRecord(1, 0, "demo/w@1", None, None, 0, [], cancelled=[], ann=None)
    value = typed.to_value()
    assert "cancelled" not in value and "ann" not in value
    assert value == _legacy_step(**typed._asdict())


# The other kinds' dict builders, verbatim from before they were typed (records.py).


def _legacy_manifest(manifest_hash: str, stamp: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "manifest", "manifest": manifest_hash, "stamp": stamp}


def _legacy_ingress_rejected(
    schema: str, value: Any, stamp: dict[str, Any], code: str, message: str
) -> dict[str, Any]:
    return {
        "kind": "ingress_rejected",
        "schema": schema,
        "value": value,
        "stamp": stamp,
        "code": code,
        "message": records.clip_message(message),
    }


def _legacy_step_fault(
    *,
    input_seq: int,
    delivery: int,
    workflow: str,
    key: bytes | None,
    module: str,
    code: str,
    message: str,
    guest: dict[str, str] | None = None,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "kind": "step_fault",
        "input": input_seq,
        "delivery": delivery,
        "workflow": workflow,
        "key": key,
        "module": module,
        "code": code,
        "message": records.clip_message(message),
    }
    if guest is not None:
        record["guest"] = guest
    return record


def _legacy_delivery_dropped(
    *, input_seq: int, delivery: int, workflow: str, key: bytes | None, reason: str
) -> dict[str, Any]:
    return {
        "kind": "delivery_dropped",
        "input": input_seq,
        "delivery": delivery,
        "workflow": workflow,
        "key": key,
        "reason": reason,
    }


def _legacy_effect_intent(
    *,
    intent: str,
    effect: str,
    params: Any,
    workflow: str,
    key: bytes | None,
    cause: int,
    index: int,
    idempotency_key: bytes | None,
    issuer_ref: str | None,
) -> dict[str, Any]:
    return {
        "kind": "effect_intent",
        "intent": intent,
        "effect": effect,
        "params": params,
        "origin": {"workflow": workflow, "key": key},
        "cause": cause,
        "index": index,
        "idempotency_key": idempotency_key,
        "issuer_ref": issuer_ref,
    }


def _legacy_receipt_rejected(
    receipt: Any, stamp: dict[str, Any], code: str, message: str
) -> dict[str, Any]:
    return {
        "kind": "receipt_rejected",
        "receipt": receipt,
        "stamp": stamp,
        "code": code,
        "message": message,
    }


def _legacy_time(stamp: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "time", "stamp": stamp}


def _legacy_snapshot(snapshot_hash: str, height: int) -> dict[str, Any]:
    return {"kind": "snapshot", "snapshot": snapshot_hash, "height": height}


def _legacy_governance(
    action: str, proposal: str, stamp: dict[str, Any], **fields: Any
) -> dict[str, Any]:
    return {"kind": "governance", "action": action, "proposal": proposal, "stamp": stamp, **fields}


def _legacy_operation(action: str, stamp: dict[str, Any], **target: Any) -> dict[str, Any]:
    return {"kind": "operation", "action": action, "stamp": stamp, **target}


long_texts = st.text(max_size=1500)


@given(hashes, stamps)
def test_manifest_record_bytes_are_the_dict_records(manifest: str, stamp: Any) -> None:
    typed = records.ManifestRecord(manifest, stamp)
    _check(typed, _legacy_manifest(manifest, stamp), records.ManifestRecord.from_value)


@given(texts, values, stamps, texts, long_texts)
def test_ingress_rejected_bytes_are_the_dict_records(
    schema: str, value: Any, stamp: Any, code: str, message: str
) -> None:
    typed = records.IngressRejected.of(schema, value, stamp, code, message)
    legacy = _legacy_ingress_rejected(schema, value, stamp, code, message)
    _check(typed, legacy, records.IngressRejected.from_value)


guests = st.fixed_dictionaries({"type": texts, "message": texts, "where": texts})


@given(
    input_seq=naturals,
    delivery=naturals,
    workflow=texts,
    key=keys,
    module=hashes,
    code=texts,
    message=long_texts,
    guest=st.one_of(st.none(), guests),
)
def test_step_fault_bytes_are_the_dict_records(**fields: Any) -> None:
    typed = records.StepFaultRecord.of(**fields)
    _check(typed, _legacy_step_fault(**fields), records.StepFaultRecord.from_value)


@given(input_seq=naturals, delivery=naturals, workflow=texts, key=keys, reason=texts)
def test_delivery_dropped_bytes_are_the_dict_records(**fields: Any) -> None:
    typed = records.DeliveryDropped(**fields)
    _check(typed, _legacy_delivery_dropped(**fields), records.DeliveryDropped.from_value)


@given(
    intent=hashes,
    effect=texts,
    params=values,
    workflow=texts,
    key=keys,
    cause=naturals,
    index=naturals,
    idempotency_key=st.one_of(st.none(), st.binary(max_size=40)),
    issuer_ref=st.one_of(st.none(), texts),
)
def test_effect_intent_bytes_are_the_dict_records(**fields: Any) -> None:
    typed = records.EffectIntentRecord(
        **{name: value for name, value in fields.items() if name != "index"},
        output_index=fields["index"],
    )
    _check(typed, _legacy_effect_intent(**fields), records.EffectIntentRecord.from_value)


@given(st.one_of(st.none(), values), stamps, texts, texts)
def test_receipt_rejected_bytes_are_the_dict_records(
    receipt: Any, stamp: Any, code: str, message: str
) -> None:
    typed = records.ReceiptRejected(receipt, stamp, code, message)
    legacy = _legacy_receipt_rejected(receipt, stamp, code, message)
    _check(typed, legacy, records.ReceiptRejected.from_value)


@given(stamps)
def test_time_record_bytes_are_the_dict_records(stamp: Any) -> None:
    _check(records.TimeRecord(stamp), _legacy_time(stamp), records.TimeRecord.from_value)


@given(hashes, naturals)
def test_snapshot_record_bytes_are_the_dict_records(snapshot: str, height: int) -> None:
    typed = records.SnapshotRecord(snapshot, height)
    _check(typed, _legacy_snapshot(snapshot, height), records.SnapshotRecord.from_value)


governance_fields = st.one_of(
    st.tuples(
        st.just("proposed"),
        st.fixed_dictionaries({"base": hashes, "manifest": hashes, "patch": hashes}),
    ),
    st.tuples(
        st.just("shadowed"),
        st.fixed_dictionaries(
            {
                "state_height": naturals,
                "report": hashes,
                "summary": st.dictionaries(texts, naturals, max_size=4),
            }
        ),
    ),
    st.tuples(
        st.sampled_from(["approved", "rejected"]),
        st.fixed_dictionaries({"approver": texts, "reason": texts}),
    ),
    st.tuples(st.just("applied"), st.fixed_dictionaries({"manifest": hashes})),
)


@given(governance_fields, hashes, stamps)
def test_governance_record_bytes_are_the_dict_records(
    action_fields: tuple[str, dict[str, Any]], proposal: str, stamp: Any
) -> None:
    action, fields = action_fields
    typed = records.GovernanceRecord(action, proposal, stamp, **fields)
    legacy = _legacy_governance(action, proposal, stamp, **fields)
    _check(typed, legacy, records.GovernanceRecord.from_value)


operations = st.one_of(
    st.builds(
        Operation,
        st.sampled_from(["cell_retry", "cell_reset"]),
        workflow=texts.filter(bool),
        key=keys,
        reason=texts,
    ),
    st.builds(Operation, st.just("intent_cancel"), intent=hashes, reason=texts),
)


@given(operations, stamps)
def test_operation_record_bytes_are_the_dict_records(operation: Operation, stamp: Any) -> None:
    typed = records.OperationRecord(operation, stamp)
    legacy = _legacy_operation(operation.action, stamp, **operation.target())
    _check(typed, legacy, records.OperationRecord.from_value)


# Refusals: a map that is not a record of its kind is `world.record_malformed`.

STAMP = {
    "height": 1,
    "entropy": b"\0" * 64,
    "wall_ns": 2,
    "manifest": "blake3:" + "0" * 64,
    "logical_ns": 3,
}
GOOD = {
    "kind": "delivery_dropped",
    "input": 3,
    "delivery": 1,
    "workflow": "demo/w@1",
    "key": None,
    "reason": "cell_failed",
}


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({k: v for k, v in GOOD.items() if k != "reason"}, "reason"),
        ({**GOOD, "extra": 1}, "extra"),
        ({**GOOD, "input": -1}, "input"),
        ({**GOOD, "input": True}, "input"),
        ({**GOOD, "key": "text"}, "key"),
        ({**GOOD, "workflow": b"bytes"}, "workflow"),
    ],
)
def test_a_map_missing_a_field_with_an_unknown_one_or_one_of_another_type_is_refused(
    value: dict[str, Any], field: str
) -> None:
    with pytest.raises(RecordMalformedError) as refused:
        records.parse(value)
    assert refused.value.code == "world.record_malformed"
    assert refused.value.detail == {"kind": "delivery_dropped", "field": field}
    assert records.parse(GOOD).to_value() == GOOD


@pytest.mark.parametrize(
    "value",
    [
        None,
        [1, 2],
        {"kind": "nonesuch"},
        {"no": "kind"},
        {"kind": 7},
    ],
)
def test_a_value_that_is_no_record_kind_is_refused(value: Any) -> None:
    with pytest.raises(RecordMalformedError):
        records.parse(value)


def test_a_class_refuses_a_record_of_another_kind() -> None:
    with pytest.raises(RecordMalformedError):
        records.StepRecord.from_value(GOOD)


@pytest.mark.parametrize(
    "value",
    [
        {"kind": "time", "stamp": {**STAMP, "tag": 1}},
        {"kind": "time", "stamp": {k: v for k, v in STAMP.items() if k != "entropy"}},
        {"kind": "time", "stamp": {**STAMP, "logical_ns": "3"}},
    ],
)
def test_a_stamp_is_exactly_its_five_fields(value: Any) -> None:
    with pytest.raises(RecordMalformedError):
        records.parse(value)


def test_a_governance_record_has_exactly_its_actions_fields() -> None:
    applied = {"kind": "governance", "action": "applied", "proposal": "p", "stamp": STAMP}
    assert records.parse({**applied, "manifest": "m"}).to_value() == {**applied, "manifest": "m"}
    for value in (
        applied,  # no manifest
        {**applied, "manifest": "m", "approver": "a"},  # another action's field
        {**applied, "action": "vetoed", "manifest": "m"},  # no such action
    ):
        with pytest.raises(RecordMalformedError):
            records.parse(value)


def test_an_operation_record_has_exactly_its_actions_fields() -> None:
    cancel = {
        "kind": "operation",
        "action": "intent_cancel",
        "stamp": STAMP,
        "intent": "blake3:" + "1" * 64,
    }
    assert records.parse(cancel).to_value() == cancel
    with pytest.raises(RecordMalformedError):
        records.parse({**cancel, "workflow": "demo/w@1", "key": None})
    with pytest.raises(RecordMalformedError):
        records.parse({**cancel, "reason": ""})  # an empty reason is never written
    with pytest.raises(OperationInvalidError):
        records.parse({**cancel, "intent": "not a hash"})


def test_an_effect_receipt_names_its_bodys_intent() -> None:
    body = {"intent": "blake3:" + "1" * 64, "status": "ok"}
    good = {"kind": "effect_receipt", "intent": body["intent"], "body": body, "signature": None}
    assert records.parse({**good, "cause": 4}).to_value() == {**good, "cause": 4}
    with pytest.raises(RecordMalformedError):
        records.parse({**good, "intent": "blake3:" + "2" * 64})


def test_an_event_with_a_stamp_is_an_ingress_and_one_without_was_emitted() -> None:
    ingress = {"kind": "domain_event", "schema": "demo/E@1", "value": 1, "stamp": STAMP}
    derived = {"kind": "domain_event", "schema": "demo/E@1", "value": 1, "cause": 2, "index": 0}
    assert isinstance(records.parse(ingress), records.IngressEvent)
    assert isinstance(records.parse(derived), records.DerivedEvent)
    with pytest.raises(RecordMalformedError):
        records.parse({**derived, "stamp": STAMP})  # an ingress has no cause


def test_every_kind_has_its_class() -> None:
    built = {
        records.ManifestRecord("m", STAMP).kind,
        records.IngressEvent("s", 1, STAMP).kind,
        records.DerivedEvent("s", 1, 1, 0).kind,
        records.IngressRejected("s", 1, STAMP, "c", "m").kind,
        records.StepRecord(1, 0, "w", None, None, 0, []).kind,
        records.StepFaultRecord(1, 0, "w", None, "m", "c", "m").kind,
        records.DeliveryDropped(1, 0, "w", None, "r").kind,
        records.EffectIntentRecord("i", "e", 1, "w", None, 1, 0, None, None).kind,
        records.EffectReceipt({"intent": "i"}, None).kind,
        records.ReceiptRejected(None, STAMP, "c", "m").kind,
        records.TimeRecord(STAMP).kind,
        records.SnapshotRecord("s", 1).kind,
        records.GovernanceRecord("applied", "p", STAMP, manifest="m").kind,
        records.OperationRecord(Operation("intent_cancel", intent="i"), STAMP).kind,
    }
    assert built == set(records.KINDS)
