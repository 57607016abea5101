"""Journal records of a world: every one is a canonical map with a `kind`.

Only `domain_event` records without a `cause` (ingress from outside), `manifest` records and,
later, receipts and governance actions are inputs; everything else records what the kernel
derived from them, so that a replay can check it.
"""

from __future__ import annotations

from typing import Any

MANIFEST = "manifest"
DOMAIN_EVENT = "domain_event"
INGRESS_REJECTED = "ingress_rejected"
STEP = "step"
STEP_FAULT = "step_fault"
DELIVERY_DROPPED = "delivery_dropped"
EFFECT_INTENT = "effect_intent"
EFFECT_RECEIPT = "effect_receipt"
RECEIPT_REJECTED = "receipt_rejected"
TIME = "time"
SNAPSHOT = "snapshot"
GOVERNANCE = "governance"
OPERATION = "operation"

KINDS = (
    MANIFEST,
    DOMAIN_EVENT,
    INGRESS_REJECTED,
    STEP,
    STEP_FAULT,
    DELIVERY_DROPPED,
    EFFECT_INTENT,
    EFFECT_RECEIPT,
    RECEIPT_REJECTED,
    TIME,
    SNAPSHOT,
    GOVERNANCE,
    OPERATION,
)

# A record that entered from outside carries an ingress `stamp`; every other record was
# derived by the kernel from one that did.


def manifest(manifest_hash: str, stamp: dict[str, Any]) -> dict[str, Any]:
    return {"kind": MANIFEST, "manifest": manifest_hash, "stamp": stamp}


def ingress_event(
    schema: str, value: Any, stamp: dict[str, Any], idempotency_key: str | None = None
) -> dict[str, Any]:
    """An event from outside; `idempotency_key` only when its sender gave one (so records
    of events sent without one are as they always were)."""
    record = {"kind": DOMAIN_EVENT, "schema": schema, "value": value, "stamp": stamp}
    if idempotency_key is not None:
        record["idempotency_key"] = idempotency_key
    return record


def derived_event(schema: str, value: Any, cause: int, index: int) -> dict[str, Any]:
    """An event a step emitted: `cause` is the step record, `index` its place in the output.
    Its stamp is derived (stamps.py), so it is not stored."""
    return {"kind": DOMAIN_EVENT, "schema": schema, "value": value, "cause": cause, "index": index}


JOURNALED_MESSAGE_CHARS_MAX = 1000
"""Longest error message a record keeps (`step_fault`, `ingress_rejected`); a longer one is
cut and says how much was cut, so a record's size never depends on a guest's or a sender's
text."""


def clip_message(text: str) -> str:
    """The message as a record keeps it (at most JOURNALED_MESSAGE_CHARS_MAX characters)."""
    if len(text) <= JOURNALED_MESSAGE_CHARS_MAX:
        return text
    marker = f" ... [{len(text) - JOURNALED_MESSAGE_CHARS_MAX + 40} characters cut]"
    return text[: JOURNALED_MESSAGE_CHARS_MAX - 40] + marker


def ingress_rejected(
    schema: str, value: Any, stamp: dict[str, Any], code: str, message: str
) -> dict[str, Any]:
    return {
        "kind": INGRESS_REJECTED,
        "schema": schema,
        "value": value,
        "stamp": stamp,
        "code": code,
        "message": clip_message(message),
    }


def step(
    *,
    input_seq: int,
    delivery: int,
    workflow: str,
    key: bytes | None,
    state: str | None,
    events: int,
    intents: list[str],
    cancelled: list[str] | None = None,
    ann: Any = None,
) -> dict[str, Any]:
    """A step record. `cancelled` (intents the step closed) and `ann` (its annotation) are
    written only when the step has them, so steps without either keep their old form."""
    record: dict[str, Any] = {
        "kind": STEP,
        "input": input_seq,
        "delivery": delivery,
        "workflow": workflow,
        "key": key,
        "state": state,
        "events": events,
        "intents": intents,
    }
    if cancelled:
        record["cancelled"] = cancelled
    if ann is not None:
        record["ann"] = ann
    return record


def step_fault(
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
    """A faulted step. `guest` (the exception a workflow raised: type, message, where) is
    written only for `step.guest_exception`, so other faults keep their old form."""
    record: dict[str, Any] = {
        "kind": STEP_FAULT,
        "input": input_seq,
        "delivery": delivery,
        "workflow": workflow,
        "key": key,
        "module": module,
        "code": code,
        "message": clip_message(message),
    }
    if guest is not None:
        record["guest"] = guest
    return record


def delivery_dropped(
    *, input_seq: int, delivery: int, workflow: str, key: bytes | None, reason: str
) -> dict[str, Any]:
    return {
        "kind": DELIVERY_DROPPED,
        "input": input_seq,
        "delivery": delivery,
        "workflow": workflow,
        "key": key,
        "reason": reason,
    }


def effect_intent(
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
        "kind": EFFECT_INTENT,
        "intent": intent,
        "effect": effect,
        "params": params,
        "origin": {"workflow": workflow, "key": key},
        "cause": cause,
        "index": index,
        "idempotency_key": idempotency_key,
        "issuer_ref": issuer_ref,
    }


def effect_receipt(
    *,
    body: dict[str, Any],
    signature: bytes | None,
    stamp: dict[str, Any] | None,
    cause: int | None,
    payload_error: tuple[str, str] | None,
) -> dict[str, Any]:
    """A settled intent. A receipt from an adapter carries its signature and an ingress
    stamp; a kernel timer receipt carries neither, but the `time` record that caused it."""
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
            "message": clip_message(payload_error[1]),
        }
    return record


def receipt_rejected(
    receipt: Any, stamp: dict[str, Any], code: str, message: str
) -> dict[str, Any]:
    return {
        "kind": RECEIPT_REJECTED,
        "receipt": receipt,
        "stamp": stamp,
        "code": code,
        "message": message,
    }


def time(stamp: dict[str, Any]) -> dict[str, Any]:
    return {"kind": TIME, "stamp": stamp}


def snapshot(snapshot_hash: str, height: int) -> dict[str, Any]:
    """A snapshot of the world as of journal `height` (the record before this one)."""
    return {"kind": SNAPSHOT, "snapshot": snapshot_hash, "height": height}


def governance(action: str, proposal: str, stamp: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A governance action (proposed, shadowed, approved, rejected, applied): an input."""
    return {"kind": GOVERNANCE, "action": action, "proposal": proposal, "stamp": stamp, **fields}


def operation(action: str, stamp: dict[str, Any], **target: Any) -> dict[str, Any]:
    """An operator's action on a cell or an intent (retry, reset, cancel): an input."""
    return {"kind": OPERATION, "action": action, "stamp": stamp, **target}
