"""Content hashes: BLAKE3, written `blake3:<64 lowercase hex>`.

Two ways to hash, never to be confused:

* `hash_value(v)` hashes the canonical encoding of a value (self-describe prefix included),
  so the same value always has the same hash whatever its origin;
* `hash_bytes(b)` hashes raw bytes as they are (WASM binaries, large payloads, blobs).

A `Hash` is a `str` subclass so it serializes as the text users see, but it can only be made
from a valid hash text, so a `Hash` in hand is always well-formed.
"""

from __future__ import annotations

from typing import Any

import blake3 as _blake3

from aos.kernel import cbor
from aos.kernel.errors import AosError

ALGORITHM = "blake3"
PREFIX = "blake3:"
DIGEST_BYTES = 32
TEXT_LENGTH = len(PREFIX) + 2 * DIGEST_BYTES

_HEX = frozenset("0123456789abcdef")


class InvalidHashError(AosError):
    code = "hash.invalid"
    hint = "hashes are written blake3:<64 lowercase hex digits>"


class Hash(str):
    """A validated `blake3:<hex>` hash text."""

    __slots__ = ()

    def __new__(cls, text: str) -> Hash:
        if isinstance(text, Hash):
            return text
        _validate(text)
        return super().__new__(cls, text)

    @classmethod
    def from_digest(cls, digest: bytes) -> Hash:
        if len(digest) != DIGEST_BYTES:
            raise InvalidHashError(f"a digest is {DIGEST_BYTES} bytes, not {len(digest)}")
        return super().__new__(cls, PREFIX + digest.hex())

    @property
    def digest(self) -> bytes:
        return bytes.fromhex(self[len(PREFIX) :])

    @property
    def hex(self) -> str:
        return self[len(PREFIX) :]

    def short(self, digits: int = 12) -> str:
        return self[: len(PREFIX) + digits]


def _validate(text: object) -> None:
    if not isinstance(text, str):
        raise InvalidHashError(f"a hash is text, not {type(text).__name__}")
    if not text.startswith(PREFIX):
        raise InvalidHashError(f"{text[:80]!r} does not start with {PREFIX!r}")
    if len(text) != TEXT_LENGTH:
        raise InvalidHashError(
            f"{text[:80]!r} has {len(text) - len(PREFIX)} hex digits, not {2 * DIGEST_BYTES}"
        )
    if not _HEX.issuperset(text[len(PREFIX) :]):
        raise InvalidHashError(f"{text[:80]!r} has characters other than lowercase hex")


def parse(text: object) -> Hash:
    """Validate hash text from outside and return it as a `Hash`."""
    if type(text) is Hash:
        return text  # made only from valid text or a digest
    _validate(text)
    assert isinstance(text, str)
    return Hash(text)


def is_hash(text: object) -> bool:
    try:
        _validate(text)
    except InvalidHashError:
        return False
    return True


def hash_bytes(data: bytes | bytearray | memoryview) -> Hash:
    """BLAKE3 of raw bytes."""
    return Hash.from_digest(_blake3.blake3(data).digest())


def hash_value(value: Any) -> Hash:
    """BLAKE3 of the canonical encoding of `value`."""
    return hash_bytes(cbor.encode(value))


def digest_bytes(data: bytes | bytearray | memoryview) -> bytes:
    """The 32 raw digest bytes, for derivations that chain hashes (entropy, trie nodes)."""
    return _blake3.blake3(data).digest()
