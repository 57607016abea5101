"""Progress frames: an adapter's signed heartbeat while it holds a lease (seed 001's
"non-authoritative progress reporting").

A frame is signed like a receipt, over the canonical CBOR of its body:

    {"body": {"world": text, "intent": hash, "adapter": name, "lease_id": text,
              "fraction": float in [0, 1] | null, "message": text, "at_ns": nat},
     "signature": bytes(64)}

Posting one (`POST /v1/leases/{lease_id}/progress`) extends the lease like a renewal. Frames
are never journaled, never reach a workflow and change no world state: the node keeps the
newest `PROGRESS_FRAMES_KEPT_MAX` per intent, for `PROGRESS_INTENTS_KEPT_MAX` intents (the
least recently reported forgotten first), in memory, for `GET /v1/intents/{intent}` and
`aos world intent show`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aos.kernel import cbor
from aos.kernel.errors import AosError
from aos.kernel.hashing import is_hash
from aos.kernel.signing.signatures import verify_body

PROGRESS_FRAMES_KEPT_MAX = 8
"""Newest frames kept per intent."""
PROGRESS_INTENTS_KEPT_MAX = 10_000
"""Intents whose frames are kept; the least recently reported is forgotten first."""
PROGRESS_MESSAGE_CHARS_MAX = 200
"""Characters of a frame's message."""
PROGRESS_FRAME_BYTES_MAX = 2048
"""Bytes of a frame's canonical encoding, signature included."""

_BODY_KEYS = frozenset({"world", "intent", "adapter", "lease_id", "fraction", "message", "at_ns"})


class ProgressError(AosError):
    code = "progress.error"


class ProgressInvalidError(ProgressError):
    code = "progress.invalid"
    hint = (
        'a frame is {"body": {world, intent, adapter, lease_id, fraction (0..1 or null), '
        'message, at_ns}, "signature": 64 bytes}'
    )


class ProgressForgedError(ProgressError):
    code = "progress.signature_invalid"
    hint = "the frame must be signed by an adapter of the manifest that may settle the intent"


@dataclass(frozen=True)
class Frame:
    body: dict[str, Any]
    signature: bytes

    def to_json(self) -> dict[str, Any]:
        return {"body": dict(self.body), "signature": cbor.to_json(self.signature)}


def parse_frame(value: Any, *, lease_id: str) -> Frame:
    """Check a frame's shape and bounds (not yet its signature)."""
    try:
        size = len(cbor.encode(value))
    except cbor.CborError:
        raise ProgressInvalidError("the frame is not a CBOR value") from None
    if size > PROGRESS_FRAME_BYTES_MAX:
        raise ProgressInvalidError(
            f"the frame is {size} bytes; the limit is {PROGRESS_FRAME_BYTES_MAX}"
        )
    if not isinstance(value, dict) or set(value) != {"body", "signature"}:
        raise ProgressInvalidError("a frame is a map of exactly body and signature")
    body, signature = value["body"], value["signature"]
    if not isinstance(signature, bytes) or len(signature) != 64:
        raise ProgressInvalidError("signature must be 64 bytes", path="$.signature")
    if not isinstance(body, dict) or set(body) != _BODY_KEYS:
        raise ProgressInvalidError(f"body must have exactly {sorted(_BODY_KEYS)}", path="$.body")
    for name in ("world", "adapter", "lease_id"):
        if not isinstance(body[name], str) or not body[name]:
            raise ProgressInvalidError(f"{name} must be text", path=f"$.body.{name}")
    if body["lease_id"] != lease_id:
        raise ProgressInvalidError("the frame is for another lease", path="$.body.lease_id")
    if not is_hash(body["intent"]):
        raise ProgressInvalidError("intent must be a blake3: hash", path="$.body.intent")
    fraction = body["fraction"]
    if fraction is not None and not (type(fraction) is float and 0.0 <= fraction <= 1.0):
        raise ProgressInvalidError(
            "fraction must be a float in [0, 1] or null", path="$.body.fraction"
        )
    message = body["message"]
    if not isinstance(message, str) or len(message) > PROGRESS_MESSAGE_CHARS_MAX:
        raise ProgressInvalidError(
            f"message must be text of at most {PROGRESS_MESSAGE_CHARS_MAX} characters",
            path="$.body.message",
        )
    if type(body["at_ns"]) is not int or body["at_ns"] < 0:
        raise ProgressInvalidError("at_ns must be a non-negative integer", path="$.body.at_ns")
    return Frame(dict(body), signature)


def authenticate_frame(frame: Frame, *, world_id: str, public_keys: Mapping[str, bytes]) -> None:
    """The frame is for this world and signed by the adapter it names."""
    if frame.body["world"] != world_id:
        raise ProgressInvalidError("the frame is for another world", path="$.body.world")
    key = public_keys.get(frame.body["adapter"])
    if key is None or not verify_body(key, frame.body, frame.signature):
        raise ProgressForgedError(f"the signature is not {frame.body['adapter']}'s")


class ProgressLog:
    """The newest frames per intent, bounded both ways. Thread-safe."""

    def __init__(
        self,
        *,
        frames_max: int = PROGRESS_FRAMES_KEPT_MAX,
        intents_max: int = PROGRESS_INTENTS_KEPT_MAX,
    ) -> None:
        self._frames_max = frames_max
        self._intents_max = intents_max
        self._by_intent: OrderedDict[str, deque[Frame]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, frame: Frame) -> None:
        intent = str(frame.body["intent"])
        with self._lock:
            frames = self._by_intent.pop(intent, None) or deque(maxlen=self._frames_max)
            frames.append(frame)
            self._by_intent[intent] = frames
            while len(self._by_intent) > self._intents_max:
                self._by_intent.popitem(last=False)

    def frames(self, intent: str) -> list[Frame]:
        with self._lock:
            return list(self._by_intent.get(intent, ()))
