"""The world: events/s of the counter world end to end (ingress, step, flush) on the C counter
(core module, `strict`: a fresh instance per step) and the Python counter (component,
`checked`: a warm instance), and resident memory as the number of cells grows.

* `send`: one event per `World.send` (ingress, `run_to_idle`, one flush: one commit each);
* batch of 100: ingress 100 events, then one `run_to_idle` (one flush for all: group commit).

Each world is warmed with `KEYS_SPREAD` cells and the events go round the keys in a shuffled
order, so every step reads and writes a different cell (all of them in the hot cache). With
sync on every flush is durable (fsync); sync off is the comparison. Rows are per event; the
baseline of a group is the durable one-event `send`.

The `world.rss` group runs `bench/world_rss.py` in a child process: it creates one cell per
event (C counter, batches of `RSS_BATCH_EVENTS`, sync off) and reads VmRSS at 10k, 100k and
(full mode) 1M cells. Its rows are the seconds per new cell since the previous checkpoint;
the memory figures are in the row names and `extra`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aos.kernel.world.cells import CACHE_CELLS_MAX_DEFAULT
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World
from bench.harness import Row, measure

REPO = Path(__file__).resolve().parent.parent
COUNTER_C = REPO / "manifests" / "counter-c"
COUNTER_PY = REPO / "manifests" / "counter"
SCHEMA = "demo/CounterEvent@1"
WORKFLOW = "demo/counter@1"
KEYS_SPREAD = 1000
KEY_STRIDE = 7919  # prime, so `i * KEY_STRIDE % KEYS_SPREAD` visits every key once per round
BATCH_EVENTS = 100
RSS_BATCH_EVENTS = 1000
RSS_CELLS_QUICK = [10_000, 100_000]
RSS_CELLS_FULL = [10_000, 100_000, 1_000_000]
RSS_TIMEOUT_S_QUICK = 900
RSS_TIMEOUT_S_FULL = 4 * 3600
_MIB_KIB = 1024


def counter_event(number: int) -> dict[str, Any]:
    key = number * KEY_STRIDE % KEYS_SPREAD
    return {"$tag": "Increment", "$value": {"id": f"c-{key}", "by": 1}}


@contextmanager
def counter_world(manifest: Path, *, sync: bool) -> Iterator[World]:
    with tempfile.TemporaryDirectory(prefix="aos-bench-world-") as tmp:
        world = World.create(Path(tmp) / "world", manifest, sync=sync, stamps=PinnedStampSource())
        with world:
            for first in range(0, KEYS_SPREAD, BATCH_EVENTS):
                ingress_batch(world, range(first, first + BATCH_EVENTS))
                world.run_to_idle()
            yield world


def ingress_batch(world: World, numbers: range) -> None:
    for number in numbers:
        world.ingress(SCHEMA, counter_event(number))


def _sender(world: World, counter: Iterator[int]) -> Callable[[], object]:
    def send_one() -> None:
        _, report = world.send(SCHEMA, counter_event(next(counter)))
        assert report.steps == 1 and report.faults == 0, report

    return send_one


def _batcher(world: World, counter: Iterator[int]) -> Callable[[], object]:
    def send_batch() -> None:
        first = next(counter)
        ingress_batch(world, range(first, first + BATCH_EVENTS))
        report = world.run_to_idle()
        assert report.steps == BATCH_EVENTS and report.faults == 0, report

    return send_batch


def _counter(start: int, step: int) -> Iterator[int]:
    number = start
    while True:
        yield number
        number += step


def _throughput_rows(label: str, manifest: Path, quick: bool) -> list[Row]:
    group = f"world.counter {label}"
    rounds = 7 if quick else 15
    rows: list[Row] = []
    for sync in (True, False):
        sync_label = "sync on" if sync else "sync off"
        with counter_world(manifest, sync=sync) as world:
            determinism = world.runtime.loaded.determinism(WORKFLOW)
            for batch in (1, BATCH_EVENTS):
                if batch == 1:
                    fn, number = _sender(world, _counter(KEYS_SPREAD, 1)), 30 if quick else 100
                else:
                    fn, number = _batcher(world, _counter(KEYS_SPREAD, batch)), 1 if quick else 3
                median_s, samples_s = measure(fn, number=number, rounds=rounds)
                per_event_s = median_s / batch
                how = "send (1 event, 1 flush)" if batch == 1 else f"batch of {batch}, 1 flush"
                rows.append(
                    Row(
                        group,
                        f"{how}, {sync_label}",
                        per_event_s,
                        per="event",
                        rounds=rounds,
                        baseline=sync and batch == 1,
                        samples_s=[s / batch for s in samples_s],
                        extra={
                            "events_per_s": round(1 / per_event_s),
                            "sync": sync,
                            "batch_events": batch,
                            "determinism": determinism,
                            "cells": KEYS_SPREAD,
                        },
                    )
                )
    return rows


def _grow(cells: list[int], timeout_s: int) -> list[dict[str, Any]]:
    """Run bench/world_rss.py in a child process; return its checkpoints."""
    command = [
        sys.executable,
        "-m",
        "bench.world_rss",
        "--cells",
        ",".join(str(c) for c in cells),
        "--batch",
        str(RSS_BATCH_EVENTS),
        "--cache-cells-max",
        str(CACHE_CELLS_MAX_DEFAULT),
    ]
    done = subprocess.run(
        command, cwd=REPO, check=True, capture_output=True, text=True, timeout=timeout_s
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _rss_rows(quick: bool) -> list[Row]:
    cells = RSS_CELLS_QUICK if quick else RSS_CELLS_FULL
    points = _grow(cells, RSS_TIMEOUT_S_QUICK if quick else RSS_TIMEOUT_S_FULL)
    first = points[0]
    rows: list[Row] = []
    previous_cells, previous_s = 0, 0.0
    for point in points:
        rss_ratio = point["vm_rss_kib"] / first["vm_rss_kib"]
        anon_ratio = point["rss_anon_kib"] / first["rss_anon_kib"]
        name = (
            f"{point['cells']:,} cells: RSS {point['vm_rss_kib'] / _MIB_KIB:.0f} MiB "
            f"({rss_ratio:.2f}x), anon {point['rss_anon_kib'] / _MIB_KIB:.0f} MiB "
            f"({anon_ratio:.2f}x), file {point['rss_file_kib'] / _MIB_KIB:.0f} MiB, "
            f"store {point['store_bytes'] / _MIB_KIB**2:.0f} MiB"
        )
        per_cell_s = (point["elapsed_s"] - previous_s) / (point["cells"] - previous_cells)
        extra = dict(point)
        extra.update(
            rss_ratio_to_first=round(rss_ratio, 3),
            anon_ratio_to_first=round(anon_ratio, 3),
            cache_cells_max=CACHE_CELLS_MAX_DEFAULT,
            batch_events=RSS_BATCH_EVENTS,
            manifest="counter-c",
        )
        rows.append(
            Row(
                "world.rss",
                name,
                per_cell_s,
                per="new cell",
                rounds=1,
                baseline=point is first,
                samples_s=[per_cell_s],
                extra=extra,
            )
        )
        previous_cells, previous_s = point["cells"], point["elapsed_s"]
    return rows


def run(quick: bool) -> list[Row]:
    rows = _throughput_rows("core (C)", COUNTER_C, quick)
    rows += _throughput_rows("component (Python)", COUNTER_PY, quick)
    rows += _rss_rows(quick)
    return rows
