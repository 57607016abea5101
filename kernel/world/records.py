"""Journal records of a world: every one is a canonical map with a `kind`.

Only `domain_event` records without a `cause` (ingress from outside), `manifest` records and,
later, receipts and governance actions are inputs; everything else records what the kernel
derived from them, so that a replay can check it.

The records of the hot path are typed (issue 15): `StepRecord`, `IngressEvent`,
`DerivedEvent` and `EffectReceipt` are named tuples (immutable, and built at about a third of
the cost of a frozen dataclass) the step and ingress paths build, and `World.append` encodes them with their own `encode()` at the journal boundary.
`to_cbor_value()` is the map they stand for, built in canonical key order so the encoder
keeps it as it is, and `from_value()` reads a decoded map back where the hot path needs its
fields (the tail fold, replay). The bytes are exactly those of the map the dict builders
below give (tests/test_records_typed.py holds them equal over generated fields), so typing a
record changes no journal. Every other record, and every reader off the hot path (trace,
read APIs, the inspector), stays a decoded `dict`.
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeAlias

from aos.kernel import cbor

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

# In each `to_cbor_value` the keys are written in canonical order (spec/01 §3: by the length
# of their encoding, then bytewise), which is what lets the encoder take the map unchanged.


class StepRecord(NamedTuple):
    """An applied step. `cancelled` (intents the step closed), `ann` (its annotation) and
    `writes` (the hashes of the blobs it stored, spec/08 §4.4) are written only when the step
    has them, so steps without any keep their old form."""

    input_seq: int
    delivery: int
    workflow: str
    key: bytes | None
    state: str | None
    events: int
    intents: list[str]
    cancelled: list[str] | None = None
    ann: Any = None
    writes: list[str] | None = None

    @property
    def kind(self) -> str:
        return STEP

    def to_cbor_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {} if self.ann is None else {"ann": self.ann}
        value["key"] = self.key
        value["kind"] = STEP
        value["input"] = self.input_seq
        value["state"] = self.state
        value["events"] = self.events
        if self.writes:
            value["writes"] = self.writes
        value["intents"] = self.intents
        value["delivery"] = self.delivery
        value["workflow"] = self.workflow
        if self.cancelled:
            value["cancelled"] = self.cancelled
        return value

    def encode(self) -> bytes:
        """Its stored bytes. Every field but the annotation is a number, text, bytes or a list
        of texts and the map is in canonical order, so there is nothing for the encoder to
        check or reorder unless the step has an annotation (a value of any shape)."""
        if self.ann is None:
            return cbor.encode_ordered(self.to_cbor_value())
        return cbor.encode_built(self.to_cbor_value())

    @classmethod
    def from_value(cls, value: dict[str, Any]) -> StepRecord:
        return cls(
            input_seq=value["input"],
            delivery=value["delivery"],
            workflow=value["workflow"],
            key=value["key"],
            state=value["state"],
            events=value["events"],
            intents=value["intents"],
            cancelled=value.get("cancelled"),
            ann=value.get("ann"),
            writes=value.get("writes"),
        )


class IngressEvent(NamedTuple):
    """An event from outside; `idempotency_key` only when its sender gave one (so records of
    events sent without one are as they always were). `encoded` is the value's canonical
    stored form when the admission has it (the record is then written around those bytes)."""

    schema: str
    value: Any
    stamp: dict[str, Any]
    idempotency_key: str | None = None
    encoded: bytes | None = None

    @property
    def kind(self) -> str:
        return DOMAIN_EVENT

    def to_cbor_value(self) -> dict[str, Any]:
        value = {"kind": DOMAIN_EVENT, "stamp": self.stamp, "value": self.value}
        value["schema"] = self.schema
        if self.idempotency_key is not None:
            value["idempotency_key"] = self.idempotency_key
        return value

    def encode(self) -> bytes:
        """Its stored bytes: the value was normalized when it was admitted."""
        if self.encoded is None or not _stamp_as_built(self.stamp):
            return cbor.encode_built(self.to_cbor_value())
        value = {
            "kind": DOMAIN_EVENT,
            "stamp": self.stamp,
            "value": cbor.Encoded.of_stored(self.encoded),
            "schema": self.schema,
        }
        if self.idempotency_key is not None:
            value["idempotency_key"] = self.idempotency_key
        return cbor.encode_ordered(value)

    @classmethod
    def from_value(cls, value: dict[str, Any]) -> IngressEvent:
        return cls(value["schema"], value["value"], value["stamp"], value.get("idempotency_key"))


class DerivedEvent(NamedTuple):
    """An event a step emitted: `cause` is the step record, `output_index` its place in the
    output (the record's `index`). Its stamp is derived (stamps.py), so it is not stored.
    `encoded` is the value's canonical stored form when the step's check has it."""

    schema: str
    value: Any
    cause: int
    output_index: int  # not `index`, which would hide tuple.index
    encoded: bytes | None = None

    @property
    def kind(self) -> str:
        return DOMAIN_EVENT

    def to_cbor_value(self) -> dict[str, Any]:
        return {
            "kind": DOMAIN_EVENT,
            "cause": self.cause,
            "index": self.output_index,
            "value": self.value,
            "schema": self.schema,
        }

    def encode(self) -> bytes:
        """Its stored bytes: the value was normalized when the step was checked."""
        if self.encoded is None:
            return cbor.encode_built(self.to_cbor_value())
        value = self.to_cbor_value()
        value["value"] = cbor.Encoded.of_stored(self.encoded)
        return cbor.encode_ordered(value)

    @classmethod
    def from_value(cls, value: dict[str, Any]) -> DerivedEvent:
        return cls(value["schema"], value["value"], value["cause"], value["index"])


class EffectReceipt(NamedTuple):
    """A settled intent. A receipt from an adapter carries its signature and an ingress
    stamp; a kernel timer receipt carries neither, but the `time` record that caused it."""

    body: dict[str, Any]
    signature: bytes | None
    stamp: dict[str, Any] | None = None
    cause: int | None = None
    payload_error: dict[str, str] | None = None
    by: str | None = None
    """The node identity that completed a human task (spec/04 §9.8), attested by the host
    beside the adapter's signature; absent from every other receipt, and from old worlds."""

    @property
    def kind(self) -> str:
        return EFFECT_RECEIPT

    @property
    def intent(self) -> str:
        return str(self.body["intent"])

    def to_cbor_value(self) -> dict[str, Any]:
        # Keys in canonical order (length first): `by` before `body`.
        value: dict[str, Any] = {} if self.by is None else {"by": self.by}
        value.update(body=self.body, kind=EFFECT_RECEIPT)
        if self.cause is not None:
            value["cause"] = self.cause
        if self.stamp is not None:
            value["stamp"] = self.stamp
        value["intent"] = self.body["intent"]
        value["signature"] = self.signature
        if self.payload_error is not None:
            value["payload_error"] = self.payload_error
        return value

    def encode(self) -> bytes:
        """Its stored bytes. No validation walk: an adapter's body was checked when the
        receipt was parsed (`receipts.parse` encodes it), and a kernel timer's is built."""
        return cbor.encode_built(self.to_cbor_value())

    @classmethod
    def from_value(cls, value: dict[str, Any]) -> EffectReceipt:
        return cls(
            value["body"],
            value["signature"],
            value.get("stamp"),
            value.get("cause"),
            value.get("payload_error"),
            value.get("by"),
        )


_STAMP_FIELDS = ("height", "entropy", "wall_ns", "manifest", "logical_ns")  # canonical order
_STAMP_FIELD_TYPES = frozenset({int, bytes, str})


def _stamp_as_built(stamp: dict[str, Any]) -> bool:
    """Whether a stamp's map is as `Stamp.to_value` builds it: its keys in canonical order and
    its fields integers, bytes and text, so the encoder has nothing to check or reorder."""
    return tuple(stamp) == _STAMP_FIELDS and _STAMP_FIELD_TYPES.issuperset(
        map(type, stamp.values())
    )


TypedRecord: TypeAlias = StepRecord | IngressEvent | DerivedEvent | EffectReceipt
Record: TypeAlias = "dict[str, Any] | TypedRecord"
"""What the world appends: a typed record of the hot path, or the map of any other."""


def value_of(record: Record) -> dict[str, Any]:
    """The record as the map it is journaled as (what a reader of the journal decodes)."""
    return record if isinstance(record, dict) else record.to_cbor_value()


def manifest(manifest_hash: str, stamp: dict[str, Any]) -> dict[str, Any]:
    return {"kind": MANIFEST, "manifest": manifest_hash, "stamp": stamp}


def ingress_event(
    schema: str, value: Any, stamp: dict[str, Any], idempotency_key: str | None = None
) -> dict[str, Any]:
    """An ingress event's map (`IngressEvent`)."""
    return IngressEvent(schema, value, stamp, idempotency_key).to_cbor_value()


def derived_event(schema: str, value: Any, cause: int, index: int) -> dict[str, Any]:
    """A derived event's map (`DerivedEvent`)."""
    return DerivedEvent(schema, value, cause, index).to_cbor_value()


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
    writes: list[str] | None = None,
) -> dict[str, Any]:
    """A step record's map (`StepRecord`)."""
    return StepRecord(
        input_seq, delivery, workflow, key, state, events, intents, cancelled, ann, writes
    ).to_cbor_value()


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


def receipt(
    *,
    body: dict[str, Any],
    signature: bytes | None,
    stamp: dict[str, Any] | None,
    cause: int | None,
    payload_error: tuple[str, str] | None,
    by: str | None = None,
) -> EffectReceipt:
    """A settled intent; a payload error's message is clipped as every journaled one is."""
    error = None
    if payload_error is not None:
        error = {"code": payload_error[0], "message": clip_message(payload_error[1])}
    return EffectReceipt(body, signature, stamp, cause, error, by)


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
