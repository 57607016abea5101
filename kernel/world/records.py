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

KINDS = (
    MANIFEST,
    DOMAIN_EVENT,
    INGRESS_REJECTED,
    STEP,
    STEP_FAULT,
    DELIVERY_DROPPED,
    EFFECT_INTENT,
)


def manifest(manifest_hash: str, stamp: dict[str, Any]) -> dict[str, Any]:
    return {"kind": MANIFEST, "manifest": manifest_hash, "stamp": stamp}


def ingress_event(schema: str, value: Any, stamp: dict[str, Any]) -> dict[str, Any]:
    return {"kind": DOMAIN_EVENT, "schema": schema, "value": value, "stamp": stamp}


def derived_event(schema: str, value: Any, cause: int, index: int) -> dict[str, Any]:
    """An event a step emitted: `cause` is the step record, `index` its place in the output.
    Its stamp is derived (stamps.py), so it is not stored."""
    return {"kind": DOMAIN_EVENT, "schema": schema, "value": value, "cause": cause, "index": index}


def ingress_rejected(
    schema: str, value: Any, stamp: dict[str, Any], code: str, message: str
) -> dict[str, Any]:
    return {
        "kind": INGRESS_REJECTED,
        "schema": schema,
        "value": value,
        "stamp": stamp,
        "code": code,
        "message": message,
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
    fuel: int,
) -> dict[str, Any]:
    return {
        "kind": STEP,
        "input": input_seq,
        "delivery": delivery,
        "workflow": workflow,
        "key": key,
        "state": state,
        "events": events,
        "intents": intents,
        "fuel": fuel,
    }


def step_fault(
    *,
    input_seq: int,
    delivery: int,
    workflow: str,
    key: bytes | None,
    module: str,
    code: str,
    message: str,
) -> dict[str, Any]:
    return {
        "kind": STEP_FAULT,
        "input": input_seq,
        "delivery": delivery,
        "workflow": workflow,
        "key": key,
        "module": module,
        "code": code,
        "message": message,
    }


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
