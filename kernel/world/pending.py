"""What one flush will write: journal records and CAS blobs, readable before they are durable.

The world works ahead of the store between flushes: cells read states and index nodes it has
just written. This overlay serves those reads, and `flush` writes everything in one store
batch (one transaction, one fsync).

It also reclaims, at flush time, the objects a flush supersedes (spec/05 §5). An object the
world writes while materializing cells (an index node, a cell state, a head checkpoint) is
**young**: new to the CAS since the last snapshot, and named by exactly one reference in the
head. Young objects carry the store's reclaimable mark. Every later write of the same bytes,
from anywhere, is a second reference and takes the mark away for good. So when a flush
replaces the one reference to a marked object, nothing else can name it (no snapshot, no
other cell, no other workflow's index, no receipt), and the same transaction deletes it. A
snapshot clears every mark: what it names must stay.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aos.kernel import cbor
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.store.interface import Store


@dataclass
class ReclaimStats:
    """What reclaiming did over a world's life in this process (for benches and `status`)."""

    deleted_objects: int = 0  # marked objects deleted from the store
    dropped_objects: int = 0  # objects written and superseded before they reached the store


class PendingWrites:
    def __init__(self, store: Store) -> None:
        self._store = store
        self.blobs: dict[Hash, bytes] = {}
        self.records: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {}
        self.reclaim = ReclaimStats()
        self._young = False
        # Young blobs of this flush named once so far (they get the mark when written).
        self._young_new: set[Hash] = set()
        # Marked blobs in the store named again since the last flush (they lose the mark).
        self._unmark: set[Hash] = set()
        # Objects a materialization superseded: reclaimed at the flush if still young.
        self._superseded: set[Hash] = set()
        self._clear_marks = False

    # -- CAS view (the world's BlobStore) ----------------------------------------------------

    def put(self, data: bytes) -> Hash:
        hash_ = hash_bytes(data)
        if hash_ in self.blobs:
            self._young_new.discard(hash_)  # a second reference
        elif self._store.cas.has(hash_):
            if self._store.cas.reclaimable(hash_):
                self._unmark.add(hash_)  # a second reference
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

    def clear_marks(self) -> None:
        """This flush writes a snapshot: clear every mark, and mark nothing it writes."""
        self._clear_marks = True

    # -- flushing ----------------------------------------------------------------------------

    def __bool__(self) -> bool:
        return bool(self.blobs or self.records or self.meta)

    def flush(self, expected_first_seq: int) -> tuple[int, int]:
        """Write everything in one batch; return the journal range written."""
        first = last = expected_first_seq - 1
        dropped, deletes = self._reclaimable()
        with self._store.batch() as batch:
            for hash_, data in self.blobs.items():
                if hash_ not in dropped:
                    batch.cas_put(data)
            for hash_ in deletes:
                batch.cas_delete(hash_)
            for hash_ in self._unmark:
                batch.cas_mark_reclaimable(hash_, False)
            if self._clear_marks:
                batch.cas_clear_reclaimable()
            else:
                for hash_ in self._young_new - dropped:
                    batch.cas_mark_reclaimable(hash_)
            if self.records:
                first, last = batch.journal_append(self.records)
            for key, value in self.meta.items():
                batch.meta_put(key, value)
        self.reclaim.dropped_objects += len(dropped)
        self.reclaim.deleted_objects += len(deletes)
        self.blobs.clear()
        self.records.clear()
        self.meta.clear()
        self._young_new.clear()
        self._unmark.clear()
        self._superseded.clear()
        self._clear_marks = False
        return first, last

    def _reclaimable(self) -> tuple[set[Hash], list[Hash]]:
        """The superseded objects nothing else names: young blobs of this flush (never
        written), and marked blobs in the store no write since the last flush named again."""
        dropped = self._superseded & self._young_new
        deletes = sorted(
            hash_
            for hash_ in self._superseded - dropped
            if hash_ not in self.blobs
            and hash_ not in self._unmark
            and self._store.cas.reclaimable(hash_)
        )
        return dropped, deletes
