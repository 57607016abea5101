"""Opening a large world: the child processes of bench_replay's `replay.open` group.

    python -m bench.world_open grow --world DIR --cells 10000,100000[,1000000]
    python -m bench.world_open measure --world DIR

`grow` creates a counter world (C counter, sync off, one Increment per new key in batches of
`--batch` events per `run_to_idle`) and, at each checkpoint, closes it and runs `measure` in a
fresh process, then reopens it and grows on. It prints one JSON line per checkpoint.

At each checkpoint it also measures the open **after a crash**: a copy of the world gets
`CRASH_TAIL_RECORDS` more records (new keys, one flush, no head checkpoint: the most the
default cadence of 2,000 records leaves) and is abandoned as a SIGKILL leaves it, without the
checkpoint a close writes; opening it checks the journal chain over that tail and folds it
(spec/05 §1.1-1.2). Each of its measurements opens a fresh copy of the crashed world.

`measure` imports the kernel, notes its memory, then times `World.open` (the head checkpoint,
the manifest from the CAS; cells load lazily), a first cold read of one cell (index walk from
the root) and a first `send` (module instance, one step, one flush), with VmRSS, RssAnon and
RssFile (from bench/world_rss.py) after each. A fresh process per measurement keeps the
grower's memory out of the figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aos.kernel.hashing import Hash
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
# A send is 2 records (its input and its step): 999 sends leave 1,998 after the checkpoint.
CRASH_TAIL_RECORDS = 1_998


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
            crashed = _measure_median(_crashed_copy(world_dir, cells), copy_each=True)
            point["crash_open_s"] = crashed["open_s"]
            point["crash_open_s_samples"] = crashed["open_s_samples"]
            point["crash_tail_records"] = CRASH_TAIL_RECORDS
            points.append(point)
            print(json.dumps(point), flush=True)
            stamps = PinnedStampSource(seed=b"regrow", start_ns=10**15 + cells)
            world = World.open(world_dir, sync=False, stamps=stamps, limits=_limits())
    finally:
        world.close()
    return points


def _crashed_copy(world_dir: Path, cells: int) -> Path:
    """A copy of the closed world with `CRASH_TAIL_RECORDS` records after its head
    checkpoint, left as a kill leaves it."""
    crashed = world_dir.with_name(world_dir.name + "-crashed")
    shutil.rmtree(crashed, ignore_errors=True)
    shutil.copytree(world_dir, crashed)
    stamps = PinnedStampSource(seed=b"crash", start_ns=10**15 + cells)
    world = World.open(crashed, sync=False, stamps=stamps, limits=_limits())
    for number in range(CRASH_TAIL_RECORDS // 2):
        world.ingress(SCHEMA, {"$tag": "Increment", "$value": {"id": f"t-{number}", "by": 1}})
    world.run_to_idle()
    head: Any = world.store.cas.get_value(Hash(str(world.store.meta.get("world.head"))))
    assert world.height - head["height"] == CRASH_TAIL_RECORDS, (world.height, head["height"])
    world.store.close()  # no World.close: it would write the head checkpoint a kill skips
    return crashed


def _measure_median(world_dir: Path, *, copy_each: bool = False) -> dict[str, Any]:
    """Memory from the first fresh process, times as the median of all of them (each one
    sends one event, so the world grows by a record or three per measurement; with
    `copy_each` each one opens its own copy of `world_dir` instead)."""
    runs = [_measure_in_child(_probe(world_dir, copy_each)) for _ in range(MEASURE_REPEATS)]
    point = dict(runs[0])
    for name in ("open_s", "first_read_s", "first_send_s"):
        point[name] = statistics.median(run[name] for run in runs)
        point[name + "_samples"] = [run[name] for run in runs]
    point["height"] = runs[-1]["height"]
    return point


def _probe(world_dir: Path, copy_each: bool) -> Path:
    if not copy_each:
        return world_dir
    probe = world_dir.with_name(world_dir.name + "-probe")
    shutil.rmtree(probe, ignore_errors=True)
    shutil.copytree(world_dir, probe)
    return probe


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
        state = world.reader.state(WORKFLOW, "c-1")  # grown once, never probed: count 1
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
