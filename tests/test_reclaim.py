"""Reclaiming at flush time: a flush deletes the index nodes, states and head checkpoints it
supersedes when nothing else names them, and never anything a head, a retained snapshot or
another writer still names (spec/05 §5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aos.kernel import cbor, gc, replay
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.store import open_store
from aos.kernel.store.errors import StoreUsageError
from aos.kernel.store.memory_store import MemoryStore
from aos.kernel.world.cellindex import CellIndex
from aos.kernel.world.cells import CellTable
from aos.kernel.world.pending import PendingWrites
from aos.kernel.world.world import WorldLimits
from tests.test_world import COUNTER, EVENT, create, inc, reopen
from tests.test_world import reset as reset_event

NO_SNAPSHOTS = WorldLimits(snapshot_every_records=None)


def _grow(world: Any, rounds: int, *, keys: int = 60, per_round: int = 40) -> None:
    for round_ in range(rounds):
        for n in range(per_round):
            world.ingress(EVENT, inc(f"k{(n * 7 + round_ * 3) % keys}", round_ + 1))
        world.run_to_idle()


def _index_objects(store: Any, root: Hash) -> set[Hash]:
    return set(gc._index_objects(store, root))


# --------------------------------------------------------------------------------------------
# The store's marks


@pytest.mark.parametrize("backend", ["lmdb", "memory"])
def test_marks_are_set_cleared_and_go_with_a_deleted_blob(tmp_path: Path, backend: str) -> None:
    store: Any = open_store(tmp_path, sync=False) if backend == "lmdb" else MemoryStore()
    with store:
        with store.batch() as batch:
            a, b, c = (batch.cas_put(bytes([n]) * 8) for n in range(3))
            for hash_ in (a, b, c):
                batch.cas_mark_reclaimable(hash_)
        assert [store.cas.reclaimable(h) for h in (a, b, c)] == [True, True, True]
        assert store.cas.reclaimable_count() == 3
        with store.batch() as batch:
            batch.cas_mark_reclaimable(a, False)
            batch.cas_delete(b)
        assert [store.cas.reclaimable(h) for h in (a, b, c)] == [False, False, True]
        assert not store.cas.has(b) and store.cas.has(a)
        with store.batch() as batch:
            batch.cas_clear_reclaimable()
            batch.cas_mark_reclaimable(a)  # marks of the same batch apply after the clear
        assert [store.cas.reclaimable(h) for h in (a, c)] == [True, False]
        assert store.cas.reclaimable_count() == 1


def test_a_failed_batch_changes_no_mark(tmp_path: Path) -> None:
    with open_store(tmp_path, sync=False) as store:
        with store.batch() as batch:
            blob = batch.cas_put(b"x" * 8)
            batch.cas_mark_reclaimable(blob)
        with pytest.raises(RuntimeError), store.batch() as batch:
            batch.cas_clear_reclaimable()
            raise RuntimeError("abandoned")
        assert store.cas.reclaimable(blob)


def test_consistent_reads_are_for_read_only_stores_and_do_not_nest(tmp_path: Path) -> None:
    with open_store(tmp_path, sync=False) as store:
        store.journal.append([{"n": 1}])
        with pytest.raises(StoreUsageError), store.consistent():
            pass
    with open_store(tmp_path, readonly=True) as reader:
        with reader.consistent():
            assert reader.journal.head() == 1
            assert [r for _, r in reader.journal.read()] == [{"n": 1}]
            with pytest.raises(StoreUsageError), reader.consistent():
                pass
        assert reader.journal.head() == 1  # plain reads again


# --------------------------------------------------------------------------------------------
# A model: two workflows' tables over one pending view, sharing states and whole nodes


def _flush(
    pending: PendingWrites, tables: dict[str, CellTable], *, snapshot: bool = False
) -> dict[str, Hash]:
    superseded: set[Hash] = set()
    with pending.young():
        roots = {name: table.materialize(superseded) for name, table in tables.items()}
    pending.superseded(superseded)
    if snapshot:
        pending.clear_marks()
    pending.flush(1)
    return roots


_cell_write = st.tuples(  # (table, key, state); state None deletes the cell
    st.sampled_from(["a", "b"]), st.integers(0, 5), st.one_of(st.none(), st.integers(0, 2))
)
operations = st.lists(
    st.one_of(
        _cell_write,
        _cell_write,
        st.sampled_from(["flush", "flush", "flush", "snapshot"]),
        st.tuples(st.just("blob"), st.integers(0, 2)),  # a receipt blob equal to some state
    ),
    max_size=80,
)


@given(operations)
@example([("a", 1, 0), "flush", ("b", 2, 0), "flush", ("a", 1, 1), "flush"])
@example([("a", 1, 0), ("b", 1, 0), "flush", ("a", 1, 1), "flush"])
@example([("a", 1, 0), "flush", ("blob", 0), ("a", 1, 1), "flush"])
@settings(max_examples=200, deadline=None)
def test_reclaiming_never_deletes_what_a_root_a_snapshot_or_a_blob_still_names(
    ops: list[Any],
) -> None:
    store = MemoryStore()
    pending = PendingWrites(store)
    index = CellIndex(pending, bucket_entries_max=2)  # deep tries: splits and collapses
    tables = {name: CellTable(pending, index, index.empty_root) for name in ("a", "b")}
    kept: list[Hash] = []  # roots of snapshots
    blobs: set[Hash] = set()
    roots: dict[str, Hash] = {}
    deleted_any = False
    for seq, op in enumerate([*ops, "flush"], start=1):
        if op in ("flush", "snapshot"):
            roots = _flush(pending, tables, snapshot=op == "snapshot")
            if op == "snapshot":
                kept.extend(roots.values())
            named = set(blobs)
            for root in [*roots.values(), *kept]:
                named |= _index_objects(store, root)  # raises if a node went missing
            assert all(store.cas.has(h) for h in named)
        elif op[0] == "blob":
            blobs.add(pending.put(cbor.encode({"count": op[1]})))
        else:
            name, key, value = op
            data = None if value is None else cbor.encode({"count": value})
            deleted_any |= data is None
            tables[name].put(cbor.encode(key), data, seq)
    for table in tables.values():
        for _, cell in table.items():
            assert table.state_bytes(cell)  # every state still reads back
    if not kept and not deleted_any:
        # Without snapshots and deletes, nothing but shared states outlives its last name.
        named = {index.empty_root, *blobs}
        for root in roots.values():
            named |= _index_objects(store, root)
        leftover = {h for h in store.cas.blobs if h not in named}
        assert all("count" in cbor.decode(store.cas.blobs[h]) for h in leftover)


def test_a_node_both_workflows_name_survives_when_one_moves_on() -> None:
    store = MemoryStore()
    pending = PendingWrites(store)
    index = CellIndex(pending, bucket_entries_max=2)
    tables = {name: CellTable(pending, index, index.empty_root) for name in ("a", "b")}
    for name in tables:  # identical cells: identical tries, every node shared
        for n in range(8):
            tables[name].put(cbor.encode(n), cbor.encode({"n": n}), 1)
    first = _flush(pending, tables)
    assert first["a"] == first["b"]
    shared = _index_objects(store, first["a"])
    for n in range(8):
        tables["a"].put(cbor.encode(n), cbor.encode({"n": n + 100}), 2)
    second = _flush(pending, tables)
    assert second["b"] == first["b"]
    assert all(store.cas.has(h) for h in shared)
    assert pending.reclaim.deleted_objects == 0  # all were named twice


def test_a_node_written_and_superseded_within_one_flush_never_reaches_the_store() -> None:
    store = MemoryStore()
    pending = PendingWrites(store)
    index = CellIndex(pending)
    table = CellTable(pending, index, index.empty_root)
    table.put(cbor.encode("k"), cbor.encode({"n": 1}), 1)
    with pending.young():
        superseded: set[Hash] = set()
        middle = table.materialize(superseded)
        table.put(cbor.encode("k"), cbor.encode({"n": 2}), 2)
        table.materialize(superseded)
    pending.superseded(superseded)
    pending.flush(1)
    assert not store.cas.has(middle)
    assert not store.cas.has(hash_bytes(cbor.encode({"n": 1})))
    assert pending.reclaim.dropped_objects == 2


# --------------------------------------------------------------------------------------------
# Worlds


def test_flushes_leave_almost_no_garbage_and_replay_still_verifies(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    off = WorldLimits(snapshot_every_records=None, reclaim_superseded=False)
    with create(kept, limits=off) as world:
        _grow(world, 25)
    reclaimed = tmp_path / "reclaimed"
    with create(reclaimed, limits=NO_SNAPSHOTS) as world:
        _grow(world, 25)
        assert world.reclaimed_objects > 0
    without, with_ = gc.collect(kept), gc.collect(reclaimed)
    assert with_.live_objects == without.live_objects  # the same head either way
    assert with_.garbage_bytes * 50 < without.garbage_bytes
    assert replay.verify(reclaimed).ok


def test_marks_survive_a_reopen_and_reclaiming_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path, limits=NO_SNAPSHOTS) as world:
        _grow(world, 5)
        marked = world.store.cas.reclaimable_count()
    assert marked > 0
    with reopen(path, limits=NO_SNAPSHOTS) as world:
        assert world.store.cas.reclaimable_count() == marked
        _grow(world, 10)
        assert world.reclaimed_objects > 0
    report = gc.collect(path)
    assert report.garbage_bytes * 20 < report.live_bytes
    assert replay.verify(path).ok


def test_a_snapshot_keeps_what_it_names_and_replays_from_it(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path, limits=NO_SNAPSHOTS) as world:
        _grow(world, 5)
        seq, snapshot = world.snapshot()
        assert world.store.cas.reclaimable_count() == 0
        content = world.store.cas.get_value(snapshot)
        named = set()
        for root in content["roots"].values():
            named |= _index_objects(world.store, Hash(root))
        _grow(world, 10)
        world.send(EVENT, reset_event("k1"))
        assert all(world.store.cas.has(h) for h in named)
        assert world.reclaimed_objects > 0
    assert replay.verify(path).ok
    assert replay.verify(path, from_snapshot=str(seq)).ok
    gc.collect(path, apply=True)  # walks every head and snapshot: raises if one lost a node
    assert replay.verify(path, from_snapshot=str(seq)).ok


def test_reclaiming_is_invisible_in_the_journal_and_the_roots(tmp_path: Path) -> None:
    heads = []
    for reclaim in (True, False):
        path = tmp_path / str(reclaim)
        limits = WorldLimits(snapshot_every_records=None, reclaim_superseded=reclaim)
        with create(path, limits=limits) as world:
            _grow(world, 8)
            world.snapshot()
            _grow(world, 4)
            heads.append(
                (
                    [r for _, r in world.store.journal.read()],
                    world.store.meta.get("world.head"),
                    world.state(COUNTER, "k3"),
                )
            )
    assert heads[0] == heads[1]
