"""The journal hash chain (spec/05 §1.2): each record commits to every record before it.

    c_0 = BLAKE3(CHAIN_TAG || world id)        c_n = BLAKE3(c_{n-1} || canonical bytes of n)

The world advances its chain as it appends each record (over the bytes it encoded once) and
every flush writes, in the same batch, the chain head `(seq, hash)` to store meta and a mark
of it under its sequence (`world.chain@<seq>`); the head checkpoint and every snapshot carry
the chain head at their height, and a world with a key signs its chain head at each snapshot
(worldkey.py). Those stored heads are the witnesses a check compares the recomputed chain
against: a record changed on disk makes the chain disagree at the first witness after it,
and the check names the first record after the last witness that still agreed, which is the
first record of the flush that wrote the changed one (a record an input and its steps wrote
in one flush: the input).

A world created before chains has a head checkpoint without one: the first time this
version opens it for writing, the chain is computed over its whole journal from genesis and
carried from then on. Tampering done before that is not detectable by the chain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import blake3

from aos.kernel.store.interface import Store
from aos.kernel.world.errors import WorldCorruptError, WorldError

CHAIN_TAG = b"aos.journal.chain/1\x00"
META_CHAIN = "world.chain"
CHAIN_BYTES = 32
_MARK_PREFIX = "world.chain@"


def mark_key(seq: int) -> str:
    """The meta key of the chain mark a flush ending at `seq` wrote (fixed width, so keys
    sort by sequence)."""
    return f"{_MARK_PREFIX}{seq:020d}"


class ChainBrokenError(WorldError):
    code = "world.chain_broken"
    hint = (
        "a journal record differs from the one the chain head committed to: the store was "
        "changed outside aos; restore it from a backup or an export"
    )


@dataclass
class JournalChain:
    """The chain head after record `seq` (seq 0: the genesis value, before any record)."""

    seq: int
    head: bytes

    @classmethod
    def genesis(cls, world_id: str) -> JournalChain:
        return cls(0, blake3.blake3(CHAIN_TAG + world_id.encode()).digest())

    @classmethod
    def from_value(cls, value: Any) -> JournalChain:
        """A stored chain head `[seq, hash]`; anything else is a corrupt world."""
        if (
            not isinstance(value, list)
            or len(value) != 2
            or not isinstance(value[0], int)
            or not isinstance(value[1], bytes)
            or len(value[1]) != CHAIN_BYTES
        ):
            raise WorldCorruptError("a stored chain head is not [seq, 32-byte hash]")
        return cls(value[0], value[1])

    def to_value(self) -> list[Any]:
        return [self.seq, self.head]

    def copy(self) -> JournalChain:
        return JournalChain(self.seq, self.head)

    def advance(self, raw: bytes) -> None:
        """Take record `seq + 1`, given as its canonical bytes."""
        hasher = blake3.blake3(self.head)
        hasher.update(raw)
        self.head = hasher.digest()
        self.seq += 1


Witness = Callable[[int], bytes | None]


def follow(
    chain: JournalChain, raws: Iterable[tuple[int, bytes]], witness: Witness
) -> JournalChain:
    """Advance `chain` over `raws` (consecutive, starting at `chain.seq + 1`), comparing it
    with the stored chain head `witness(seq)` wherever there is one. The first disagreement
    is `world.chain_broken` naming the first record after the last witness that agreed."""
    follower = Follower(chain, witness)
    for seq, raw in raws:
        follower.take(seq, raw)
    return chain


class Follower:
    """`follow` one record at a time (a replay audit feeds it the bytes it compared)."""

    def __init__(self, chain: JournalChain, witness: Witness) -> None:
        self.chain = chain
        self._witness = witness
        self._agreed = chain.seq

    def take(self, seq: int, raw: bytes) -> None:
        chain = self.chain
        if seq != chain.seq + 1:
            raise WorldCorruptError(f"the journal skips from seq {chain.seq} to {seq}")
        chain.advance(raw)
        expected = self._witness(seq)
        if expected is None:
            return
        if expected != chain.head:
            raise broken(self._agreed + 1, seq)
        self._agreed = seq


def no_witness(_seq: int) -> bytes | None:
    return None


def marks(store: Store, extra: dict[int, bytes] | None = None) -> Witness:
    """The witness of the flush marks in `store` (and of `extra` heads by sequence); a mark
    and another stored head that disagree at one sequence are a break there."""
    others = extra or {}

    def witness(seq: int) -> bytes | None:
        mark = store.meta.get(mark_key(seq), None)
        other = others.get(seq)
        if mark is not None and not isinstance(mark, bytes):
            raise WorldCorruptError(f"the chain mark at seq {seq} is not bytes")
        if mark is not None and other is not None and mark != other:
            raise broken(seq, seq)
        return mark if mark is not None else other

    return witness


def mark_seqs(store: Store) -> set[int]:
    """The sequences that have a flush mark in `store`, from one listing of meta (a key
    that is not a mark's form is left out: `marks` reads each mark itself)."""
    listed = store.meta.keys()  # Meta is not a mapping: no iteration of its own
    found = (key[len(_MARK_PREFIX) :] for key in listed if key.startswith(_MARK_PREFIX))
    return {int(digits) for digits in found if digits.isdigit()}


def broken(first_bad: int, witness_seq: int) -> ChainBrokenError:
    return ChainBrokenError(
        f"the journal chain breaks at seq {first_bad}: the records from there to seq "
        f"{witness_seq} do not hash to the chain head stored at seq {witness_seq}",
        seq=first_bad,
        witness_seq=witness_seq,
    )


def from_genesis(store: Store, world_id: str, to_seq: int) -> JournalChain:
    """The chain over records 1..to_seq, with nothing to compare (a world from before
    chains, or a replay starting from a snapshot that carries none)."""
    chain = JournalChain.genesis(world_id)
    if to_seq > 0:
        follow(chain, store.journal.read_encoded(1, to_seq), no_witness)
    return chain


def on_open(store: Store, world_id: str, head: dict[str, Any]) -> JournalChain | None:
    """The chain at the journal's end, checked over the tail after the head checkpoint
    against the chain head in meta (spec/05 §1.2). None for a read-only open of a world from
    before chains (nothing can be appended to it there)."""
    end = store.journal.head()
    stored = store.meta.get(META_CHAIN, None)
    if "chain" not in head:
        if stored is not None:
            raise WorldCorruptError("the store has a chain head but its head checkpoint has none")
        return None if store.readonly else from_genesis(store, world_id, end)
    chain = JournalChain.from_value(head["chain"])
    if chain.seq != head["height"]:
        raise WorldCorruptError(
            f"the head checkpoint at {head['height']} carries the chain at {chain.seq}"
        )
    meta = JournalChain.from_value(stored)
    if meta.seq != end:
        raise broken(min(meta.seq, end), max(meta.seq, end))
    if end > chain.seq:
        return _follow_tail(store, chain, meta)
    if chain.head != meta.head:
        raise broken(end, end)
    return chain


def _follow_tail(store: Store, chain: JournalChain, end: JournalChain) -> JournalChain:
    """`chain` followed over the records after it to `end`, the stored head at the journal's
    end. That one witness covers every byte of the tail, so it is the only one read (a meta
    read per record was a quarter of a crashed world's open); only when it disagrees is the
    tail followed again against every flush mark, to name the flush that was changed."""
    start = chain.copy()
    try:
        return follow(
            chain, store.journal.read_encoded(chain.seq + 1, end.seq), {end.seq: end.head}.get
        )
    except ChainBrokenError:
        tail = store.journal.read_encoded(start.seq + 1, end.seq)
        return follow(start, tail, marks(store, {end.seq: end.head}))
