"""The aos side of the recovery benchmark of `bench/bench_peers.py`, in the project's
virtualenv; each mode runs in its own process, as `bench/peers/dbos_workload.py` does.

    python -m bench.peers.aos_recovery start --world PATH --chains W --effects N [--store URL]
        Creates a durable effect-chain world (on the PostgreSQL world `URL` names, with
        `PATH` pointing at it, when given), starts W chains of N effects and settles the
        first N - 1 effects of each (the in-process noop adapter, one group commit per
        round), so that every chain has its last intent open; prints {"blocked": W}, then
        waits to be killed.
    python -m bench.peers.aos_recovery recover --world PATH --chains W --effects N
        Times `World.open` and then settling the W open intents until every chain is done,
        with one group commit, as the in-process adapter does after a restart.
"""

from __future__ import annotations

import argparse
import importlib
import json
import threading
import time
from pathlib import Path

from aos.kernel.store.url import store_url_path
from aos.kernel.world.world import World
from aos.kernel.world_store import create_world
from bench.bench_effects import CHAIN, START, WORKFLOW, settle_all

RECOVER_PREFIX = "recover-"


def _keys(chains: int) -> list[str]:
    return [f"{RECOVER_PREFIX}{c}" for c in range(chains)]


def _start(path: Path, chains: int, effects: int, store_url: str | None) -> None:
    world = create_world(path, CHAIN, store_url=store_url, sync=True)
    for key in _keys(chains):
        world.ingress(START, {"id": key, "n": effects})
    world.run_to_idle()
    for _ in range(effects - 1):
        assert settle_all(world, flush_each=False) == chains
    assert len(world.reader.open_intents()) == chains
    print(json.dumps({"blocked": chains}), flush=True)
    threading.Event().wait()  # until the bench kills this process, world open


def _recover(path: Path, chains: int, effects: int) -> None:
    if store_url_path(path).exists():
        # Loaded before the clock starts, as DBOS's driver is before its `open_s`.
        importlib.import_module("aos.kernel.store.pg_store")
    started = time.perf_counter()
    world = World.open(path, sync=True)
    opened = time.perf_counter()
    height = world.height
    settled = 0
    while settled < chains:
        count = settle_all(world, flush_each=False)
        assert count, "a chain stopped before its end"
        settled += count
    done = time.perf_counter()
    assert all(world.reader.state(WORKFLOW, key)["done"] == effects for key in _keys(chains))
    answer = {
        "open_s": opened - started,
        "done_s": done - started,
        "records": world.height - height,
    }
    world.close()
    print(json.dumps(answer), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["start", "recover"])
    parser.add_argument("--world", required=True, type=Path)
    parser.add_argument("--chains", type=int, required=True)
    parser.add_argument("--effects", type=int, required=True)
    parser.add_argument("--store", help="start: a postgresql:// store URL (LMDB without it)")
    options = parser.parse_args()
    if options.mode == "start":
        _start(options.world, options.chains, options.effects, options.store)
    else:
        _recover(options.world, options.chains, options.effects)


if __name__ == "__main__":
    main()
