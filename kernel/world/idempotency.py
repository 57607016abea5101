"""Idempotent ingress: an event sent with an idempotency key is admitted once.

A client whose request failed cannot tell whether the world committed its event before the
failure (a killed node, a lost answer), so it sends again; with the same key the world then
answers the first admission instead of journaling a second event. The key is journaled in
the event's record (`idempotency_key`), so the journal says which events were keyed, and the
index that finds a key is kept in store meta, written in the same transaction as the record
(durable exactly when the event is, and never folded or replayed: it is derived from the
journal and rebuilt by a replay as it re-admits every recorded event).

The index holds the newest `keys_max` keys: a ring of slots (`idem.next` counts keys ever
remembered; key n sits in slot n mod keys_max and evicts the key that was there). A key older
than that window is forgotten and a repeat of it is admitted again. Lowering `keys_max`
between opens leaves keys in the slots beyond the new bound until the ring wraps past them;
the index never holds more than the largest window it was opened with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aos.kernel import cbor
from aos.kernel.errors import InvalidInputError
from aos.kernel.hashing import Hash, hash_bytes, hash_value
from aos.kernel.world.errors import WorldError
from aos.kernel.world.staged import StagedWrites

IDEMPOTENCY_KEY_BYTES_MAX = 128
"""Longest idempotency key, in UTF-8 bytes (a UUID or a request id fits many times)."""
IDEMPOTENCY_KEYS_MAX_DEFAULT = 100_000
"""Keys the world remembers (the newest); a repeat of an older one is admitted again."""

_NEXT = "idem.next"
_SLOT = "idem.slot."
_ENTRY = "idem.key."


class IdempotencyKeyInvalidError(InvalidInputError):
    code = "world.idempotency_key_invalid"
    hint = f"an idempotency key is text of 1 to {IDEMPOTENCY_KEY_BYTES_MAX} UTF-8 bytes"


class IdempotencyKeyReusedError(WorldError):
    code = "world.idempotency_key_reused"
    hint = "an idempotency key names one event: send a different event with a new key"


@dataclass(frozen=True)
class FirstAdmission:
    """What the world answered when it first admitted the event a key names."""

    seq: int
    event_hash: Hash
    deliveries: int
    content: str  # hash of [schema, normalized value]: a repeat must carry the same event

    def to_value(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "event_hash": str(self.event_hash),
            "deliveries": self.deliveries,
            "content": self.content,
        }

    @staticmethod
    def from_value(value: Any) -> FirstAdmission:
        return FirstAdmission(
            int(value["seq"]),
            Hash(str(value["event_hash"])),
            int(value["deliveries"]),
            str(value["content"]),
        )


def check_key(key: Any) -> str:
    """The key, if it is one (`world.idempotency_key_invalid` otherwise)."""
    if not isinstance(key, str) or not key:
        raise IdempotencyKeyInvalidError("an idempotency key is non-empty text")
    size = len(key.encode("utf-8", errors="surrogatepass"))
    if size > IDEMPOTENCY_KEY_BYTES_MAX:
        raise IdempotencyKeyInvalidError(
            f"the idempotency key is {size} bytes; the limit is {IDEMPOTENCY_KEY_BYTES_MAX}",
            limit=IDEMPOTENCY_KEY_BYTES_MAX,
        )
    return key


def event_content(schema: str, normalized: Any) -> str:
    return str(hash_value([schema, normalized]))


class IdempotencyIndex:
    """The newest `keys_max` keys of admitted events, read and written through the pending
    writes of the flush (so a repeat in the same batch is found too)."""

    def __init__(self, pending: StagedWrites, keys_max: int) -> None:
        if keys_max < 1:
            raise ValueError("idempotency_keys_max must be at least 1")
        self._pending = pending
        self._keys_max = keys_max

    def find(self, key: str, content: str) -> FirstAdmission | None:
        """The first admission of `key`, if remembered; a different event under the same key
        is `world.idempotency_key_reused`. Reads only."""
        found = self._pending.meta_get(_entry_name(key))
        if found is None:
            return None
        first = FirstAdmission.from_value(found)
        if first.content != content:
            raise IdempotencyKeyReusedError(
                f"the idempotency key names the event admitted at seq {first.seq}, not this one",
                seq=first.seq,
            )
        return first

    def remember(self, key: str, first: FirstAdmission) -> None:
        count = int(self._pending.meta_get(_NEXT, 0))
        slot = f"{_SLOT}{count % self._keys_max}"
        evicted = self._pending.meta_get(slot)
        if evicted is not None:
            self._pending.meta_delete(str(evicted))
        name = _entry_name(key)
        self._pending.meta_put(name, first.to_value())
        self._pending.meta_put(slot, name)
        self._pending.meta_put(_NEXT, count + 1)


def _entry_name(key: str) -> str:
    # By hash: any text is a safe key for every backend's meta, and its length is fixed.
    return _ENTRY + str(hash_bytes(cbor.encode(key))).removeprefix("blake3:")
