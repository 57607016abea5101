"""Process CPU time per counter event, live in batches of 100 and under `replay --verify`: a
comparison that holds on a loaded machine, where wall-clock medians do not.

    python -m bench.cpu_per_event --manifest manifests/counter-c --sync on
    python -m bench.cpu_per_event --manifest manifests/counter --replay

Warms 1,000 cells, then times `--events` events (ingress 100, `run_to_idle`, repeat) with
`time.process_time()`; with `--replay` the world is then closed and `replay.verify_replay` from
genesis is timed the same way. Run it in two checkouts, alternating, to compare them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aos.kernel.audit.replay import verify_replay
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World, WorldLimits

SCHEMA = "demo/CounterEvent@1"
KEYS = 1000
KEY_STRIDE = 7919
BATCH_EVENTS = 100
EVENTS_DEFAULT = 3000


def _event(number: int) -> dict[str, Any]:
    return {"$tag": "Increment", "$value": {"id": f"c-{number * KEY_STRIDE % KEYS}", "by": 1}}


def _batches(world: World, first: int, events: int) -> None:
    for start in range(first, first + events, BATCH_EVENTS):
        for number in range(start, start + BATCH_EVENTS):
            world.ingress(SCHEMA, _event(number))
        world.run_to_idle()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--manifest", type=Path, default=Path("manifests/counter-c"))
    parser.add_argument("--sync", choices=("on", "off"), default="on")
    parser.add_argument("--events", type=int, default=EVENTS_DEFAULT)
    parser.add_argument("--replay", action="store_true", help="also time replay --verify")
    args = parser.parse_args()
    limits = WorldLimits(snapshot_every_records=None)
    with tempfile.TemporaryDirectory(prefix="aos-bench-cpu-") as tmp:
        path = Path(tmp) / "w"
        world = World.create(
            path, args.manifest, sync=args.sync == "on", stamps=PinnedStampSource(), limits=limits
        )
        _batches(world, 0, KEYS)
        start = time.process_time()
        _batches(world, KEYS, args.events)
        live_s = time.process_time() - start
        world.close()
        line = f"live {live_s / args.events * 1e6:.0f} µs CPU per event"
        line += f" ({args.events / live_s:.0f} events per CPU-s)"
        if args.replay:
            start = time.process_time()
            report = verify_replay(path)
            replay_s = time.process_time() - start
            assert report.ok, report
            per_event = replay_s / (args.events + KEYS) * 1e6
            line += f"; replay --verify {per_event:.0f} µs CPU per event"
    print(f"{args.manifest.name}, sync {args.sync}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
