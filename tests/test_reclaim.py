"""Reclaiming at flush time: a flush deletes the index nodes, states and head checkpoints it
supersedes when nothing else names them, and never anything a head, a retained snapshot or
another writer still names (spec/05 §5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from aos.kernel import cbor
from aos.kernel.audit import gc, replay
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.store import open_store
from aos.kernel.store.errors import StoreUsageError
from aos.kernel.store.interface import Mark
from aos.kernel.store.memory_store import MemoryStore
from aos.kernel.world.cellindex import CellIndex
from aos.kernel.world.cells import CellTable
from aos.kernel.world.staged import StagedWrites
from aos.kernel.world.world import WorldLimits
from tests.strategies import examples_times
from tests.test_world import COUNTER, EVENT, create, inc, reopen
from tests.test_world import reset as reset_event

NO_SNAPSHOTS = WorldLimits(snapshot_every_records=None)
# Reclaiming superseded index nodes and heads needs heads to supersede: these tests checkpoint
# at every flush (tests/test_world_tail.py covers the flushes between checkpoints).
EVERY_FLUSH = WorldLimits(snapshot_every_records=None, checkpoint_every_records=1)


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
def test_marks_and_doomed_rows_are_kept_and_go_with_a_deleted_blob(
    tmp_path: Path, backend: str
) -> None:
    store: Any = open_store(tmp_path, sync=False) if backend == "lmdb" else MemoryStore()
    with store:
        with store.batch() as batch:
            a, b, c = (batch.cas_put(bytes([n]) * 8) for n in range(3))
            for hash_ in (a, b, c):
                batch.cas_mark(hash_, Mark("young", 7))
        assert [store.cas.mark(h) for h in (a, b, c)] == [Mark("young", 7)] * 3
        assert store.cas.marks_count() == 3
        # No row yet: the LMDB writer remembers it, and must forget it when one is written.
        assert store.cas.doomed(13) == []
        with store.batch() as batch:
            batch.cas_mark(a, None)
            batch.cas_delete(b)
            batch.cas_mark(c, Mark("doomed", 12))
        assert [store.cas.mark(h) for h in (a, b, c)] == [None, None, Mark("doomed", 12)]
        assert not store.cas.has(b) and store.cas.has(a)
        assert store.cas.doomed(12) == [] and store.cas.doomed(13) == [(12, c)]
        with store.batch() as batch:
            batch.cas_clear_marks()
            batch.cas_mark(a, Mark("young", 0))  # marks of the same batch apply after the clear
        assert [store.cas.mark(h) for h in (a, c)] == [Mark("young", 0), None]
        assert store.cas.marks_count() == 1
        assert store.cas.doomed(13) == [(12, c)]  # a row outlives its mark
        with store.batch() as batch:
            batch.cas_forget_doomed(12, c)
        assert store.cas.doomed(13) == []
        with store.batch() as batch:
            batch.cas_mark(a, Mark("doomed", 5))
        assert store.cas.doomed(13) == [(5, a)]


def test_a_failed_batch_changes_no_mark(tmp_path: Path) -> None:
    with open_store(tmp_path, sync=False) as store:
        with store.batch() as batch:
            blob = batch.cas_put(b"x" * 8)
            batch.cas_mark(blob, Mark("young", 0))
        with pytest.raises(RuntimeError), store.batch() as batch:
            batch.cas_clear_marks()
            batch.cas_mark(blob, Mark("doomed", 3))
            raise RuntimeError("abandoned")
        assert store.cas.mark(blob) == Mark("young", 0)
        assert store.cas.doomed(10) == []


def test_a_store_no_writer_of_this_version_opened_reads_as_unmarked(tmp_path: Path) -> None:
    import lmdb

    env = lmdb.open(str(tmp_path / "store"), max_dbs=8)
    with env.begin(write=True) as txn:
        for name in (b"journal", b"cas", b"meta"):
            env.open_db(name, txn=txn)
    env.close()
    with open_store(tmp_path, readonly=True) as reader:
        assert reader.cas.mark(hash_bytes(b"x")) is None
        assert reader.cas.marks_count() == 0 and reader.cas.doomed(10) == []
    with open_store(tmp_path, sync=False) as writer:  # a writer adds the databases
        with writer.batch() as batch:
            batch.cas_mark(batch.cas_put(b"x"), Mark("young", 0))
        assert writer.cas.marks_count() == 1


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


class Model:
    """Two workflows' cell tables over one pending view, as a world drives them: flushes,
    snapshots every so often with the newest `kept_max` retained, and outside blobs."""

    def __init__(self, *, bucket: int = 2, kept_max: int = 2, release_max: int = 3) -> None:
        self.store = MemoryStore()
        self.pending = StagedWrites(self.store)
        self.pending.release_max = release_max  # small: releasing spreads over flushes
        self.index = CellIndex(self.pending, bucket_entries_max=bucket)
        self.tables = {
            name: CellTable(self.pending, self.index, self.index.empty_root) for name in "ab"
        }
        self.kept_max = kept_max
        self.snapshots: list[tuple[int, list[Hash]]] = []  # (id, roots), oldest first
        self.roots: dict[str, Hash] = {}
        self.seq = 0

    def flush(self, *, snapshot: bool = False) -> None:
        self.seq += 1
        superseded: set[Hash] = set()
        with self.pending.young():
            self.roots = {
                name: table.materialize(superseded) for name, table in self.tables.items()
            }
        self.pending.superseded(superseded)
        if snapshot:
            self.snapshots.append((self.seq, list(self.roots.values())))
            del self.snapshots[: -self.kept_max]
            self.pending.release_before = self.snapshots[0][0]
        self.pending.write(1)
        self.pending.epoch = self.snapshots[-1][0] if self.snapshots else 0

    def named(self) -> set[Hash]:
        """Every object the head and the retained snapshots name (raises if one is gone)."""
        found: set[Hash] = {self.index.empty_root}
        roots = [*self.roots.values(), *(r for _, rs in self.snapshots for r in rs)]
        for root in roots:
            found |= _index_objects(self.store, root)
        return found


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
# The old root leaf becomes a child of the new branch, then is replaced: it stays young.
@example([("a", 1, 0), "flush", ("a", 0, 0), ("a", 2, 0), "flush", ("a", 1, 0)])
@example([("a", 1, 0), ("b", 1, 0), "flush", ("a", 1, 1), "flush"])
@example([("a", 1, 0), "flush", ("blob", 0), ("a", 1, 1), "flush"])
@example([("a", 1, 0), "snapshot", ("a", 1, 1), "flush", "snapshot", "snapshot", "flush"])
@example([("a", 1, 0), "snapshot", ("a", 1, 1), "flush", ("b", 1, 0), "snapshot", "snapshot"])
@examples_times(1.5)  # cheap: in-memory tables and store (300 under ci)
def test_reclaiming_never_deletes_what_a_root_a_snapshot_or_a_blob_still_names(
    ops: list[Any],
) -> None:
    model = Model()
    blobs: set[Hash] = set()
    ever_snapshotted = deleted_any = False
    for seq, op in enumerate([*ops, "flush"], start=1):
        if op in ("flush", "snapshot"):
            model.flush(snapshot=op == "snapshot")
            ever_snapshotted |= op == "snapshot"
            named = model.named() | blobs
            assert all(model.store.cas.has(h) for h in named)
        elif op[0] == "blob":
            blobs.add(model.pending.put(cbor.encode({"count": op[1]})))
        else:
            name, key, value = op
            data = None if value is None else cbor.encode({"count": value})
            deleted_any |= data is None
            model.tables[name].put(cbor.encode(key), data, seq)
    for table in model.tables.values():
        for _, cell in table.items():
            assert table.state_bytes(cell)  # every state still reads back
    if not deleted_any:
        # Without deletes (a collapsing branch leaks its freshly written children to `gc`),
        # nothing outlives its last name but states that once had two.
        leftover = {h for h in model.store.cas.blobs if h not in model.named() | blobs}
        assert all("count" in cbor.decode(model.store.cas.blobs[h]) for h in leftover)


def test_what_only_dropped_snapshots_named_is_released_with_them() -> None:
    model = Model(bucket=2, kept_max=2, release_max=10**6)
    for round_ in range(6):
        for key in range(12):
            model.tables["a"].put(cbor.encode(key), cbor.encode({"r": round_, "k": key}), 1)
        model.flush(snapshot=True)
        assert all(model.store.cas.has(h) for h in model.named())
    # Only the head and the two newest snapshots' objects are left.
    assert set(model.store.cas.blobs) == model.named()
    assert model.pending.reclaim.released_objects > 0


def test_releasing_is_spread_over_flushes_and_catches_up() -> None:
    model = Model(bucket=2, kept_max=1, release_max=4)
    for round_ in range(3):
        for key in range(12):
            model.tables["a"].put(cbor.encode(key), cbor.encode({"r": round_, "k": key}), 1)
        model.flush(snapshot=True)
    backlog = len(model.store.cas.doomed(10**9))
    assert backlog > 4
    released = model.pending.reclaim.released_objects
    model.flush()  # at most release_max per flush
    assert model.pending.reclaim.released_objects - released <= 4
    for _ in range(backlog):
        model.flush()
    assert model.store.cas.doomed(10**9) == []
    assert set(model.store.cas.blobs) == model.named()


def test_a_node_both_workflows_name_survives_when_one_moves_on() -> None:
    model = Model()
    for table in model.tables.values():  # identical cells: identical tries, all nodes shared
        for n in range(8):
            table.put(cbor.encode(n), cbor.encode({"n": n}), 1)
    model.flush()
    first = dict(model.roots)
    assert first["a"] == first["b"]
    shared = _index_objects(model.store, first["a"])
    for n in range(8):
        model.tables["a"].put(cbor.encode(n), cbor.encode({"n": n + 100}), 2)
    model.flush()
    assert model.roots["b"] == first["b"]
    assert all(model.store.cas.has(h) for h in shared)
    assert model.pending.reclaim.deleted_objects == 0  # all were named twice


def test_a_node_written_and_superseded_within_one_flush_never_reaches_the_store() -> None:
    store = MemoryStore()
    pending = StagedWrites(store)
    index = CellIndex(pending)
    table = CellTable(pending, index, index.empty_root)
    table.put(cbor.encode("k"), cbor.encode({"n": 1}), 1)
    with pending.young():
        superseded: set[Hash] = set()
        middle = table.materialize(superseded)
        table.put(cbor.encode("k"), cbor.encode({"n": 2}), 2)
        table.materialize(superseded)
    pending.superseded(superseded)
    pending.write(1)
    assert not store.cas.has(middle)
    assert not store.cas.has(hash_bytes(cbor.encode({"n": 1})))
    assert pending.reclaim.dropped_objects == 2


# --------------------------------------------------------------------------------------------
# Worlds


def test_flushes_leave_almost_no_garbage_and_replay_still_verifies(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    off = WorldLimits(
        snapshot_every_records=None, reclaim_superseded=False, checkpoint_every_records=1
    )
    with create(kept, limits=off) as world:
        _grow(world, 25)
    reclaimed = tmp_path / "reclaimed"
    with create(reclaimed, limits=EVERY_FLUSH) as world:
        _grow(world, 25)
        assert world.reclaimed_objects > 0
    without, with_ = gc.collect(kept), gc.collect(reclaimed)
    assert with_.live_objects == without.live_objects  # the same head either way
    assert with_.garbage_bytes * 50 < without.garbage_bytes
    assert replay.verify_replay(reclaimed).ok


def test_marks_survive_a_reopen_and_reclaiming_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path, limits=EVERY_FLUSH) as world:
        _grow(world, 5)
        marked = world.store.cas.marks_count()
    assert marked > 0
    with reopen(path, limits=EVERY_FLUSH) as world:
        assert world.store.cas.marks_count() == marked
        _grow(world, 10)
        assert world.reclaimed_objects > 0
    report = gc.collect(path)
    assert report.garbage_bytes * 20 < report.live_bytes
    assert replay.verify_replay(path).ok


def test_a_snapshot_keeps_what_it_names_and_replays_from_it(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path, limits=EVERY_FLUSH) as world:
        _grow(world, 5)
        seq, snapshot = world.snapshot()
        content = world.store.cas.get_value(snapshot)
        named = set()
        for root in content["roots"].values():
            named |= _index_objects(world.store, Hash(root))
        _grow(world, 10)
        world.send(EVENT, reset_event("k1"))
        assert all(world.store.cas.has(h) for h in named)
        assert world._pending.reclaim.doomed_objects > 0  # superseded, but the snapshot names them
        assert world.reclaimed_objects > 0  # what was written after it and superseded is gone
    assert replay.verify_replay(path).ok
    assert replay.verify_replay(path, from_snapshot=str(seq)).ok
    gc.collect(path, apply=True)  # walks every head and snapshot: raises if one lost a node
    assert replay.verify_replay(path, from_snapshot=str(seq)).ok


def test_retention_drops_old_snapshots_and_what_only_they_named(tmp_path: Path) -> None:
    path = tmp_path / "w"
    limits = WorldLimits(snapshot_every_records=None, snapshots_kept_max=2)
    with create(path, limits=limits) as world:
        taken = []
        for _ in range(5):
            _grow(world, 4)
            taken.append(world.snapshot())
        _grow(world, 3)
        assert world.snapshots == taken[-2:]
        assert world._pending.reclaim.released_objects > 0
        assert not world.store.cas.has(taken[0][1])  # a dropped snapshot's blob goes too
        assert world.store.meta.get("world.snapshots") == [[n, str(h)] for n, h in taken[-2:]]
    report = gc.collect(path)
    assert report.snapshots_kept == 2
    assert report.garbage_bytes * 20 < report.live_bytes  # retention left little for gc
    for seq, _ in taken[-2:]:
        assert replay.verify_replay(path, from_snapshot=str(seq)).ok
    assert replay.verify_replay(path).ok
    with pytest.raises(replay.SnapshotUnknownError):  # a dropped snapshot is unknown
        replay.verify_replay(path, from_snapshot=str(taken[0][0]))


def test_retention_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        WorldLimits(snapshots_kept_max=0)
    with pytest.raises(ValueError):
        WorldLimits(release_objects_per_flush_max=0)


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
                    world.reader.state(COUNTER, "k3"),
                )
            )
    assert heads[0] == heads[1]


def test_snapshots_kept_max_none_keeps_every_snapshot(tmp_path: Path) -> None:
    limits = WorldLimits(snapshot_every_records=None, snapshots_kept_max=None)
    with create(tmp_path / "w", limits=limits) as world:
        taken = []
        for _ in range(5):
            _grow(world, 2)
            taken.append(world.snapshot())
        assert world.snapshots == taken
        assert all(world.store.cas.has(h) for _, h in taken)
        assert world._pending.reclaim.released_objects == 0
