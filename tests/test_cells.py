"""The layered head view of cells: dirty deltas, bounded hot cache, CellIndex."""

from __future__ import annotations

from typing import Any

from aos.kernel import cbor
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.world.cellindex import CellIndex
from aos.kernel.world.cells import CellTable


class MemoryBlobs:
    def __init__(self) -> None:
        self.blobs: dict[Hash, bytes] = {}
        self.gets = 0

    def put(self, data: bytes) -> Hash:
        h = hash_bytes(data)
        self.blobs[h] = data
        return h

    def put_hashed(self, data: bytes, hash_: Hash) -> Hash:
        assert hash_ == hash_bytes(data)
        return self.put(data)

    def get(self, hash_: Hash) -> bytes:
        self.gets += 1
        return self.blobs[hash_]

    def put_value(self, value: Any) -> Hash:
        return self.put(cbor.encode(value))

    def get_value(self, hash_: Hash) -> Any:
        return cbor.decode(self.get(hash_))


def key(n: int) -> bytes:
    return cbor.encode(f"k{n}")


def state(n: int) -> bytes:
    return cbor.encode({"count": n})


def table(**limits: int) -> tuple[CellTable, MemoryBlobs]:
    blobs = MemoryBlobs()
    index = CellIndex(blobs, bucket_entries_max=4)
    return CellTable(blobs, index, index.empty_root, **limits), blobs


def test_missing_cell_reads_as_none() -> None:
    cells, _ = table()
    assert cells.get(key(1)) is None
    assert cells.count() == 0


def test_put_get_materialize_and_read_back_through_the_index() -> None:
    cells, blobs = table(cache_cells_max=2)
    for n in range(10):
        cells.put(key(n), state(n), seq=n + 1)
    assert cells.dirty_count == 10
    root = cells.materialize()
    assert cells.dirty_count == 0
    assert cells.count() == 10
    # A fresh table over the same root sees the same cells (loading states from the CAS).
    index = CellIndex(blobs, bucket_entries_max=4)
    reopened = CellTable(blobs, index, root)
    for n in range(10):
        cell = reopened.get(key(n))
        assert cell is not None
        assert reopened.state_bytes(cell) == state(n)
        assert cell.last_active_seq == n + 1


def test_null_state_deletes_the_cell() -> None:
    cells, _ = table()
    cells.put(key(1), state(1), seq=1)
    cells.materialize()
    cells.put(key(1), None, seq=2)
    assert cells.get(key(1)) is None
    assert cells.count() == 0
    root = cells.materialize()
    assert root == CellIndex(MemoryBlobs(), bucket_entries_max=4).empty_root


def test_hot_cache_is_bounded() -> None:
    cells, _ = table(cache_cells_max=3)
    for n in range(20):
        cells.put(key(n), state(n), seq=1)
    cells.materialize()
    assert len(cells._cache) == 3
    for n in range(20):
        assert cells.get(key(n)) is not None
    assert len(cells._cache) == 3


def test_large_dirty_states_spill_to_the_cas_and_stay_readable() -> None:
    big = cbor.encode(b"x" * 1000)
    cells, _ = table(resident_state_bytes_max=2500)
    for n in range(5):
        cells.put(key(n), big, seq=1)
    assert cells._resident_bytes <= 2500
    assert cells.dirty_count == 5
    for n in range(5):
        cell = cells.get(key(n))
        assert cell is not None
        assert cells.state_bytes(cell) == big


def test_failed_cells_keep_their_state() -> None:
    cells, _ = table()
    cells.put(key(1), state(1), seq=1)
    cells.mark_failed(key(1), seq=2)
    cell = cells.get(key(1))
    assert cell is not None and cell.failed
    assert cells.state_bytes(cell) == state(1)
    cells.materialize()
    cell = cells.get(key(1))
    assert cell is not None and cell.failed and cell.last_active_seq == 2


def test_unkeyed_cell() -> None:
    cells, _ = table()
    cells.put(None, state(7), seq=3)
    cells.materialize()
    cell = cells.get(None)
    assert cell is not None and cell.key is None


def test_root_is_independent_of_materialization_points() -> None:
    a, _ = table()
    b, _ = table()
    for n in range(30):
        a.put(key(n % 7), state(n), seq=n)
        b.put(key(n % 7), state(n), seq=n)
        if n % 4 == 0:
            a.materialize()
    assert a.materialize() == b.materialize()


def test_items_after_merges_staged_cells_over_the_index() -> None:
    cells, _ = table()
    for n in range(40):
        cells.put(key(n), state(n), n)
    cells.materialize()
    for n in range(0, 40, 3):
        cells.put(key(n), None, 100)  # staged deletes
    for n in range(40, 50):
        cells.put(key(n), state(n), 101)  # staged inserts
    cells.put(key(1), state(999), 102)  # a staged update of an indexed cell
    everything = cells.items()
    for cut in [None, *(d for d, _ in everything[::7])]:
        tail = [(d, c.state_hash) for d, c in everything if cut is None or d > cut]
        assert [(d, c.state_hash) for d, c in cells.items_after(cut)] == tail
