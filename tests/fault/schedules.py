"""The schedules slice of fault injection (spec/11-flows.md §12.2): a child that fires a
`*/15 * * * *` schedule slot by slot on a manual-clock flow world (LMDB, `sync=True`), to be
SIGKILLed at random and run again; `check` says every slot in the window has exactly one
execution, none missing, none doubled, and the world replays.

    python -m tests.fault.schedules --world DIR --keys DIR --days N
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from zoneinfo import ZoneInfo

from aos.flows.define.document import load_flow
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import create_flow_world, load_or_make_keys
from aos.flows.serve.schedules import operations as sched
from aos.flows.serve.schedules.slots import ScheduleSpec, parse_time
from aos.kernel.audit import replay
from aos.kernel.wasm import WasmEngine
from aos.kernel.world.world import CLOCK_MANUAL, World

QUICK = "name: t/quick\nsteps: [{name: a, tasks: [{do: noop}]}]"
NAME = "quarter"
DAY_NS = 86_400 * 10**9
START_NS = parse_time("2026-11-28T00:00:00", ZoneInfo("UTC"), "start")


def open_world(world_dir: Path, keys_dir: Path) -> World:
    if (world_dir / "store").exists():
        world = World.open(world_dir, engine=WasmEngine())
        world.run_to_idle()
        return world
    world, _ = create_flow_world(
        world_dir, keys_dir=keys_dir, clock=CLOCK_MANUAL, sync=True, engine=WasmEngine()
    )
    return world


def run(world: World, days: int) -> None:
    ops.deploy(world, load_flow(QUICK, source="<fault>"))
    if world.logical_ns < START_NS:
        world.advance_time(START_NS - world.logical_ns)
    if world.reader.state(sched.SCHEDULE_WORKFLOW, NAME) is None:
        spec = ScheduleSpec.parse({"flow": "t/quick", "cron": "*/15 * * * *"})
        sched.create(world, NAME, spec)
    end = START_NS + days * DAY_NS
    while world.logical_ns < end:
        sched.advance(world, min(end, world.logical_ns + 3_600 * 10**9))
        print(world.logical_ns, flush=True)


def check(world_dir: Path, days: int) -> list[str]:
    """Every slot of the window has exactly one execution, and the world replays."""
    problems: list[str] = []
    with World.reading(world_dir) as world:
        expected = [
            sched.slot_exec_id(NAME, START_NS + 15 * 60 * 10**9 * (n + 1)) for n in range(days * 96)
        ]
        found = [
            str(c.key)
            for c in world.reader.cells(ops.EXEC_WORKFLOW)
            if str(c.key).startswith("sched~")
        ]
        if sorted(found) != sorted(expected):
            missing = sorted(set(expected) - set(found))
            extra = sorted(set(found) - set(expected))
            problems.append(f"slots missing {missing[:5]} ({len(missing)}), extra {extra[:5]}")
        shown = sched.show(world, NAME)
        if (shown["fired"], shown["skipped"]) != (len(expected), 0):
            problems.append(f"fired {shown['fired']}, skipped {shown['skipped']}")
    report = replay.verify_replay(world_dir)
    if not report.ok:
        problems.append(f"replay diverged: {report.divergence}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=Path, required=True)
    parser.add_argument("--keys", type=Path, required=True)
    parser.add_argument("--days", type=int, default=1)
    args = parser.parse_args(argv)
    load_or_make_keys(args.keys)
    world = open_world(args.world, args.keys)
    try:
        run(world, args.days)
    finally:
        world.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
