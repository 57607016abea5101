"""Staged writes: what the world's next commit writes (journal records, CAS blobs, meta),
readable before it is durable (spec/07-storage.md §3).

The world works ahead of the store between commits: cells read states and index nodes it has
just written. This overlay serves those reads, and `write` puts everything in one store batch
(the store's `PendingBatch`: one transaction, one fsync). The journaler (journaler.py) is the
only caller of `write`.

It also reclaims, at flush time, the objects a flush supersedes (spec/05 §5.1). An object
the world writes while materializing cells or writing its head (an index node, a cell state,
a head checkpoint) that is new to the CAS is **young**: named by exactly one reference of
the head. It gets a `young` mark carrying the **epoch** it was written in (the journal
sequence of the newest snapshot before its flush, 0 for none). Any later write of the same
bytes, from anywhere, is a second name and removes the mark for good. When a flush replaces
the one reference to a young object, nothing in the head names it any more: if no snapshot
was taken since it was written (its epoch is the current one) the same transaction deletes
it; otherwise the snapshots taken since name it, and it is marked `doomed` with the newest of
them, to be deleted once retention has dropped that snapshot (and so every older one),
a bounded number per flush.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aos.kernel import cbor
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.store.interface import Mark, Store
from aos.kernel.world.records import Record


@dataclass
class ReclaimStats:
    """What reclaiming did since the world was opened in this process (benches, tests)."""

    deleted_objects: int = 0  # young objects deleted as their flush superseded them
    dropped_objects: int = 0  # objects written and superseded before they reached the store
    doomed_objects: int = 0  # superseded objects a retained snapshot still names
    released_objects: int = 0  # doomed objects deleted once retention dropped their snapshot


class StagedWrites:
    """The world's writes since its last commit, over the store they will be written to."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.blobs: dict[Hash, bytes] = {}
        self.records: list[Record] = []
        # Each record's canonical bytes, encoded once when it was appended (`append_record`).
        self.record_bytes: list[bytes] = []
        self.meta: dict[str, Any] = {}
        self.meta_deletes: set[str] = set()
        self.reclaim = ReclaimStats()
        self._young = False
        # Young blobs of this flush named once so far (they get the mark when written).
        self._young_new: set[Hash] = set()
        # Marked blobs in the store named again since the last flush, with how many times:
        # they lose the mark unless as many of their old references were superseded.
        self._unmark: dict[Hash, int] = {}
        # Objects a materialization superseded: reclaimed at the flush if still young.
        self._superseded: set[Hash] = set()
        # Dropped snapshot blobs, and the doomed rows this flush releases.
        self._forgotten: list[Hash] = []
        self._released: list[tuple[int, Hash]] = []
        # The journal sequence of the newest snapshot before the current flush (0: none);
        # the world moves it on after the flush that writes a snapshot.
        self.epoch = 0
        # Objects doomed with a snapshot before this sequence are named by no kept snapshot
        # (the oldest kept one; past every sequence when none is kept). A flush releases at
        # most `release_max` of them, so retention never makes one huge transaction.
        self.release_before = 0
        self.release_max = 4096

    # -- CAS view (the world's BlobStore) ----------------------------------------------------

    def put(self, data: bytes) -> Hash:
        return self.put_hashed(data, hash_bytes(data))

    def put_hashed(self, data: bytes, hash_: Hash) -> Hash:
        """`put` of bytes whose hash the kernel computed already (a cell state the step
        record names): `hash_` must be `hash_bytes(data)`."""
        if hash_ in self.blobs:
            self._young_new.discard(hash_)  # a second reference
        elif self._store.cas.has(hash_):
            if self._store.cas.mark(hash_) is not None:
                self._unmark[hash_] = self._unmark.get(hash_, 0) + 1  # another reference
        else:
            self.blobs[hash_] = data
            if self._young:
                self._young_new.add(hash_)
        return hash_

    def has(self, hash_: Hash) -> bool:
        return hash_ in self.blobs or self._store.cas.has(hash_)

    def get(self, hash_: Hash) -> bytes:
        data = self.blobs.get(hash_)
        return data if data is not None else self._store.cas.get(hash_)

    def append_record(self, record: Record, raw: bytes) -> None:
        """Queue a journal record with its canonical bytes (the store writes those bytes)."""
        self.records.append(record)
        self.record_bytes.append(raw)

    def put_value(self, value: Any) -> Hash:
        return self.put(cbor.encode(value))

    def get_value(self, hash_: Hash) -> Any:
        data = self.blobs.get(hash_)
        if data is not None:
            return cbor.decode(data)
        return self._store.cas.get_value(hash_)

    # -- reclaiming --------------------------------------------------------------------------

    @contextmanager
    def young(self) -> Iterator[None]:
        """Blobs first written inside the block are young (materializing cells, the head)."""
        self._young = True
        try:
            yield
        finally:
            self._young = False

    def superseded(self, hashes: Iterable[Hash]) -> None:
        """The head no longer names these through the reference it just replaced."""
        self._superseded.update(hashes)

    # -- meta view: the store's meta as this flush will leave it ------------------------------

    def meta_get(self, key: str, default: Any = None) -> Any:
        if key in self.meta_deletes:
            return default
        if key in self.meta:
            return self.meta[key]
        return self._store.meta.get(key, default)

    def meta_put(self, key: str, value: Any) -> None:
        self.meta_deletes.discard(key)
        self.meta[key] = value

    def meta_delete(self, key: str) -> None:
        self.meta.pop(key, None)
        self.meta_deletes.add(key)

    def forget(self, dropped_snapshots: list[Hash]) -> None:
        """Retention dropped these snapshots: this flush deletes their blobs."""
        self._forgotten.extend(dropped_snapshots)

    # -- flushing ----------------------------------------------------------------------------

    def __bool__(self) -> bool:
        return bool(self.blobs or self.records or self.meta or self.meta_deletes)

    def write(self, expected_first_seq: int) -> tuple[int, int]:
        """Write everything in one store batch; return the journal range written."""
        first = last = expected_first_seq - 1
        if self.release_before > 0:
            self._released = self._store.cas.doomed(self.release_before, self.release_max)
        self._carry_references()
        dropped, deletes, doomed, released = self._reclaimable()
        with self._store.batch() as batch:
            for hash_, data in self.blobs.items():
                if hash_ not in dropped:
                    batch.cas_put(data)
            for hash_ in self._unmark:
                batch.cas_mark(hash_, None)
            for hash_ in [*deletes, *self._forgotten]:
                batch.cas_delete(hash_)
            for hash_ in doomed:
                batch.cas_mark(hash_, Mark("doomed", self.epoch))
            for seq, hash_ in self._released:
                if hash_ in released:
                    batch.cas_delete(hash_)
                batch.cas_forget_doomed(seq, hash_)
            for hash_ in self._young_new - dropped:
                batch.cas_mark(hash_, Mark("young", self.epoch))
            if self.records:
                pairs = list(zip(self.records, self.record_bytes, strict=True))
                first, last = batch.journal_append_encoded(pairs)
            for key, value in self.meta.items():
                batch.meta_put(key, value)
            for key in sorted(self.meta_deletes):
                batch.meta_delete(key)
        self.reclaim.dropped_objects += len(dropped)
        self.reclaim.deleted_objects += len(deletes)
        self.reclaim.doomed_objects += len(doomed)
        self.reclaim.released_objects += len(released)
        self.blobs.clear()
        self.records.clear()
        self.record_bytes.clear()
        self.meta.clear()
        self.meta_deletes.clear()
        self._young_new.clear()
        self._unmark.clear()
        self._superseded.clear()
        self._released.clear()
        self._forgotten.clear()
        return first, last

    def _carry_references(self) -> None:
        """A young object superseded through one reference and named again through a new one
        (an index node that moved) is still named once: it keeps its mark."""
        for hash_ in self._superseded & self._unmark.keys():
            self._superseded.discard(hash_)
            if self._unmark[hash_] == 1:
                del self._unmark[hash_]
            else:
                self._unmark[hash_] -= 1

    def _reclaimable(self) -> tuple[set[Hash], list[Hash], list[Hash], set[Hash]]:
        """What this flush reclaims: young blobs of this flush it superseded (never written);
        young objects in the store it superseded, deleted if written in this epoch and doomed
        if a snapshot was taken since; and released doomed objects nothing named again."""
        dropped = self._superseded & self._young_new
        deletes: list[Hash] = []
        doomed: list[Hash] = []
        for hash_ in sorted(self._superseded - dropped):
            if hash_ in self.blobs or hash_ in self._unmark:
                continue
            mark = self._store.cas.mark(hash_)
            if mark is None or mark.kind != "young":
                continue
            (deletes if mark.seq == self.epoch else doomed).append(hash_)
        released = {
            hash_
            for seq, hash_ in self._released
            if hash_ not in self._unmark
            and hash_ not in self.blobs
            and self._store.cas.mark(hash_) == Mark("doomed", seq)
        }
        return dropped, deletes, doomed, released
