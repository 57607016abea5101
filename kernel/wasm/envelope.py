"""The step envelopes: one canonical CBOR input and one canonical CBOR output per step.

Input (built by the host):

    {"version": 1, "state": bytes|null, "event": {"schema": text, "value": bytes, "key"?: bytes},
     "ctx"?: bytes, "data"?: {hash: bytes}}

Output (returned by the guest):

    {"state": bytes|null, "domain_events"?: [{"schema": text, "value": bytes}],
     "effects"?: [{"effect": text, "params": bytes, "idempotency_key"?: bytes,
                   "issuer_ref"?: text}], "ann"?: bytes, "cancel"?: [text],
     "reads"?: [hash], "writes"?: [bytes], "hash"?: [bytes]}

or, when the workflow raised (the SDK catches the exception):

    {"state": null, "fault": {"type": text, "message": text, "where"?: text}}

`data` holds raw CAS blobs the guest asked for with `reads` (a read request: the host runs
the step again with them; spec/08 §4.1), and the blobs of a hash request (`hash`: the step
runs again with each under its hash, §4.4); `writes` are raw blobs the kernel stores in the
CAS when the step applies (§4.4); `cancel` names, by issuer_ref, open intents of the
stepping cell to close (§4.2).

Every embedded value (`state`, `event.value`, `event.key`, `ctx`, an event's `value`, an
effect's `params`, `ann`) is itself a full canonical encoding, self-describe prefix included,
so the host stores and hashes it without re-encoding. `idempotency_key` is opaque bytes.
The output is checked strictly: anything else is a step fault, and nothing of it is used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aos.kernel import cbor
from aos.kernel.errors import KernelInvariantError
from aos.kernel.wasm.faults import (
    StepAnnotationTooLargeError,
    StepGuestExceptionError,
    StepOutputMalformedError,
    StepOutputTooLargeError,
    StepReadRefusedError,
    StepTooManyCancelsError,
    StepTooManyEffectsError,
    StepTooManyEventsError,
    StepTooManyWritesError,
)
from aos.kernel.wasm.limits import StepLimits

INPUT_ENVELOPE_VERSION = 1
CONTEXT_SCHEMA = "sys/WorkflowContext@1"
CONTEXT_ENTROPY_BYTES = 64

_OUTPUT_KEYS_REQUIRED = frozenset({"state"})
_OUTPUT_KEYS = frozenset(
    {"state", "domain_events", "effects", "ann", "cancel", "reads", "writes", "hash", "fault"}
)
_FAULT_KEYS_REQUIRED = frozenset({"type", "message"})
_FAULT_KEYS = frozenset({"type", "message", "where"})
_EVENT_KEYS = frozenset({"schema", "value"})
_EFFECT_KEYS_REQUIRED = frozenset({"effect", "params"})
_EFFECT_KEYS = frozenset({"effect", "params", "idempotency_key", "issuer_ref"})


@dataclass(frozen=True, slots=True)
class WorkflowContext:
    """`sys/WorkflowContext@1`: what a step may know about its surroundings. Every field is
    derived from the journaled ingress stamp, so a replay sees the same context."""

    now_ns: int
    entropy: bytes
    journal_height: int
    manifest_hash: str
    workflow: str
    key: bytes | None = None
    cell_mode: bool = False

    def encode(self) -> bytes:
        if len(self.entropy) != CONTEXT_ENTROPY_BYTES:
            raise KernelInvariantError(f"context entropy is {len(self.entropy)} bytes, not 64")
        value: dict[str, Any] = {
            "now_ns": self.now_ns,
            "entropy": self.entropy,
            "journal_height": self.journal_height,
            "manifest_hash": self.manifest_hash,
            "workflow": self.workflow,
            "cell_mode": self.cell_mode,
        }
        if self.key is not None:
            value["key"] = self.key
        return cbor.encode(value)


@dataclass(frozen=True, slots=True)
class StepInput:
    """A decoded input envelope (for native runners and tests; the host only encodes)."""

    state: bytes | None
    event_schema: str
    event_value: bytes
    key: bytes | None = None
    ctx: bytes | None = None


@dataclass(frozen=True, slots=True)
class EmittedEvent:
    schema: str
    value: bytes


@dataclass(frozen=True, slots=True)
class EmittedEffect:
    effect: str
    params: bytes
    idempotency_key: bytes | None = None
    issuer_ref: str | None = None


_UNDECODED: Any = object()


@dataclass(frozen=True, slots=True)
class StepOutput:
    """A validated output envelope. `state is None` deletes the cell."""

    state: bytes | None
    domain_events: tuple[EmittedEvent, ...] = ()
    effects: tuple[EmittedEffect, ...] = ()
    ann: bytes | None = None
    cancel: tuple[str, ...] = ()  # issuer_refs of the cell's open intents to close
    reads: tuple[str, ...] = ()  # a read request: nothing else of the output counts
    writes: tuple[bytes, ...] = ()  # blobs to store in the CAS when the step applies
    hash_request: tuple[bytes, ...] = ()  # blobs whose hashes the step asks for (a request)
    # `state` and `ann` decoded: `decode_output` decodes them to check them and keeps the
    # values, so the world does not decode them again (read them with the methods below).
    _state_value: Any = field(default=_UNDECODED, compare=False, repr=False)
    _ann_value: Any = field(default=_UNDECODED, compare=False, repr=False)

    def state_value(self) -> Any:
        """The value `state` encodes (None when there is no state)."""
        return _decoded(self.state, self._state_value)

    def ann_value(self) -> Any:
        """The value `ann` encodes (None when there is no annotation)."""
        return _decoded(self.ann, self._ann_value)

    @property
    def is_request(self) -> bool:
        """A read or hash request: the host runs the step again, and only that run counts."""
        return bool(self.reads or self.hash_request)


def _decoded(data: bytes | None, kept: Any) -> Any:
    if data is None:
        return None
    return cbor.decode(data) if kept is _UNDECODED else kept


# --------------------------------------------------------------------------------------------
# Input


def encode_input(
    *,
    state: bytes | None,
    event_schema: str,
    event_value: bytes,
    key: bytes | None = None,
    ctx: bytes | None = None,
    data: dict[str, bytes] | None = None,
) -> bytes:
    """The canonical input envelope of one step, encoded in one call.

    Every embedded encoding was made by the kernel itself (its store, its own canonical
    encoder) a moment earlier, so it is not decoded and checked again here (spec/08 §4): only
    its type and self-describe prefix are, which costs nothing and catches a raw value passed
    by mistake. The envelope's fixed shape is built in canonical key order (shorter key
    first, then bytewise): `ctx`, `data`, `event`, `state`, `version`; `key`, `value`,
    `schema`."""
    for name, embedded in (("state", state), ("event.value", event_value), ("key", key)):
        _require_embedded(name, embedded)
    _require_embedded("ctx", ctx)
    if not isinstance(event_schema, str):
        raise KernelInvariantError("input event.schema is not text")
    event: dict[str, Any] = {} if key is None else {"key": key}
    event["value"] = event_value
    event["schema"] = event_schema
    envelope: dict[str, Any] = {} if ctx is None else {"ctx": ctx}
    if data:
        envelope["data"] = cbor.Encoded(_blobs_map(data))
    envelope["event"] = event
    envelope["state"] = state
    envelope["version"] = INPUT_ENVELOPE_VERSION
    # Maps in canonical order holding only bytes, text, null and a small integer: cbor2's
    # default mode writes the canonical bytes in one call.
    return cbor.encode_ordered(envelope)


def with_data(input_bytes: bytes, data: dict[str, bytes]) -> bytes:
    """The same input envelope with `data` (blobs by hash) added, for a read request's
    second run."""
    envelope: Any = cbor.decode(input_bytes)
    envelope["data"] = {**envelope.get("data", {}), **data}
    return cbor.encode(envelope)


def _require_embedded(name: str, embedded: bytes | None) -> None:
    if embedded is not None and not (
        type(embedded) is bytes and embedded.startswith(cbor.SELF_DESCRIBE_PREFIX)
    ):
        raise KernelInvariantError(f"input {name} is not a self-described CBOR encoding")


def _head(major: int, length: int) -> bytes:
    """A CBOR head in its shortest form, as canonical encoding requires."""
    if length < 24:
        return bytes((major << 5 | length,))
    width = 1 if length < 0x100 else 2 if length < 0x10000 else 4 if length < 2**32 else 8
    return bytes((major << 5 | 23 + width.bit_length(),)) + length.to_bytes(width, "big")


def _bytes_item(data: bytes) -> bytes:
    return _head(2, len(data)) + data


def _text_item(text: str) -> bytes:
    raw = text.encode()
    return _head(3, len(raw)) + raw


def _map_head(pairs: int) -> bytes:
    return _head(5, pairs)


def _blobs_map(data: dict[str, bytes]) -> bytes:
    """`{hash: blob}` with its keys in canonical order."""
    pairs = sorted((_text_item(hash_), blob) for hash_, blob in data.items())
    pairs.sort(key=lambda pair: len(pair[0]))  # stable: bytewise within one length
    return _map_head(len(pairs)) + b"".join(key + _bytes_item(blob) for key, blob in pairs)


def decode_input(data: bytes) -> StepInput:
    """Decode and check an input envelope (the guest side of `encode_input`)."""
    envelope = cbor.decode(data)
    if not isinstance(envelope, dict) or envelope.get("version") != INPUT_ENVELOPE_VERSION:
        raise cbor.CborUnsupportedValueError("not a version 1 input envelope")
    event = envelope.get("event")
    if not isinstance(event, dict):
        raise cbor.CborUnsupportedValueError("input envelope without an event map")
    schema, value = event.get("schema"), event.get("value")
    if not isinstance(schema, str) or not isinstance(value, bytes):
        raise cbor.CborUnsupportedValueError("input event needs text schema and bytes value")
    return StepInput(
        state=_optional_bytes(envelope.get("state"), "state"),
        event_schema=schema,
        event_value=value,
        key=_optional_bytes(event.get("key"), "event.key"),
        ctx=_optional_bytes(envelope.get("ctx"), "ctx"),
    )


def _optional_bytes(item: object, name: str) -> bytes | None:
    if item is not None and not isinstance(item, bytes):
        raise cbor.CborUnsupportedValueError(f"input {name} is bytes when present")
    return item


# --------------------------------------------------------------------------------------------
# Output


def encode_output(output: StepOutput) -> bytes:
    """The canonical output envelope of `output` (what a guest returns). Both lists are always
    written, so one output has one encoding."""
    envelope: dict[str, Any] = {
        "state": output.state,
        "domain_events": [{"schema": e.schema, "value": e.value} for e in output.domain_events],
        "effects": [_effect_map(effect) for effect in output.effects],
    }
    if output.ann is not None:
        envelope["ann"] = output.ann
    if output.cancel:
        envelope["cancel"] = list(output.cancel)
    if output.reads:
        envelope["reads"] = list(output.reads)
    if output.writes:
        envelope["writes"] = list(output.writes)
    if output.hash_request:
        envelope["hash"] = list(output.hash_request)
    return cbor.encode(envelope)


def _effect_map(effect: EmittedEffect) -> dict[str, Any]:
    body: dict[str, Any] = {"effect": effect.effect, "params": effect.params}
    if effect.idempotency_key is not None:
        body["idempotency_key"] = effect.idempotency_key
    if effect.issuer_ref is not None:
        body["issuer_ref"] = effect.issuer_ref
    return body


def decode_output(data: bytes, limits: StepLimits, *, module_hash: str | None = None) -> StepOutput:
    """Check a guest's output strictly and return it, or raise the step fault that says what
    is wrong. Counts are checked before items, so an oversized list costs nothing to reject."""
    if len(data) > limits.output_bytes_max:
        raise StepOutputTooLargeError(
            f"output is {len(data)} bytes; the limit is {limits.output_bytes_max}",
            module_hash=module_hash,
            output_bytes=len(data),
            output_bytes_max=limits.output_bytes_max,
        )
    envelope = _decode_embedded(data, "$", module_hash)
    body = _check_map(envelope, _OUTPUT_KEYS_REQUIRED, _OUTPUT_KEYS, "$", module_hash)
    if "fault" in body:
        raise _guest_exception(body, limits, module_hash)
    events = _check_list(body.get("domain_events", []), "$.domain_events", module_hash)
    effects = _check_list(body.get("effects", []), "$.effects", module_hash)
    _check_counts(len(events), len(effects), limits, module_hash)
    cancel = _texts(body.get("cancel", []), "$.cancel", limits.cancels_per_step_max, module_hash)
    reads = _texts(body.get("reads", []), "$.reads", limits.reads_per_step_max, module_hash)
    writes = _blobs(body.get("writes", []), "$.writes", limits.writes_per_step_max, module_hash)
    hashes = _blobs(body.get("hash", []), "$.hash", limits.writes_per_step_max, module_hash)
    ann, ann_value = _optional_value(body.get("ann"), "$.ann", module_hash)
    if ann is not None and len(ann) > limits.ann_bytes_max:
        raise StepAnnotationTooLargeError(
            f"the annotation is {len(ann)} bytes; the limit is {limits.ann_bytes_max}",
            module_hash=module_hash,
            ann_bytes=len(ann),
            ann_bytes_max=limits.ann_bytes_max,
        )
    state, state_value = _optional_value(body["state"], "$.state", module_hash)
    return StepOutput(
        state,
        tuple([_event(item, index, module_hash) for index, item in enumerate(events)]),
        tuple([_effect(item, index, module_hash) for index, item in enumerate(effects)]),
        ann,
        cancel,
        reads,
        writes,
        hashes,
        state_value,
        ann_value,
    )


def _guest_exception(
    body: dict[str, Any], limits: StepLimits, module_hash: str | None
) -> StepGuestExceptionError:
    """The exception a workflow reported, each text cut to `guest_fault_chars_max`."""
    if len(body) != 2 or body["state"] is not None:
        raise _malformed("a fault carries no state and nothing else", "$", module_hash)
    fault = _check_map(body["fault"], _FAULT_KEYS_REQUIRED, _FAULT_KEYS, "$.fault", module_hash)
    chars_max = limits.guest_fault_chars_max
    texts = {
        name: _text(fault[name], f"$.fault.{name}", module_hash)[:chars_max]
        for name in sorted(fault)
    }
    where = f" (at {texts['where']})" if texts.get("where") else ""
    return StepGuestExceptionError(
        f"{texts['type']}: {texts['message']}{where}",
        module_hash=module_hash,
        **{f"guest_{name}": text for name, text in texts.items()},
    )


def _texts(item: object, path: str, count_max: int, module_hash: str | None) -> tuple[str, ...]:
    """A list of distinct texts (issuer_refs to cancel, hashes to read), at most `count_max`."""
    items = _check_list(item, path, module_hash)
    if not items:
        return ()
    if len(items) > count_max:
        fault = StepReadRefusedError if path == "$.reads" else StepTooManyCancelsError
        raise fault(
            f"{path} has {len(items)} entries; the limit is {count_max}",
            module_hash=module_hash,
            path=path,
        )
    texts = tuple(_text(entry, f"{path}[{i}]", module_hash) for i, entry in enumerate(items))
    if len(set(texts)) != len(texts):
        raise _malformed("entries repeat", path, module_hash)
    return texts


def _blobs(item: object, path: str, count_max: int, module_hash: str | None) -> tuple[bytes, ...]:
    """A list of distinct byte strings (blobs to write, or to hash), at most `count_max`."""
    items = _check_list(item, path, module_hash)
    if not items:
        return ()
    if len(items) > count_max:
        raise StepTooManyWritesError(
            f"{path} has {len(items)} entries; the limit is {count_max}",
            module_hash=module_hash,
            path=path,
            writes_per_step_max=count_max,
        )
    blobs: list[bytes] = []
    for index, entry in enumerate(items):
        if not isinstance(entry, bytes):
            raise _malformed(
                f"expected bytes, found {_kind(entry)}", f"{path}[{index}]", module_hash
            )
        blobs.append(entry)
    if len(set(blobs)) != len(blobs):
        raise _malformed("entries repeat", path, module_hash)
    return tuple(blobs)


def _check_counts(events: int, effects: int, limits: StepLimits, module_hash: str | None) -> None:
    if events > limits.events_per_step_max:
        raise StepTooManyEventsError(
            f"the step emitted {events} domain events; the limit is {limits.events_per_step_max}",
            module_hash=module_hash,
            events=events,
            events_per_step_max=limits.events_per_step_max,
        )
    if effects > limits.effects_per_step_max:
        raise StepTooManyEffectsError(
            f"the step emitted {effects} effects; the limit is {limits.effects_per_step_max}",
            module_hash=module_hash,
            effects=effects,
            effects_per_step_max=limits.effects_per_step_max,
        )


def _event(item: object, index: int, module_hash: str | None) -> EmittedEvent:
    path = f"$.domain_events[{index}]"
    body = _check_map(item, _EVENT_KEYS, _EVENT_KEYS, path, module_hash)
    return EmittedEvent(
        schema=_text(body["schema"], f"{path}.schema", module_hash),
        value=_value(body["value"], f"{path}.value", module_hash),
    )


def _effect(item: object, index: int, module_hash: str | None) -> EmittedEffect:
    path = f"$.effects[{index}]"
    body = _check_map(item, _EFFECT_KEYS_REQUIRED, _EFFECT_KEYS, path, module_hash)
    key = body.get("idempotency_key")
    if key is not None and not isinstance(key, bytes):
        raise _malformed("idempotency_key must be bytes", f"{path}.idempotency_key", module_hash)
    issuer = body.get("issuer_ref")
    return EmittedEffect(
        effect=_text(body["effect"], f"{path}.effect", module_hash),
        params=_value(body["params"], f"{path}.params", module_hash),
        idempotency_key=key,
        issuer_ref=None if issuer is None else _text(issuer, f"{path}.issuer_ref", module_hash),
    )


def _check_map(
    item: object,
    required: frozenset[str],
    allowed: frozenset[str],
    path: str,
    module_hash: str | None,
) -> dict[str, object]:
    if not isinstance(item, dict):
        raise _malformed(f"expected a map, found {_kind(item)}", path, module_hash)
    if item.keys() >= required and item.keys() <= allowed:
        return item
    keys = set(item)
    if missing := sorted(required - keys):
        raise _malformed(f"missing key(s) {', '.join(missing)}", path, module_hash)
    if unknown := sorted(str(k) for k in keys - allowed):
        raise _malformed(f"unknown key(s) {', '.join(unknown)}", path, module_hash)
    return item


def _check_list(item: object, path: str, module_hash: str | None) -> list[object]:
    if not isinstance(item, list):
        raise _malformed(f"expected an array, found {_kind(item)}", path, module_hash)
    return item


def _text(item: object, path: str, module_hash: str | None) -> str:
    if not isinstance(item, str):
        raise _malformed(f"expected text, found {_kind(item)}", path, module_hash)
    return item


def _optional_value(item: object, path: str, module_hash: str | None) -> tuple[bytes | None, Any]:
    """An optional embedded value: its bytes and the value they encode (None, None)."""
    return (None, None) if item is None else _embedded(item, path, module_hash)


def _value(item: object, path: str, module_hash: str | None) -> bytes:
    """An embedded value: bytes that are themselves a canonical encoding."""
    return _embedded(item, path, module_hash)[0]


def _embedded(item: object, path: str, module_hash: str | None) -> tuple[bytes, Any]:
    """An embedded value's bytes and the value they encode (a step fault unless canonical)."""
    if not isinstance(item, bytes):
        raise _malformed(f"expected bytes, found {_kind(item)}", path, module_hash)
    return item, _decode_embedded(item, path, module_hash)


def _decode_embedded(data: bytes, path: str, module_hash: str | None) -> object:
    try:
        return cbor.decode(data)
    except cbor.CborError as exc:
        raise _malformed(f"not canonical CBOR ({exc.code}: {exc})", path, module_hash) from None


def _malformed(message: str, path: str, module_hash: str | None) -> StepOutputMalformedError:
    return StepOutputMalformedError(message, module_hash=module_hash, path=path)


def _kind(item: object) -> str:
    return "null" if item is None else type(item).__name__
