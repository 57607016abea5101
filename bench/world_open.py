"""Opening a large world: the child processes of bench_replay's `replay.open` group.

    python -m bench.world_open grow --world DIR --cells 10000,100000[,1000000]
    python -m bench.world_open measure --world DIR

`grow` creates a counter world (C counter, sync off, one Increment per new key in batches of
`--batch` events per `run_to_idle`) and, at each checkpoint, closes it and runs `measure` in a
fresh process, then reopens it and grows on. It prints one JSON line per checkpoint.

`measure` imports the kernel, notes its memory, then times `World.open` (the head checkpoint,
the manifest from the CAS; cells load lazily), a first cold read of one cell (index walk from
the root) and a first `send` (module instance, one step, one flush), with VmRSS, RssAnon and
RssFile (from bench/world_rss.py) after each. A fresh process per measurement keeps the
grower's memory out of the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World, WorldLimits
from bench.world_rss import memory_kib

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "manifests" / "counter-c"
SCHEMA = "demo/CounterEvent@1"
WORKFLOW = "demo/counter@1"
BATCH_EVENTS_DEFAULT = 1000
MEASURE_TIMEOUT_S = 600
MEASURE_REPEATS = 3  # fresh processes per checkpoint; times are their medians


def _increment(number: int) -> dict[str, Any]:
    return {"$tag": "Increment", "$value": {"id": f"c-{number}", "by": 1}}


def _limits() -> WorldLimits:
    # No automatic snapshot while growing: a snapshot would land in the middle of the figures.
    return WorldLimits(snapshot_every_records=None)


def grow(world_dir: Path, checkpoints: list[int], batch: int) -> list[dict[str, Any]]:
    assert checkpoints == sorted(checkpoints) and all(c % batch == 0 for c in checkpoints)
    points = []
    cells = 0
    world = World.create(
        world_dir, MANIFEST, sync=False, stamps=PinnedStampSource(), limits=_limits()
    )
    try:
        for checkpoint in checkpoints:
            while cells < checkpoint:
                for number in range(cells, cells + batch):
                    world.ingress(SCHEMA, _increment(number))
                report = world.run_to_idle()
                assert report.steps == batch and report.faults == 0, report
                cells += batch
            world.close()
            point = {"cells": cells, **_measure_median(world_dir)}
            points.append(point)
            print(json.dumps(point), flush=True)
            stamps = PinnedStampSource(seed=b"regrow", start_ns=10**15 + cells)
            world = World.open(world_dir, sync=False, stamps=stamps, limits=_limits())
    finally:
        world.close()
    return points


def _measure_median(world_dir: Path) -> dict[str, Any]:
    """Memory from the first fresh process, times as the median of all of them (each one
    sends one event, so the world grows by a record or three per measurement)."""
    runs = [_measure_in_child(world_dir) for _ in range(MEASURE_REPEATS)]
    point = dict(runs[0])
    for name in ("open_s", "first_read_s", "first_send_s"):
        point[name] = statistics.median(run[name] for run in runs)
        point[name + "_samples"] = [run[name] for run in runs]
    point["height"] = runs[-1]["height"]
    return point


def _measure_in_child(world_dir: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.world_open", "measure", "--world", str(world_dir)]
    done = subprocess.run(
        command, cwd=REPO, check=True, capture_output=True, text=True, timeout=MEASURE_TIMEOUT_S
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(world_dir: Path) -> dict[str, Any]:
    before = memory_kib()
    start = time.perf_counter()
    world = World.open(world_dir, sync=False, limits=_limits())
    open_s = time.perf_counter() - start
    opened = memory_kib()
    with world:
        start = time.perf_counter()
        state = world.state(WORKFLOW, "c-1")  # grown once, never probed: count 1
        read_s = time.perf_counter() - start
        assert state == {"count": 1, "resets": 0}, state
        start = time.perf_counter()
        _, report = world.send(SCHEMA, {"$tag": "Increment", "$value": {"id": "probe", "by": 1}})
        send_s = time.perf_counter() - start
        assert report.steps == 1, report
        sent = memory_kib()
        height = world.height
    return {
        "open_s": open_s,
        "first_read_s": read_s,
        "first_send_s": send_s,
        "height": height,
        "rss_before_kib": before["vm_rss_kib"],
        "rss_open_kib": opened["vm_rss_kib"],
        "anon_open_kib": opened["rss_anon_kib"],
        "rss_sent_kib": sent["vm_rss_kib"],
        "anon_sent_kib": sent["rss_anon_kib"],
        "file_sent_kib": sent["rss_file_kib"],
        # Allocated blocks: the data file is as large as the writer's map, sparse past them.
        "store_bytes": (world_dir / "store" / "data.mdb").stat().st_blocks * 512,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["grow", "measure"])
    parser.add_argument("--world", type=Path, required=True)
    parser.add_argument("--cells", default="10000,100000")
    parser.add_argument("--batch", type=int, default=BATCH_EVENTS_DEFAULT)
    args = parser.parse_args()
    if args.mode == "measure":
        # The measurement is the last line, whatever the kernel may print before it.
        print(json.dumps(measure(args.world)), flush=True)
        return 0
    checkpoints = [int(c) for c in args.cells.split(",") if c]
    grow(args.world, checkpoints, args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
