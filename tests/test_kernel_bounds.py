"""What the kernel checks of itself and what it keeps bounded (issue 16 item 7): waiting
counts agree with open intents, journaled messages are clipped by a named bound, a run
report's fault codes are bounded, and the head keeps a bounded number of closed proposals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aos.kernel.audit import replay
from aos.kernel.errors import KernelInvariantError
from aos.kernel.governance import proposals
from aos.kernel.store.memory_store import MemoryStore
from aos.kernel.world import governance_records, records
from aos.kernel.world.intents import IntentTracker, OpenIntent
from aos.kernel.world.staged import StagedWrites
from aos.kernel.world.world import (
    FAULT_CODES_KEPT_MAX,
    OPEN_INTENTS_MAX_DEFAULT,
    World,
    WorldLimits,
)
from tests.test_governance import DOUBLE, REFACTOR, counter_world, propose_folder, variant
from tests.test_world import SCRIPTED, create, engine, ping, reopen


def test_waiting_counts_that_disagree_with_open_intents_stop_the_world() -> None:
    store = MemoryStore()
    tracker = IntentTracker(StagedWrites(store), lambda: store)
    tracker.open("i1", OpenIntent("w", b"k", "e", 3))
    tracker.open("i2", OpenIntent("w", b"k", "e", 4))
    assert tracker.waiting(("w", b"k")) == 2 and len(tracker.values()) == 2
    tracker._waiting[("w", b"k")] = 1  # a bug elsewhere, simulated
    with pytest.raises(KernelInvariantError):
        tracker.values()
    fresh = IntentTracker(StagedWrites(store), lambda: store)
    twice = [OpenIntent("w", b"k", "e", 3).to_value("i1")] * 2
    with pytest.raises(KernelInvariantError):
        fresh.restore(twice)


@pytest.mark.parametrize("extra", [0, 1, 5000])
def test_journaled_messages_are_clipped_at_their_named_bound(extra: int) -> None:
    text = "x" * (records.JOURNALED_MESSAGE_CHARS_MAX + extra)
    clipped = records.clip_message(text)
    assert len(clipped) <= records.JOURNALED_MESSAGE_CHARS_MAX
    if extra == 0:
        assert clipped == text
    else:
        assert clipped.endswith(f"[{extra + 40} characters cut]")
        assert clipped.startswith("x" * (records.JOURNALED_MESSAGE_CHARS_MAX - 40))
    record = records.StepFaultRecord.of(
        input_seq=1, delivery=0, workflow="w", key=None, module="m", code="c", message=text
    )
    assert record.message == clipped


def test_a_run_report_lists_at_most_its_bound_of_fault_codes(tmp_path: Path) -> None:
    with create(tmp_path / "w", SCRIPTED) as world:
        for n in range(FAULT_CODES_KEPT_MAX + 1):  # each faults its own cell (and the global
            world.ingress("demo/Ping@1", ping(f"k{n}", "trap"))  # cell once, then drops)
        report = world.run_to_idle()
    assert report.faults == FAULT_CODES_KEPT_MAX + 2
    assert report.fault_codes == ["step.guest_exception"] * FAULT_CODES_KEPT_MAX


def test_the_head_keeps_only_the_newest_closed_proposals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(governance_records, "PROPOSALS_CLOSED_KEPT", 1)
    path = tmp_path / "w"
    counter_world(path, {"a": [1]})
    with reopen(path) as world:
        first = propose_folder(world, variant(tmp_path, "double", DOUBLE))
        second = propose_folder(world, variant(tmp_path, "refactor", REFACTOR))
        proposals.decide(world, first, approve=False, approver="ann", reason="no")
        assert set(world.proposals) == {first, second}
        proposals.decide(world, second, approve=False, approver="ann", reason="no")
        assert set(world.proposals) == {second}  # the older closed one left the head
    with reopen(path) as world:
        assert set(world.proposals) == {second}
    report = replay.verify_replay(path, engine=engine())
    assert report.ok, report


KEYED = "demo/keyed@1"  # the scripted unkeyed workflow faults on effects: only the keyed counts
EXCEEDED = "step.open_intents_exceeded"


def keyed_faults(world: World) -> list[dict[str, Any]]:
    found = [record for _, record in world.store.journal.read(1)]
    return [r for r in found if r["kind"] == records.STEP_FAULT and r["workflow"] == KEYED]  # type: ignore[index]


def test_open_intents_are_bounded_per_world_at_the_edge(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path, SCRIPTED, limits=WorldLimits(open_intents_max=3)) as world:
        _, at_limit = world.send("demo/Ping@1", ping("x", "effect", 3))
        assert at_limit.intents == 3 and EXCEEDED not in at_limit.fault_codes
        _, still = world.send("demo/Ping@1", ping("x", "cancel_and_open", 1))  # closes first
        assert still.intents == 1 and world.reader.status()["open_intents"] == 3
        height = world.height
        _, over = world.send("demo/Ping@1", ping("y", "effect", 1))
        assert over.fault_codes == [EXCEEDED] and over.intents == 0
        [fault] = keyed_faults(world)
        assert fault["code"] == EXCEEDED and fault["input"] == height + 1
        assert world.reader.status()["open_intents"] == 3  # nothing of the step was applied
        assert world.reader.state(KEYED, "y") is None
    # The bound was recorded at creation: opened with other limits, the world steps alike.
    with reopen(path, limits=WorldLimits(open_intents_max=1000)) as world:
        assert world.limits.open_intents_max == 3
        _, again = world.send("demo/Ping@1", ping("z", "effect", 1))
        assert again.fault_codes == [EXCEEDED]
        seq, _ = world.snapshot()
        _, later = world.send("demo/Ping@1", ping("w", "effect", 1))
        assert later.fault_codes == [EXCEEDED]
        assert len(keyed_faults(world)) == 3
    assert replay.verify_replay(path, engine=engine()).ok
    assert replay.verify_replay(path, engine=engine(), from_snapshot=str(seq)).ok


def test_a_default_world_records_no_open_intents_bound_and_one_below_one_is_refused(
    tmp_path: Path,
) -> None:
    with create(tmp_path / "w", SCRIPTED) as world:
        assert world.limits.open_intents_max == OPEN_INTENTS_MAX_DEFAULT
        assert "open_intents_max" not in world.store.meta.get("world.config")  # type: ignore[operator]
    with pytest.raises(ValueError, match="open_intents_max"):
        WorldLimits(open_intents_max=0)
