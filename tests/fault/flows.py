"""The flow slice of the fault-injection harness: a child workload on a flow world, the
driver that performs its tool calls, and the checks the harness adds for flows.

    python -m tests.fault.flows --world DIR --keys DIR --ack FILE --seed N [--ops-max M]
    AOS_FAULT_POINT=receipt.after AOS_FAULT_AT=3 python -m tests.fault.flows ...
    python -m tests.fault.harness --workload flows --kills 60 --jobs 2

The child creates a flow world (`manual` clock, `sync=True`, the adapter keys kept in the
lane's key folder, so a reopened world and its keys match) or opens it, runs to idle what the
last checkpoint left queued, deploys `FLOW` (idempotent: unchanged after the first time), then
runs operations chosen by `random.Random(seed)`, acknowledging each once it returned (see
`workload.Workload.ack`: the records it appended, with their hashes):

* start an execution with a fresh id (acked after `ops.start` returned: then it is durable);
* settle a small batch (1-3) of open tool intents with signed receipts, one `run_to_idle`
  (group commit), so kills land between receipts and between steps; the first attempt of a
  call whose args say `flaky` fails (a retry on a timer follows);
* skip time to the next timer (retry backoffs, call timeouts racing their call: a timeout
  that wins cancels the call's intent);
* signal `go` to an execution waiting at its gate (or, sent around the host's check as a raw
  `aos world send` would, a signal no step waits for, which the interpreter drops);
* cancel a running execution;
* snapshots, duplicate receipts (nothing written) and refused receipts (a late receipt for a
  cancelled intent, for now only one cancelled since the newest snapshot: see
  `LATE_ACROSS_SNAPSHOTS`; an unknown intent; a receipt signed by the wrong adapter).

The flow forks (inclusive) into `charge` (a call with a retry policy and a timeout, then a
second call) and `fanout` (a parallel loop of echo calls, `max_in_flight: 3`), joins them
(`join: all`), may wait for the signal `go`, and ends with a second parallel loop
(`max_in_flight: 2`). Every call's args name its decision (execution, what, item), so a call
issued twice for one decision is visible in the journal.

`check` is what the harness adds after each kill (beside its own checks, which also hold for
the flow world); `drain` and `check_final` run in the harness when a lane retires its world:
every execution is driven to its end and each must have ended exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aos.flows.define.cfd import FlowDefinition, load_definition
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import (
    CANCEL_EVENT,
    EXEC_WORKFLOW,
    SIGNAL_EVENT,
    START_EVENT,
    FlowKeys,
    create_flow_world,
    load_or_make_keys,
)
from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import TOOL_EFFECTS, run_tool
from aos.kernel import cbor
from aos.kernel.signing.signatures import signed_receipt
from aos.kernel.wasm import WasmEngine
from aos.kernel.world import records
from aos.kernel.world.receipts import ReceiptError
from aos.kernel.world.world import World, WorldLimits
from tests.fault.workload import KillContext, Killer, Workload, install_hooks, open_or_create

OPS_MAX_DEFAULT = 600  # a bound; a child normally dies long before
SNAPSHOT_EVERY_RECORDS = 120  # automatic snapshots inside run_to_idle (and short replay tails)
RUNNING_MAX = 6  # executions running at once before the child stops starting new ones
SETTLE_BATCH_MAX = 3
# Late receipts go to intents cancelled before and after the newest snapshot: a replay from
# the snapshot must refuse them as the journal did (this slice found that it did not, when the
# replay lacked the `cancelled/` markers from before its snapshot).
# AOS_FAULT_FLOW_LATE_ACROSS_SNAPSHOTS=0 keeps them after the newest snapshot only.
LATE_ACROSS_SNAPSHOTS = os.environ.get("AOS_FAULT_FLOW_LATE_ACROSS_SNAPSHOTS", "1") == "1"
ITEMS_MIN, ITEMS_MAX = 2, 4
FLOW_NAME = "fault/fanout"
GATE_SIGNAL = "go"
DRAIN_ROUNDS_MAX = 2_000
TOOL_EFFECT_PREFIX = "aos/tool."
FLAKY_CODE = "tool.flaky"

FLOW = """
format: aos.flow/1
name: fault/fanout
description: An inclusive fork into a retried call and a parallel loop, a join, a gate, a loop.
workload: {items: [1, 2], flaky: false, gate: false}
steps:
  - name: fork
    tasks:
      - {name: note, do: assign, set: {forked: true}}
    next:
      mode: inclusive
      arcs:
        - {to: charge, args: {side: charge}}
        - {to: fanout, args: {side: fanout}}

  - name: charge
    tasks:
      - name: pay
        do: call
        tool: {kind: echo}
        args: {exec: "{{ execution.id }}", what: pay, flaky: "{{ workload.flaky }}"}
        timeout_s: 30
        policy:
          rules:
            - when: "outcome.status != 'ok'"
              then: {do: retry, attempts: 4, backoff: linear, delay_s: 1}
      - name: confirm
        do: call
        tool: {kind: echo}
        args: {exec: "{{ execution.id }}", what: confirm, paid: "{{ _prev }}"}
    next: join

  - name: fanout
    loop: {in: "{{ workload.items }}", iterator: item, mode: parallel, max_in_flight: 3}
    tasks:
      - name: ping
        do: call
        tool: {kind: echo}
        args: {exec: "{{ execution.id }}", what: ping, item: "{{ iter.item }}"}
    next: join

  - name: join
    join: all
    tasks:
      - name: gate
        do: wait_signal
        signal: go
        when: "workload.gate"
    next: tail

  - name: tail
    loop: {in: "{{ workload.items }}", iterator: item, mode: parallel, max_in_flight: 2}
    tasks:
      - name: ship
        do: call
        tool: {kind: echo}
        args: {exec: "{{ execution.id }}", what: ship, item: "{{ iter.item }}"}
"""


def definition() -> FlowDefinition:
    return load_definition(FLOW)


def limits() -> WorldLimits:
    return WorldLimits(snapshot_every_records=SNAPSHOT_EVERY_RECORDS)


# --------------------------------------------------------------------------------------------
# The driver: performs tool intents the way the adapters would (signed receipts), with one
# deterministic failure (the first attempt of a `flaky` call), and drives a world to its end.


def tool_intents(world: World) -> list[dict[str, Any]]:
    return [i for i in world.reader.open_intents() if i["effect"] in TOOL_EFFECTS]


def tool_receipt(world: World, keys: FlowKeys, intent: str) -> Any:
    """The signed receipt the tool's adapter would send for an open intent (None if it is not
    open)."""
    record = world.reader.open_intent(intent)
    if record is None:
        return None
    effect, params = str(record["effect"]), record["params"]
    args = params.get("args") if isinstance(params, dict) else None
    if isinstance(args, dict) and args.get("flaky") is True and params.get("attempt") == 1:
        status = "error"
        payload: Any = {
            "kind": "transport",
            "code": FLAKY_CODE,
            "message": "the first attempt of a flaky call fails",
            "retryable": True,
        }
    else:
        outcome = run_tool(effect, params, context=ToolContext(intent=intent))
        status, payload = outcome.status, outcome.payload
    return receipt(world, keys, intent, TOOL_EFFECTS[effect], status, payload)


def receipt(
    world: World, keys: FlowKeys, intent: str, adapter: str, status: str, payload: Any
) -> Any:
    now = time.time_ns()
    body = {
        "world": world.world_id,
        "intent": intent,
        "status": status,
        "payload": payload,
        "adapter": adapter,
        "started_ns": now,
        "finished_ns": now,
    }
    return signed_receipt(keys.seed(adapter), body)


def exec_states(world: World) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for cell in world.reader.cells(EXEC_WORKFLOW):
        state = world.reader.state(EXEC_WORKFLOW, cell.key)
        if isinstance(state, dict):
            found[str(cell.key)] = state
    return found


def running(states: dict[str, dict[str, Any]]) -> list[str]:
    return sorted(e for e, s in states.items() if s.get("status") not in ops.TERMINAL_STATUSES)


def waiting_for_signal(state: dict[str, Any]) -> bool:
    waits = (state.get("engine") or {}).get("waits") or {}
    return any(
        isinstance(w, dict) and w.get("kind") == "signal" and w.get("signal") == GATE_SIGNAL
        for w in waits.values()
    )


def drain(world: World, keys: FlowKeys, *, rounds_max: int = DRAIN_ROUNDS_MAX) -> int:
    """Drive every execution to its end: perform open tool calls, open every gate, skip to the
    next timer; until nothing is left. Returns the rounds it took."""
    for rounds in range(1, rounds_max + 1):
        intents = tool_intents(world)
        if intents:
            for intent in intents:
                found = tool_receipt(world, keys, str(intent["intent"]))
                if found is not None:
                    world.settle(found)
            world.run_to_idle()
            continue
        gated = [e for e, s in exec_states(world).items() if waiting_for_signal(s)]
        for exec_id in sorted(gated):
            ops.signal(world, exec_id, GATE_SIGNAL, {"by": "drain"})
        if gated:
            continue
        if world.reader.next_timer_ns() is None:
            return rounds
        world.jump_next_timer()
    raise AssertionError(f"the world did not drain in {rounds_max} rounds")


# --------------------------------------------------------------------------------------------
# The child


class FlowWorkload(Workload):
    def __init__(
        self,
        world: World,
        keys: FlowKeys,
        rng: random.Random,
        killer: Killer,
        context: KillContext,
        ack_fd: int,
        seed: int,
    ) -> None:
        super().__init__(world, rng, killer, context, ack_fd)
        self.keys = keys
        self.prefix = f"x{seed:08x}"
        self.started = 0
        self.cancelled_intents: list[str] = []

    def run(self, ops_max: int) -> None:
        self.begin("recover")
        self.world.run_to_idle()  # whatever the last checkpoint left queued
        self.ack("recover")
        self.begin("deploy")
        deployed = ops.deploy(self.world, definition())
        self.ack("deploy", version=deployed.version, definition=deployed.definition)
        choices = [
            (self.start, 14),
            (self.settle, 50),
            (self.tick, 10),
            (self.signal, 8),
            (self.cancel, 3),
            (self.snapshot, 3),
            (self.duplicate, 3),
            (self.reject, 4),
        ]
        operations = [operation for operation, _ in choices]
        weights = [weight for _, weight in choices]
        for _ in range(ops_max):
            self.rng.choices(operations, weights)[0]()

    def start(self) -> None:
        if len(running(exec_states(self.world))) >= RUNNING_MAX:
            self.settle()
            return
        rng = self.rng
        self.started += 1
        exec_id = f"{self.prefix}.{self.started}"
        count = rng.randint(ITEMS_MIN, ITEMS_MAX)
        workload = {
            "items": [f"i{n}" for n in range(count)],
            "flaky": rng.random() < 0.5,
            "gate": rng.random() < 0.3,
        }
        self.begin("start")
        ops.start(self.world, FLOW_NAME, workload=workload, exec_id=exec_id)
        self.ack("start", exec=exec_id)

    def settle(self) -> None:
        intents = [str(i["intent"]) for i in tool_intents(self.world)]
        if not intents:
            self.tick() if self.world.reader.next_timer_ns() is not None else self.start()
            return
        self.begin("settle")
        chosen = self.rng.sample(intents, min(len(intents), self.rng.randint(1, SETTLE_BATCH_MAX)))
        for intent in chosen:
            settlement = self.world.settle(tool_receipt(self.world, self.keys, intent))
            if settlement.duplicate or settlement.seq is None:
                raise AssertionError(f"an open intent settled as a duplicate: {intent}")
            self.killer.hit("receipt.after")
        self.world.run_to_idle()
        self.settled.extend(chosen)
        self.ack("settle", intents=chosen)

    def tick(self) -> None:
        if self.world.reader.next_timer_ns() is None:
            self.snapshot()
            return
        open_before = {str(i["intent"]) for i in tool_intents(self.world)}
        self.begin("tick")
        self.world.jump_next_timer()
        open_after = {str(i["intent"]) for i in tool_intents(self.world)}
        self.cancelled_intents += sorted(
            i for i in open_before - open_after if self.world.reader.cancelled_seq(i) is not None
        )
        self.ack("tick")

    def signal(self) -> None:
        states = exec_states(self.world)
        live = running(states)
        if not live:
            self.start()
            return
        gated = [e for e in live if waiting_for_signal(states[e])]
        stale = not gated or self.rng.random() < 0.2
        exec_id = self.rng.choice(live if stale else gated)
        name = "poke" if stale else GATE_SIGNAL
        payload = {"n": self.rng.randrange(1000)}
        self.begin("signal")
        if stale:  # `ops.signal` would refuse it (flow.signal_unknown) and journal nothing
            value = {"exec": exec_id, "name": name, "payload": payload, "expect_version": None}
            self.world.send(SIGNAL_EVENT, value)
        else:
            ops.signal(self.world, exec_id, name, payload)
        self.ack("signal", exec=exec_id, name=name)

    def cancel(self) -> None:
        live = running(exec_states(self.world))
        if not live:
            self.start()
            return
        exec_id = self.rng.choice(live)
        open_before = {str(i["intent"]) for i in tool_intents(self.world)}
        self.begin("cancel")
        ops.cancel(self.world, exec_id, "the fault harness")
        open_after = {str(i["intent"]) for i in tool_intents(self.world)}
        self.cancelled_intents += sorted(open_before - open_after)
        self.ack("cancel", exec=exec_id)

    def duplicate(self) -> None:
        """A second receipt for an intent this child settled: nothing is written."""
        if not self.settled:
            self.settle()
            return
        self.begin("duplicate")
        intent = self.rng.choice(self.settled)
        height = self.world.height
        again = receipt(self.world, self.keys, intent, "aos/echo@1", "ok", {"again": True})
        settlement = self.world.settle(again)
        if not settlement.duplicate or self.world.height != height:
            raise AssertionError(f"a settled intent was settled again: {intent}")
        self.ack("duplicate", intent=intent)

    def reject(self) -> None:
        """A refused receipt: journaled as `receipt_rejected` and flushed at once."""
        world, keys = self.world, self.keys
        intents = [str(i["intent"]) for i in tool_intents(world)]
        newest = world.snapshots[-1][0] if world.snapshots else 0
        late = [
            intent
            for intent in self.cancelled_intents
            if (world.reader.cancelled_seq(intent) or 0) > (0 if LATE_ACROSS_SNAPSHOTS else newest)
        ]
        roll = self.rng.random()
        if late and roll < 0.5:
            bad = receipt(world, keys, self.rng.choice(late), "aos/echo@1", "ok", {"late": True})
        elif intents and roll < 0.8:  # signed by the wrong adapter
            bad = receipt(world, keys, self.rng.choice(intents), "aos/http@1", "ok", {})
        else:
            bad = receipt(world, keys, "blake3:" + "0" * 64, "aos/echo@1", "ok", {})
        self.begin("reject")
        try:
            world.settle(bad)
        except ReceiptError as error:
            self.ack("reject", code=error.code)
        else:
            raise AssertionError("a bad receipt was accepted")


def open_world(world_dir: Path, keys_dir: Path, engine: WasmEngine, ack_fd: int) -> World:
    def create() -> World:
        world, _ = create_flow_world(
            world_dir, keys_dir=keys_dir, clock="manual", sync=True, engine=engine, limits=limits()
        )
        return world

    return open_or_create(world_dir, engine, ack_fd, limits(), create)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--world", type=Path, required=True)
    parser.add_argument("--keys", type=Path, required=True)
    parser.add_argument("--ack", type=Path, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--ops-max", type=int, default=OPS_MAX_DEFAULT)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    killer = Killer.from_env(random.Random(args.seed ^ 0x5EED))
    ack_fd = os.open(args.ack, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    keys = load_or_make_keys(args.keys)
    world = open_world(args.world, args.keys, WasmEngine(), ack_fd)
    context = KillContext()
    install_hooks(world, killer, context)
    print("ready", flush=True)
    with world:
        FlowWorkload(world, keys, rng, killer, context, ack_fd, args.seed).run(args.ops_max)
    os.close(ack_fd)
    return 0


# --------------------------------------------------------------------------------------------
# Checks


def check(
    problems: list[str],
    journal: dict[int, dict[str, Any]],
    world: World,
    acks: list[dict[str, Any]],
) -> None:
    """What the flow world must satisfy after any kill, beside the harness's own checks:

    1. every execution ends at most once, and is terminal iff it has ended: its history holds
       at most one `playbook.finished`, and one iff its status is terminal; an ended execution
       holds no open intent; an acknowledged cancel left its execution `cancelled`;
    2. no tool call is issued twice for one decision: every `aos/tool.*@1` intent has a
       distinct (exec, step, task, attempt, issuer_ref) and distinct (exec, step, task,
       attempt, args) (the args name the decision: the execution, the call, the loop item),
       its params name the cell that issued it, and issuer_refs are unique per execution;
    3. no acknowledged input is lost: every acked start has its execution, every acked signal
       and cancel is journaled as an ingress event for that execution.
    No interpreter step faults (spec/11 §8: an error is an outcome, never a trap)."""
    finished: Counter[bytes | None] = Counter()
    refs: dict[bytes, Counter[str]] = {}
    decisions: Counter[tuple[Any, ...]] = Counter()
    by_args: Counter[tuple[Any, ...]] = Counter()
    inputs: Counter[tuple[str, str, str | None]] = Counter()
    for seq, record in sorted(journal.items()):
        kind = record["kind"]
        if kind == records.STEP and record["workflow"] == EXEC_WORKFLOW:
            ann = record.get("ann")
            events = ann.get("events") if isinstance(ann, dict) else None
            for event in events if isinstance(events, list) else []:
                if isinstance(event, dict) and event.get("event") == "playbook.finished":
                    finished[record["key"]] += 1
        elif kind == records.STEP_FAULT and record["workflow"] == EXEC_WORKFLOW:
            problems.append(
                f"the interpreter faulted at {seq} on {_key_text(record['key'])}: "
                f"{record['code']} {record['message']}"
            )
        elif kind == records.EFFECT_INTENT and record["origin"]["workflow"] == EXEC_WORKFLOW:
            _intent(problems, seq, record, refs, decisions, by_args)
        elif kind == records.DOMAIN_EVENT and "stamp" in record:  # an ingress event
            schema, value = record["schema"], record["value"]
            if schema in (START_EVENT, SIGNAL_EVENT, CANCEL_EVENT) and isinstance(value, dict):
                inputs[(schema, str(value.get("exec")), value.get("name"))] += 1
    for where, count in decisions.items():
        if count > 1:
            problems.append(f"tool call {where} issued {count} times")
    for where, count in by_args.items():
        if count > 1:
            problems.append(f"tool call for one decision {where} issued {count} times")
    for cell_key, counter in refs.items():
        doubled = sorted(ref for ref, n in counter.items() if n > 1)
        if doubled:
            problems.append(f"execution {_key_text(cell_key)} reuses issuer_refs {doubled}")

    open_cells: Counter[bytes | None] = Counter(
        i["key"] for i in world.reader.open_intents() if i["workflow"] == EXEC_WORKFLOW
    )
    states: dict[str, dict[str, Any]] = {}
    for cell in world.reader.cells(EXEC_WORKFLOW):
        exec_id = str(cell.key)
        state = world.reader.state(EXEC_WORKFLOW, cell.key)
        # `faulted`: the kernel failed a step of the cell. Its `status` says `failed` for an
        # execution that ended failed too (flows/serve/cell_status.py), which a workload of retries
        # and timeouts may legitimately do.
        if cell.faulted or not isinstance(state, dict):
            problems.append(f"execution {exec_id} is faulted with state {type(state)}")
            continue
        states[exec_id] = state
        ended = finished[cell.key_bytes]
        terminal = state.get("status") in ops.TERMINAL_STATUSES
        if ended > 1:
            problems.append(f"execution {exec_id} finished {ended} times")
        elif terminal != (ended == 1):
            problems.append(
                f"execution {exec_id} is {state.get('status')} with {ended} playbook.finished"
            )
        if terminal and open_cells[cell.key_bytes]:
            problems.append(
                f"execution {exec_id} ended ({state.get('status')}) "
                f"with {open_cells[cell.key_bytes]} open intents"
            )

    for ack in acks:
        op, acked = ack["op"], str(ack.get("exec"))
        if op == "start":
            if acked not in states:
                problems.append(f"acked start of {acked} has no execution")
            if not inputs[(START_EVENT, acked, None)]:
                problems.append(f"acked start of {acked} is not journaled")
        elif op == "signal" and not inputs[(SIGNAL_EVENT, acked, ack["name"])]:
            problems.append(f"acked signal {ack['name']} to {acked} is not journaled")
        elif op == "cancel":
            if not inputs[(CANCEL_EVENT, acked, None)]:
                problems.append(f"acked cancel of {acked} is not journaled")
            found = states.get(acked, {}).get("status")
            if found != "cancelled":
                problems.append(f"acked cancel of {acked}: the execution is {found}")


def _intent(
    problems: list[str],
    seq: int,
    record: dict[str, Any],
    refs: dict[bytes, Counter[str]],
    decisions: Counter[tuple[Any, ...]],
    by_args: Counter[tuple[Any, ...]],
) -> None:
    key = record["origin"]["key"]
    ref = record.get("issuer_ref")
    if ref is None:
        problems.append(f"flow intent at {seq} has no issuer_ref")
    else:
        refs.setdefault(key, Counter())[str(ref)] += 1
    if not str(record["effect"]).startswith(TOOL_EFFECT_PREFIX):
        return
    params = record["params"]
    exec_id = params.get("exec")
    if exec_id != _key_text(key):
        problems.append(f"tool intent at {seq} names exec {exec_id}, issued by {_key_text(key)}")
    where = (exec_id, params.get("step"), params.get("task"), params.get("attempt"))
    decisions[(*where, ref)] += 1
    by_args[(*where, json.dumps(params.get("args"), sort_keys=True, default=str))] += 1


def _key_text(key: Any) -> str:
    try:
        return str(cbor.decode(key))
    except Exception:
        return repr(key)


def check_final(
    problems: list[str], world: World, acks: Iterable[dict[str, Any]], keys: FlowKeys
) -> int:
    """After the last kill: drain every execution to its end; then each acknowledged one (and
    every other) has ended exactly once, nothing is left open. Returns the executions."""
    try:
        drain(world, keys)
    except Exception as error:  # a world that cannot be drained is a failure
        problems.append(f"draining raised {type(error).__name__}: {error}")
        return 0
    if world.reader.open_intents():
        problems.append(f"open intents left after the drain: {world.reader.open_intents()[:5]}")
    states = exec_states(world)
    acked = {str(a["exec"]) for a in acks if a["op"] == "start"}
    for exec_id in sorted(set(states) | acked):
        state = states.get(exec_id)
        if state is None:
            problems.append(f"acked execution {exec_id} does not exist")
            continue
        history = ops.history(world, exec_id)
        ended = [e for e in history if e.event.get("event") == "playbook.finished"]
        if state.get("status") not in ops.TERMINAL_STATUSES or len(ended) != 1:
            problems.append(
                f"execution {exec_id} drained to {state.get('status')} "
                f"with {len(ended)} playbook.finished (at {[e.seq for e in ended]})"
            )
    return len(states)


if __name__ == "__main__":
    sys.exit(main())
