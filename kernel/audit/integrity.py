"""`aos world verify`: the journal chain from genesis and the CAS's integrity, without
running a step (spec/05 §1.2, §7).

The chain is recomputed over every journal record and compared with every chain head the
store keeps: the flush marks, the head checkpoint's, each retained snapshot's, the chain head
in meta, and the signed heads (whose signatures are checked with the world's public key). Then every blob the
head, the retained snapshots and the journal name must be present and hash to its name. The
first problem is a typed error: `world.chain_broken` (naming the first bad sequence),
`world.chain_signature_invalid`, or `world.cas_broken` (naming the blob).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos.kernel.audit import gc
from aos.kernel.hashing import Hash
from aos.kernel.store import StoreError, open_store
from aos.kernel.store.interface import Store
from aos.kernel.world import chain as journal_chain
from aos.kernel.world import records, worldkey
from aos.kernel.world.chain import JournalChain
from aos.kernel.world.errors import WorldCorruptError, WorldError, WorldMissingError


class CasBrokenError(WorldError):
    code = "world.cas_broken"
    hint = "a blob the world names is missing or damaged; restore the store from a backup"


@dataclass
class ChainReport:
    """What the chain check compared: records hashed and the stored heads they matched."""

    end_seq: int
    chain: JournalChain
    witnesses: int  # stored chain heads besides flush marks (checkpoint, snapshots, signed)
    signed: int  # signed heads whose signature checked


@dataclass
class VerifyReport:
    chain: ChainReport
    blobs: int  # blobs read back and checked against their hashes

    def to_value(self) -> dict[str, Any]:
        return {
            "ok": True,
            "end_seq": self.chain.end_seq,
            "chain": self.chain.chain.head.hex(),
            "witnesses": self.chain.witnesses,
            "signed_heads": self.chain.signed,
            "blobs": self.blobs,
        }


def verify_integrity(world_dir: str | Path) -> VerifyReport:
    """Verify the world at `world_dir` read-only (a running host may keep writing it)."""
    root = Path(world_dir)
    if not (root / "store").is_dir():
        raise WorldMissingError(f"no world at {root}")
    with open_store(root, readonly=True) as store, store.consistent():
        report = verify_chain(store)
        return VerifyReport(chain=report, blobs=verify_cas(store))


def world_id(store: Store) -> str:
    config = store.meta.get("world.config", None)
    if not isinstance(config, dict) or not isinstance(config.get("id"), str):
        raise WorldCorruptError("the store has no world config with an id")
    return str(config["id"])


def verify_chain(store: Store, start: JournalChain | None = None) -> ChainReport:
    """Recompute the chain from genesis (or from `start`, a stored head trusted as given)
    and compare it with every stored chain head after it."""
    ident = world_id(store)
    witnesses, signed = stored_heads(store, ident)
    end = store.journal.head()
    chain = start.copy() if start is not None else JournalChain.genesis(ident)
    raws = store.journal.read_encoded(chain.seq + 1, end) if end > chain.seq else iter(())
    witness = journal_chain.marks(store, witnesses)
    chain = journal_chain.follow(chain, raws, witness)
    return ChainReport(end_seq=end, chain=chain, witnesses=len(witnesses), signed=signed)


def stored_heads(store: Store, ident: str) -> tuple[dict[int, bytes], int]:
    """Every chain head the store keeps, by sequence (two that disagree at one sequence are
    a break there), and how many of them were signed."""
    witnesses: dict[int, bytes] = {}
    found: list[tuple[int, bytes]] = []
    head: Any = store.cas.get_value(Hash(str(store.meta.get("world.head"))))
    for content in [head, *(store.cas.get_value(h) for _, h in _snapshots(store))]:
        if isinstance(content, dict) and "chain" in content:
            stored = JournalChain.from_value(content["chain"])
            found.append((stored.seq, stored.head))
    meta = store.meta.get(journal_chain.META_CHAIN, None)
    if meta is not None:
        stored = JournalChain.from_value(meta)
        found.append((stored.seq, stored.head))
    signed = worldkey.signed_heads(store)
    if signed:
        public_key = store.meta.get(worldkey.META_PUBLIC_KEY, None)
        if not isinstance(public_key, bytes):
            raise WorldCorruptError("the store has signed chain heads but no public key")
        found.extend(worldkey.check(public_key, ident, entry) for entry in signed)
    for seq, hash_ in found:
        if witnesses.setdefault(seq, hash_) != hash_:
            raise journal_chain.broken(seq, seq)
    return witnesses, len(signed)


def verify_cas(store: Store) -> int:
    """Read back every blob the head, the retained snapshots and the journal name; their
    count. Tail states (named by step records after the head checkpoint) must be present."""
    try:
        live = gc.reachable(store, [h for _, h in _snapshots(store)])
        live.update(_tail_states(store))
        for hash_ in sorted(live):
            store.cas.get(hash_)  # checks the bytes against the hash
    except StoreError as error:
        named = error.detail.get("hash")
        raise CasBrokenError(f"{error.code}: {error}", hash=named) from None
    return len(live)


def _tail_states(store: Store) -> set[Hash]:
    head: Any = store.cas.get_value(Hash(str(store.meta.get("world.head"))))
    end = store.journal.head()
    states: set[Hash] = set()
    if int(head["height"]) >= end:
        return states
    for _, value in store.journal.read(int(head["height"]) + 1, end):
        record = records.parse(value)
        if isinstance(record, records.StepRecord) and record.state:
            states.add(Hash(record.state))
    return states


def _snapshots(store: Store) -> list[tuple[int, Hash]]:
    value: Any = store.meta.get("world.snapshots", [])
    return [(int(seq), Hash(str(hash_))) for seq, hash_ in value]
