"""A real full file system under the LMDB writer's writable map (needs root: mounts tmpfs).

    python -m bench.full_disk [--size-mib 48]

The store maps `data.mdb` with MDB_WRITEMAP, so LMDB writes pages by storing into the map; on
a full file system a store into a page without a block is a SIGBUS. The store allocates the
blocks a transaction may touch before it begins (kernel/store/lmdb_reserve.py). This checks
both halves on a tmpfs mounted with `size=`:

1. `raw`: py-lmdb with `writemap=True` and no reservation, in a child that writes until the
   file system is full: the child is expected to die of SIGBUS (what the store avoids).
2. `store`: a counter world on the same kind of file system, in a child that admits events in
   flushes of `--batch` until a flush fails: it must fail with `store.full` (typed, the child
   lives), after acknowledging some flushes.
3. `reopen`: the file system is grown (`mount -o remount,size=`), the world reopens, holds
   every acknowledged event, takes one more, and `replay.verify_replay` passes.

One JSON line per step; the exit status is non-zero if any expectation fails. tmpfs is used
rather than a loop-mounted image because it needs no block device; its fallocate and its
SIGBUS on a full mapping behave as on a disk file system.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
CHILD_TIMEOUT_S = 600

_RAW = """
import os, sys, lmdb
env = lmdb.open(sys.argv[1], map_size=256 * 1024 * 1024, writemap=True)
n = 0
while True:
    with env.begin(write=True) as txn:
        for _ in range(64):
            txn.put(n.to_bytes(8, "big"), os.urandom(3000))
            n += 1
    print(n, flush=True)
"""

_STORE = """
import json, sys
from pathlib import Path
from aos.kernel.errors import AosError
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World
root, manifest, batch = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
def say(value):
    print(json.dumps(value), flush=True)
world = World.create(root, manifest, sync=True, stamps=PinnedStampSource())
cells = 0
try:
    while True:
        for number in range(cells, cells + batch):
            world.ingress("demo/CounterEvent@1", {"$tag": "Increment", "$value": {"id": f"c-{number}", "by": 1}})
        world.run_to_idle()
        cells += batch
        say({"acknowledged_cells": cells, "height": world.height})
except AosError as exc:
    say({"code": exc.code, "message": str(exc)})
"""


def _mount(point: Path, size_mib: int, *, remount: bool = False) -> None:
    options = f"{'remount,' if remount else ''}size={size_mib}m"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], check=True)


def _child(code: str, *args: str) -> tuple[int, list[str]]:
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        cwd=REPO,
    )
    return run.returncode, run.stdout.splitlines()


def raw_writemap(point: Path) -> dict[str, Any]:
    """Step 1: no reservation; the child should die of SIGBUS."""
    store = point / "raw"
    store.mkdir()
    status, lines = _child(_RAW, str(store))
    return {
        "step": "raw",
        "returncode": status,
        "sigbus": status == -signal.SIGBUS,
        "records_written": int(lines[-1]) if lines else 0,
        "ok": status == -signal.SIGBUS,
    }


def store_until_full(point: Path, manifest: Path, batch: int) -> dict[str, Any]:
    """Step 2: the store on a full file system; the child must end with `store.full`."""
    status, lines = _child(_STORE, str(point / "world"), str(manifest), str(batch))
    answers = [json.loads(line) for line in lines]
    acked = [answer for answer in answers if "acknowledged_cells" in answer]
    last = answers[-1] if answers else {}
    return {
        "step": "store",
        "returncode": status,
        "flushes_acknowledged": len(acked),
        "acknowledged_cells": acked[-1]["acknowledged_cells"] if acked else 0,
        "height": acked[-1]["height"] if acked else 0,
        "code": last.get("code"),
        "message": last.get("message"),
        "ok": status == 0 and last.get("code") == "store.full" and bool(acked),
    }


def reopen_and_verify(point: Path, acknowledged_cells: int, height: int) -> dict[str, Any]:
    """Step 3: after the file system grew, the world reopens whole and verifies."""
    from aos.kernel.audit import replay
    from aos.kernel.world.stamps import PinnedStampSource
    from aos.kernel.world.world import World

    root = point / "world"
    with World.open(root, sync=True, stamps=PinnedStampSource(seed=b"reopened")) as world:
        reopened_height = world.height
        last = world.reader.state("demo/counter@1", f"c-{acknowledged_cells - 1}")
        world.ingress(
            "demo/CounterEvent@1", {"$tag": "Increment", "$value": {"id": "after", "by": 1}}
        )
        world.run_to_idle()
        after = world.reader.state("demo/counter@1", "after")
    report = replay.verify_replay(root)
    ok = reopened_height >= height and last is not None and after is not None and report.ok
    return {
        "step": "reopen",
        "height_acknowledged": height,
        "height_reopened": reopened_height,
        "last_acknowledged_cell": last,
        "verify_ok": report.ok,
        "ok": ok,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mib", type=int, default=48, help="the small file system")
    parser.add_argument("--grown-mib", type=int, default=512, help="after it is grown")
    parser.add_argument("--batch", type=int, default=500, help="events per flush")
    parser.add_argument("--manifest", type=Path, default=REPO / "manifests" / "counter-c")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="aos-full-disk-") as tmp:
        for name in ("raw", "store"):
            point = Path(tmp) / name
            point.mkdir()
            _mount(point, args.size_mib)
            try:
                if name == "raw":
                    results.append(raw_writemap(point))
                else:
                    stored = store_until_full(point, args.manifest, args.batch)
                    results.append(stored)
                    _mount(point, args.grown_mib, remount=True)
                    if stored["acknowledged_cells"]:
                        results.append(
                            reopen_and_verify(point, stored["acknowledged_cells"], stored["height"])
                        )
            finally:
                subprocess.run(["umount", str(point)], check=True)
    for result in results:
        print(json.dumps(result), flush=True)
    return 0 if results and all(result["ok"] for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
