"""The step envelopes as the guest sees them (DESIGN §6, spec/wit/workflow.wit).

Input (canonical CBOR): `{"version": 1, "state": bytes|null, "event": {"schema": text,
"value": bytes, "key"?: bytes}, "ctx"?: bytes, "data"?: {hash: bytes}}`; every embedded bytes
field is itself the canonical encoding (d9d9f7 prefix) of a value, except `data`, which holds
raw CAS blobs the step asked to read.

Output (canonical CBOR): `{"state": bytes|null, "domain_events": [{"schema", "value"}],
"effects": [{"effect", "params", "idempotency_key"?, "issuer_ref"?}], "ann"?: bytes,
"cancel"?: [text], "reads"?: [hash], "writes"?: [bytes], "hash"?: [bytes]}`.
`domain_events` and `effects` are always written, absent optionals are left out. An output
with `reads` is a read request: the host runs the step again with those blobs in `data`; one
with `hash` a hash request: the host runs it again with each of those blobs in `data` under
its hash. `writes` are blobs the host stores in the CAS when the step applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aos_sdk import cbor, schema

ENVELOPE_VERSION = 1


class EnvelopeError(ValueError):
    """The host sent an input envelope this SDK cannot read."""

    code = "sdk.envelope"


@dataclass(frozen=True)
class StepInput:
    """A decoded input envelope: embedded values are decoded too."""

    state: Any
    """The decoded state value, or None for a cell that has no state yet."""
    has_state: bool
    schema: str
    value: Any
    key: Any = None
    has_key: bool = False
    ctx: dict[str, Any] | None = None
    data: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class DomainEvent:
    schema: str
    value: Any


@dataclass(frozen=True)
class EffectIntent:
    effect: str
    params: Any
    idempotency_key: bytes | None = None
    issuer_ref: str | None = None


@dataclass
class StepOutput:
    """What a step produced, as plain values. `state` None deletes the cell."""

    state: Any
    has_state: bool
    domain_events: list[DomainEvent] = field(default_factory=list)
    effects: list[EffectIntent] = field(default_factory=list)
    ann: Any = None
    has_ann: bool = False
    cancel: list[str] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    writes: list[bytes] = field(default_factory=list)
    hash_request: list[bytes] = field(default_factory=list)


_ABSENT: Any = object()

# A warm instance's memo of the states it output (see `StateMemo`).
STATE_MEMO_ENTRIES_MAX_DEFAULT = 8
STATE_MEMO_STATE_BYTES_MAX_DEFAULT = 65_536  # a warm heap holds 8 such states at most


class StateMemo:
    """The last states an instance output, by their encoding, each as decoding those bytes
    would give it (`cbor.decoded_copy`). A cell's next input usually carries the state its
    last step output, byte for byte: it is then taken from here instead of decoded (most of a
    step's work in a Python component). Taken at most once (the handler may change what it
    is given), bounded in entries and in state size; a fresh instance, with none, decodes, and
    gets the same value, so the outputs are the same (`checked` compares them)."""

    def __init__(
        self,
        entries_max: int = STATE_MEMO_ENTRIES_MAX_DEFAULT,
        state_bytes_max: int = STATE_MEMO_STATE_BYTES_MAX_DEFAULT,
    ) -> None:
        self.entries_max = entries_max
        self.state_bytes_max = state_bytes_max
        self._states: dict[bytes, Any] = {}
        self._copying = entries_max >= 1

    def __len__(self) -> int:
        return len(self._states)

    def keep(self, encoded: bytes, value: Any, copy: Any = _ABSENT) -> None:
        """Note that `value` (plain data) was output as `encoded`; `copy`, when given, is
        `cbor.decoded_copy(value)` already (`cbor.encode_copied`)."""
        self._copying = len(encoded) <= self.state_bytes_max and self.entries_max >= 1
        if not self._copying:
            return
        self._states.pop(encoded, None)
        while len(self._states) >= self.entries_max:
            del self._states[next(iter(self._states))]  # the oldest
        self._states[encoded] = cbor.decoded_copy(value) if copy is _ABSENT else copy

    @property
    def copying(self) -> bool:
        """Whether the next state should be encoded with its copy (`cbor.encode_copied`):
        not while the memo keeps nothing, nor right after a state too large to keep (a
        large state's copy would mostly be thrown away)."""
        return self._copying

    def take(self, encoded: bytes) -> Any:
        """The state `encoded` decodes to: from the memo (and out of it), else decoded."""
        found = self._states.pop(encoded, _ABSENT)
        if found is not _ABSENT:
            return found
        return cbor.decode(encoded, trusted=True)


def decode_input(data: bytes, states: StateMemo | None = None) -> StepInput:
    """The host built every byte of the input envelope and checked it canonical
    (`_require_canonical_input` in the kernel), so it is read without re-encoding it. With
    `states`, a state output before is taken from there."""
    envelope = cbor.decode(data, trusted=True)
    _require(type(envelope) is dict, "the input envelope is not a map")
    _require(envelope.get("version") == ENVELOPE_VERSION, "unsupported envelope version")
    state_bytes = envelope.get("state")
    _require(state_bytes is None or type(state_bytes) is bytes, "state is neither bytes nor null")
    event = envelope.get("event")
    _require(type(event) is dict, "event is not a map")
    schema = event.get("schema")
    _require(type(schema) is str, "event.schema is not text")
    _require(type(event.get("value")) is bytes, "event.value is not bytes")
    key_bytes = event.get("key")
    _require(key_bytes is None or type(key_bytes) is bytes, "event.key is not bytes")
    ctx_bytes = envelope.get("ctx")
    _require(ctx_bytes is None or type(ctx_bytes) is bytes, "ctx is not bytes")
    ctx = cbor.decode(ctx_bytes, trusted=True) if ctx_bytes is not None else None
    _require(ctx is None or type(ctx) is dict, "ctx is not a map")
    data = envelope.get("data", {})
    _require(type(data) is dict, "data is not a map")
    return StepInput(
        state=_state_value(state_bytes, states),
        has_state=state_bytes is not None,
        schema=schema,
        value=cbor.decode(event["value"], trusted=True),
        key=cbor.decode(key_bytes, trusted=True) if key_bytes is not None else None,
        has_key=key_bytes is not None,
        ctx=ctx,
        data=data,
    )


def _state_value(state_bytes: bytes | None, states: StateMemo | None) -> Any:
    if state_bytes is None:
        return None
    if states is not None:
        return states.take(state_bytes)
    return cbor.decode(state_bytes, trusted=True)


def encode_input(
    state: Any,
    schema: str,
    value: Any,
    *,
    has_state: bool = True,
    key: Any = None,
    has_key: bool = False,
    ctx: dict[str, Any] | None = None,
    data: dict[str, bytes] | None = None,
) -> bytes:
    """The input envelope the host would send (for native tests and tools)."""
    event: dict[str, Any] = {"schema": schema, "value": cbor.encode(value)}
    if has_key:
        event["key"] = cbor.encode(key)
    envelope: dict[str, Any] = {
        "version": ENVELOPE_VERSION,
        "state": cbor.encode(state) if has_state else None,
        "event": event,
    }
    if ctx is not None:
        envelope["ctx"] = cbor.encode(ctx)
    if data:
        envelope["data"] = dict(data)
    return cbor.encode(envelope)


def encode_output(
    output: StepOutput, *, typed_state: bool = False, states: StateMemo | None = None
) -> bytes:
    """The output envelope. `typed_state`: the state may still hold typed values
    (dataclasses, variants), converted with `schema.to_value` when it is not plain data.
    `states` keeps the state (when it is plain data) for the next input that carries it."""
    envelope: dict[str, Any] = {
        "state": _state_bytes(output.state, typed_state, states) if output.has_state else None,
        "domain_events": [
            {"schema": event.schema, "value": cbor.encode(event.value)}
            for event in output.domain_events
        ],
        "effects": [_effect_entry(intent) for intent in output.effects],
    }
    if output.has_ann:
        envelope["ann"] = cbor.encode(output.ann)
    if output.cancel:
        envelope["cancel"] = list(output.cancel)
    if output.reads:
        envelope["reads"] = list(output.reads)
    if output.writes:
        envelope["writes"] = list(output.writes)
    if output.hash_request:
        envelope["hash"] = list(output.hash_request)
    return cbor.encode(envelope)


def _state_bytes(state: Any, typed: bool, states: StateMemo | None) -> bytes:
    """The state's encoding. A typed state is encoded as it is when it is plain data (the
    usual case); when the encoder refuses it, it is converted first, which gives the same
    bytes, or the same error, as converting it always would."""
    copying = states is not None and states.copying
    try:
        encoded, copy = cbor.encode_copied(state) if copying else (cbor.encode(state), _ABSENT)
    except cbor.CborError:
        if not typed:
            raise
        return cbor.encode(schema.to_value(state))
    if states is not None:
        states.keep(encoded, state, copy)
    return encoded


# Characters kept of each text of a reported exception (the host cuts to its own limit too).
FAULT_TEXT_CHARS_MAX = 1000


def encode_fault(type_name: str, message: str, where: str) -> bytes:
    """The output of a step whose workflow raised: the exception instead of a result, so the
    host journals what went wrong rather than a bare trap."""
    fault = {"type": type_name, "message": message, "where": where}
    return cbor.encode(
        {"state": None, "fault": {k: v[:FAULT_TEXT_CHARS_MAX] for k, v in fault.items()}}
    )


def _effect_entry(intent: EffectIntent) -> dict[str, Any]:
    entry: dict[str, Any] = {"effect": intent.effect, "params": cbor.encode(intent.params)}
    if intent.idempotency_key is not None:
        entry["idempotency_key"] = intent.idempotency_key
    if intent.issuer_ref is not None:
        entry["issuer_ref"] = intent.issuer_ref
    return entry


def decode_output(data: bytes) -> StepOutput:
    """Read an output envelope back (for tests and tools), checking its shape."""
    envelope = cbor.decode(data)
    _require(type(envelope) is dict, "the output envelope is not a map")
    state_bytes = envelope.get("state")
    events = envelope.get("domain_events")
    effects = envelope.get("effects")
    _require(type(events) is list and type(effects) is list, "events/effects are not lists")
    output = StepOutput(
        state=cbor.decode(state_bytes) if state_bytes is not None else None,
        has_state=state_bytes is not None,
    )
    for event in events:
        output.domain_events.append(DomainEvent(event["schema"], cbor.decode(event["value"])))
    for entry in effects:
        output.effects.append(
            EffectIntent(
                effect=entry["effect"],
                params=cbor.decode(entry["params"]),
                idempotency_key=entry.get("idempotency_key"),
                issuer_ref=entry.get("issuer_ref"),
            )
        )
    if "ann" in envelope:
        output.ann, output.has_ann = cbor.decode(envelope["ann"]), True
    output.cancel = list(envelope.get("cancel", []))
    output.reads = list(envelope.get("reads", []))
    output.writes = list(envelope.get("writes", []))
    output.hash_request = list(envelope.get("hash", []))
    return output


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise EnvelopeError(message)
