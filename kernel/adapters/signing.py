"""Ed25519 keys and receipt signatures.

A receipt is `{"body": {...}, "signature": 64 bytes}`; the signature is Ed25519 over the
canonical encoding of the body (self-describe prefix included). Public keys live in the
manifest (`defadapter.public_key`, 64 lowercase hex), so the journal proves which adapter
identity vouched for each result.

The primitives are libsodium's (PyNaCl): Ed25519 signatures are deterministic (RFC 8032), so
a seed signs the same bytes as with any other implementation, and libsodium verifies in about
half the time OpenSSL takes, which every settled receipt pays (issue 15). It also refuses what
RFC 8032 lets an implementation accept from a forger: a non-canonical `S`, and public keys or
`R` of small order.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from nacl import bindings
from nacl.exceptions import CryptoError
from nacl.utils import random as random_bytes

from aos.kernel import cbor

SEED_BYTES = 32
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
# Key pairs kept by their seed: deriving one costs about as much as a signature, and a
# process signs with a few keys.
KEYS_CACHED_MAX = 64


def generate_seed() -> bytes:
    """A new private key seed (32 bytes). Only key generation reads the OS random source."""
    return random_bytes(SEED_BYTES)


def public_key_of(seed: bytes) -> bytes:
    return _key_pair(bytes(seed))[0]


def sign_body(seed: bytes, body: Any) -> bytes:
    """The signature of a receipt body (any canonical value)."""
    return sign_encoded(seed, cbor.encode(body))


def sign_encoded(seed: bytes, encoded: bytes) -> bytes:
    """The signature of bytes already encoded (what `sign_body` signs for a body)."""
    return bindings.crypto_sign(encoded, _key_pair(bytes(seed))[1])[:SIGNATURE_BYTES]


def verify_body(public_key: bytes, body: Any, signature: bytes) -> bool:
    return verify_encoded(public_key, cbor.encode(body), signature)


def verify_encoded(public_key: bytes, encoded: bytes, signature: bytes) -> bool:
    """`verify_body` for a body whose canonical encoding the caller has already made (the
    bytes are what was signed; nothing here re-derives them)."""
    if len(public_key) != PUBLIC_KEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        bindings.crypto_sign_open(bytes(signature) + encoded, bytes(public_key))
    except CryptoError:
        return False
    return True


def signed_receipt(seed: bytes, body: dict[str, Any]) -> dict[str, Any]:
    return {"body": body, "signature": sign_body(seed, body)}


@lru_cache(maxsize=KEYS_CACHED_MAX)
def _key_pair(seed: bytes) -> tuple[bytes, bytes]:
    """(public key, libsodium secret key) of a seed; ValueError if it is not 32 bytes."""
    if len(seed) != SEED_BYTES:
        raise ValueError(f"an Ed25519 seed is {SEED_BYTES} bytes, not {len(seed)}")
    public_key, secret_key = bindings.crypto_sign_seed_keypair(seed)
    return public_key, secret_key
