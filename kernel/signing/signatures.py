"""Ed25519 keys and receipt signatures.

A receipt is `{"body": {...}, "signature": 64 bytes}`; the signature is Ed25519 over the
canonical encoding of the body (self-describe prefix included). Public keys live in the
manifest (`defadapter.public_key`, 64 lowercase hex), so the journal proves which adapter
identity vouched for each result.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from aos.kernel import cbor

SEED_BYTES = 32
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
# Key objects kept by their bytes: building one costs about as much as a signature (the
# private key derives its public half), and a process signs and verifies with a few keys.
KEYS_CACHED_MAX = 64


def generate_seed() -> bytes:
    """A new private key seed (32 bytes). Only key generation reads the OS random source."""
    key = Ed25519PrivateKey.generate()
    return key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


def public_key_of(seed: bytes) -> bytes:
    key = _private_key(bytes(seed))
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def sign_body(seed: bytes, body: Any) -> bytes:
    """The signature of a receipt body (any canonical value)."""
    return sign_encoded(seed, cbor.encode(body))


def sign_encoded(seed: bytes, encoded: bytes) -> bytes:
    """`sign_body` for a body whose canonical encoding the caller has already made (say while
    checking its size), so it is not encoded a second time."""
    return _private_key(bytes(seed)).sign(encoded)


def verify_body(public_key: bytes, body: Any, signature: bytes) -> bool:
    return verify_encoded(public_key, cbor.encode(body), signature)


def verify_encoded(public_key: bytes, encoded: bytes, signature: bytes) -> bool:
    """`verify_body` for a body whose canonical encoding the caller has already made (the
    bytes are what was signed; nothing here re-derives them)."""
    if len(public_key) != PUBLIC_KEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        _public_key(bytes(public_key)).verify(signature, encoded)
    except (InvalidSignature, ValueError):
        return False
    return True


@lru_cache(maxsize=KEYS_CACHED_MAX)
def _private_key(seed: bytes) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(seed)


@lru_cache(maxsize=KEYS_CACHED_MAX)
def _public_key(public_key: bytes) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(public_key)


def signed_receipt(seed: bytes, body: dict[str, Any]) -> dict[str, Any]:
    return {"body": body, "signature": sign_body(seed, body)}
