"""Governance: the cost of a shadow run per 10k cells of history.

A counter-c world with N cells, one increment each (events ingressed in batches of 1000, one
`run_to_idle` per batch, sync off, no automatic snapshots). Two proposals change the C counter
by text replacement in a copy of its source: a behaviour-preserving refactor (every cell
reproduces) and, in full mode, a variant that doubles every increment (every cell diverges at
its first step). Rows are seconds per 10k cells of history; the baseline is a plain `replay.verify_replay` of
the same world from genesis, so the ratio column is what running the proposed module beside
every recorded step adds to a replay audit. All runs share one engine (each module compiles
once, a negligible part of a run).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aos.kernel.air.loader import load_manifest_dir
from aos.kernel.audit import replay
from aos.kernel.governance import proposals, shadow
from aos.kernel.hashing import Hash
from aos.kernel.wasm import WasmEngine
from aos.kernel.world.modules import building_resolver
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World, WorldLimits
from bench.harness import Row

REPO = Path(__file__).resolve().parent.parent
COUNTER_C = REPO / "manifests" / "counter-c"
COUNTER_SOURCE = REPO / "modules" / "examples" / "counter_c" / "counter.c"
ARTIFACT = "../../../modules/examples/counter_c/counter.c"
SCHEMA = "demo/CounterEvent@1"
CELLS_QUICK = [10_000]
CELLS_FULL = [10_000, 50_000]
BATCH_EVENTS = 1000
PER_CELLS = 10_000
VARIANTS = {
    "refactor (every cell reproduces)": {"arena_take(48);": "arena_take(64);"},
    "doubling (every cell diverges)": {
        "u64 count = s.count + e.by;": "u64 count = s.count + 2 * e.by;"
    },
}


def _variant(root: Path, name: str, changes: dict[str, str]) -> Path:
    folder = root / name
    shutil.copytree(COUNTER_C, folder)
    text = COUNTER_SOURCE.read_text()
    for old, new in changes.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (folder / "counter.c").write_text(text)
    defs = folder / "defs" / "counter.yaml"
    defs.write_text(defs.read_text().replace(ARTIFACT, "../counter.c"))
    return folder


def _grow(path: Path, cells: int) -> None:
    limits = WorldLimits(snapshot_every_records=None)
    with World.create(
        path, COUNTER_C, sync=False, stamps=PinnedStampSource(), limits=limits
    ) as world:
        for start in range(0, cells, BATCH_EVENTS):
            for number in range(start, min(start + BATCH_EVENTS, cells)):
                world.ingress(
                    SCHEMA, {"$tag": "Increment", "$value": {"id": f"c-{number}", "by": 1}}
                )
            assert world.run_to_idle().faults == 0


def _propose(path: Path, folder: Path) -> str:
    built: dict[Hash, Path] = {}
    loaded = load_manifest_dir(folder, artifact_resolver=building_resolver(built))
    with World.open(path, sync=False) as world:
        patch, _ = proposals.diff(world.runtime.loaded, loaded)
        blobs = {h: file.read_bytes() for h, file in built.items()}
        return proposals.propose(world, patch, blobs=blobs)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def _rows(cells: int, variants: dict[str, dict[str, str]]) -> list[Row]:
    group = f"governance.shadow {cells:,} cells"
    engine = WasmEngine()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="aos-bench-gov-") as tmp:
        root = Path(tmp)
        path = root / "world"
        _, grow_s = _timed(lambda: _grow(path, cells))
        proposals = {
            label: _propose(path, _variant(root, f"v{n}", changes))
            for n, (label, changes) in enumerate(variants.items())
        }
        verified, verify_s = _timed(lambda: replay.verify_replay(path, engine=engine))
        assert verified.ok, verified.divergence
        runs = [("replay --verify from genesis (no shadow)", verify_s, True, {})]
        for label, proposal in proposals.items():
            report, shadow_s = _timed(lambda p=proposal: shadow.shadow(path, p, engine=engine))
            summary = report.summary()
            assert summary["cells"] == cells, summary
            runs.append((f"shadow, {label}", shadow_s, False, summary))
        for name, seconds, baseline, extra in runs:
            per_s = seconds * PER_CELLS / cells
            rows.append(
                Row(
                    group,
                    f"{name}: {cells / seconds:,.0f} cells/s",
                    per_s,
                    per=f"{PER_CELLS // 1000}k cells",
                    rounds=1,
                    baseline=baseline,
                    samples_s=[per_s],
                    extra={"cells": cells, "seconds": round(seconds, 3), **extra},
                )
            )
        print(
            f"# {group}: world grown in {grow_s:.1f} s; shadow/verify "
            + ", ".join(f"{r.samples_s[0] / rows[0].samples_s[0]:.2f}" for r in rows[1:]),
            file=sys.stderr,
            flush=True,
        )
    return rows


def run(quick: bool) -> list[Row]:
    rows: list[Row] = []
    variants = dict(list(VARIANTS.items())[:1]) if quick else VARIANTS
    for cells in CELLS_QUICK if quick else CELLS_FULL:
        rows.extend(_rows(cells, variants))
    return rows
