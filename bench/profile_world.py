"""Where the time of one counter event goes: cProfile over the world's hot path.

    python -m bench.profile_world                         # C counter, send, sync on
    python -m bench.profile_world --batch 100 --sync off  # group commit, CPU only
    python -m bench.profile_world --manifest manifests/counter --top 20

Warms a world with the benchmark's cells (bench_world.KEYS_SPREAD), then profiles `--events`
events sent one per `send` (`--batch 1`) or in batches per `run_to_idle`, and prints the top
functions by cumulative and by own time. Profiling slows Python code more than native code
(fsync, wasmtime), so read the shares, not the absolute figures.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

from bench.bench_world import (
    COUNTER_C,
    KEYS_SPREAD,
    SCHEMA,
    counter_event,
    counter_world,
    ingress_batch,
)

EVENTS_DEFAULT = 2000
TOP_DEFAULT = 15


def profile(manifest: Path, *, sync: bool, batch: int, events: int) -> cProfile.Profile:
    profiler = cProfile.Profile()
    with counter_world(manifest, sync=sync) as world:
        start = time.perf_counter()
        profiler.enable()
        for first in range(KEYS_SPREAD, KEYS_SPREAD + events, batch):
            if batch == 1:
                world.send(SCHEMA, counter_event(first))
            else:
                ingress_batch(world, range(first, first + batch))
                world.run_to_idle()
        profiler.disable()
        elapsed_s = time.perf_counter() - start
    print(f"{events} events in {elapsed_s:.2f} s under the profiler: ", end="")
    print(f"{elapsed_s / events * 1e6:.0f} µs per event\n")
    return profiler


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--manifest", type=Path, default=COUNTER_C)
    parser.add_argument("--sync", choices=("on", "off"), default="on")
    parser.add_argument("--batch", type=int, default=1, help="events per run_to_idle")
    parser.add_argument("--events", type=int, default=EVENTS_DEFAULT)
    parser.add_argument("--top", type=int, default=TOP_DEFAULT)
    parser.add_argument("--callers", action="store_true", help="who calls encode/decode")
    args = parser.parse_args()
    if args.events % args.batch:
        parser.error("--events must be a multiple of --batch")
    profiler = profile(args.manifest, sync=args.sync == "on", batch=args.batch, events=args.events)
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)
    print_cbor_counts(stats, args.events)
    if args.callers:
        stats.print_callers(r"cbor.py.*\((encode|encode_built|decode)\)")
    return 0


CBOR_COUNTED = ("encode", "encode_built", "decode")


def print_cbor_counts(stats: pstats.Stats, events: int) -> None:
    """Canonical CBOR work per event: validated encodes, kernel-built encodes (no validation
    walk), strict decodes, and cbor2's own dumps/loads calls under all of them."""
    counts = dict.fromkeys(CBOR_COUNTED, 0)
    raw = {"dumps": 0, "loads": 0}
    table: Any = stats.stats  # type: ignore[attr-defined]
    for (filename, _, name), (_, calls, *_) in table.items():
        if filename.endswith("kernel/cbor.py") and name in counts:
            counts[name] += calls
        elif "cbor2" in name and name.split(".")[-1].rstrip(">") in raw:
            raw[name.split(".")[-1].rstrip(">")] += calls
    shown = ", ".join(f"{name} {count / events:.1f}" for name, count in counts.items())
    print(f"CBOR per event: {shown}; cbor2 dumps {raw['dumps'] / events:.1f}")


if __name__ == "__main__":
    sys.exit(main())
