"""`make demo`, part 3: a declarative flow on the embedded default (LMDB, no node).

It creates a flow world (the interpreter module is built once and cached) with the adapters in
process, deploys `flows/examples/restock.flow.yaml` and runs it: the inventory call fails
twice (a local HTTP server answering 503) and is retried through timers, a manager approves
the purchase (the demo completes the human task), the supplier's confirmation arrives as a
signal, and two tool calls run in parallel before a join closes the execution. It prints the
execution's history and checks the world with `replay --verify`. Then, each on a world of its
own: a NoETL playbook (`playbook`), a `.flow` file (`flow_language`), and a new version of a
flow shadowed against the old one's executions, one migrated to it (`versions`).
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import click

from aos.flows.define.cfd import load_definition
from aos.flows.define.document import load_flow
from aos.flows.serve import flow_operations as ops
from aos.flows.serve import flow_shadow as shadow
from aos.flows.serve import migration
from aos.flows.serve.flow_world import create_flow_world
from aos.flows.serve.local import LocalAdapters
from aos.kernel.audit import replay
from aos.kernel.world.world import CLOCK_MANUAL, World

DEMO_DIR = Path(".aos-demo-flows")
DEFINITION = Path("flows/examples/restock.flow.yaml")
PLAYBOOK = Path("flows/examples/hello.yaml")
ARROW_FLOW = Path("flows/examples/merge.flow")
APPROVAL = Path("flows/examples/approval.yaml")
APPROVAL_V2 = Path("flows/examples/approval-v2.yaml")
FAILURES_BEFORE_SUCCESS = 2
ON_HAND = 3
TARGET = 20


class _Inventory(BaseHTTPRequestHandler):
    """A flaky inventory service: 503 to its first requests, then the stock level."""

    calls = 0

    def do_POST(self) -> None:
        type(self).calls += 1
        healthy = type(self).calls > FAILURES_BEFORE_SUCCESS
        body = json.dumps({"on_hand": ON_HAND} if healthy else {"error": "busy"}).encode()
        self.send_response(200 if healthy else 503)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return None


@contextmanager
def _inventory() -> Iterator[str]:
    _Inventory.calls = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Inventory)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/stock"
    finally:
        server.shutdown()


def main() -> None:
    if DEMO_DIR.exists():
        shutil.rmtree(DEMO_DIR)
    click.echo(f"creating a flow world in {DEMO_DIR}/ (builds the interpreter module once)")
    world, keys = create_flow_world(
        DEMO_DIR / "world", keys_dir=DEMO_DIR / "keys", clock=CLOCK_MANUAL
    )
    with world, _inventory() as url:
        adapters = LocalAdapters(world, keys)
        deployed = ops.deploy(world, load_definition(DEFINITION.read_bytes()))
        click.echo(f"deployed  {deployed.name} v{deployed.version}  {deployed.definition}")
        workload = {"sku": "SKU-1", "inventory_url": url, "target": TARGET}
        ops.start(world, deployed.name, workload=workload, exec_id="restock-1")
        _drain(adapters, "the inventory call is retried through timers")
        (task,) = [i for i in world.reader.open_intents() if i["effect"] == "aos/human.task@1"]
        params = world.reader.open_intent(str(task["intent"]))["params"]  # type: ignore[index]
        click.echo(f"human task: {params['title']!r} for roles {params['roles']}: approving")
        adapters.complete_task(str(task["intent"]), {"approved": True})
        _drain(adapters, "waiting for the supplier")
        click.echo("signal supplier.confirmed {'eta': '2026-12-01'}")
        ops.signal(world, "restock-1", "supplier.confirmed", {"eta": "2026-12-01"})
        _drain(adapters, "order and notify in parallel, then close")
        state = ops.status(world, "restock-1")
        click.echo("")
        for event in ops.history(world, "restock-1"):
            click.echo(f"{event.seq:>5}  {ops.describe_event(event.event)}")
        click.echo(f"\nstatus {state['status']}, result {state['business']['steps']['close']}")
        click.echo(f"inventory service called {_Inventory.calls} times (2 failures, 1 success)")
    report = replay.verify_replay(DEMO_DIR / "world")
    verdict = "ok: every record and the head match" if report.ok else f"{report.divergence}"
    click.echo(f"replay --verify: {report.records} records, {report.steps} steps; {verdict}")
    if not report.ok or state["status"] != "completed":
        raise SystemExit(1)


def playbook() -> None:
    """A NoETL v10 playbook (`flows/examples/hello.yaml`) on its own flow world: python tasks
    run by the reused worker, a parallel loop, arcs with args; its history, then replay."""
    world_dir = DEMO_DIR / "playbook-world"
    if world_dir.exists():
        shutil.rmtree(world_dir)
    world, keys = create_flow_world(world_dir, clock=CLOCK_MANUAL)
    with world:
        deployed = ops.deploy(world, load_flow(PLAYBOOK.read_bytes(), source=str(PLAYBOOK)))
        click.echo(f"deployed  {deployed.name} v{deployed.version}  {deployed.definition}")
        ops.start(world, deployed.name, workload={"who": "demo"}, exec_id="hello-1")
        _drain(LocalAdapters(world, keys), "python tasks in the reused worker")
        for event in ops.history(world, "hello-1"):
            click.echo(f"{event.seq:>5}  {ops.describe_event(event.event)}")
        state = ops.status(world, "hello-1")
        steps = state["business"]["steps"]
        click.echo(f"\nstatus {state['status']}: {steps['start']['greeting']}, {steps['done']}")
    report = replay.verify_replay(world_dir)
    click.echo(f"replay --verify: {report.records} records; {'ok' if report.ok else 'FAILED'}")
    if not report.ok or state["status"] != "completed":
        raise SystemExit(1)


def flow_language() -> None:
    """A `.flow` file of the arrow language (`flows/examples/merge.flow`): two literals meet, the
    merge operator joins them, a JSONPath guard lets the last task run; then replay."""
    world_dir = DEMO_DIR / "arrow-world"
    if world_dir.exists():
        shutil.rmtree(world_dir)
    world, keys = create_flow_world(world_dir, clock=CLOCK_MANUAL)
    with world:
        definition = load_flow(ARROW_FLOW.read_bytes(), source=str(ARROW_FLOW))
        deployed = ops.deploy(world, definition)
        click.echo(f"deployed  {deployed.name} v{deployed.version}  {deployed.definition}")
        ops.start(world, deployed.name, exec_id="merge-1")
        _drain(LocalAdapters(world, keys), "echo tasks")
        state = ops.status(world, "merge-1")
        click.echo(f"status {state['status']}: result {state['engine'].get('result')}")
    report = replay.verify_replay(world_dir)
    click.echo(f"replay --verify: {report.records} records; {'ok' if report.ok else 'FAILED'}")
    if not report.ok or state["status"] != "completed":
        raise SystemExit(1)


def versions() -> None:
    """A new version of a flow against the executions of the old one
    (`flows/examples/approval*.yaml`): the shadow says which it reproduces and where the
    others differ, and the one still waiting moves to the new version; then replay."""
    world_dir = DEMO_DIR / "versions-world"
    if world_dir.exists():
        shutil.rmtree(world_dir)
    world, _ = create_flow_world(world_dir, clock=CLOCK_MANUAL)
    with world:
        v1 = ops.deploy(world, load_flow(APPROVAL.read_bytes(), source=str(APPROVAL)))
        for exec_id in ("a-1", "a-2"):
            ops.start(world, v1.name, exec_id=exec_id)
        ops.signal(world, "a-2", "decided", "yes")
        v2 = ops.deploy(world, load_flow(APPROVAL_V2.read_bytes(), source=str(APPROVAL_V2)))
        click.echo(f"deployed  {v2.name} v1 and v2; a-1 waits on v1, a-2 completed on v1")
        target = shadow.deployed_target(world, v2.name, v2.version)
    report = shadow.shadow_flow(world_dir, target)
    for found in report.executions:
        where = "" if found.diverged_at is None else f" at seq {found.diverged_at}: "
        detail = f"{found.difference} ({found.recorded!r} -> {found.shadow!r})" if where else ""
        click.echo(f"shadow v2  {found.exec} ({found.status}): {found.outcome}{where}{detail}")
    planned = migration.plan(world_dir, "a-1", v2.version)
    with World.open(world_dir) as world:
        migration.apply(world, planned)
        ops.signal(world, "a-1", "decided", "yes")
        steps = ops.status(world, "a-1")["business"]["steps"]
    click.echo(f"migrated  a-1 v1 -> v2, then decided: {steps['record']}")
    report_ok = replay.verify_replay(world_dir)
    click.echo(
        f"replay --verify: {report_ok.records} records; {'ok' if report_ok.ok else 'FAILED'}"
    )
    if not report_ok.ok or steps["record"]["by"] != "v2":
        raise SystemExit(1)


def _drain(adapters: LocalAdapters, what: str) -> None:
    drained = adapters.drain()
    click.echo(
        f"ran: {drained.receipts} tool receipts, {drained.timers_skipped} timers skipped ({what})"
    )


if __name__ == "__main__":
    main()
