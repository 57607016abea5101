"""Resident memory of a world as its cell count grows: the child process of bench_world.

    python -m bench.world_rss --cells 10000,100000,1000000 [--cache-cells-max 4096]

Creates a counter world in a temporary directory and admits one Increment per new key, in
batches of `--batch` events per `run_to_idle` (one flush each). At each checkpoint it prints
one JSON line: cells, seconds since the first event, and the process's memory from
/proc/self/status (VmRSS, split into RssAnon, the heap, and RssFile, which is mostly the LMDB
memory map of the store) plus the size of the store on disk (allocated blocks). It runs in its own process so
the benchmark runner's memory does not pollute the figures.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import os
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
MIB = 1024 * 1024
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


class MemoryCgroup:
    """A cgroup-v1 memory cgroup the bench runs in (`--memory-limit-mib`).

    The kernel then holds everything the process makes resident under one limit: its heap
    and the page cache it maps (the LMDB store). Clean file pages are reclaimed as the limit
    is reached; memory that cannot be reclaimed ends in the OOM killer. A run that finishes
    inside the limit shows what the world really needs resident, whatever VmRSS shows on a
    machine with memory to spare. Needs a writable `/sys/fs/cgroup/memory` (root in a VM or
    a privileged container).

    `enter` moves this process into a new cgroup and re-executes it, so that everything the
    run allocates (imports included) is charged there; the re-executed process finds the
    cgroup through `ENV` and moves back out when done."""

    ROOT = Path("/sys/fs/cgroup/memory")
    ENV = "AOS_BENCH_MEMORY_CGROUP"

    def __init__(self, path: Path, home: Path) -> None:
        self.path = path
        self._home = home

    @classmethod
    def enter(cls, limit_bytes: int) -> None:
        """Create the cgroup, move in, and exec this bench again inside it (never returns)."""
        if not os.access(cls.ROOT / "cgroup.procs", os.W_OK):
            raise SystemExit(f"--memory-limit-mib needs a writable cgroup-v1 {cls.ROOT}")
        home = cls.ROOT / _own_memory_cgroup().lstrip("/")
        path = cls.ROOT / f"aos-bench-rss-{os.getpid()}"
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
        (path / "cgroup.procs").write_text(str(os.getpid()))
        os.environ[cls.ENV] = f"{path}:{home}"
        os.execv(sys.executable, [sys.executable, "-m", "bench.world_rss", *sys.argv[1:]])

    @classmethod
    def inside(cls) -> MemoryCgroup | None:
        """The cgroup `enter` put this process in, if any."""
        found = os.environ.get(cls.ENV)
        if not found:
            return None
        path, home = found.split(":", 1)
        return cls(Path(path), Path(home))

    def reading(self) -> dict[str, int]:
        """Usage now and at peak (page cache included), and how often the limit was hit."""
        stat = dict(
            (name, int(value))
            for name, value in (
                line.split() for line in (self.path / "memory.stat").read_text().splitlines()
            )
        )
        return {
            "cgroup_limit_kib": int((self.path / "memory.limit_in_bytes").read_text()) // 1024,
            "cgroup_usage_kib": int((self.path / "memory.usage_in_bytes").read_text()) // 1024,
            "cgroup_peak_kib": int((self.path / "memory.max_usage_in_bytes").read_text()) // 1024,
            "cgroup_limit_hits": int((self.path / "memory.failcnt").read_text()),
            "cgroup_rss_kib": stat.get("rss", 0) // 1024,
            "cgroup_cache_kib": stat.get("cache", 0) // 1024,
        }

    def leave(self) -> None:
        (self._home / "cgroup.procs").write_text(str(os.getpid()))
        self.path.rmdir()


def _own_memory_cgroup() -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path
    return "/"


def _store_bytes(root: Path) -> int:
    """Bytes on disk (allocated blocks): the writer's data file is as large as its map, sparse
    past the blocks it allocated, so file sizes would show the map."""
    return sum(path.stat().st_blocks * 512 for path in root.rglob("*") if path.is_file())


def _increment(number: int) -> dict[str, Any]:
    return {"$tag": "Increment", "$value": {"id": f"c-{number}", "by": 1}}


def grow(
    manifest: Path,
    checkpoints: list[int],
    *,
    batch: int,
    cache_cells_max: int,
    snapshot_every_records: int | None = SNAPSHOT_EVERY_RECORDS_DEFAULT,
    cgroup: MemoryCgroup | None = None,
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
                if cgroup is not None:
                    point.update(cgroup.reading())
                points.append(point)
                print(json.dumps(point), flush=True)
            # The first and the last cell both hold one increment.
            assert world.reader.state(WORKFLOW, "c-0") == {"count": 1, "resets": 0}
            assert world.reader.state(WORKFLOW, f"c-{cells - 1}") == {"count": 1, "resets": 0}
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
    parser.add_argument(
        "--memory-limit-mib",
        type=int,
        default=None,
        help="run inside a memory cgroup of this size, page cache included (needs root)",
    )
    args = parser.parse_args()
    checkpoints = [int(c) for c in args.cells.split(",") if c]
    every = None if args.snapshot_every_records == "off" else int(args.snapshot_every_records)
    cgroup = MemoryCgroup.inside()
    if args.memory_limit_mib is not None and cgroup is None:
        MemoryCgroup.enter(args.memory_limit_mib * MIB)
    try:
        grow(
            args.manifest,
            checkpoints,
            batch=args.batch,
            cache_cells_max=args.cache_cells_max,
            snapshot_every_records=every,
            cgroup=cgroup,
        )
    finally:
        if cgroup is not None:
            cgroup.leave()
    return 0


if __name__ == "__main__":
    sys.exit(main())
