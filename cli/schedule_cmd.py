"""`aos schedule`: flows that start themselves, exactly once per slot (spec/11-flows.md §12).

Every command opens the flow world (`--world DIR`, env `AOS_WORLD`): reads read-only, writes
for writing (a world a node serves is locked: stop the node, or use its API). `aos schedule
fire` fires what the world's clock has reached, which a node serving the world does itself
as time passes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from aos.cli.common import emit_json, handles_errors, json_option, table, world_option
from aos.flows.serve.schedules import operations as sched
from aos.flows.serve.schedules.errors import ScheduleError
from aos.flows.serve.schedules.slots import (
    CATCH_UP_POLICIES,
    OVERLAP_POLICIES,
    SCHEDULE_WORKLOAD_BYTES_MAX,
    ScheduleSpec,
    parse_duration,
    parse_time,
)
from aos.kernel import cbor
from aos.kernel.world.world import World


@click.group("schedule")
def schedule_group() -> None:
    """Schedules: start a deployed flow by cron or interval, exactly once per slot."""


@contextmanager
def writing(world_path: str) -> Iterator[World]:
    """The world opened for writing, closed after (schedule and trigger commands)."""
    world = World.open(world_path)
    try:
        yield world
    finally:
        world.close()


def _answer(value: Any, as_json: bool, text: Callable[[Any], str]) -> None:
    if as_json:
        emit_json(cbor.to_json(value))
    else:
        click.echo(text(value))


@schedule_group.command("create")
@click.argument("name")
@click.option("--flow", "flow", required=True, help="The deployed flow each slot starts.")
@click.option("--version", type=int, default=None, help="Pin a version (default: the latest).")
@click.option("--cron", default=None, help="A five-field cron expression, e.g. '0 2 * * *'.")
@click.option("--every", default=None, metavar="DURATION", help="An interval: 15m, 1h, 1d.")
@click.option("--timezone", default="UTC", show_default=True, help="The cron's time zone.")
@click.option("--start", default=None, metavar="AT", help="No slot before (ISO 8601).")
@click.option("--end", default=None, metavar="AT", help="No slot after (ISO 8601).")
@click.option("--jitter", default=None, metavar="DURATION", help="Delay each slot by up to.")
@click.option("--workload", default=None, metavar="JSON", help="Each execution's workload.")
@click.option("--overlap", type=click.Choice(OVERLAP_POLICIES), default="skip", show_default=True)
@click.option(
    "--catch-up",
    "catch_up",
    type=click.Choice(CATCH_UP_POLICIES),
    default="last",
    show_default=True,
)
@world_option
@json_option
@handles_errors
def create_command(world_path: str, as_json: bool, name: str, **options: Any) -> None:
    """Create schedule NAME; its first slot is the first after now (or after --start)."""
    spec = _spec(options)
    with writing(world_path) as world:
        shown = sched.create(world, name, spec)
    _answer(shown, as_json, _shown_text)


def _spec(options: dict[str, Any]) -> ScheduleSpec:
    zone = ScheduleSpec(flow="", cron="* * * * *", timezone=options["timezone"]).zone()
    workload = options["workload"]
    if workload is not None:
        if len(workload.encode()) > SCHEDULE_WORKLOAD_BYTES_MAX:
            raise ScheduleError("the workload is too large", path="workload")
        try:
            workload = json.loads(workload)
        except json.JSONDecodeError as error:
            raise ScheduleError(f"--workload is not JSON: {error}", path="workload") from None
    value = {
        "flow": options["flow"],
        "version": options["version"],
        "cron": options["cron"],
        "every_ns": None if options["every"] is None else parse_duration(options["every"], "every"),
        "timezone": options["timezone"],
        "start_ns": None
        if options["start"] is None
        else parse_time(options["start"], zone, "start"),
        "end_ns": None if options["end"] is None else parse_time(options["end"], zone, "end"),
        "jitter_ns": 0
        if options["jitter"] is None
        else parse_duration(options["jitter"], "jitter"),
        "workload": workload,
        "overlap": options["overlap"],
        "catch_up": options["catch_up"],
    }
    return ScheduleSpec.parse(value)


@schedule_group.command("ls")
@world_option
@json_option
@handles_errors
def ls_command(world_path: str, as_json: bool) -> None:
    """List the schedules with their next slot and counts."""
    with World.reading(world_path) as world:
        found = sched.listing(world)
    rows = [
        [
            s["name"],
            s["flow"],
            s["cron"] or f"every {s['every_ns'] // 10**9}s",
            "paused" if s["paused"] else "active",
            s["next_slot"] or "-",
            s["fired"],
            s["skipped"],
        ]
        for s in found
    ]
    headers = ["NAME", "FLOW", "WHEN", "STATE", "NEXT SLOT (UTC)", "FIRED", "SKIPPED"]
    _answer({"schedules": found}, as_json, lambda _: table(headers, rows))


@schedule_group.command("show")
@click.argument("name")
@click.option("--slots", type=int, default=sched.SHOWN_SLOTS_DEFAULT, show_default=True)
@world_option
@json_option
@handles_errors
def show_command(world_path: str, as_json: bool, name: str, slots: int) -> None:
    """A schedule, its next slots and its recent runs."""
    with World.reading(world_path) as world:
        shown = sched.show(world, name, slots)
    _answer(shown, as_json, _shown_text)


def _shown_text(shown: dict[str, Any]) -> str:
    lines = [
        f"{shown['name']}: {shown['flow']} "
        f"{shown['cron'] or 'every ' + str(shown['every_ns'] // 10**9) + 's'} "
        f"({shown['timezone']}, overlap {shown['overlap']}, catch-up {shown['catch_up']})"
        f"{' paused' if shown['paused'] else ''}",
        "next slots (UTC): " + (", ".join(shown["next_slots"]) or "none"),
    ]
    for entry in shown["recent"][-10:]:
        what = entry.get("exec") or f"{entry.get('reason')} x{entry.get('count', 1)}"
        lines.append(f"  {entry['event']} {entry['slot']} {what}")
    return "\n".join(lines)


def _simple(verb: str, act: Callable[[World, str], Any], doc: str) -> None:
    @schedule_group.command(verb, help=doc)
    @click.argument("name")
    @world_option
    @json_option
    @handles_errors
    def command(world_path: str, as_json: bool, name: str) -> None:
        with writing(world_path) as world:
            act(world, name)
        _answer({"schedule": name, "done": verb}, as_json, lambda _: f"{verb}: {name}")


_simple("pause", sched.pause, "Pause NAME: no slot fires until it resumes.")
_simple("resume", sched.resume, "Resume NAME; missed slots catch up as its --catch-up says.")
_simple("delete", sched.delete, "Delete NAME (its executions stay).")


@schedule_group.command("trigger")
@click.argument("name")
@world_option
@json_option
@handles_errors
def trigger_command(world_path: str, as_json: bool, name: str) -> None:
    """Start one run of NAME's flow now, beside its slots."""
    with writing(world_path) as world:
        exec_id = sched.trigger(world, name)
    _answer({"schedule": name, "exec": exec_id}, as_json, lambda _: f"started {exec_id}")


@schedule_group.command("backfill")
@click.argument("name")
@click.argument("from_at", metavar="FROM")
@click.argument("to_at", metavar="TO")
@world_option
@json_option
@handles_errors
def backfill_command(world_path: str, as_json: bool, name: str, from_at: str, to_at: str) -> None:
    """Start NAME's slots in [FROM, TO] (ISO 8601) that have not run."""
    with writing(world_path) as world:
        zone = sched.show(world, name)["timezone"]
        tz = ScheduleSpec(flow="", cron="* * * * *", timezone=zone).zone()
        decisions = sched.backfill(
            world, name, parse_time(from_at, tz, "from"), parse_time(to_at, tz, "to")
        )
    started = sum(1 for d in decisions if d["action"] == "start")
    _answer(
        {"schedule": name, "decisions": decisions},
        as_json,
        lambda _: f"started {started}, {len(decisions) - started} had run",
    )


@schedule_group.command("fire")
@world_option
@json_option
@handles_errors
def fire_command(world_path: str, as_json: bool) -> None:
    """Fire the slots the world's clock has reached (a node does this itself)."""
    with writing(world_path) as world:
        if world.clock == "wall":
            world.tick()
        moved = sched.pump(world)
    _answer({"fired": moved}, as_json, lambda _: f"fired: {', '.join(moved) or 'nothing'}")
