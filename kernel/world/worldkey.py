"""A world's Ed25519 key: it signs the journal chain head at every snapshot (spec/05 §1.3).

The seed is made at `World.create` and kept in `<world>/world.key` (mode 0600, the adapter
key file format of keys.py), never in the store or the journal; the public key is in store
meta (`world.public_key`). A signed head is `[seq, chain hash, signature]`, the signature
being Ed25519 over the canonical encoding of `{"world": id, "seq": seq, "chain": hash}`; the
newest `signed_heads_kept_max` of them are kept in meta (`world.chain_signed`) and go into an
export, so that whoever holds only the public key can check the exported journal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aos.kernel.signing import keys
from aos.kernel.signing import signatures as signing
from aos.kernel.store.interface import Store
from aos.kernel.world.chain import JournalChain
from aos.kernel.world.errors import WorldCorruptError, WorldError

KEY_FILE = "world.key"
META_PUBLIC_KEY = "world.public_key"
META_SIGNED = "world.chain_signed"
SIGNED_HEADS_KEPT_MAX_DEFAULT = 256


class ChainSignatureInvalidError(WorldError):
    code = "world.chain_signature_invalid"
    hint = "the signed chain head was not signed by this world's key, or was changed since"


class WorldKeyMissingError(WorldError):
    code = "world.key_missing"
    hint = "worlds created before world keys have none; only newer worlds sign and export"


def create(world_dir: Path) -> bytes:
    """Make the world's key file; its public key."""
    seed = signing.generate_seed()
    keys.write_seed(world_dir / KEY_FILE, seed)
    return signing.public_key_of(seed)


def load_seed(world_dir: Path) -> bytes | None:
    """The world's seed, or None for a world without a key file (made before world keys)."""
    path = world_dir / KEY_FILE
    return keys.read_seed(path) if path.exists() else None


def statement(world_id: str, seq: int, chain_hash: bytes) -> dict[str, Any]:
    return {"world": world_id, "seq": seq, "chain": chain_hash}


def sign(seed: bytes, world_id: str, chain: JournalChain) -> list[Any]:
    signature = signing.sign_body(seed, statement(world_id, chain.seq, chain.head))
    return [chain.seq, chain.head, signature]


def signed_heads(store: Store) -> list[list[Any]]:
    value = store.meta.get(META_SIGNED, [])
    if not isinstance(value, list):
        raise WorldCorruptError("the stored signed chain heads are not a list")
    return [list(entry) for entry in value if isinstance(entry, list)]


def with_signed(store: Store, entry: list[Any], kept_max: int) -> list[list[Any]]:
    """The stored signed heads with `entry` added, the newest `kept_max` of them."""
    return [*signed_heads(store), entry][-kept_max:]


def check(public_key: bytes, world_id: str, entry: Any) -> tuple[int, bytes]:
    """A signed head's `(seq, chain hash)` once its signature checks."""
    if (
        not isinstance(entry, list)
        or len(entry) != 3
        or not isinstance(entry[0], int)
        or not isinstance(entry[1], bytes)
        or not isinstance(entry[2], bytes)
    ):
        raise ChainSignatureInvalidError("a signed chain head is not [seq, hash, signature]")
    seq, chain_hash, signature = entry
    if not signing.verify_body(public_key, statement(world_id, seq, chain_hash), signature):
        raise ChainSignatureInvalidError(
            f"the chain head signed at seq {seq} does not verify with the public key", seq=seq
        )
    return seq, chain_hash
