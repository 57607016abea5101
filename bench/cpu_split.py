"""Where a counter event's process CPU goes, by the world's own functions: each named function
is wrapped to add up the CPU time spent inside it (inclusive; nested ones are counted in their
callers too), over the same batches as `bench.cpu_per_event`.

    python -m bench.cpu_split --manifest manifests/counter-c --events 3000

CPU time, not wall time, so the split holds on a loaded machine; each wrap adds ~1 µs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World, WorldLimits
from bench.cpu_per_event import KEYS, _batches

WRAPPED = (
    ("aos.kernel.world.world", "World", "ingress"),
    ("aos.kernel.world.ingress", "Ingress", "check_event"),
    ("aos.kernel.world.world", "World", "append"),
    ("aos.kernel.world.stepping", "Stepper", "step"),
    ("aos.kernel.wasm.runner", "StepRunner", "step"),
    ("aos.kernel.world.stepping", "Stepper", "check"),
    ("aos.kernel.world.stepping", "Stepper", "_apply"),
    ("aos.kernel.world.world", "World", "flush"),
    ("aos.kernel.world.world", "World", "checkpoint"),
    ("aos.kernel.world.world", "World", "_commit"),
    ("aos.kernel.world.tables", "CellTables", "store_states"),
)


def _wrap(module: str, owner: str, name: str, spent: dict[str, float]) -> None:
    cls = getattr(importlib.import_module(module), owner)
    inner: Callable[..., Any] = getattr(cls, name)
    label = f"{owner}.{name}"
    spent[label] = 0.0

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] += time.process_time() - start

    setattr(cls, name, timed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--manifest", type=Path, default=Path("manifests/counter-c"))
    parser.add_argument("--events", type=int, default=3000)
    args = parser.parse_args()
    spent: dict[str, float] = {}
    for module, owner, name in WRAPPED:
        _wrap(module, owner, name, spent)
    with tempfile.TemporaryDirectory(prefix="aos-bench-split-") as tmp:
        world = World.create(
            Path(tmp) / "w",
            args.manifest,
            sync=True,
            stamps=PinnedStampSource(),
            limits=WorldLimits(snapshot_every_records=None),
        )
        _batches(world, 0, KEYS)
        spent.update(dict.fromkeys(spent, 0.0))
        start = time.process_time()
        _batches(world, KEYS, args.events)
        total_s = time.process_time() - start
        world.close()
    print(f"{args.manifest.name}: {total_s / args.events * 1e6:.0f} µs CPU per event")
    for label, seconds in spent.items():
        print(f"  {label:26s} {seconds / args.events * 1e6:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
