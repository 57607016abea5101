"""Resident memory of a world as its cell count grows: the child process of bench_world.

    python -m bench.world_rss --cells 10000,100000,1000000 [--cache-cells-max 4096]

Creates a counter world in a temporary directory and admits one Increment per new key, in
batches of `--batch` events per `run_to_idle` (one flush each). At each checkpoint it prints
one JSON line: cells, seconds since the first event, and the process's memory from
/proc/self/status (VmRSS, split into RssAnon, the heap, and RssFile, which is mostly the LMDB
memory map of the store) plus the size of the store on disk. It runs in its own process so
the benchmark runner's memory does not pollute the figures.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aos.kernel.world.cells import CACHE_CELLS_MAX_DEFAULT
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import SNAPSHOT_EVERY_RECORDS_DEFAULT, World, WorldLimits

REPO = Path(__file__).resolve().parent.parent
MANIFEST_DEFAULT = REPO / "manifests" / "counter-c"
BATCH_EVENTS_DEFAULT = 1000
SCHEMA = "demo/CounterEvent@1"
WORKFLOW = "demo/counter@1"
_STATUS_FIELDS = {"VmRSS": "vm_rss_kib", "RssAnon": "rss_anon_kib", "RssFile": "rss_file_kib"}


def memory_kib() -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of this process, in KiB (Linux only)."""
    found: dict[str, int] = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in _STATUS_FIELDS:
                found[_STATUS_FIELDS[name]] = int(rest.split()[0])
    return found


def anon_after_trim_kib() -> int | None:
    """RssAnon after glibc's malloc_trim(0) returns free heap pages to the system: what the
    heap really holds, as opposed to what the allocator keeps (None without glibc)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        return None
    return memory_kib()["rss_anon_kib"]


def _store_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


def _increment(number: int) -> dict[str, Any]:
    return {"$tag": "Increment", "$value": {"id": f"c-{number}", "by": 1}}


def grow(
    manifest: Path,
    checkpoints: list[int],
    *,
    batch: int,
    cache_cells_max: int,
    snapshot_every_records: int | None = SNAPSHOT_EVERY_RECORDS_DEFAULT,
) -> list[dict[str, Any]]:
    """Create cells up to the largest checkpoint; return one measurement per checkpoint."""
    assert checkpoints == sorted(checkpoints) and all(c % batch == 0 for c in checkpoints)
    limits = WorldLimits(
        cache_cells_max=cache_cells_max, snapshot_every_records=snapshot_every_records
    )
    points: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="aos-bench-rss-") as tmp:
        root = Path(tmp) / "world"
        with World.create(
            root, manifest, sync=False, stamps=PinnedStampSource(), limits=limits
        ) as world:
            start = time.perf_counter()
            cells = 0
            for checkpoint in checkpoints:
                while cells < checkpoint:
                    for number in range(cells, cells + batch):
                        world.ingress(SCHEMA, _increment(number))
                    report = world.run_to_idle()
                    assert report.steps == batch and report.faults == 0, report
                    cells += batch
                elapsed_s = time.perf_counter() - start
                gc.collect()
                point: dict[str, Any] = {"cells": cells, "elapsed_s": elapsed_s}
                point.update(memory_kib())
                point["rss_anon_trimmed_kib"] = anon_after_trim_kib()
                point["store_bytes"] = _store_bytes(root)
                point["snapshots"] = len(world.snapshots)
                point["reclaimed_objects"] = world.reclaimed_objects
                points.append(point)
                print(json.dumps(point), flush=True)
            # The first and the last cell both hold one increment.
            assert world.state(WORKFLOW, "c-0") == {"count": 1, "resets": 0}
            assert world.state(WORKFLOW, f"c-{cells - 1}") == {"count": 1, "resets": 0}
    return points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cells", default="10000,100000", help="comma-separated checkpoints")
    parser.add_argument("--manifest", type=Path, default=MANIFEST_DEFAULT)
    parser.add_argument("--batch", type=int, default=BATCH_EVENTS_DEFAULT)
    parser.add_argument("--cache-cells-max", type=int, default=CACHE_CELLS_MAX_DEFAULT)
    parser.add_argument(
        "--snapshot-every-records",
        default=str(SNAPSHOT_EVERY_RECORDS_DEFAULT),
        help="automatic snapshots every N records, or 'off' (each one is kept)",
    )
    args = parser.parse_args()
    checkpoints = [int(c) for c in args.cells.split(",") if c]
    every = None if args.snapshot_every_records == "off" else int(args.snapshot_every_records)
    grow(
        args.manifest,
        checkpoints,
        batch=args.batch,
        cache_cells_max=args.cache_cells_max,
        snapshot_every_records=every,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
