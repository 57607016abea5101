"""Replay audits and recovery: clean worlds replay byte for byte; tampered journals, tampered
blobs and swapped modules are found and reported precisely; a lost head is rebuilt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb
import pytest
from click.testing import CliRunner

from aos.cli.main import main as aos_main
from aos.kernel import cbor
from aos.kernel.audit import gc, replay
from aos.kernel.hashing import Hash
from aos.kernel.world import records
from aos.kernel.world.errors import WorldCorruptError
from aos.kernel.world.world import World
from tests.test_receipts import open_intents, receipt
from tests.test_world import COUNTER, EVENT, SCRIPTED, create, inc, journal, ping, reopen


def counter_world(path: Path, *, snapshot_after: int | None = None) -> None:
    with create(path) as world:
        for n in range(12):
            world.send(EVENT, inc(f"k{n % 4}", n + 1))
            if snapshot_after is not None and n == snapshot_after:
                world.snapshot()


def scripted_world(path: Path) -> None:
    with create(path, SCRIPTED, clock="manual") as world:
        first, second = open_intents(world, 2, "a")
        world.settle(receipt(world, first))
        world.run_to_idle()
        world.send("demo/Ping@1", ping("t", "timer", 50))
        world.snapshot()
        world.jump_next_timer()
        world.send("demo/Ping@1", ping("b", "emit"))
        world.send("demo/Ping@1", ping("c", "trap"))
        world.send("demo/Ping@1", ping("c"))  # dropped: the cell failed
        world.settle(receipt(world, second, payload={"ok": "not a bool"}))
        world.run_to_idle()
        with pytest.raises(Exception):  # noqa: B017 - any refusal: it is journaled
            world.settle(receipt(world, "blake3:" + "0" * 64))
        with pytest.raises(Exception):  # noqa: B017
            world.send("demo/Ping@1", ping("k" * 2000))


# --------------------------------------------------------------------------------------------
# Clean worlds


def test_full_replay_equals_the_live_world(tmp_path: Path) -> None:
    counter_world(tmp_path / "w")
    report = replay.verify_replay(tmp_path / "w")
    assert report.ok, report.divergence
    with reopen(tmp_path / "w") as world:
        height = world.height
    assert report.records == height - 1  # every record after genesis was re-derived and compared
    assert (report.start_seq, report.end_seq) == (2, height)
    assert report.inputs == 12 and report.steps == 12


def test_snapshot_plus_tail_equals_full_replay_equals_live(tmp_path: Path) -> None:
    counter_world(tmp_path / "w", snapshot_after=5)
    with reopen(tmp_path / "w") as world:
        [(seq, snapshot_hash)] = world.snapshots
    full = replay.verify_replay(tmp_path / "w")
    by_seq = replay.verify_replay(tmp_path / "w", from_snapshot=str(seq))
    by_hash = replay.verify_replay(tmp_path / "w", from_snapshot=str(snapshot_hash))
    later = replay.verify_replay(tmp_path / "w", from_seq=seq + 3)
    assert full.ok and by_seq.ok and by_hash.ok and later.ok
    assert by_seq.start_seq == seq + 1 == later.start_seq
    assert by_seq.records < full.records


def test_every_record_kind_replays(tmp_path: Path) -> None:
    scripted_world(tmp_path / "s")
    with reopen(tmp_path / "s") as world:
        kinds = {record["kind"] for record in journal(world)}
    # Governance and operation records replay too: tests/test_governance.py and
    # tests/test_operations.py cover them.
    assert kinds == set(records.KINDS) - {records.GOVERNANCE, records.OPERATION}
    report = replay.verify_replay(tmp_path / "s")
    assert report.ok, report.divergence and report.divergence.to_value()
    with reopen(tmp_path / "s") as world:
        snapshot = str(world.snapshots[0][0])
    assert replay.verify_replay(tmp_path / "s", from_snapshot=snapshot).ok


def test_unknown_snapshot_is_refused(tmp_path: Path) -> None:
    counter_world(tmp_path / "w")
    with pytest.raises(replay.SnapshotUnknownError):
        replay.verify_replay(tmp_path / "w", from_snapshot="7")


# --------------------------------------------------------------------------------------------
# Tampering


def _rewrite_record(path: Path, seq: int, change: Any) -> None:
    env = lmdb.open(str(path / "store"), max_dbs=8)
    db = env.open_db(b"journal")
    with env.begin(write=True, db=db) as txn:
        record = cbor.decode(txn.get(seq.to_bytes(8, "big")))
        change(record)
        txn.put(seq.to_bytes(8, "big"), cbor.encode(record))
    env.close()


def _rewrite_blob(path: Path, hash_: Hash, data: bytes) -> None:
    env = lmdb.open(str(path / "store"), max_dbs=8)
    db = env.open_db(b"cas")
    with env.begin(write=True, db=db) as txn:
        assert txn.get(hash_.digest) is not None
        txn.put(hash_.digest, data)
    env.close()


def _seq_of(path: Path, kind: str, nth: int = 0) -> tuple[int, dict[str, Any]]:
    with reopen(path) as world:
        found = [(n, r) for n, r in enumerate(journal(world), start=1) if r["kind"] == kind]
        return found[nth]


def test_a_tampered_step_record_is_reported_precisely(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    seq, step = _seq_of(path, records.STEP, 3)

    def forge(record: Any) -> None:
        record["state"] = "blake3:" + "e" * 64

    _rewrite_record(path, seq, forge)
    report = replay.verify_replay(path)
    assert not report.ok and report.divergence is not None
    d = report.divergence
    assert (d.seq, d.what, d.kind, d.fields) == (seq, "record_differs", "step", ["state"])
    assert d.workflow == COUNTER and d.key == cbor.decode(step["key"])
    assert d.module is not None and d.module.startswith("blake3:")


def test_a_tampered_input_shows_at_the_step_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    seq, _ = _seq_of(path, records.DOMAIN_EVENT, 2)

    def forge(record: Any) -> None:
        record["value"]["$value"]["by"] = 1000

    _rewrite_record(path, seq, forge)
    report = replay.verify_replay(path)
    d = report.divergence
    assert d is not None and d.seq == seq + 1 and d.kind == "step" and "state" in d.fields


def test_a_tampered_blob_is_an_integrity_failure(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path, snapshot_after=5)
    with reopen(path) as world:
        [(seq, snapshot_hash)] = world.snapshots
    _rewrite_blob(path, snapshot_hash, b"rotten")
    report = replay.verify_replay(path, from_snapshot=str(seq))
    d = report.divergence
    assert d is not None and d.what == "integrity"
    assert "store.corrupt_blob" in d.message and d.found == str(snapshot_hash)


def test_a_module_swapped_under_the_world_is_found(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    with reopen(path) as world:
        module = world.runtime.module_hash(COUNTER)
        other = (SCRIPTED / "module" / "scripted.py").read_bytes()
    _rewrite_blob(path, module, other)
    report = replay.verify_replay(path)
    d = report.divergence
    assert d is not None and d.what == "integrity" and d.found == str(module)


def test_the_cli_reports_a_divergence_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    seq, _ = _seq_of(path, records.STEP, 1)
    _rewrite_record(path, seq, lambda r: r.update(events=9))
    result = CliRunner().invoke(aos_main, ["world", "replay", "--verify", "--world", str(path)])
    assert result.exit_code == 1
    assert f"seq {seq}" in result.stderr and "events" in result.stderr
    assert "error[replay.diverged]" in result.stderr
    ok = CliRunner().invoke(aos_main, ["world", "replay", "--verify", "--world", str(tmp_path)])
    assert ok.exit_code == 1  # not a world


# --------------------------------------------------------------------------------------------
# Recovery of a lost head, snapshots with missing roots


def _states(path: Path) -> dict[str, Any]:
    with reopen(path) as world:
        return {f"k{n}": world.reader.state(COUNTER, f"k{n}") for n in range(4)}


def test_a_lost_head_is_rebuilt_from_the_snapshot_and_tail(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path, snapshot_after=5)
    expected = _states(path)
    with reopen(path) as world:
        head = Hash(str(world.store.meta.get("world.head")))
    _rewrite_blob(path, head, b"gone")
    assert _states(path) == expected
    assert replay.verify_replay(path).ok


def test_a_snapshot_with_missing_roots_fails_closed_and_recovery_uses_the_one_before(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w"
    with create(path) as world:
        for n in range(6):
            world.send(EVENT, inc(f"k{n % 4}", n + 1))
        world.snapshot()
        for n in range(6):
            world.send(EVENT, inc(f"k{n % 4}", n + 1))
        newest = world.snapshot()
        head = Hash(str(world.store.meta.get("world.head")))
        root = Hash(world.store.cas.get_value(newest[1])["roots"][COUNTER])  # type: ignore[index,call-overload]
    expected = _states(path)
    env = lmdb.open(str(path / "store"), max_dbs=8)
    with env.begin(write=True, db=env.open_db(b"cas")) as txn:
        txn.delete(root.digest)
        txn.delete(head.digest)
    env.close()
    with pytest.raises(WorldCorruptError):
        replay.verify_replay(path, from_snapshot=str(newest[0]))
    recovery = replay.recover(path)
    assert recovery.start != str(newest[1]) and len(recovery.skipped) == 1
    assert _states(path) == expected


def test_gc_keeps_everything_reachable(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path, snapshot_after=5)
    dry = gc.collect(path)
    assert dry.garbage_objects > 0 and not dry.deleted
    done = gc.collect(path, apply=True)
    assert done.garbage_objects == dry.garbage_objects
    assert gc.collect(path).garbage_objects == 0
    assert replay.verify_replay(path).ok
    with reopen(path) as world:
        seq = world.snapshots[0][0]
    assert replay.verify_replay(path, from_snapshot=str(seq)).ok
    assert _states(path)["k1"] is not None


def test_gc_can_drop_old_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path) as world:
        for round_ in range(3):
            world.send(EVENT, inc("a", round_ + 1))
            world.snapshot()
    report = gc.collect(path, apply=True, keep_snapshots=1)
    assert (report.snapshots_kept, report.snapshots_dropped) == (1, 2)
    with World.open(path, sync=False) as world:
        assert len(world.snapshots) == 1
    assert replay.verify_replay(path).ok


def test_a_fault_after_reopen_replays(tmp_path: Path) -> None:
    """A cell read back from the index and one held in memory give the same index entry."""
    path = tmp_path / "s"
    with create(path, SCRIPTED) as world:
        world.send("demo/Ping@1", ping("y"))
    with reopen(path) as world:
        world.send("demo/Ping@1", ping("y", "trap"))
        world.send("demo/Ping@1", ping("x", "trap"))
    report = replay.verify_replay(path)
    assert report.ok, report.divergence and report.divergence.to_value()


def test_queued_work_at_the_head_replays(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path) as world:
        for n in range(4):
            world.ingress(EVENT, inc(f"k{n}"))
        with pytest.raises(Exception):  # noqa: B017 - the step budget error
            world.run_to_idle(steps_max=2)
    report = replay.verify_replay(path)
    assert report.ok, report.divergence and report.divergence.to_value()


def test_the_spilled_scratch_store_behaves_like_the_memory_one(tmp_path: Path) -> None:
    from aos.kernel.hashing import hash_bytes
    from aos.kernel.store.memory_store import MemoryStore

    spill = tmp_path / "spill"
    spill.mkdir()
    store = MemoryStore(spill_dir=spill)
    with store.batch() as batch:
        batch.cas_put(b"one")
        batch.cas_put(b"two")
    h = hash_bytes(b"one")
    assert store.cas.get(h) == b"one" and store.cas.has(h)
    assert sorted(store.cas.hashes()) == sorted([h, hash_bytes(b"two")])
    assert store.cas.delete(h) and not store.cas.has(h)
    store.close()


def test_reading_a_world_never_changes_its_head(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with create(path, SCRIPTED) as world:
        world.reader.cells("demo/keyed@1")  # opens an empty cell table
        world.reader.state("demo/global@1")
        world.snapshot()
    assert replay.verify_replay(path).ok
