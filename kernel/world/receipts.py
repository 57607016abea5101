"""Receipts: how an effect's result comes back into the world.

A receipt is `{"body": body, "signature": bytes}` with

    body = {"world": text, "intent": hash, "status": "ok" | "error" | "timeout",
            "payload": value, "adapter": name, "started_ns": int, "finished_ns": int}

signed with Ed25519 over the canonical encoding of `body` by the adapter identity it names.
The checks below run in order and each refusal has its own code; a refused receipt is
journaled as `receipt_rejected` and never reaches a workflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aos.kernel import cbor
from aos.kernel.air import RECEIPT_ENVELOPE, RECEIPT_REJECTED
from aos.kernel.air.errors import AirError
from aos.kernel.air.model import DefAdapter, DefEffect
from aos.kernel.air.normalize import normalize
from aos.kernel.errors import AosError
from aos.kernel.hashing import hash_bytes, is_hash
from aos.kernel.signing.signatures import verify_encoded
from aos.kernel.world.records import ReceiptDigest

RECEIPT_BYTES_MAX_DEFAULT = 1024 * 1024
REJECTED_TEXT_CHARS_MAX = 200
"""Characters kept of each text a `receipt_rejected` record copies from a refused receipt
(its intent, adapter and status) and of the refusal's message."""
STATUSES = ("ok", "error", "timeout")
_RECEIPT_KEYS = frozenset({"body", "signature"})
_BODY_KEY = cbor.encode("body", self_describe=False)
_BODY_KEYS = frozenset(
    {"world", "intent", "status", "payload", "adapter", "started_ns", "finished_ns"}
)


class ReceiptError(AosError):
    code = "receipt.error"


class ReceiptMalformedError(ReceiptError):
    code = "receipt.malformed"
    hint = 'a receipt is {"body": {world, intent, status, payload, adapter, started_ns, finished_ns}, "signature": 64 bytes}'


class ReceiptTooLargeError(ReceiptError):
    code = "receipt.too_large"
    hint = (
        "receipts are limited in size (receipt_bytes_max); put large results in the payload by hash"
    )


class ReceiptWrongWorldError(ReceiptError):
    code = "receipt.wrong_world"
    hint = "the receipt was made for another world"


class ReceiptAdapterUnknownError(ReceiptError):
    code = "receipt.adapter_unknown"
    hint = "the manifest defines no adapter of that name"


class ReceiptSignatureInvalidError(ReceiptError):
    code = "receipt.signature_invalid"
    hint = "the signature does not verify with the adapter's public key from the manifest"


class ReceiptIntentCancelledError(ReceiptError):
    code = "receipt.intent_cancelled"
    hint = "the workflow cancelled this intent before the receipt arrived; the work is not wanted"


class ReceiptCellDeletedError(ReceiptError):
    code = "receipt.cell_deleted"
    hint = (
        "the cell that opened the intent was deleted; a receipt never starts a new cell "
        "(`aos world intent cancel INTENT` closes the intent)"
    )


class ReceiptUnknownIntentError(ReceiptError):
    code = "receipt.unknown_intent"
    hint = "no open intent has that hash"


class ReceiptAdapterNotAllowedError(ReceiptError):
    code = "receipt.adapter_not_allowed"
    hint = "the effect's adapters list does not include this adapter"


@dataclass(frozen=True)
class Receipt:
    """A receipt that passed the shape checks, with the canonical encoding of its body (what
    the adapter signed), made once while checking its size."""

    body: dict[str, Any]
    signature: bytes
    body_bytes: bytes

    @property
    def intent(self) -> str:
        return str(self.body["intent"])

    @property
    def adapter(self) -> str:
        return str(self.body["adapter"])

    @property
    def status(self) -> str:
        return str(self.body["status"])


def parse(value: Any, *, receipt_bytes_max: int = RECEIPT_BYTES_MAX_DEFAULT) -> Receipt:
    """Check a receipt's shape (not yet its signature or intent)."""
    body_bytes = _body_bytes(value)
    size = _encoded_size(value, body_bytes)
    if size > receipt_bytes_max:
        raise ReceiptTooLargeError(f"the receipt is {size} bytes; the limit is {receipt_bytes_max}")
    if not isinstance(value, dict) or set(value) != _RECEIPT_KEYS:
        raise ReceiptMalformedError("a receipt is a map of exactly body and signature")
    body, signature = value["body"], value["signature"]
    if not isinstance(signature, bytes):
        raise ReceiptMalformedError("signature must be bytes", path="$.signature")
    if not isinstance(body, dict) or set(body) != _BODY_KEYS:
        missing = sorted(_BODY_KEYS - set(body)) if isinstance(body, dict) else sorted(_BODY_KEYS)
        raise ReceiptMalformedError(
            f"body must have exactly {sorted(_BODY_KEYS)}; missing {missing}", path="$.body"
        )
    for name in ("world", "adapter"):
        if not isinstance(body[name], str) or not body[name]:
            raise ReceiptMalformedError(f"{name} must be text", path=f"$.body.{name}")
    if not is_hash(body["intent"]):
        raise ReceiptMalformedError("intent must be a blake3: hash", path="$.body.intent")
    if body["status"] not in STATUSES:
        raise ReceiptMalformedError(f"status must be one of {STATUSES}", path="$.body.status")
    for name in ("started_ns", "finished_ns"):
        if type(body[name]) is not int or body[name] < 0:
            raise ReceiptMalformedError(
                f"{name} must be a non-negative integer", path=f"$.body.{name}"
            )
    if body["finished_ns"] < body["started_ns"]:
        raise ReceiptMalformedError("finished_ns is before started_ns", path="$.body.finished_ns")
    if body_bytes is None:
        # A value outside the data model (a set, a dict subclass): nothing was signed over it.
        raise ReceiptMalformedError("the receipt has no canonical CBOR encoding", path="$")
    return Receipt(body, signature, body_bytes)


def _body_bytes(value: Any) -> bytes | None:
    """The canonical encoding of a receipt's body, when the receipt is a map of a body and
    a signature and the body has one (else None: the shape checks refuse it)."""
    if type(value) is not dict or value.keys() != _RECEIPT_KEYS:
        return None
    try:
        return cbor.encode(value["body"])
    except cbor.CborError:
        return None


def _encoded_size(value: Any, body_bytes: bytes | None) -> int:
    """The size of the receipt's canonical encoding (0 when it has none), from the body's
    encoding when there is one: the map's other parts are a few fixed items."""
    if body_bytes is None or type(value["signature"]) is not bytes:
        return len(cbor.encode(value)) if _encodable(value) else 0
    prefix = len(cbor.SELF_DESCRIBE_PREFIX)
    rest = cbor.encode({"signature": value["signature"]}, self_describe=False)
    # One map header of two entries replaces the one-entry header `rest` starts with.
    return prefix + len(_BODY_KEY) + (len(body_bytes) - prefix) + len(rest)


def _encodable(value: Any) -> bool:
    try:
        cbor.encode(value)
    except cbor.CborError:
        return False
    return True


def authenticate(
    receipt: Receipt,
    *,
    world_id: str,
    adapters: Mapping[str, DefAdapter],
) -> None:
    """World, adapter identity and signature."""
    if receipt.body["world"] != world_id:
        raise ReceiptWrongWorldError(f"the receipt is for world {receipt.body['world']}")
    adapter = adapters.get(receipt.adapter)
    if adapter is None:
        raise ReceiptAdapterUnknownError(f"no adapter {receipt.adapter} in the manifest")
    if not verify_encoded(adapter.public_key_bytes, receipt.body_bytes, receipt.signature):
        raise ReceiptSignatureInvalidError(f"the signature is not {receipt.adapter}'s")


def authorize(receipt: Receipt, effect: DefEffect) -> None:
    if receipt.adapter not in effect.adapters:
        raise ReceiptAdapterNotAllowedError(
            f"{receipt.adapter} may not settle {effect.name} (allowed: {', '.join(effect.adapters)})"
        )


def rejection(value: Any, error: ReceiptError) -> tuple[ReceiptDigest | None, str]:
    """What a `receipt_rejected` record keeps of a refused receipt: a bounded digest (the hash
    and size of its encoding, and its intent, adapter and status clipped; never its payload or
    signature), and the refusal's message clipped. Whatever the receipt's size, the record is
    small, so refusals cannot grow the journal by more than a few hundred bytes each. None
    when the value has no CBOR encoding at all."""
    try:
        encoded = cbor.encode(value)
    except cbor.CborError:
        return None, _clip(str(error))
    body = value.get("body") if isinstance(value, dict) else None
    fields = body if isinstance(body, dict) else {}
    clipped = {
        name: _clip(found) if isinstance(found := fields.get(name), str) else None
        for name in ("intent", "adapter", "status")
    }
    digest = ReceiptDigest(
        digest=str(hash_bytes(encoded)),
        bytes=len(encoded),
        intent=clipped["intent"],
        adapter=clipped["adapter"],
        status=clipped["status"],
    )
    return digest, _clip(str(error))


def _clip(text: str) -> str:
    if len(text) <= REJECTED_TEXT_CHARS_MAX:
        return text
    return text[: REJECTED_TEXT_CHARS_MAX - 3] + "..."


def checked_payload(
    body: Mapping[str, Any], effect: DefEffect, schemas: Any
) -> tuple[Any, tuple[str, str] | None]:
    """The payload of an accepted receipt: an `ok` one normalized against the effect's
    receipt schema, or left as sent with the (code, message) of why it does not fit."""
    payload = body["payload"]
    if body["status"] != "ok":
        return payload, None
    try:
        return normalize(payload, effect.receipt, schemas), None
    except AirError as error:
        return payload, (error.code, str(error))


def envelope(
    origin: dict[str, Any], body: Mapping[str, Any], payload: Any, error: tuple[str, str] | None
) -> tuple[str, dict[str, Any]]:
    """The schema and value delivered to the origin cell: a receipt envelope, or a rejected
    receipt when the payload did not fit (spec/04-effects.md §2)."""
    if error is None:
        status = {"$tag": body["status"]}
        # The payload is part of a body `parse` encoded (and, when ok, normalized since).
        payload_bytes = cbor.encode_built(payload)
        return RECEIPT_ENVELOPE, {**origin, "status": status, "payload": payload_bytes}
    return RECEIPT_REJECTED, {
        **origin,
        "error_code": error[0],
        "error_message": error[1][:1000],
        "payload": cbor.encode(payload) if _encodable(payload) else b"",
    }
