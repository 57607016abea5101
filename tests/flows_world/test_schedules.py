"""Schedules on a manual clock (spec/11-flows.md §12): exactly one execution per slot, the
overlap and catch-up policies recorded in the history, cron's slots across DST, refusals that
change nothing, and replay of a world whose schedules fired."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from aos.flows.serve import flow_operations as ops
from aos.flows.serve.schedules import operations as sched
from aos.flows.serve.schedules.errors import (
    ScheduleError,
    ScheduleExistsError,
    ScheduleLimitError,
    ScheduleUnknownError,
)
from aos.flows.serve.schedules.slots import (
    CRON_EXPRESSION_BYTES_MAX,
    ScheduleSpec,
    parse_duration,
    parse_time,
)
from aos.kernel.audit import replay
from tests.flows_world.support import FlowWorld, make_flow_world

QUICK = "name: t/quick\nsteps: [{name: a, tasks: [{do: noop}]}]"
SLOW = "name: t/slow\nsteps: [{name: a, tasks: [{do: wait_timer, duration_s: 1200}]}]"
DAY_NS = 86_400 * 10**9
HOUR_NS = 3_600 * 10**9
UTC = ZoneInfo("UTC")


def at(text: str, zone: str = "UTC") -> int:
    return parse_time(text, ZoneInfo(zone), "at")


def world_at(path: Path, when_ns: int, flow: str = QUICK) -> FlowWorld:
    flows = make_flow_world(path)
    flows.deploy(flow)
    flows.world.advance_time(when_ns - flows.world.logical_ns)
    return flows


def spec(**value: Any) -> ScheduleSpec:
    return ScheduleSpec.parse({"flow": "t/quick", "cron": "*/15 * * * *", **value})


def scheduled(flows: FlowWorld, name: str) -> list[dict[str, Any]]:
    prefix = f"sched~{name}~"
    listed = ops.listing(flows.world, page=ops.Page(limit=1000))["executions"]
    return sorted((e for e in listed if str(e["exec"]).startswith(prefix)), key=lambda e: e["exec"])


def recent(flows: FlowWorld, name: str, event: str) -> list[dict[str, Any]]:
    return [r for r in sched.show(flows.world, name)["recent"] if r["event"] == event]


def test_every_quarter_hour_over_a_day_starts_96_executions_once_each(tmp_path: Path) -> None:
    start = at("2026-11-28T00:00:00")
    flows = world_at(tmp_path / "w", start)
    with flows.world:
        sched.create(flows.world, "quarter", spec())
        sched.advance(flows.world, start + DAY_NS)
        sched.pump(flows.world)  # nothing more is due: a second pump fires nothing
        runs = scheduled(flows, "quarter")
        assert len(runs) == 96
        assert {r["status"] for r in runs} == {"completed"}
        assert runs[0]["exec"] == "sched~quarter~20261128T001500Z"
        assert runs[-1]["exec"] == "sched~quarter~20261129T000000Z"
        shown = sched.show(flows.world, "quarter")
        assert (shown["fired"], shown["skipped"]) == (96, 0)
        assert shown["next_slot"] == "2026-11-29T00:15:00Z"
    assert replay.verify_replay(tmp_path / "w").ok


def test_a_slot_fired_twice_starts_one_execution(tmp_path: Path) -> None:
    start = at("2026-11-28T00:00:00")
    flows = world_at(tmp_path / "w", start)
    with flows.world:
        sched.create(flows.world, "once", spec())
        flows.world.jump_next_timer()
        sched.pump(flows.world)
        fired = [
            r["value"]
            for _, r in flows.journal()
            if r["kind"] == "domain_event" and r["schema"] == sched.COMMAND_EVENT
        ][-1]
        assert fired["op"] == "fire"
        height = flows.world.height
        # A second node (or a repeat after a kill) sends the same slot's fire again.
        flows.world.send(sched.COMMAND_EVENT, fired)
        assert flows.world.height == height + 2  # the command and its (stale) step, no start
        assert len(scheduled(flows, "once")) == 1
        assert sched.show(flows.world, "once")["fired"] == 1


def test_skip_with_a_slow_flow_skips_the_overlapping_slots_and_says_so(tmp_path: Path) -> None:
    start = at("2026-11-28T00:00:00")
    flows = world_at(tmp_path / "w", start, SLOW)
    with flows.world:
        sched.create(flows.world, "slow", spec(flow="t/slow", overlap="skip"))
        sched.advance(flows.world, start + 2 * HOUR_NS)
        runs = scheduled(flows, "slow")
        # 20-minute runs every 15 minutes: every other slot finds the previous still running.
        assert len(runs) == 4
        skipped = recent(flows, "slow", "schedule.skipped")
        assert len(skipped) == 4 and {s["reason"] for s in skipped} == {"overlap"}
        assert sched.show(flows.world, "slow")["skipped"] == 4


def test_cancel_previous_and_buffer_one(tmp_path: Path) -> None:
    start = at("2026-11-28T00:00:00")
    flows = world_at(tmp_path / "w", start, SLOW)
    with flows.world:
        sched.create(flows.world, "cancel", spec(flow="t/slow", overlap="cancel-previous"))
        sched.create(flows.world, "buffer", spec(flow="t/slow", overlap="buffer-one"))
        sched.advance(flows.world, start + HOUR_NS)
        cancelled = scheduled(flows, "cancel")
        assert len(cancelled) == 4
        assert [r["status"] for r in cancelled[:3]] == ["cancelled"] * 3
        buffered = scheduled(flows, "buffer")
        # 00:15 runs to 00:35, when 00:30 (buffered) starts; 00:45 starts at 00:55; 01:00 waits.
        assert [r["exec"][-7:] for r in buffered] == ["001500Z", "003000Z", "004500Z"]
        state = flows.world.reader.state(sched.SCHEDULE_WORKFLOW, "buffer")
        assert state["buffered"]["start"]["exec"] == "sched~buffer~20261128T010000Z"


def test_catch_up_last_after_a_three_hour_pause_starts_one(tmp_path: Path) -> None:
    start = at("2026-11-28T00:00:00")
    flows = world_at(tmp_path / "w", start)
    with flows.world:
        for policy in ("none", "last", "all"):
            sched.create(flows.world, policy, spec(catch_up=policy))
            sched.pause(flows.world, policy)
        flows.world.advance_time(3 * HOUR_NS)
        for policy in ("none", "last", "all"):
            sched.resume(flows.world, policy)
        assert len(scheduled(flows, "none")) == 0
        assert [r["exec"] for r in scheduled(flows, "last")] == ["sched~last~20261128T030000Z"]
        assert len(scheduled(flows, "all")) == 12
        missed = recent(flows, "last", "schedule.skipped")
        assert [(s["reason"], s["count"]) for s in missed] == [("missed", 11)]
        assert recent(flows, "none", "schedule.skipped")[0]["count"] == 12


def test_catch_up_is_bounded(tmp_path: Path) -> None:
    start = at("2026-11-28T00:00:00")
    flows = world_at(tmp_path / "w", start)
    limits = sched.ScheduleLimits(schedule_catch_up_slots_max=5)
    with flows.world:
        sched.create(flows.world, "all", spec(catch_up="all"))
        sched.pause(flows.world, "all")
        flows.world.advance_time(3 * HOUR_NS)
        sched.resume(flows.world, "all", limits)
        assert len(scheduled(flows, "all")) == 5
        skipped = recent(flows, "all", "schedule.skipped")
        assert [(s["reason"], s["count"]) for s in skipped] == [("catch_up_limit", 5)]


@pytest.mark.parametrize(
    ("day", "slots"), [("2026-03-29", 92), ("2026-10-25", 100), ("2026-11-28", 96)]
)
def test_berlin_dst_days_have_cron_slots(tmp_path: Path, day: str, slots: int) -> None:
    """Spring forward (23 hours), fall back (25 hours, 02:00-02:45 twice), an ordinary day."""
    start = at(f"{day}T00:00:00", "Europe/Berlin")
    flows = world_at(tmp_path / "w", start)
    with flows.world:
        sched.create(flows.world, "berlin", spec(timezone="Europe/Berlin"))
        end = at(f"{day}T23:59:59", "Europe/Berlin")
        sched.advance(flows.world, end)
        assert len(scheduled(flows, "berlin")) == slots - 1  # 00:00 of the day after is next


def test_nightly_in_berlin_runs_at_two_local_across_dst(tmp_path: Path) -> None:
    start = at("2026-10-23T12:00:00", "Europe/Berlin")
    flows = world_at(tmp_path / "w", start)
    with flows.world:
        sched.create(flows.world, "n", spec(cron="0 3 * * *", timezone="Europe/Berlin"))
        sched.advance(flows.world, start + 3 * DAY_NS)
        runs = [r["exec"][-16:] for r in scheduled(flows, "n")]
        # 03:00 CEST is 01:00Z; after the fall back on the 25th, 03:00 CET is 02:00Z.
        assert runs == ["20261024T010000Z", "20261025T020000Z", "20261026T020000Z"]


def test_trigger_backfill_and_jitter(tmp_path: Path) -> None:
    start = at("2026-11-28T00:00:00")
    flows = world_at(tmp_path / "w", start)
    with flows.world:
        sched.create(flows.world, "b", spec(cron="0 * * * *", jitter_ns=600 * 10**9))
        state = flows.world.reader.state(sched.SCHEDULE_WORKFLOW, "b")
        slot, fires = state["next"]["slot"], state["next"]["at_ns"]
        assert slot <= fires < slot + 600 * 10**9
        assert fires == ScheduleSpec(**state["spec"]).jittered("b", slot)
        exec_id = sched.trigger(flows.world, "b")
        assert ops.status(flows.world, exec_id)["status"] == "completed"
        decisions = sched.backfill(flows.world, "b", start - 3 * HOUR_NS, start)
        assert [d["action"] for d in decisions] == ["start"] * 4
        again = sched.backfill(flows.world, "b", start - 3 * HOUR_NS, start)
        assert [d["reason"] for d in again] == ["exists"] * 4
        assert len(scheduled(flows, "b")) == 5
        with pytest.raises(ScheduleLimitError):
            sched.backfill(flows.world, "b", start - 2000 * HOUR_NS, start)


def test_refusals_change_nothing(tmp_path: Path) -> None:
    start = at("2026-11-28T00:00:00")
    flows = world_at(tmp_path / "w", start)
    with flows.world:
        sched.create(flows.world, "a", spec())
        height = flows.world.height
        bad: list[tuple[type[Exception], Any]] = [
            (ScheduleExistsError, lambda: sched.create(flows.world, "a", spec())),
            (ScheduleError, lambda: sched.create(flows.world, "Bad Name", spec())),
            (ops.FlowUnknownError, lambda: sched.create(flows.world, "b", spec(flow="t/none"))),
            (ScheduleUnknownError, lambda: sched.pause(flows.world, "nope")),
            (ScheduleError, lambda: sched.resume(flows.world, "a")),
            (
                ScheduleLimitError,
                lambda: sched.create(
                    flows.world, "c", spec(), sched.ScheduleLimits(schedules_per_world_max=1)
                ),
            ),
        ]
        for error, call in bad:
            with pytest.raises(error):
                call()
        assert flows.world.height == height


@pytest.mark.parametrize(
    "value",
    [
        {"cron": "* * * *"},
        {"cron": "61 * * * *"},
        {"cron": "* " * (CRON_EXPRESSION_BYTES_MAX // 2) + "*"},
        {"cron": None, "every_ns": None},
        {"cron": "* * * * *", "every_ns": 60 * 10**9},
        {"cron": None, "every_ns": 10**6},
        {"timezone": "Mars/Olympus"},
        {"overlap": "sometimes"},
        {"catch_up": "some"},
        {"start_ns": 10, "end_ns": 5},
        {"workload": {"x": "y" * 70_000}},
    ],
)
def test_bad_specs_are_refused(value: dict[str, Any]) -> None:
    with pytest.raises(ScheduleError):
        ScheduleSpec.parse({"flow": "t/quick", "cron": "*/15 * * * *", **value})


def test_cron_expression_at_its_size_limit_is_taken() -> None:
    fields = "0,1,2,3,4,5 * * * *"
    padded = fields.replace("0,", "0," + "0," * ((CRON_EXPRESSION_BYTES_MAX - len(fields)) // 2))
    assert len(padded.encode()) <= CRON_EXPRESSION_BYTES_MAX
    ScheduleSpec.parse({"flow": "f", "cron": padded})


def test_durations() -> None:
    assert parse_duration("1h30m", "every") == 5_400 * 10**9
    assert parse_duration("1d", "every") == DAY_NS
    for bad in ("", "15", "1x", "m", "9" * 50):
        with pytest.raises(ScheduleError):
            parse_duration(bad, "every")


def test_every_interval_schedule(tmp_path: Path) -> None:
    start = at("2026-11-28T00:00:00")
    flows = world_at(tmp_path / "w", start)
    with flows.world:
        every = ScheduleSpec.parse({"flow": "t/quick", "every_ns": 2 * HOUR_NS, "start_ns": start})
        sched.create(flows.world, "every", every)
        sched.advance(flows.world, start + DAY_NS)
        assert len(scheduled(flows, "every")) == 12
        sched.delete(flows.world, "every")
        assert sched.listing(flows.world) == []
        assert flows.world.reader.next_timer_ns() is None


def test_backfill_at_its_limit_is_taken_and_one_over_is_refused(tmp_path: Path) -> None:
    start = at("2026-11-28T00:00:00")
    flows = world_at(tmp_path / "w", start)
    limits = sched.ScheduleLimits(schedule_backfill_slots_max=4)
    with flows.world:
        sched.create(flows.world, "b", spec(cron="0 * * * *"))
        height = flows.world.height
        with pytest.raises(ScheduleLimitError):
            sched.backfill(flows.world, "b", start - 4 * HOUR_NS, start, limits)
        assert flows.world.height == height
        taken = sched.backfill(flows.world, "b", start - 3 * HOUR_NS, start, limits)
        assert len(taken) == 4
