"""Schedules (spec/11-flows.md §12): what firing costs, measured, never asserted.

* a simulated day of `*/15 * * * *` on a manual-clock flow world (no sync): 96 slots, each a
  kernel timer, a journaled fire and the execution it starts, run to its end;
* one `pump` (what a node runs every second) over 200 schedules of which none is due: the
  writer time a node spends looking.

    .venv/bin/python -m bench.schedules
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from zoneinfo import ZoneInfo

from aos.flows.define.document import load_flow
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import create_flow_world
from aos.flows.serve.schedules import operations as sched
from aos.flows.serve.schedules.slots import ScheduleSpec, parse_time
from aos.kernel.world.world import CLOCK_MANUAL

QUICK = "name: t/quick\nsteps: [{name: a, tasks: [{do: noop}]}]"
DAY_NS = 86_400 * 10**9
SCHEDULES = 200
PUMPS = 20


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="aos-bench-schedules-") as scratch:
        world, _ = create_flow_world(Path(scratch) / "w", clock=CLOCK_MANUAL, sync=False)
        with world:
            ops.deploy(world, load_flow(QUICK, source="<bench>"))
            start = parse_time("2026-11-28T00:00:00", ZoneInfo("UTC"), "start")
            world.advance_time(start - world.logical_ns)
            quarter = ScheduleSpec.parse({"flow": "t/quick", "cron": "*/15 * * * *"})
            sched.create(world, "quarter", quarter)
            began = time.perf_counter()
            sched.advance(world, start + DAY_NS)
            day_s = time.perf_counter() - began
            print(f"a day of */15: {day_s:.2f} s, {day_s / 96 * 1000:.1f} ms a slot")
            yearly = ScheduleSpec.parse({"flow": "t/quick", "cron": "0 0 1 1 *"})
            for n in range(SCHEDULES - 1):
                sched.create(world, f"s{n}", yearly)
            began = time.perf_counter()
            for _ in range(PUMPS):
                sched.pump(world)
            pump_ms = (time.perf_counter() - began) / PUMPS * 1000
            print(f"pump over {SCHEDULES} schedules, none due: {pump_ms:.1f} ms")


if __name__ == "__main__":
    main()
