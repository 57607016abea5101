"""Times as the inspector shows them (kernel/node/times.py): ISO 8601 instants and durations,
a manual clock's logical time as the time since its start, and a derived record's time found
through its links to the stamped input it came from, within `TIME_LINKS_MAX` links."""

from __future__ import annotations

from pathlib import Path

import pytest

from aos.kernel.node import times
from aos.kernel.node.times import RecordTimes, iso_duration, iso_instant, logical_text
from aos.kernel.world import records
from aos.kernel.world.stamps import PinnedStampSource
from tests.test_world import SCRIPTED, create, ping

START_NS = 1_795_000_000 * times.NS_PER_S


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "PT0S"),
        (105_000_000, "PT0.105S"),
        (123_500_000_000, "PT2M3.5S"),
        (93_600_000_000_000, "P1DT2H"),
        (3_600_000_000_000, "PT1H"),
        (-1_500_000_000, "-PT1.5S"),  # a wall clock set back
        (999_999, "PT0S"),  # below the millisecond
        (None, ""),
    ],
)
def test_durations_are_iso_8601_to_the_millisecond(ns: int | None, text: str) -> None:
    assert iso_duration(ns) == text


def test_instants_are_utc_to_the_millisecond_and_logical_time_follows_the_clock() -> None:
    assert iso_instant(1_795_846_691_992_126_241) == "2026-11-28T06:18:11.992Z"
    assert iso_instant(0) == "1970-01-01T00:00:00.000Z" and iso_instant(None) == ""
    assert logical_text(30 * times.NS_PER_S, "manual") == "+PT30S"
    assert logical_text(0, "wall") == "1970-01-01T00:00:00.000Z"


def test_a_derived_record_has_its_inputs_time(tmp_path: Path) -> None:
    stamps = PinnedStampSource(start_ns=START_NS, step_ns=times.NS_PER_S)
    world = create(tmp_path / "w", SCRIPTED, stamps=stamps)
    try:
        world.send("demo/Ping@1", ping("a", "effect"))
        sent, _ = world.send("demo/Ping@1", ping("b", "effect"))
        found = RecordTimes(world)
        head = world.store.journal.head()
        kinds = {seq: r["kind"] for seq, r in world.store.journal.read(sent.seq, head)}
        stamped = found.at(sent.seq)
        assert stamped is not None and stamped.wall_ns > START_NS  # the second input's
        steps = [seq for seq, kind in kinds.items() if kind == records.STEP]
        assert steps and [found.at(seq) for seq in steps] == [stamped] * len(steps)
        assert RecordTimes(world).at(steps[-1]) == stamped  # the same without the cache
        assert found.at(sent.seq - 1) != stamped  # the first input's steps: its own time
        assert found.at(head + 5) is None and found.at(0) is None  # no such record
    finally:
        world.close()
