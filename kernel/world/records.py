"""Journal records of a world (spec/03-world.md §10): every one is a canonical map with a
`kind`, and each kind is a class here.

Only `domain_event` records without a `cause` (ingress from outside), `manifest` records,
receipts, governance actions and operations are inputs; everything else records what the
kernel derived from them, so that a replay can check it.

Every record is a named tuple (immutable, and built at about a third of the cost of a frozen
dataclass; issue 15 typed the hot path's first): the kernel builds one, `World.append` encodes
it with its own `encode()` at the journal boundary, and `to_value()` is the map it is journaled
as. A reader of the journal turns a decoded map back into its class with `parse()` (or a
class's `from_value()`), which checks the map is a record of that kind, field by field, and
refuses anything else with `world.record_malformed`: `to_value(from_value(v)) == v` for every
map it accepts. The bytes are exactly those the dict builders the classes replaced gave
(tests/test_records_typed.py holds them equal over generated fields), so typing a record
changes no journal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeAlias, TypedDict

from aos.kernel import cbor
from aos.kernel.wasm.faults import GuestError
from aos.kernel.world.errors import RecordMalformedError
from aos.kernel.world.operations import Operation
from aos.kernel.world.stamps import StampValue

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


class ReceiptDigest(TypedDict):
    """What a `receipt_rejected` record keeps of a refused receipt (`receipts.rejection`): the
    hash and size of its encoding, and its intent, adapter and status clipped."""

    digest: str
    bytes: int
    intent: str | None
    adapter: str | None
    status: str | None


class PayloadError(TypedDict):
    """Why a receipt's payload did not fit its schema (spec/04 §2)."""

    code: str
    message: str


# A record that entered from outside carries an ingress `stamp`; every other record was
# derived by the kernel from one that did.

# In each `to_value` of the hot path's records the keys are written in canonical order
# (spec/01 §3: by the length of their encoding, then bytewise), which is what lets the
# encoder take the map unchanged. The other records go through the encoder's sort.
#
# A record whose every value the kernel built or already checked (a normalized event, a guest
# output decoded strictly and normalized, hashes, sequence numbers, stamps) is encoded without
# a validation walk (`cbor.encode_built`); one carrying what came from outside unnormalized
# (genesis, refused input and receipts, operator and governance actions, fault messages) is
# encoded with the walk (`cbor.encode`).


# --------------------------------------------------------------------------------------------
# Reading a decoded map: each field's check, and the walk that applies them.

Check: TypeAlias = Callable[[object], bool]


def _nat(value: object) -> bool:
    return type(value) is int and 0 <= value <= cbor.INT_MAX


def _text(value: object) -> bool:
    return type(value) is str


def _text_or_none(value: object) -> bool:
    return value is None or type(value) is str


def _bytes_or_none(value: object) -> bool:
    return value is None or type(value) is bytes


def _any(value: object) -> bool:
    return True


def _present(value: object) -> bool:
    """An optional field written only when it has a value."""
    return value is not None


def _texts(value: object) -> bool:
    return type(value) is list and all(type(item) is str for item in value)


def _some_texts(value: object) -> bool:
    """An optional list written only when it is not empty."""
    return _texts(value) and value != []


def _map_of(checks: Mapping[str, Check]) -> Check:
    """A map with exactly these fields, each passing its check."""

    def check(value: object) -> bool:
        return (
            type(value) is dict
            and value.keys() == checks.keys()
            and all(checks[name](field) for name, field in value.items())
        )

    return check


_stamp = _map_of(
    {
        "height": _nat,
        "entropy": lambda v: type(v) is bytes,
        "wall_ns": _nat,
        "manifest": _text,
        "logical_ns": _nat,
    }
)
_guest = _map_of({"type": _text, "message": _text, "where": _text})
_payload_error = _map_of({"code": _text, "message": _text})
_origin = _map_of({"workflow": _text, "key": _bytes_or_none})


def _summary(value: object) -> bool:
    return type(value) is dict and all(type(k) is str and _nat(v) for k, v in value.items())


def _receipt_body(value: object) -> bool:
    return type(value) is dict and type(value.get("intent")) is str


def _read(
    kind: str,
    value: Any,
    required: Mapping[str, Check],
    optional: Mapping[str, Check] | None = None,
) -> dict[str, Any]:
    """`value` as a record of `kind`: a map with every required field, no field it does not
    know, and each field passing its check; `world.record_malformed` otherwise."""
    if type(value) is not dict or value.get("kind") != kind:
        found = value.get("kind") if isinstance(value, dict) else type(value).__name__
        raise RecordMalformedError(f"not a {kind} record ({found!r})", kind=kind)
    for name, check in required.items():  # inline: this runs for every record a fold reads
        field = value.get(name, _MISSING)
        if field is _MISSING or not check(field):
            raise _refusal(kind, name, field)
    if len(value) > len(required) + 1:
        known = optional or {}
        for name, field in value.items():
            if name != "kind" and name not in required:
                extra = known.get(name)
                if extra is None or not extra(field):
                    raise _refusal(kind, name, field, known=extra is not None)
    return value


_MISSING = object()


def _refusal(kind: str, name: str, field: object, *, known: bool = True) -> RecordMalformedError:
    if not known:
        why = f"has no field {name!r}"
    elif field is _MISSING:
        why = f"has no {name!r}"
    else:
        why = f"has a {name!r} that is not of its type"
    return RecordMalformedError(f"a {kind} record {why}", kind=kind, field=name)


# --------------------------------------------------------------------------------------------
# The kinds


class ManifestRecord(NamedTuple):
    """Genesis: the manifest a world starts from (its hash names the world)."""

    manifest: str
    stamp: StampValue

    @property
    def kind(self) -> str:
        return MANIFEST

    def to_value(self) -> dict[str, Any]:
        return {"kind": MANIFEST, "manifest": self.manifest, "stamp": self.stamp}

    def encode(self) -> bytes:
        return cbor.encode(self.to_value())

    @classmethod
    def from_value(cls, value: object) -> ManifestRecord:
        found = _read(MANIFEST, value, {"manifest": _text, "stamp": _stamp})
        return cls(found["manifest"], found["stamp"])


_STEP_REQUIRED: dict[str, Check] = {
    "input": _nat,
    "delivery": _nat,
    "workflow": _text,
    "key": _bytes_or_none,
    "state": _text_or_none,
    "events": _nat,
    "intents": _texts,
}
_STEP_OPTIONAL: dict[str, Check] = {
    "cancelled": _some_texts,
    "ann": _present,
    "writes": _some_texts,
}


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
    ann: cbor.Value = None
    writes: list[str] | None = None

    @property
    def kind(self) -> str:
        return STEP

    def to_value(self) -> dict[str, Any]:
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
            return cbor.encode_ordered(self.to_value())
        return cbor.encode_built(self.to_value())

    @classmethod
    def from_value(cls, value: object) -> StepRecord:
        found = _read(STEP, value, _STEP_REQUIRED, _STEP_OPTIONAL)
        get = found.get
        return cls(
            found["input"],
            found["delivery"],
            found["workflow"],
            found["key"],
            found["state"],
            found["events"],
            found["intents"],
            get("cancelled"),
            get("ann"),
            get("writes"),
        )


class IngressEvent(NamedTuple):
    """An event from outside; `idempotency_key` only when its sender gave one (so records of
    events sent without one are as they always were). `encoded` is the value's canonical
    stored form when the admission has it (the record is then written around those bytes)."""

    schema: str
    value: cbor.Value
    stamp: StampValue
    idempotency_key: str | None = None
    encoded: bytes | None = None

    @property
    def kind(self) -> str:
        return DOMAIN_EVENT

    def to_value(self) -> dict[str, Any]:
        value = {"kind": DOMAIN_EVENT, "stamp": self.stamp, "value": self.value}
        value["schema"] = self.schema
        if self.idempotency_key is not None:
            value["idempotency_key"] = self.idempotency_key
        return value

    def encode(self) -> bytes:
        """Its stored bytes: the value was normalized when it was admitted."""
        if self.encoded is None or not _stamp_as_built(self.stamp):
            return cbor.encode_built(self.to_value())
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
    def from_value(cls, value: object) -> IngressEvent:
        found = _read(
            DOMAIN_EVENT,
            value,
            {"schema": _text, "value": _any, "stamp": _stamp},
            {"idempotency_key": _text},
        )
        return cls(found["schema"], found["value"], found["stamp"], found.get("idempotency_key"))


class DerivedEvent(NamedTuple):
    """An event a step emitted: `cause` is the step record, `output_index` its place in the
    output (the record's `index`). Its stamp is derived (stamps.py), so it is not stored.
    `encoded` is the value's canonical stored form when the step's check has it."""

    schema: str
    value: cbor.Value
    cause: int
    output_index: int  # not `index`, which would hide tuple.index
    encoded: bytes | None = None

    @property
    def kind(self) -> str:
        return DOMAIN_EVENT

    def to_value(self) -> dict[str, Any]:
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
            return cbor.encode_built(self.to_value())
        value = self.to_value()
        value["value"] = cbor.Encoded.of_stored(self.encoded)
        return cbor.encode_ordered(value)

    @classmethod
    def from_value(cls, value: object) -> DerivedEvent:
        found = _read(
            DOMAIN_EVENT, value, {"schema": _text, "value": _any, "cause": _nat, "index": _nat}
        )
        return cls(found["schema"], found["value"], found["cause"], found["index"])


class EffectReceipt(NamedTuple):
    """A settled intent. A receipt from an adapter carries its signature and an ingress
    stamp; a kernel timer receipt carries neither, but the `time` record that caused it."""

    body: dict[str, Any]
    signature: bytes | None
    stamp: StampValue | None = None
    cause: int | None = None
    payload_error: PayloadError | None = None
    by: str | None = None
    """The node identity that completed a human task (spec/04 §9.8), attested by the host
    beside the adapter's signature; absent from every other receipt, and from old worlds."""

    @property
    def kind(self) -> str:
        return EFFECT_RECEIPT

    @property
    def intent(self) -> str:
        return str(self.body["intent"])

    def to_value(self) -> dict[str, Any]:
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
        return cbor.encode_built(self.to_value())

    @classmethod
    def of(
        cls,
        *,
        body: dict[str, Any],
        signature: bytes | None,
        stamp: StampValue | None,
        cause: int | None,
        payload_error: tuple[str, str] | None,
        by: str | None = None,
    ) -> EffectReceipt:
        """A settled intent; a payload error's message is clipped as every journaled one is."""
        error = None
        if payload_error is not None:
            error = PayloadError(code=payload_error[0], message=clip_message(payload_error[1]))
        return cls(body, signature, stamp, cause, error, by)

    @classmethod
    def from_value(cls, value: object) -> EffectReceipt:
        found = _read(
            EFFECT_RECEIPT,
            value,
            {"body": _receipt_body, "intent": _text, "signature": _bytes_or_none},
            {"by": _text, "cause": _nat, "stamp": _stamp, "payload_error": _payload_error},
        )
        if found["intent"] != found["body"]["intent"]:
            raise RecordMalformedError(
                "an effect_receipt record's intent is not its body's",
                kind=EFFECT_RECEIPT,
                field="intent",
            )
        return cls(
            found["body"],
            found["signature"],
            found.get("stamp"),
            found.get("cause"),
            found.get("payload_error"),
            found.get("by"),
        )


_STAMP_FIELDS = ("height", "entropy", "wall_ns", "manifest", "logical_ns")  # canonical order
_STAMP_FIELD_TYPES = frozenset({int, bytes, str})


def _stamp_as_built(stamp: StampValue) -> bool:
    """Whether a stamp's map is as `Stamp.to_value` builds it: its keys in canonical order and
    its fields integers, bytes and text, so the encoder has nothing to check or reorder."""
    return tuple(stamp) == _STAMP_FIELDS and _STAMP_FIELD_TYPES.issuperset(
        map(type, stamp.values())
    )


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


class IngressRejected(NamedTuple):
    """An input routing refused (spec/03 §3): the input as sent, its stamp and the refusal."""

    schema: str
    value: cbor.Value
    stamp: StampValue
    code: str
    message: str

    @classmethod
    def of(
        cls, schema: str, value: Any, stamp: StampValue, code: str, message: str
    ) -> IngressRejected:
        """The record of a refusal, its message clipped as every journaled one is."""
        return cls(schema, value, stamp, code, clip_message(message))

    @property
    def kind(self) -> str:
        return INGRESS_REJECTED

    def to_value(self) -> dict[str, Any]:
        return {
            "kind": INGRESS_REJECTED,
            "schema": self.schema,
            "value": self.value,
            "stamp": self.stamp,
            "code": self.code,
            "message": self.message,
        }

    def encode(self) -> bytes:
        return cbor.encode(self.to_value())

    @classmethod
    def from_value(cls, value: object) -> IngressRejected:
        found = _read(
            INGRESS_REJECTED,
            value,
            {"schema": _text, "value": _any, "stamp": _stamp, "code": _text, "message": _text},
        )
        return cls(found["schema"], found["value"], found["stamp"], found["code"], found["message"])


_CELL_FIELDS: dict[str, Check] = {
    "input": _nat,
    "delivery": _nat,
    "workflow": _text,
    "key": _bytes_or_none,
}


class StepFaultRecord(NamedTuple):
    """A faulted step. `guest` (the exception a workflow raised) is written only for
    `step.guest_exception`, so other faults keep their old form."""

    input_seq: int
    delivery: int
    workflow: str
    key: bytes | None
    module: str
    code: str
    message: str
    guest: GuestError | None = None

    @classmethod
    def of(
        cls,
        *,
        input_seq: int,
        delivery: int,
        workflow: str,
        key: bytes | None,
        module: str,
        code: str,
        message: str,
        guest: GuestError | None = None,
    ) -> StepFaultRecord:
        """The record of a fault, its message clipped as every journaled one is."""
        return cls(input_seq, delivery, workflow, key, module, code, clip_message(message), guest)

    @property
    def kind(self) -> str:
        return STEP_FAULT

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "kind": STEP_FAULT,
            "input": self.input_seq,
            "delivery": self.delivery,
            "workflow": self.workflow,
            "key": self.key,
            "module": self.module,
            "code": self.code,
            "message": self.message,
        }
        if self.guest is not None:
            value["guest"] = self.guest
        return value

    def encode(self) -> bytes:
        return cbor.encode(self.to_value())

    @classmethod
    def from_value(cls, value: object) -> StepFaultRecord:
        found = _read(
            STEP_FAULT,
            value,
            {**_CELL_FIELDS, "module": _text, "code": _text, "message": _text},
            {"guest": _guest},
        )
        return cls(
            found["input"],
            found["delivery"],
            found["workflow"],
            found["key"],
            found["module"],
            found["code"],
            found["message"],
            found.get("guest"),
        )


class DeliveryDropped(NamedTuple):
    """A delivery that reached a cell that cannot take it (`cell_failed`, `cell_deleted`)."""

    input_seq: int
    delivery: int
    workflow: str
    key: bytes | None
    reason: str

    @property
    def kind(self) -> str:
        return DELIVERY_DROPPED

    def to_value(self) -> dict[str, Any]:
        return {
            "kind": DELIVERY_DROPPED,
            "input": self.input_seq,
            "delivery": self.delivery,
            "workflow": self.workflow,
            "key": self.key,
            "reason": self.reason,
        }

    def encode(self) -> bytes:
        return cbor.encode_built(self.to_value())

    @classmethod
    def from_value(cls, value: object) -> DeliveryDropped:
        found = _read(DELIVERY_DROPPED, value, {**_CELL_FIELDS, "reason": _text})
        return cls(
            found["input"], found["delivery"], found["workflow"], found["key"], found["reason"]
        )


class EffectIntentRecord(NamedTuple):
    """An admitted effect (spec/03 §9): its identity, what it asks, the cell that emitted it
    (the record's `origin`), the step record that did (`cause`) and its place in that step's
    output (the record's `index`)."""

    intent: str
    effect: str
    params: cbor.Value
    workflow: str
    key: bytes | None
    cause: int
    output_index: int  # not `index`, which would hide tuple.index
    idempotency_key: bytes | None
    issuer_ref: str | None

    @property
    def kind(self) -> str:
        return EFFECT_INTENT

    def to_value(self) -> dict[str, Any]:
        return {
            "kind": EFFECT_INTENT,
            "intent": self.intent,
            "effect": self.effect,
            "params": self.params,
            "origin": {"workflow": self.workflow, "key": self.key},
            "cause": self.cause,
            "index": self.output_index,
            "idempotency_key": self.idempotency_key,
            "issuer_ref": self.issuer_ref,
        }

    def encode(self) -> bytes:
        return cbor.encode_built(self.to_value())

    @classmethod
    def from_value(cls, value: object) -> EffectIntentRecord:
        found = _read(
            EFFECT_INTENT,
            value,
            {
                "intent": _text,
                "effect": _text,
                "params": _any,
                "origin": _origin,
                "cause": _nat,
                "index": _nat,
                "idempotency_key": _bytes_or_none,
                "issuer_ref": _text_or_none,
            },
        )
        origin = found["origin"]
        return cls(
            found["intent"],
            found["effect"],
            found["params"],
            origin["workflow"],
            origin["key"],
            found["cause"],
            found["index"],
            found["idempotency_key"],
            found["issuer_ref"],
        )


class ReceiptRejected(NamedTuple):
    """A refused receipt (spec/04 §2). `receipt` is a bounded digest of it (`receipts.
    rejection`); older journals kept it whole, or null."""

    receipt: ReceiptDigest | cbor.Value
    stamp: StampValue
    code: str
    message: str

    @property
    def kind(self) -> str:
        return RECEIPT_REJECTED

    def to_value(self) -> dict[str, Any]:
        return {
            "kind": RECEIPT_REJECTED,
            "receipt": self.receipt,
            "stamp": self.stamp,
            "code": self.code,
            "message": self.message,
        }

    def encode(self) -> bytes:
        return cbor.encode(self.to_value())

    @classmethod
    def from_value(cls, value: object) -> ReceiptRejected:
        found = _read(
            RECEIPT_REJECTED,
            value,
            {"receipt": _any, "stamp": _stamp, "code": _text, "message": _text},
        )
        return cls(found["receipt"], found["stamp"], found["code"], found["message"])


class TimeRecord(NamedTuple):
    """Logical time moved (tick, advance, jump): an input whose stamp says to when."""

    stamp: StampValue

    @property
    def kind(self) -> str:
        return TIME

    def to_value(self) -> dict[str, Any]:
        return {"kind": TIME, "stamp": self.stamp}

    def encode(self) -> bytes:
        return cbor.encode_built(self.to_value())

    @classmethod
    def from_value(cls, value: object) -> TimeRecord:
        return cls(_read(TIME, value, {"stamp": _stamp})["stamp"])


class SnapshotRecord(NamedTuple):
    """A snapshot of the world as of journal `height` (the record before this one)."""

    snapshot: str
    height: int

    @property
    def kind(self) -> str:
        return SNAPSHOT

    def to_value(self) -> dict[str, Any]:
        return {"kind": SNAPSHOT, "snapshot": self.snapshot, "height": self.height}

    def encode(self) -> bytes:
        return cbor.encode_built(self.to_value())

    @classmethod
    def from_value(cls, value: object) -> SnapshotRecord:
        found = _read(SNAPSHOT, value, {"snapshot": _text, "height": _nat})
        return cls(found["snapshot"], found["height"])


PROPOSED, SHADOWED, APPROVED, REJECTED, APPLIED = (
    "proposed",
    "shadowed",
    "approved",
    "rejected",
    "applied",
)
_GOVERNANCE_FIELDS: dict[str, dict[str, Check]] = {
    PROPOSED: {"base": _text, "manifest": _text, "patch": _text},
    SHADOWED: {"state_height": _nat, "report": _text, "summary": _summary},
    APPROVED: {"approver": _text, "reason": _text},
    REJECTED: {"approver": _text, "reason": _text},
    APPLIED: {"manifest": _text},
}
"""The fields each governance action writes beside `action`, `proposal` and `stamp`
(spec/06 §6)."""


class GovernanceRecord(NamedTuple):
    """A governance action (spec/06 §6): an input. Each action has its own fields (the
    others are None, and absent from the record)."""

    action: str
    proposal: str
    stamp: StampValue
    base: str | None = None
    manifest: str | None = None
    patch: str | None = None
    state_height: int | None = None
    report: str | None = None
    summary: dict[str, int] | None = None
    approver: str | None = None
    reason: str | None = None

    @property
    def kind(self) -> str:
        return GOVERNANCE

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "kind": GOVERNANCE,
            "action": self.action,
            "proposal": self.proposal,
            "stamp": self.stamp,
        }
        fields = self._asdict()
        for name in _GOVERNANCE_FIELDS[self.action]:
            value[name] = fields[name]
        return value

    def encode(self) -> bytes:
        return cbor.encode(self.to_value())

    @classmethod
    def from_value(cls, value: object) -> GovernanceRecord:
        action = value.get("action") if isinstance(value, dict) else None
        fields = _GOVERNANCE_FIELDS.get(action) if isinstance(action, str) else None
        if fields is None:
            raise RecordMalformedError(
                f"a governance record's action {action!r} is none of {sorted(_GOVERNANCE_FIELDS)}",
                kind=GOVERNANCE,
                field="action",
            )
        found = _read(
            GOVERNANCE, value, {"action": _text, "proposal": _text, "stamp": _stamp, **fields}
        )
        return cls(**{name: found[name] for name in ("action", "proposal", "stamp", *fields)})


class OperationRecord(NamedTuple):
    """An operator's action on a cell or an intent (retry, reset, cancel): an input."""

    operation: Operation
    stamp: StampValue

    @property
    def kind(self) -> str:
        return OPERATION

    def to_value(self) -> dict[str, Any]:
        return {
            "kind": OPERATION,
            "action": self.operation.action,
            "stamp": self.stamp,
            **self.operation.target(),
        }

    def encode(self) -> bytes:
        return cbor.encode(self.to_value())

    @classmethod
    def from_value(cls, value: object) -> OperationRecord:
        """Through `Operation.parse`, which refuses an action it does not know
        (`operation.invalid`); a field the action does not write is malformed."""
        found = _read(
            OPERATION,
            value,
            {"action": _text, "stamp": _stamp},
            {"intent": _text, "workflow": _text, "key": _bytes_or_none, "reason": _text},
        )
        record = cls(Operation.parse(found), found["stamp"])
        if record.to_value().keys() != found.keys():
            raise RecordMalformedError(
                f"an operation record's fields are not those of {found['action']}",
                kind=OPERATION,
            )
        return record


RecordMap: TypeAlias = dict[str, cbor.Value]
"""A record as journaled: the decoded map a reader shows as it is (`to_value` builds one)."""

Record: TypeAlias = (
    ManifestRecord
    | IngressEvent
    | DerivedEvent
    | IngressRejected
    | StepRecord
    | StepFaultRecord
    | DeliveryDropped
    | EffectIntentRecord
    | EffectReceipt
    | ReceiptRejected
    | TimeRecord
    | SnapshotRecord
    | GovernanceRecord
    | OperationRecord
)
"""A journal record of any kind: what the world appends and what `parse` reads back."""

_READERS: dict[str, Callable[[object], Record]] = {
    MANIFEST: ManifestRecord.from_value,
    INGRESS_REJECTED: IngressRejected.from_value,
    STEP: StepRecord.from_value,
    STEP_FAULT: StepFaultRecord.from_value,
    DELIVERY_DROPPED: DeliveryDropped.from_value,
    EFFECT_INTENT: EffectIntentRecord.from_value,
    EFFECT_RECEIPT: EffectReceipt.from_value,
    RECEIPT_REJECTED: ReceiptRejected.from_value,
    TIME: TimeRecord.from_value,
    SNAPSHOT: SnapshotRecord.from_value,
    GOVERNANCE: GovernanceRecord.from_value,
    OPERATION: OperationRecord.from_value,
}


def parse(value: object) -> Record:
    """A decoded journal record as its class: an event with a `stamp` came from outside, one
    without was emitted by a step. Anything that is not a record of a known kind is
    `world.record_malformed`."""
    if not isinstance(value, dict):
        raise RecordMalformedError(f"a journal record is a map, not {type(value).__name__}")
    kind = value.get("kind")
    if kind == DOMAIN_EVENT:
        return (
            IngressEvent.from_value(value) if "stamp" in value else DerivedEvent.from_value(value)
        )
    reader = _READERS.get(kind) if isinstance(kind, str) else None
    if reader is None:
        raise RecordMalformedError(f"{kind!r} is not a journal record kind", kind=str(kind))
    return reader(value)
