"""Where the time of one durable effect step goes, and the floor under it (issue 15).

    python -m bench.profile_effects                 # 400 effects, sync on and off interleaved
    python -m bench.profile_effects --effects 1000

Two effect-chain worlds (bench/bench_effects.py: one cell, one effect after another, one flush
per receipt), one durable and one not, step in alternation, so a slow patch of a shared
machine lands on both; a bare store beside them commits one journal record durably per round
(`bench_store`'s single commit). Each part is timed around the public call that does it
(wall; no profiler, so native code and Python are weighed alike):

* `effect step` all of it (what `bench_peers`' sequential row times per step);
* `adapter: sign` the in-process adapter signing its receipt (`signed_receipt`);
* `settle` parsing, authenticating (of which `verify`, the Ed25519 check) and journaling it;
* `guest step` the chain component's step (`StepRunner.step`: the WebAssembly call, and the
  fresh re-run `checked` makes of about one step in twenty);
* `flush` the world's flush (of which `commit`: the store batch, its transaction and syncs);
* `sync` the durable world's flush less the no-sync world's.

The floor line adds what no kernel change removes from a durable step of this workload: the
guest step, one signature check, and the store's own durable single commit.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from aos.kernel.store import open_lmdb_store
from aos.kernel.wasm.runner import StepRunner
from aos.kernel.world import receipts
from aos.kernel.world.staged import StagedWrites
from aos.kernel.world.world import World
from bench import bench_effects
from bench.bench_effects import START, chain_world, settle_all
from bench.bench_store import RECORD

EFFECTS_DEFAULT = 400
PARTS = {
    "adapter: sign": (bench_effects, "signed_receipt"),
    "settle": (World, "settle"),
    "  verify": (receipts, "verify_encoded"),
    "guest step": (StepRunner, "step"),
    "flush": (World, "flush"),
    "  commit": (StagedWrites, "write"),
}


@contextmanager
def timed_parts(spent: dict[str, float]) -> Iterator[None]:
    """Time every part of PARTS into `spent` (seconds) while the block runs."""
    originals = {label: getattr(owner, name) for label, (owner, name) in PARTS.items()}
    for label, (owner, name) in PARTS.items():
        setattr(owner, name, _timer(originals[label], label, spent))
    try:
        yield
    finally:
        for label, (owner, name) in PARTS.items():
            setattr(owner, name, originals[label])


def _timer(function: Callable[..., Any], label: str, spent: dict[str, float]) -> Any:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - started

    return timed


def profile(effects: int) -> dict[str, dict[str, float]]:
    """Seconds per effect of each part, by world ("sync on", "sync off"), and the bare
    store's durable single commit."""
    spent: dict[str, dict[str, float]] = {
        "sync on": defaultdict(float),
        "sync off": defaultdict(float),
    }
    commits: list[float] = []
    with ExitStack() as stack:
        worlds = {
            "sync on": stack.enter_context(chain_world(sync=True)),
            "sync off": stack.enter_context(chain_world(sync=False)),
        }
        store = stack.enter_context(open_lmdb_store(stack.enter_context(_tmp()), sync=True))
        for world in worlds.values():
            world.ingress(START, {"id": "profiled", "n": effects + 1})
            world.run_to_idle()
            settle_all(world, flush_each=True)  # warm: the component is loaded
        for _ in range(effects):
            for label, world in worlds.items():
                started = time.perf_counter()
                with timed_parts(spent[label]):
                    settle_all(world, flush_each=True)
                spent[label]["effect step"] += time.perf_counter() - started
            started = time.perf_counter()
            store.journal.append([RECORD])
            commits.append(time.perf_counter() - started)
    result = {label: {k: v / effects for k, v in parts.items()} for label, parts in spent.items()}
    result["store"] = {"durable single commit": statistics.median(commits)}
    return result


@contextmanager
def _tmp() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="aos-profile-effects-") as path:
        yield path


def report(result: dict[str, dict[str, float]]) -> str:
    on, off = result["sync on"], result["sync off"]
    lines = ["| part | sync on | sync off |", "|---|---|---|"]
    for label in ("effect step", *PARTS):
        lines.append(f"| {label} | {on[label] * 1e3:.3f} ms | {off[label] * 1e3:.3f} ms |")
    sync = on["flush"] - off["flush"]
    commit = result["store"]["durable single commit"]
    floor = off["guest step"] + off["  verify"] + commit
    lines += [
        f"| sync (flush on - off) | {sync * 1e3:.3f} ms | |",
        f"| store: durable single commit (median) | {commit * 1e3:.3f} ms | |",
        f"| floor: guest step + verify + store commit | {floor * 1e3:.3f} ms | |",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--effects", type=int, default=EFFECTS_DEFAULT)
    args = parser.parse_args()
    print(report(profile(args.effects)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
