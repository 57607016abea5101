"""A world for the inspector's tests with everything the inspector shows: keyed counter cells
(the C counter), flow executions waiting for a person and for a signal (so open intents, a
kernel timer among them), one whose python task failed, one waiting to retry its task, one with
a long history, a few kept for the actions to act on, and a governance proposal that doubles
every increment, shadowed, so every counter cell diverges and the report holds the live and
the proposed state.

One manifest holds both: the flow world's (with fresh adapter keys) plus the counter."""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from aos.flows.define.cfd import load_definition
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import FlowKeys, load_or_make_keys, write_manifest
from aos.flows.serve.local import LocalAdapters
from aos.kernel.governance import proposals, shadow
from aos.kernel.world.router import RouteError
from aos.kernel.world.world import World
from tests.test_governance import COUNTER_SOURCE, DOUBLE, folder_patch
from tests.test_world import COUNTER_C, engine, inc

REPO = Path(__file__).resolve().parents[2]
ORDER_FLOW = REPO / "flows" / "examples" / "order.flow.yaml"
HELLO_FLOW = REPO / "flows" / "examples" / "hello.flow.yaml"
COUNTER = "demo/counter@1"
COUNTER_EVENT = "demo/CounterEvent@1"
EXEC = "aos/FlowExec@1"
COUNTS = {"alpha": [1, 2], "bravo": [5], "charlie": [3, 3, 3], "delta": [7], "echo": [2]}
APPROVAL_EXEC = "order-approval"  # waits for a person (a human task) and its timeout timer
SIGNAL_EXEC = "order-signal"  # waits for the warehouse's signal
DONE_EXEC = "hello-done"  # runs to its end
FAILED_EXEC = "parse-failed"  # its python task raised: failed, with the error
RETRYING_EXEC = "parse-retrying"  # the same task under a retry rule: waits for its next attempt
LONG_EXEC = "hello-long"  # greets LONG_NAMES names, a receipt each: a long history
LONG_NAMES = 80
# Kept for the actions: each is acted on by one test only.
TO_CANCEL_EXEC = "order-to-cancel"  # waits for a signal; cancelled
TO_SIGNAL_EXEC = "order-to-signal"  # waits for the warehouse's signal; signalled
TO_COMPLETE_EXEC = "order-to-complete"  # waits for a person in `finance`; the task completed
TO_RETRY_EXEC = "parse-to-retry"  # failed; retried as a new execution
ALL_EXECS = 10
FINANCE = "finance"  # the role the order flow's approval asks for
PARSE_BUSINESS_REF = "invoice-17"
PARSE_FLOW = """
name: t/parse
steps:
  - name: fetch
    tasks:
      - name: parse
        do: call
        tool: {kind: python, code: "result = int(text)"}
        args: {text: "{{ workload.text }}"}
"""
PARSE_RETRY_FLOW = (
    PARSE_FLOW.replace("name: t/parse", "name: t/parse-retry")
    + """\
        policy:
          rules:
            - when: "outcome.status == 'error'"
              then: {do: retry, attempts: 3, backoff: linear, delay_s: 30}
"""
)
MARKUP_KEY = '<img src=x onerror="document.title=1">'  # a key the pages must show as text
UNROUTED_EVENT = "demo/CounterThreshold@1"  # declared, routed nowhere: journaled as rejected


@dataclass(frozen=True)
class InspectorWorld:
    path: Path
    keys: FlowKeys
    proposal: str
    counts: dict[str, int]  # each counter's count


def manifest_folder(out: Path, keys: FlowKeys, changes: dict[str, str] | None = None) -> Path:
    """The flow manifest with the C counter added (its source changed by `changes`)."""
    write_manifest(out, keys)
    source = COUNTER_SOURCE.read_text()
    for old, new in (changes or {}).items():
        source = source.replace(old, new)
    (out / "counter.c").write_text(source)
    for name in ("counter.yaml", "schemas.yaml"):
        text = (COUNTER_C / "defs" / name).read_text()
        artifact = os.path.relpath(out / "counter.c", out / "defs")
        text = text.replace("../../../modules/examples/counter_c/counter.c", artifact)
        (out / "defs" / f"counter-{name}").write_text(text)
    manifest_path = out / "manifest.yaml"
    manifest: Any = yaml.safe_load(manifest_path.read_text())
    counter: Any = yaml.safe_load((COUNTER_C / "manifest.yaml").read_text())
    for section in ("schemas", "modules", "workflows"):
        manifest[section] += counter[section]
    manifest["routing"]["subscriptions"] += counter["routing"]["subscriptions"]
    manifest_path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return out


def build(root: Path) -> InspectorWorld:
    """Create the world at root/world (closed when this returns)."""
    keys = load_or_make_keys(root / "keys")
    path = root / "world"
    world = World.create(
        path, manifest_folder(root / "manifest", keys), clock="manual", sync=False, engine=engine()
    )
    try:
        counts = _count(world)
        _run_flows(world, keys)
        world.send(COUNTER_EVENT, inc(MARKUP_KEY, 1))
        with contextlib.suppress(RouteError):
            world.send(UNROUTED_EVENT, {"id": "alpha", "count": 3, "threshold": 2})
        patch, blobs = folder_patch(world, manifest_folder(root / "double", keys, DOUBLE))
        proposal = proposals.propose(world, patch, blobs=blobs)
    finally:
        world.close()
    report = shadow.shadow(path, proposal, engine=engine())
    world = World.open(path, sync=False, engine=engine())
    try:
        proposals.record_shadow(world, proposal, report)
    finally:
        world.close()
    shutil.rmtree(root / "double")
    return InspectorWorld(path, keys, proposal, counts)


def _count(world: World) -> dict[str, int]:
    for index in range(max(len(v) for v in COUNTS.values())):
        for key, amounts in COUNTS.items():
            if index < len(amounts):
                world.send(COUNTER_EVENT, inc(key, amounts[index]))
    return {key: sum(amounts) for key, amounts in COUNTS.items()}


def _run_flows(world: World, keys: FlowKeys) -> None:
    name = ops.deploy(world, load_definition(ORDER_FLOW.read_text())).name
    workloads = {
        APPROVAL_EXEC: {"order_id": "A-7", "amount": 250, "currency": "EUR"},
        SIGNAL_EXEC: {"order_id": "B-2", "amount": 40, "currency": "EUR"},
        TO_CANCEL_EXEC: {"order_id": "C-3", "amount": 30, "currency": "EUR"},
        TO_SIGNAL_EXEC: {"order_id": "D-4", "amount": 20, "currency": "EUR"},
        TO_COMPLETE_EXEC: {"order_id": "E-5", "amount": 900, "currency": "EUR"},
    }
    for exec_id, workload in workloads.items():
        ops.start(world, name, workload=workload, exec_id=exec_id)
    hello = ops.deploy(world, load_definition(HELLO_FLOW.read_text())).name
    ops.start(world, hello, workload={"names": ["ann", "bo"]}, exec_id=DONE_EXEC)
    names = [f"guest-{index:02d}" for index in range(LONG_NAMES)]
    ops.start(world, hello, workload={"names": names}, exec_id=LONG_EXEC)
    parse = ops.deploy(world, load_definition(PARSE_FLOW)).name
    retried = ops.deploy(world, load_definition(PARSE_RETRY_FLOW)).name
    for exec_id, flow in ((FAILED_EXEC, parse), (TO_RETRY_EXEC, parse), (RETRYING_EXEC, retried)):
        workload = {"text": "12 apples"}
        ops.start(world, flow, workload=workload, exec_id=exec_id, business_ref=PARSE_BUSINESS_REF)
    LocalAdapters(world, keys).drain()
