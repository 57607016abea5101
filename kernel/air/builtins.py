"""The kernel's built-in `sys/` definitions.

They exist in every world without being listed in a manifest (a manifest may still list
them, with their hash), and authored files may not define `sys/` names. The kernel produces
values of these schemas itself: the step context, receipt envelopes, rejected-receipt
notices, and the timer effect that its own timer adapter settles.

Field meanings (seed §3.4-3.5, DESIGN §5 ingress stamps):

`sys/WorkflowContext@1` (the `ctx` of a step, when a workflow declares it):
    now_ns          the world's logical time when the input was admitted (what timers are
                    due against); never the host clock of the step
    entropy         64 bytes, derived deterministically from the ingress stamp
    journal_height  journal sequence of the input being delivered
    manifest_hash   the active manifest
    workflow        the workflow's name
    key             the cell key (canonical key bytes) for a keyed workflow, else null
    cell_mode       true for a keyed workflow

`sys/EffectReceiptEnvelope@1` (a settled effect, delivered to the origin cell only):
    origin_workflow, origin_key  who emitted the intent
    intent_hash, effect          which intent, of which effect
    adapter                      the adapter identity that signed the receipt
    status                       ok | error | timeout | cancelled (a variant of unit arms;
                                 cancelled: an operator cancelled the intent, adapter
                                 `sys/operator@1`, payload null)
    payload                      canonical CBOR of the receipt value (the effect's receipt schema)
    issuer_ref                   echoed from the emitted effect
    emitted_seq                  journal sequence of the intent

`sys/EffectReceiptRejected@1` (a receipt whose payload does not fit the receipt schema; the
intent is settled anyway): the same identity fields, `error_code` and `error_message` from the
normalizer, and the raw `payload`.

`sys/StepFault@1` (a fault notice, delivered to the faulted cell only, when its workflow's
event schema takes it: spec/03-world.md §7.1):
    code, message    the fault's, as the `step_fault` record keeps them
    module           the module hash that faulted
    seq              journal sequence of the `step_fault` record
    input, delivery  the delivery that faulted: its input record and index
    event            canonical CBOR of the event value that delivery gave the cell

`sys/timer.set@1`: params `sys/TimerSetParams@1` (`deliver_at_ns`: logical time, `key`: an
optional correlation text), receipt `sys/TimerSetReceipt@1` (`delivered_at_ns`, `key`),
settled by the kernel's own adapter identity `sys/timer@1`, which has no manifest key because
its receipts never leave the kernel.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from aos.kernel.air.builtin_names import (
    RECEIPT_ENVELOPE,
    RECEIPT_REJECTED,
    RECEIPT_STATUS,
    STEP_FAULT,
    TIMER_ADAPTER,
    TIMER_SET_EFFECT,
    TIMER_SET_PARAMS,
    TIMER_SET_RECEIPT,
    WORKFLOW_CONTEXT,
)
from aos.kernel.air.model import DefEffect, DefSchema
from aos.kernel.air.types import TypeExpr

ENTROPY_BYTES = 64

_UNIT: dict[str, Any] = {"unit": {}}


def _prim(tag: str) -> dict[str, Any]:
    return {tag: {}}


def _option(inner: dict[str, Any]) -> dict[str, Any]:
    return {"option": inner}


_ORIGIN_FIELDS: dict[str, Any] = {
    "origin_workflow": _prim("text"),
    "origin_key": _option(_prim("bytes")),
    "intent_hash": _prim("hash"),
    "effect": _prim("text"),
    "adapter": _prim("text"),
    "issuer_ref": _option(_prim("text")),
    "emitted_seq": _prim("nat"),
}

_SCHEMA_TYPES: dict[str, dict[str, Any]] = {
    WORKFLOW_CONTEXT: {
        "record": {
            "now_ns": _prim("time"),
            "entropy": _prim("bytes"),
            "journal_height": _prim("nat"),
            "manifest_hash": _prim("hash"),
            "workflow": _prim("text"),
            "key": _option(_prim("bytes")),
            "cell_mode": _prim("bool"),
        }
    },
    RECEIPT_STATUS: {
        "variant": {"ok": _UNIT, "error": _UNIT, "timeout": _UNIT, "cancelled": _UNIT}
    },
    RECEIPT_ENVELOPE: {
        "record": {
            **_ORIGIN_FIELDS,
            "status": {"ref": RECEIPT_STATUS},
            "payload": _prim("bytes"),
        }
    },
    RECEIPT_REJECTED: {
        "record": {
            **_ORIGIN_FIELDS,
            "error_code": _prim("text"),
            "error_message": _prim("text"),
            "payload": _prim("bytes"),
        }
    },
    STEP_FAULT: {
        "record": {
            "code": _prim("text"),
            "message": _prim("text"),
            "module": _prim("hash"),
            "seq": _prim("nat"),
            "input": _prim("nat"),
            "delivery": _prim("nat"),
            "event": _prim("bytes"),
        }
    },
    TIMER_SET_PARAMS: {"record": {"deliver_at_ns": _prim("time"), "key": _option(_prim("text"))}},
    TIMER_SET_RECEIPT: {
        "record": {"delivered_at_ns": _prim("time"), "key": _option(_prim("text"))}
    },
}

BUILTIN_SCHEMAS: MappingProxyType[str, DefSchema] = MappingProxyType(
    {
        name: DefSchema.model_validate({"$kind": "defschema", "name": name, "type": type_})
        for name, type_ in sorted(_SCHEMA_TYPES.items())
    }
)
"""The built-in schemas by name."""

BUILTIN_EFFECTS: MappingProxyType[str, DefEffect] = MappingProxyType(
    {
        TIMER_SET_EFFECT: DefEffect.model_validate(
            {
                "$kind": "defeffect",
                "name": TIMER_SET_EFFECT,
                "params": TIMER_SET_PARAMS,
                "receipt": TIMER_SET_RECEIPT,
                "adapters": [TIMER_ADAPTER],
            }
        )
    }
)
"""The built-in effects by name."""

BUILTIN_DEFINITIONS: MappingProxyType[str, DefSchema | DefEffect] = MappingProxyType(
    {**BUILTIN_SCHEMAS, **BUILTIN_EFFECTS}
)
"""Every built-in definition by name."""


def builtin_types() -> dict[str, TypeExpr]:
    """The types of the built-in schemas by name (a fresh dict the caller may extend)."""
    return {name: schema.type_ for name, schema in BUILTIN_SCHEMAS.items()}
