"""Before/after of `replay --verify` against live stepping on a noisy machine: run `measure`
in two checkouts, alternating, then `compare` the JSON lines. Each run steps the workload of
`bench_replay` live once and replays it from genesis `ROUNDS` times, all in one process, so
the ratio replay/live (the issue's target) is measured under one load. CPU seconds (the
process and its worker processes) are given beside wall seconds: they do not depend on the
load of other jobs as much.

    AB=$PWD/bench/replay_ab.py    # the base checkout need not have this file
    for i in 1 2 3 4 5; do
      (cd ../base && PYTHONPATH=. .venv/bin/python $AB measure >> /tmp/replay-ab-base.jsonl)
      PYTHONPATH=. .venv/bin/python $AB measure >> /tmp/replay-ab-new.jsonl
    done
    .venv/bin/python bench/replay_ab.py compare /tmp/replay-ab-base.jsonl /tmp/replay-ab-new.jsonl

`measure --workers N` passes `workers_max=N` where the checkout's `verify` takes it.
"""

from __future__ import annotations

import inspect
import json
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aos.kernel.audit.replay import verify_replay
from aos.kernel.wasm import WasmEngine
from bench.bench_replay import COUNTER_C, COUNTER_PY, REPLAY_KEYS, _feed, _world

ROUNDS = 2
# The quick bench's workloads, and a Python one past `parallel_records_min` (2 400 records).
WORKLOADS = {
    "C": (COUNTER_C, 4000),
    "Python": (COUNTER_PY, 400),
    "Python 1200": (COUNTER_PY, 1200),
}


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), _cpu_s()
    fn()
    return time.perf_counter() - wall, _cpu_s() - cpu


def measure(workers: int | None) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if workers is not None and "workers_max" in inspect.signature(verify_replay).parameters:
        options["workers_max"] = workers
    engine = WasmEngine()
    result: dict[str, Any] = {"workers": options.get("workers_max")}
    for name, (manifest, events) in WORKLOADS.items():
        with _world(manifest, sync=False) as (world, path):
            live = _timed(lambda world=world, events=events: _feed(world, 0, events, REPLAY_KEYS))
            world.close()
            verify_replay(path, engine=engine, **options)  # warms the module cache

            def replay(path: Path = path) -> None:
                assert verify_replay(path, engine=engine, **options).ok

            rounds = [_timed(replay) for _ in range(ROUNDS)]
        wall = statistics.median(r[0] for r in rounds)
        cpu = statistics.median(r[1] for r in rounds)
        result[name] = {
            "events": events,
            "live_s": live[0],
            "live_cpu_s": live[1],
            "replay_s": wall,
            "replay_cpu_s": cpu,
            "ratio": wall / live[0],
            "cpu_ratio": cpu / live[1],
        }
    with open("/proc/loadavg") as load:
        result["load"] = float(load.read().split()[0])
    return result


def compare(paths: list[str]) -> None:
    for path in paths:
        runs = [json.loads(line) for line in Path(path).read_text().splitlines() if line]
        loads = [run["load"] for run in runs]
        print(f"{path}: {len(runs)} runs, load {min(loads):.1f}..{max(loads):.1f}")
        for name in WORKLOADS:
            rows = [run[name] for run in runs]
            median = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
            print(
                f"  {name}: live {median['events'] / median['live_s']:,.0f} ev/s, replay "
                f"{median['events'] / median['replay_s']:,.0f} ev/s, replay/live "
                f"{median['ratio']:.2f} (cpu {median['cpu_ratio']:.2f})"
            )


def main() -> None:
    if sys.argv[1] == "measure":
        workers = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--workers" else None
        print(json.dumps(measure(workers)), flush=True)
    else:
        compare(sys.argv[2:])


if __name__ == "__main__":
    main()
