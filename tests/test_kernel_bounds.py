"""What the kernel checks of itself and what it keeps bounded (issue 16 item 7): waiting
counts agree with open intents, journaled messages are clipped by a named bound, a run
report's fault codes are bounded, and the head keeps a bounded number of closed proposals."""

from __future__ import annotations

from pathlib import Path

import pytest

from aos.kernel import governance, replay
from aos.kernel.errors import KernelInvariantError
from aos.kernel.store.memory_store import MemoryStore
from aos.kernel.world import records
from aos.kernel.world.intents import IntentTracker, OpenIntent
from aos.kernel.world.pending import PendingWrites
from aos.kernel.world.world import FAULT_CODES_KEPT_MAX
from tests.test_governance import DOUBLE, REFACTOR, counter_world, propose_folder, variant
from tests.test_world import SCRIPTED, create, engine, ping, reopen


def test_waiting_counts_that_disagree_with_open_intents_stop_the_world() -> None:
    store = MemoryStore()
    tracker = IntentTracker(PendingWrites(store), lambda: store)
    tracker.open("i1", OpenIntent("w", b"k", "e", 3))
    tracker.open("i2", OpenIntent("w", b"k", "e", 4))
    assert tracker.waiting(("w", b"k")) == 2 and len(tracker.values()) == 2
    tracker._waiting[("w", b"k")] = 1  # a bug elsewhere, simulated
    with pytest.raises(KernelInvariantError):
        tracker.values()
    fresh = IntentTracker(PendingWrites(store), lambda: store)
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
    record = records.step_fault(
        input_seq=1, delivery=0, workflow="w", key=None, module="m", code="c", message=text
    )
    assert record["message"] == clipped


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
    monkeypatch.setattr(governance, "PROPOSALS_CLOSED_KEPT", 1)
    path = tmp_path / "w"
    counter_world(path, {"a": [1]})
    with reopen(path) as world:
        first = propose_folder(world, variant(tmp_path, "double", DOUBLE))
        second = propose_folder(world, variant(tmp_path, "refactor", REFACTOR))
        governance.decide(world, first, approve=False, approver="ann", reason="no")
        assert set(world.proposals) == {first, second}
        governance.decide(world, second, approve=False, approver="ann", reason="no")
        assert set(world.proposals) == {second}  # the older closed one left the head
    with reopen(path) as world:
        assert set(world.proposals) == {second}
    report = replay.verify(path, engine=engine())
    assert report.ok, report
