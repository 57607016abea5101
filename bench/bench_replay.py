"""Snapshots and replay: opening large worlds, replay speed against live stepping, snapshot cost.

* `replay.open`: a counter world grown to 10k / 100k (and, in full mode, 1M) cells by
  `bench/world_open.py`; at each size a fresh process times `World.open`, a first cold cell
  read and a first send, and reads its memory. Rows are the open time; the read, the send and
  the memory are in the names and `extra`. Opening should stay nearly flat as the world grows:
  it reads the head checkpoint, and cells load lazily. `replay.open after a kill` opens a copy
  left with the longest tail the default cadence allows (1,998 records after the head
  checkpoint, no close): the chain check and the fold of that tail on top of the open.
* `replay.speed <module>`: the same workload stepped live (ingress in batches of 100, one
  `run_to_idle` each, sync off) and then audited by `replay.verify_replay` from genesis, and from the
  latest snapshot (the last tenth of the journal). Rows are per input event; the live run is
  the baseline, so the ratio column is the replay's cost relative to live stepping. The C
  counter is `strict` (a fresh instance per step, live and in replay alike); the Python
  counter is `checked` (a warm instance live, a fresh one per step in replay). The replay
  from genesis runs twice: with the default workers (spec/05 §2.1: fresh runs in worker
  processes once the journal has 2 000 records) and with `--workers 1` (all in one process).
* `replay.snapshot`: a 10k-cell world (sync on, as a snapshot is meant to be durable) with
  `d` cells changed since the last flush (100 / 1k / 4k: see `SNAPSHOT_DIRTY`). `d dirty:
  snapshot` steps `d` events without flushing and times `snapshot()`, which materializes the
  dirty cells and writes them, their records and the snapshot in one flush. `d dirty: flush` is the same work ended by
  a plain `run_to_idle` flush, and `clean snapshot` the snapshot right after it: the snapshot's
  own cost on top of a flush.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aos.kernel.audit.replay import ReplayReport, verify_replay
from aos.kernel.wasm import WasmEngine
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World, WorldLimits
from bench.harness import Row

REPO = Path(__file__).resolve().parent.parent
COUNTER_C = REPO / "manifests" / "counter-c"
COUNTER_PY = REPO / "manifests" / "counter"
SCHEMA = "demo/CounterEvent@1"
WORKFLOW = "demo/counter@1"
OPEN_CELLS_QUICK = [10_000, 100_000]
OPEN_CELLS_FULL = [10_000, 100_000, 1_000_000]
OPEN_TIMEOUT_S_QUICK = 600
OPEN_TIMEOUT_S_FULL = 4 * 3600
REPLAY_KEYS = 1000
REPLAY_BATCH_EVENTS = 100
REPLAY_EVENTS_QUICK = {"core (C)": 4000, "component (Python)": 400}
REPLAY_EVENTS_FULL = {"core (C)": 20_000, "component (Python)": 2000}
SNAPSHOT_CELLS = 10_000
# Dirty cells exist only between flushes, and a world flushes at the next safe point once
# `flush_records_max` (4,096) records are pending, so about 4,000 is the most one snapshot
# materializes; `step_next` by hand can go further, but only up to the store's batch limit.
SNAPSHOT_DIRTY = [100, 1000, 4000]
SNAPSHOT_ROUNDS_QUICK = 1
SNAPSHOT_ROUNDS_FULL = 3
_MIB_KIB = 1024


def _increment(number: int, keys: int) -> dict[str, Any]:
    return {"$tag": "Increment", "$value": {"id": f"c-{number % keys}", "by": 1}}


def _limits() -> WorldLimits:
    return WorldLimits(snapshot_every_records=None)


@contextmanager
def _world(manifest: Path, *, sync: bool) -> Iterator[tuple[World, Path]]:
    with tempfile.TemporaryDirectory(prefix="aos-bench-replay-") as tmp:
        path = Path(tmp) / "world"
        world = World.create(
            path, manifest, sync=sync, stamps=PinnedStampSource(), limits=_limits()
        )
        with world:
            yield world, path


def _feed(world: World, first: int, count: int, keys: int) -> None:
    """`count` events in batches, one `run_to_idle` per batch."""
    for start in range(first, first + count, REPLAY_BATCH_EVENTS):
        for number in range(start, min(start + REPLAY_BATCH_EVENTS, first + count)):
            world.ingress(SCHEMA, _increment(number, keys))
        report = world.run_to_idle()
        assert report.faults == 0, report


# --------------------------------------------------------------------------------------------
# replay.open


def _grow(cells: list[int], timeout_s: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="aos-bench-open-") as tmp:
        command = [sys.executable, "-m", "bench.world_open", "grow"]
        command += ["--world", str(Path(tmp) / "world"), "--cells", ",".join(map(str, cells))]
        done = subprocess.run(
            command, cwd=REPO, check=True, capture_output=True, text=True, timeout=timeout_s
        )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _open_rows(quick: bool) -> list[Row]:
    cells = OPEN_CELLS_QUICK if quick else OPEN_CELLS_FULL
    points = _grow(cells, OPEN_TIMEOUT_S_QUICK if quick else OPEN_TIMEOUT_S_FULL)
    rows = []
    for point in points:
        name = (
            f"{point['cells']:,} cells ({point['height']:,} records, store "
            f"{point['store_bytes'] / _MIB_KIB**2:.0f} MiB): open; first read "
            f"{point['first_read_s'] * 1e3:.2f} ms, first send {point['first_send_s'] * 1e3:.1f} ms; "
            f"RSS open {point['rss_open_kib'] / _MIB_KIB:.0f} MiB "
            f"(+{(point['rss_open_kib'] - point['rss_before_kib']) / _MIB_KIB:.1f} over imports), "
            f"after send {point['rss_sent_kib'] / _MIB_KIB:.0f} MiB"
        )
        rows.append(
            Row(
                "replay.open",
                name,
                point["open_s"],
                per="open",
                rounds=1,
                baseline=point is points[0],
                samples_s=[point["open_s"]],
                extra=dict(point),
            )
        )
        rows.append(
            Row(
                "replay.open after a kill",
                f"{point['cells']:,} cells, {point['crash_tail_records']:,} records after the "
                "head checkpoint: open (chain check and fold of the tail)",
                point["crash_open_s"],
                per="open",
                rounds=1,
                baseline=point is points[0],
                samples_s=point["crash_open_s_samples"],
            )
        )
    return rows


# --------------------------------------------------------------------------------------------
# replay.speed


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _timed_verify(
    path: Path, engine: WasmEngine, from_snapshot: str | None, workers_max: int | None = None
) -> tuple[ReplayReport, float]:
    workers = {} if workers_max is None else {"workers_max": workers_max}
    start = time.perf_counter()
    report = verify_replay(path, engine=engine, from_snapshot=from_snapshot, **workers)
    return report, time.perf_counter() - start


def _speed_rows(label: str, manifest: Path, events: int) -> list[Row]:
    group = f"replay.speed {label}"
    engine = WasmEngine()
    with _world(manifest, sync=False) as (world, path):
        tail_events = events // 10
        live_s = _timed(lambda: _feed(world, 0, events - tail_events, REPLAY_KEYS))
        snapshot_seq, _ = world.snapshot()
        live_s += _timed(lambda: _feed(world, events - tail_events, tail_events, REPLAY_KEYS))
        determinism = world.runtime.loaded.determinism(WORKFLOW)
        world.close()
        verify_replay(
            path, engine=engine, from_snapshot=str(snapshot_seq)
        )  # warms the module cache
        tail, tail_s = _timed_verify(path, engine, str(snapshot_seq))
        full, full_s = _timed_verify(path, engine, None)
        alone, alone_s = _timed_verify(path, engine, None, workers_max=1)
    assert full.ok and tail.ok and alone.ok, (full.divergence, tail.divergence, alone.divergence)
    common = {"events": events, "records": full.records, "determinism": determinism}
    specs = [
        ("live: ingress + step + flush, batches of 100", live_s, events, True, {}),
        ("replay --verify from genesis", full_s, events, False, {"steps": full.steps}),
        ("replay --verify from genesis, --workers 1", alone_s, events, False, {"workers": 1}),
        (
            f"replay --verify from the latest snapshot ({tail.records:,} records)",
            tail_s,
            tail_events,
            False,
            {"steps": tail.steps, "tail_records": tail.records},
        ),
    ]
    rows = []
    for name, seconds, count, baseline, extra in specs:
        per_event_s = seconds / count
        rows.append(
            Row(
                group,
                f"{name}: {count / seconds:,.0f} events/s",
                per_event_s,
                per="event",
                rounds=1,
                baseline=baseline,
                samples_s=[per_event_s],
                extra={**common, **extra, "events_per_s": round(count / seconds)},
            )
        )
    print(
        f"# {group}: replay/live time ratio {full_s / live_s:.2f} "
        f"(--workers 1: {alone_s / live_s:.2f})",
        file=sys.stderr,
        flush=True,
    )
    return rows


# --------------------------------------------------------------------------------------------
# replay.snapshot


def _step_all(world: World) -> None:
    while world.step_next():
        pass


def _snapshot_rows(quick: bool) -> list[Row]:
    group = "replay.snapshot"
    rounds = SNAPSHOT_ROUNDS_QUICK if quick else SNAPSHOT_ROUNDS_FULL
    samples: dict[str, list[float]] = {}
    with _world(COUNTER_C, sync=True) as (world, _):
        for start in range(0, SNAPSHOT_CELLS, 1000):
            for number in range(start, start + 1000):
                world.ingress(SCHEMA, _increment(number, SNAPSHOT_CELLS))
            world.run_to_idle()
        offset = SNAPSHOT_CELLS
        for _ in range(rounds):
            for dirty in SNAPSHOT_DIRTY:
                for how in ("snapshot", "flush"):
                    for number in range(offset, offset + dirty):
                        world.ingress(SCHEMA, _increment(number, SNAPSHOT_CELLS))
                    offset += dirty
                    _step_all(world)
                    if how == "snapshot":
                        seconds = _timed(world.snapshot)
                    else:
                        seconds = _timed(world.run_to_idle)
                        clean = _timed(world.snapshot)
                        samples.setdefault(f"{dirty:,} dirty: clean snapshot after", []).append(
                            clean
                        )
                    samples.setdefault(f"{dirty:,} dirty: {how}", []).append(seconds)
    rows = []
    for dirty in SNAPSHOT_DIRTY:
        for how in ("snapshot", "flush", "clean snapshot after"):
            name = f"{dirty:,} dirty: {how}"
            values = samples[name]
            rows.append(
                Row(
                    group,
                    f"{name} ({SNAPSHOT_CELLS:,} cells, sync on)",
                    statistics.median(values),
                    per="snapshot" if "snapshot" in how else "flush",
                    rounds=len(values),
                    baseline=dirty == SNAPSHOT_DIRTY[0] and how == "snapshot",
                    samples_s=values,
                    extra={"dirty_cells": dirty, "cells": SNAPSHOT_CELLS, "what": how},
                )
            )
    return rows


def run(quick: bool) -> list[Row]:
    events = REPLAY_EVENTS_QUICK if quick else REPLAY_EVENTS_FULL
    rows = _speed_rows("core (C)", COUNTER_C, events["core (C)"])
    rows += _speed_rows("component (Python)", COUNTER_PY, events["component (Python)"])
    rows += _snapshot_rows(quick)
    rows += _open_rows(quick)
    return rows
