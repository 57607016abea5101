"""`make demo`: the main job in three parts.

1. The counter world, in process on the embedded default (LMDB, no servers): creates a world
   from `manifests/counter` (the Python counter, built into a WASM component on first use
   and cached after), sends a few hundred events over many keys, each durable before the
   next, reopens the world, and prints its cells, a few states and the journal tail.
2. The orders world, every part its own process (`aos.cli.demo_orders`): a world host, an
   HTTP adapter with its own Ed25519 key, a local payment server; orders charge over HTTP
   and arm timers, signed receipts resume them. It starts and stops everything it uses.
3. A declarative flow (`aos.cli.demo_flows`), in process on the embedded default: a tool call
   retried through timers, a human task the demo completes, a signal, a fork and a join; then
   a NoETL v10 playbook (`flows/examples/hello.yaml`) with python tasks and a parallel loop,
   a `.flow` file of the arrow language (`flows/examples/merge.flow`), and a new version of a
   flow shadowed against the old one's executions, one of them migrated to it.
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

import click

from aos.cli import demo_flows, demo_orders
from aos.cli.common import table
from aos.kernel import cbor
from aos.kernel.world.world import World

DEMO_DIR = Path(".aos-demo")
MANIFEST = Path("manifests/counter")
COUNTER = "demo/counter@1"
EVENT = "demo/CounterEvent@1"
EVENTS = 300
KEYS = 40


def main() -> None:
    _heading("1/3  the counter world: in process, embedded store, no servers")
    counter()
    _heading("2/3  the orders world: a node, an HTTP adapter and a payment server, as processes")
    demo_orders.main()
    _heading("3/3  a declarative flow: retries, a human task, a signal, a fork and a join")
    demo_flows.main()
    _heading("and a NoETL v10 playbook: python tasks in a reused worker, a parallel loop")
    demo_flows.playbook()
    _heading("and a .flow file of the arrow language: a meet, the merge operator, a guard")
    demo_flows.flow_language()
    _heading("and a new version: shadowed against the old one's executions, one migrated")
    demo_flows.versions()


def _heading(text: str) -> None:
    click.echo(f"\n{click.style('== ' + text, bold=True)}\n")


def counter() -> None:
    if DEMO_DIR.exists():
        shutil.rmtree(DEMO_DIR)
    click.echo(f"creating a world in {DEMO_DIR}/ from {MANIFEST}/ (builds the module once)")
    started = time.perf_counter()
    with World.create(DEMO_DIR, MANIFEST) as world:
        click.echo(
            f"  manifest {world.manifest_hash.short()}  module "
            f"{world.runtime.module_hash(COUNTER).short()}  "
            f"({time.perf_counter() - started:.1f} s)"
        )
        rng = random.Random(7)  # the demo's own input; the kernel never reads randomness
        started = time.perf_counter()
        faults = thresholds = 0
        for n in range(EVENTS):
            key = f"counter-{rng.randrange(KEYS):02d}"
            value = (
                {"$tag": "Reset", "$value": {"id": key}}
                if n % 50 == 49
                else {"$tag": "Increment", "$value": {"id": key, "by": rng.randrange(1, 6)}}
            )
            _, report = world.send(EVENT, value)
            faults += report.faults
            thresholds += report.events
        elapsed = time.perf_counter() - started
        click.echo(
            f"sent {EVENTS} events over {KEYS} keys, each durable before the next "
            f"({EVENTS / elapsed:.0f} events/s): {thresholds} threshold events, {faults} faults"
        )
    with World.open(DEMO_DIR) as world:
        status = world.reader.status()
        click.echo(f"reopened at height {status['height']}: {status['workflows']}")
        cells = sorted(world.reader.cells(COUNTER), key=lambda c: str(c.key))
        rows = []
        for cell in cells[:8]:
            state = world.reader.state(COUNTER, cell.key)
            rows.append(
                [cell.key, state["count"], state["resets"], cell.status, cell.state_hash.short()]
            )
        click.echo(table(["key", "count", "resets", "status", "state"], rows))
        click.echo(f"... {len(cells)} cells in all\n\njournal tail:")
        for seq, record in world.store.journal.read(max(1, world.height - 5)):
            assert isinstance(record, dict)
            shown = {k: v for k, v in sorted(record.items()) if k not in ("stamp", "kind")}
            click.echo(f"  #{seq} {record['kind']!s:<13} {_short(shown)}")


def _short(value: object) -> str:
    text = str(cbor.to_json(value))
    return text if len(text) < 110 else text[:107] + "..."


if __name__ == "__main__":
    main()
