"""What the kernel grew for declarative flows, tested on the scripted component: a workflow
cancels its own open intents (late receipts refused and journaled, timers never delivered),
reads CAS blobs by hash (a read request re-runs the step), and annotates its step records."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.kernel import cbor
from aos.kernel.audit import replay
from aos.kernel.world import records
from aos.kernel.world.receipts import ReceiptError
from aos.kernel.world.world import World
from tests.test_receipts import receipt
from tests.test_world import SCRIPTED, create, journal, ping, reopen


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with create(tmp_path / "w", SCRIPTED, clock="manual") as opened:
        yield opened


def open_refs(world: World, key: str = "x") -> dict[str, str]:
    """issuer_ref -> intent of the cell's open intents."""
    return {
        str(i["issuer_ref"]): str(i["intent"])
        for i in world.reader.open_intents()
        if cbor.decode(i["key"]) == key
    }


def last_step(world: World) -> dict[str, Any]:
    return next(r for r in reversed(journal(world)) if r["kind"] == records.STEP)


def test_a_step_cancels_its_own_open_intent_and_its_late_receipt_is_refused(world: World) -> None:
    world.send("demo/Ping@1", ping("x", "effect", 3))
    refs = open_refs(world)
    assert sorted(refs) == ["ref-0", "ref-1", "ref-2"]
    world.send("demo/Ping@1", ping("x", "cancel", 1))
    step = last_step(world)
    assert step["cancelled"] == [refs["ref-1"]]
    assert sorted(open_refs(world)) == ["ref-0", "ref-2"]
    height = world.height
    with pytest.raises(ReceiptError) as refused:
        world.settle(receipt(world, refs["ref-1"]))
    assert refused.value.code == "receipt.intent_cancelled"
    cancelling = [seq for seq, r in enumerate(journal(world), 1) if r.get("cancelled")]
    assert refused.value.detail["cancelled_seq"] == cancelling[0]
    rejected = journal(world)[-1]
    assert rejected["kind"] == records.RECEIPT_REJECTED
    assert rejected["code"] == "receipt.intent_cancelled"
    assert world.height == height + 1  # the refusal is journaled, nothing else moved
    assert sorted(open_refs(world)) == ["ref-0", "ref-2"]


def test_a_step_cannot_cancel_another_cells_intents(world: World) -> None:
    world.send("demo/Ping@1", ping("x", "effect", 1))
    world.send("demo/Ping@1", ping("y", "cancel", 0))
    assert "cancelled" not in last_step(world)
    assert sorted(open_refs(world, "x")) == ["ref-0"]


def test_cancelling_nothing_writes_no_cancelled_field(world: World) -> None:
    world.send("demo/Ping@1", ping("x", "cancel", 7))
    assert "cancelled" not in last_step(world)


def test_an_intent_the_same_step_opens_is_not_cancelled(world: World) -> None:
    world.send("demo/Ping@1", ping("x", "effect", 1))
    old = open_refs(world)["ref-0"]
    world.send("demo/Ping@1", ping("x", "cancel_and_open", 0))
    assert last_step(world)["cancelled"] == [old]
    new = open_refs(world)["ref-0"]
    assert new != old


def test_a_cancelled_timer_is_never_delivered(world: World) -> None:
    world.send("demo/Ping@1", ping("x", "timer_ref", 50))
    assert list(open_refs(world)) == ["timer"]
    world.send("demo/Ping@1", ping("x", "cancel_timer", 10**12))  # cancels "timer" only
    assert world.reader.next_timer_ns() is not None  # the new (unnamed) timer is still armed
    count_before = world.reader.state("demo/keyed@1", "x")["count"]
    world.advance_time(1000)  # past the cancelled timer's deadline
    assert not any(r["kind"] == records.EFFECT_RECEIPT for r in journal(world))
    assert world.reader.state("demo/keyed@1", "x")["count"] == count_before


def test_cancellations_survive_reopen_and_replay(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path, SCRIPTED, clock="manual") as world:
        world.send("demo/Ping@1", ping("x", "effect", 2))
        intent = open_refs(world)["ref-0"]
        world.send("demo/Ping@1", ping("x", "cancel", 0))
    with reopen(path) as world:
        assert sorted(open_refs(world)) == ["ref-1"]
        with pytest.raises(ReceiptError) as refused:
            world.settle(receipt(world, intent))
        assert refused.value.code == "receipt.intent_cancelled"
    report = replay.verify_replay(path)
    assert report.ok, report.divergence


def test_a_step_reads_a_blob_by_hash(world: World) -> None:
    blob = b"a definition, say" * 100
    hash_ = world.put_blob(blob)
    world.send("demo/Ping@1", ping("x", f"read {hash_}"))
    state = world.reader.state("demo/keyed@1", "x")
    assert cbor.decode(state["last_value"]) == blob
    assert last_step(world)["state"] is not None


def test_two_read_rounds_are_allowed(world: World) -> None:
    first, second = world.put_blob(b"one"), world.put_blob(b"two")
    world.send("demo/Ping@1", ping("x", f"read_twice {first},{second}"))
    assert cbor.decode(world.reader.state("demo/keyed@1", "x")["last_value"]) == b"onetwo"


def test_reading_a_missing_blob_faults_only_that_cell(world: World) -> None:
    missing = "blake3:" + "ab" * 32
    _, report = world.send("demo/Ping@1", ping("x", f"read {missing}"))
    # Both workflows the ping routes to read the same missing blob.
    assert report.fault_codes == ["step.read_refused"] * 2
    fault = journal(world)[-1]
    assert fault["kind"] == records.STEP_FAULT and missing in fault["message"]
    assert (
        world.reader.status_of("demo/keyed@1", world.reader.key_bytes("demo/keyed@1", "x"))
        == "failed"
    )
    _, report = world.send("demo/Ping@1", ping("y", "none"))
    assert report.faults == 0


def test_a_world_that_read_blobs_replays(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path, SCRIPTED, clock="manual") as world:
        hash_ = world.put_blob(b"x" * 5000)
        for key in ("a", "b", "a"):
            world.send("demo/Ping@1", ping(key, f"read {hash_}"))
    report = replay.verify_replay(path)
    assert report.ok, report.divergence


def test_annotations_are_journaled_in_the_step_record(world: World) -> None:
    world.send("demo/Ping@1", ping("x", "annotate", 5))
    assert last_step(world)["ann"] == {"id": "x", "n": 5}
    world.send("demo/Ping@1", ping("x", "none"))
    assert "ann" not in last_step(world)  # steps without one keep the old record form


def test_a_late_receipt_after_a_snapshot_replays_from_that_snapshot(tmp_path: Path) -> None:
    """The refusal of a receipt for an intent cancelled before a snapshot must be the same
    when the replay starts from the snapshot (found by the flow fault slice)."""
    path = tmp_path / "w"
    with create(path, SCRIPTED, clock="manual") as world:
        world.send("demo/Ping@1", ping("x", "effect", 1))
        intent = open_refs(world)["ref-0"]
        world.send("demo/Ping@1", ping("x", "cancel", 0))
        snapshot_seq, _ = world.snapshot()
        with pytest.raises(ReceiptError) as refused:
            world.settle(receipt(world, intent))
        assert refused.value.code == "receipt.intent_cancelled"
    report = replay.verify_replay(path, from_snapshot=str(snapshot_seq))
    assert report.ok, report.divergence
    assert replay.verify_replay(path).ok
