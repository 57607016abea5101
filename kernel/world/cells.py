"""Cells: the per-key instances of a workflow, and the layered head view of their states.

A read goes dirty deltas -> hot cache -> CellIndex at the last materialized root. A write
stages the new state in the dirty layer. `materialize` folds the dirty layer into the index
(one batched trie update per workflow), moves the written cells into the hot cache and
returns the new root. Memory stays bounded: the hot cache holds at most `cache_cells_max`
clean cells, and dirty states above `resident_state_bytes_max` in total are spilled to the CAS
(they stay dirty, only their bytes leave memory).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.world.cellindex import CellEntry, CellIndex, key_hash

CACHE_CELLS_MAX_DEFAULT = 4096
RESIDENT_STATE_BYTES_MAX_DEFAULT = 64 * 1024 * 1024

STATUS_COMPLETED = "completed"
STATUS_WAITING = "waiting"
STATUS_RUNNING = "running"
STATUS_FAILED = "failed"


class BlobStore(Protocol):
    """What cells need from the world's CAS view (pending writes included)."""

    def put(self, data: bytes) -> Hash: ...

    def put_hashed(self, data: bytes, hash_: Hash) -> Hash: ...

    def get(self, hash_: Hash) -> bytes: ...

    def put_value(self, value: Any) -> Hash: ...

    def get_value(self, hash_: Hash) -> Any: ...


@dataclass(frozen=True, slots=True)
class Cell:
    """A cell as the head view sees it."""

    key: bytes | None  # canonical key bytes; None for the single cell of an unkeyed workflow
    state: bytes | None  # canonical state bytes (None once spilled: read `state_hash`)
    state_hash: Hash
    last_active_seq: int
    failed: bool = False
    # The state's length, carried so the index entry is the same whether the bytes are in
    # memory, spilled, or read back from the index (roots depend on it).
    size_bytes: int = 0
    # The state bytes are in the CAS already (written young by a flush between checkpoints):
    # materializing must not write them again, which would count as a second name.
    stored: bool = False


# The cell of an unkeyed workflow has this key in the index, so keyed and unkeyed workflows
# share one storage shape.
UNKEYED = b""


class CellTable:
    """The head view of one workflow's cells."""

    def __init__(
        self,
        blobs: BlobStore,
        index: CellIndex,
        root: Hash,
        *,
        cache_cells_max: int = CACHE_CELLS_MAX_DEFAULT,
        resident_state_bytes_max: int = RESIDENT_STATE_BYTES_MAX_DEFAULT,
        superseded: set[Hash] | None = None,
    ) -> None:
        self._blobs = blobs
        self._index = index
        self.root = root
        self._cache: OrderedDict[bytes, Cell] = OrderedDict()
        self._cache_max = cache_cells_max
        self._dirty: dict[bytes, Cell | None] = {}
        # Dirty cells whose state bytes may not be in the CAS yet (what `store_states` writes),
        # so a flush between checkpoints costs what it changed, not every dirty cell.
        self._unstored: set[bytes] = set()
        self._resident_bytes = 0
        self._resident_max = resident_state_bytes_max
        # States a flush between checkpoints wrote that a later step replaced before the
        # index named them (the world reclaims them at its next flush; None: not reclaiming).
        self._superseded = superseded

    # -- reads --------------------------------------------------------------------------

    def get(self, key: bytes | None) -> Cell | None:
        digest = key_hash(key if key is not None else UNKEYED)
        if digest in self._dirty:
            return self._dirty[digest]
        cached = self._cache.get(digest)
        if cached is not None:
            self._cache.move_to_end(digest)
            return cached
        entry = self._index.get(self.root, digest)
        if entry is None:
            return None
        cell = _cell_from_entry(entry)
        self._remember(digest, cell)
        return cell

    def state_bytes(self, cell: Cell) -> bytes:
        return cell.state if cell.state is not None else self._blobs.get(cell.state_hash)

    @property
    def dirty_count(self) -> int:
        return len(self._dirty)

    def count(self) -> int:
        """Cells at the head (materializes nothing; counts dirty inserts and deletes)."""
        total = self._index.count(self.root)
        for digest, cell in self._dirty.items():
            present = self._index.get(self.root, digest) is not None
            total += (cell is not None) - present
        return total

    def items(self) -> list[tuple[bytes, Cell]]:
        """Every cell at the head, in key-hash order (for inspection; reads the index)."""
        merged: dict[bytes, Cell] = {
            d: _cell_from_entry(e) for d, e in self._index.items(self.root)
        }
        for digest, cell in self._dirty.items():
            if cell is None:
                merged.pop(digest, None)
            else:
                merged[digest] = cell
        return sorted(merged.items())

    def items_after(self, after: bytes | None) -> Iterator[tuple[bytes, Cell]]:
        """The cells at the head whose key hash is greater than `after`, in key-hash order,
        lazily (the index is read only as far as the caller goes; staged cells win)."""
        staged = sorted(
            ((d, 0, c) for d, c in self._dirty.items() if after is None or d > after),
            key=lambda item: item[0],
        )
        indexed = (
            (d, 1, _cell_from_entry(e)) for d, e in self._index.items_after(self.root, after)
        )
        last: bytes | None = None
        for digest, _, cell in heapq.merge(staged, indexed, key=lambda item: item[:2]):
            if digest == last:
                continue  # the index's entry under a staged change
            last = digest
            if cell is not None:
                yield digest, cell

    # -- writes -------------------------------------------------------------------------

    def put(
        self,
        key: bytes | None,
        state: bytes | None,
        seq: int,
        *,
        failed: bool = False,
        state_hash: Hash | None = None,
    ) -> None:
        """Stage the state a step produced (None deletes the cell); `state_hash` is its hash
        when the caller computed it already (the step record names it)."""
        digest = key_hash(key if key is not None else UNKEYED)
        self._cache.pop(digest, None)
        previous = self._dirty.get(digest)
        self._forget_resident(previous)
        if previous is not None and previous.stored and self._superseded is not None:
            self._superseded.add(previous.state_hash)
        if state is None and not failed:
            self._dirty[digest] = None
            return
        data = state if state is not None else b""
        if state_hash is None or state is None:
            state_hash = hash_bytes(data)
        cell = Cell(key, data, state_hash, seq, failed, len(data))
        self._dirty[digest] = cell
        self._unstored.add(digest)
        self._resident_bytes += len(data)
        if self._resident_bytes > self._resident_max:
            self._spill()

    def mark_failed(self, key: bytes | None, seq: int) -> None:
        current = self.get(key)
        digest = key_hash(key if key is not None else UNKEYED)
        if current is None:
            empty = b""
            self._dirty[digest] = Cell(key, empty, hash_bytes(empty), seq, True, 0)
            self._unstored.add(digest)
            return
        self._forget_resident(self._dirty.get(digest))
        self._cache.pop(digest, None)
        self._dirty[digest] = replace(current, failed=True, last_active_seq=seq)
        if current.state is not None:
            self._resident_bytes += len(current.state)

    def materialize(self, superseded: set[Hash] | None = None) -> Hash:
        """Fold the dirty layer into the index; return the new root. `superseded` collects
        what the old root named and the new one does not (`CellIndex.update`)."""
        if not self._dirty:
            return self.root
        changes: dict[bytes, CellEntry | None] = {}
        for digest, cell in self._dirty.items():
            if cell is None:
                changes[digest] = None
                continue
            if cell.state is not None and not cell.stored:
                self._blobs.put_hashed(cell.state, cell.state_hash)
            changes[digest] = _entry_from_cell(cell)
        self.root = self._index.update(self.root, changes, superseded)
        for digest, cell in self._dirty.items():
            if cell is not None:
                # In the CAS now: writing it again (a failure mark) would be a second name.
                self._remember(digest, cell if cell.stored else _stored(cell))
        self._dirty.clear()
        self._unstored.clear()
        self._resident_bytes = 0
        return self.root

    def store_states(self) -> None:
        """Write the dirty states to the CAS without folding them into the index (a flush
        between checkpoints: the journal names them, the index does not yet). The cells stay
        dirty; a state replaced before the next checkpoint is reported as superseded."""
        for digest in sorted(self._unstored):
            cell = self._dirty.get(digest)
            if cell is not None and cell.state is not None and not cell.stored:
                self._blobs.put_hashed(cell.state, cell.state_hash)
                self._dirty[digest] = _stored(cell)
        self._unstored.clear()

    def put_stored(self, key: bytes | None, state_hash: Hash, size_bytes: int, seq: int) -> None:
        """Stage a state that is in the CAS already (rebuilding the head from the journal)."""
        digest = key_hash(key if key is not None else UNKEYED)
        self._cache.pop(digest, None)
        self._forget_resident(self._dirty.get(digest))
        self._dirty[digest] = Cell(key, None, state_hash, seq, False, size_bytes, True)

    def _spill(self) -> None:
        for digest, cell in list(self._dirty.items()):
            if cell is not None and cell.state is not None:
                if not cell.stored:
                    self._blobs.put(cell.state)
                self._dirty[digest] = replace(cell, state=None, stored=True)
        self._resident_bytes = 0

    def _forget_resident(self, cell: Cell | None) -> None:
        if cell is not None and cell.state is not None:
            self._resident_bytes -= len(cell.state)

    def _remember(self, digest: bytes, cell: Cell) -> None:
        self._cache[digest] = cell
        self._cache.move_to_end(digest)
        while len(self._cache) > self._cache_max:
            self._cache.popitem(last=False)


def _stored(cell: Cell) -> Cell:
    """`cell` with its state in the CAS (`dataclasses.replace` without its per-call cost)."""
    return Cell(
        cell.key,
        cell.state,
        cell.state_hash,
        cell.last_active_seq,
        cell.failed,
        cell.size_bytes,
        True,
    )


def _entry_from_cell(cell: Cell) -> CellEntry:
    return CellEntry(
        key=cell.key if cell.key is not None else UNKEYED,
        state=cell.state_hash,
        size_bytes=cell.size_bytes,
        last_active_seq=cell.last_active_seq,
        failed=cell.failed,
    )


def _cell_from_entry(entry: CellEntry) -> Cell:
    return Cell(
        key=entry.key if entry.key != UNKEYED else None,
        state=None,
        state_hash=entry.state,
        last_active_seq=entry.last_active_seq,
        failed=entry.failed,
        size_bytes=entry.size_bytes,
    )
