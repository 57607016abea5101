"""Stale inputs on a real world — each ignored, recorded in the history, the execution's
state byte for byte unchanged — and replay audits of worlds that ran flows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import SIGNAL_EVENT
from aos.kernel import cbor
from aos.kernel.audit import replay
from aos.kernel.world import records
from aos.kernel.world.receipts import ReceiptError
from tests.flows_world.support import FlowWorld, make_flow_world


@pytest.fixture
def flows(tmp_path: Path) -> Iterator[FlowWorld]:
    made = make_flow_world(tmp_path / "w")
    try:
        yield made
    finally:
        made.world.close()


SIGNAL_TWICE = """
name: t/signals
steps:
  - name: first
    tasks: [{name: go, do: wait_signal, signal: go}]
    next: second
  - name: second
    tasks: [{name: go_again, do: wait_signal, signal: go}]
"""


def _unchanged_by(flows: FlowWorld, send: Any, stale_event: str) -> None:
    before = flows.state_bytes()
    height = flows.world.height
    send()
    assert flows.world.height > height  # the input is journaled ...
    assert flows.state_bytes() == before  # ... and changes nothing
    assert flows.names()[-1] == stale_event  # ... but is recorded


def _resent(flows: FlowWorld, name: str, expect_version: int | None) -> Any:
    """A signal sent around the host's check (`ops.signal` refuses these: test_signal_buffer),
    as a raw `aos world send` or a redelivery would."""
    value = {"exec": "e1", "name": name, "payload": None, "expect_version": expect_version}
    return lambda: flows.world.send(SIGNAL_EVENT, value)


def test_a_redelivered_signal_is_stale(flows: FlowWorld) -> None:
    flows.run(
        "name: t/one\nsteps: [{name: a, tasks: [{do: wait_signal, signal: go}], next: b}, "
        "{name: b, tasks: [{do: wait_signal, signal: other}]}]",
    )
    (wait,) = flows.waits().values()
    ops.signal(flows.world, "e1", "go", {"n": 1}, expect_version=int(wait["version"]))
    _unchanged_by(flows, _resent(flows, "go", int(wait["version"])), "signal.stale")


def test_a_signal_with_the_wrong_expected_version_is_stale(flows: FlowWorld) -> None:
    flows.run(SIGNAL_TWICE)
    (wait,) = flows.waits().values()
    wrong = int(wait["version"]) + 7
    _unchanged_by(flows, _resent(flows, "go", wrong), "signal.stale")
    ops.signal(flows.world, "e1", "go", None, expect_version=int(wait["version"]))
    assert flows.state()["engine"]["tokens"]  # the right version resumed it: on to `second`
    assert "signal.received" in flows.names()


def test_a_late_child_completion_is_stale(flows: FlowWorld) -> None:
    flows.run(SIGNAL_TWICE)

    def late_end() -> None:
        flows.world.send(
            "aos/FlowEnded@1",
            {
                "exec": "e1",
                "child": "e1:gone:9",
                "token": "w99",
                "status": "completed",
                "result": {"late": True},
                "error": None,
            },
        )

    _unchanged_by(flows, late_end, "child.stale")


def test_a_duplicate_wake_up_changes_nothing(flows: FlowWorld) -> None:
    """A human task completed twice: the kernel takes the first receipt; the second is a
    duplicate that reaches no workflow."""
    flows.run(
        "name: t/h\nsteps: [{name: a, tasks: [{do: human, title: t}], next: b}, "
        "{name: b, tasks: [{do: wait_signal, signal: s}]}]"
    )
    (task,) = flows.human_tasks()
    flows.adapters.complete_task(str(task["intent"]), {"ok": 1})
    before, height = flows.state_bytes(), flows.world.height
    flows.adapters.complete_task(str(task["intent"]), {"ok": 2})
    assert (flows.state_bytes(), flows.world.height) == (before, height)


def test_a_cancelled_timer_never_fires(flows: FlowWorld) -> None:
    """The call wins its race against the step timeout: the interpreter cancels the timer, so
    moving time past its deadline delivers nothing (and nothing is stale)."""
    state = flows.run(
        "name: t/race\nsteps: [{name: a, tasks: [{do: call, tool: {kind: echo}, args: {}, "
        "timeout_s: 10}, {do: wait_signal, signal: s}]}]"
    )
    assert state["status"] == "running"
    timers = [r for _, r in flows.journal() if r.get("effect") == "sys/timer.set@1"]
    cancelled = [i for _, r in flows.journal() for i in r.get("cancelled", [])]
    assert [t["intent"] for t in timers] == cancelled
    before = flows.state_bytes()
    flows.world.advance_time(60 * 10**9)
    assert flows.state_bytes() == before
    assert not any(
        r["kind"] == records.EFFECT_RECEIPT and r["body"]["adapter"] == "sys/timer@1"
        for _, r in flows.journal()
    )


# --------------------------------------------------------------------------------------------
# Replay


EVERYTHING = """
name: t/everything
subflows: {child: {flow: t/child}}
steps:
  - name: start
    next:
      mode: inclusive
      arcs: [{to: retrying}, {to: loop}, {to: person}, {to: wait}, {to: delegate}]
  - name: retrying
    tasks:
      - do: call
        tool: {kind: echo}
        args: {n: 1}
        policy:
          rules:
            - when: "{{ _attempt < 3 }}"
              then: {do: retry, attempts: 3, backoff: linear, delay_s: 1}
  - name: loop
    loop: {in: "{{ [1, 2, 3, 4, 5, 6] }}", iterator: n, mode: parallel, max_in_flight: 3}
    tasks: [{do: call, tool: {kind: echo}, args: {n: "{{ iter.n }}"}}]
  - name: person
    tasks: [{do: human, title: approve}]
  - name: wait
    tasks: [{do: wait_signal, signal: go}]
  - name: delegate
    tasks: [{do: subflow, flow: child, workload: {n: 2}, into: child}]
"""

CHILD = """
name: t/child
steps: [{name: w, tasks: [{do: call, tool: {kind: echo}, args: {n: "{{ workload.n }}"}}]}]
"""


def run_everything(flows: FlowWorld) -> None:
    flows.deploy(CHILD)
    flows.run(EVERYTHING)
    (task,) = flows.human_tasks()
    flows.adapters.complete_task(str(task["intent"]), {"approved": True})
    ops.signal(flows.world, "e1", "go", {"at": 1})
    flows.adapters.drain()
    assert flows.state()["status"] == "completed"
    flows.run(
        "name: t/cancelled\nsteps: [{name: a, tasks: [{do: wait_signal, signal: x}]}]", exec_id="e2"
    )
    ops.cancel(flows.world, "e2")
    assert flows.state("e2")["status"] == "cancelled"


def test_replay_verifies_a_world_that_ran_flows(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    with flows.world:
        run_everything(flows)
        names = flows.names()
        assert names.count("task.attempt.failed") == 2  # a retry rule may retry ok outcomes
        assert {"human.task.completed", "signal.received", "child.ended"} <= set(names)
    report = replay.verify_replay(tmp_path / "w")
    assert report.ok, report.divergence
    assert report.steps > 10


def test_changing_one_journaled_receipt_is_the_first_divergence(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    with flows.world:
        run_everything(flows)
        receipts = [
            seq
            for seq, r in flows.journal()
            if r["kind"] == records.EFFECT_RECEIPT and r["body"]["adapter"] == "aos/echo@1"
        ]
    seq = receipts[len(receipts) // 2]
    env = lmdb.open(str(tmp_path / "w" / "store"), max_dbs=8)
    with env.begin(write=True, db=env.open_db(b"journal")) as txn:
        record: Any = cbor.decode(txn.get(seq.to_bytes(8, "big")))
        record["body"]["payload"] = {"n": 999}
        txn.put(seq.to_bytes(8, "big"), cbor.encode(record))
    env.close()
    report = replay.verify_replay(tmp_path / "w")
    assert not report.ok and report.divergence is not None
    assert report.divergence.seq in (seq, seq + 1)  # the receipt, or the step it resumed


def test_a_late_receipt_for_a_cancelled_call_is_refused_after_cancel(flows: FlowWorld) -> None:
    flows.deploy("name: t/c\nsteps: [{name: a, tasks: [{do: call, tool: {kind: echo}, args: {}}]}]")
    ops.start(flows.world, "t/c", exec_id="e1")
    (call,) = [i for i in flows.world.reader.open_intents() if i["effect"] == "aos/tool.echo@1"]
    ops.cancel(flows.world, "e1")
    with pytest.raises(ReceiptError) as late:
        flows.adapters.settle(str(call["intent"]), "aos/echo@1", "ok", {})
    assert late.value.code == "receipt.intent_cancelled"
    assert flows.state()["status"] == "cancelled"


def test_a_stored_state_leaves_out_its_default_fields_and_replays(tmp_path: Path) -> None:
    """spec/11 §3.1: a waiting execution's records are stored without their default fields,
    and a world of such states replays byte for byte."""
    flows = make_flow_world(tmp_path / "w")
    with flows.world:
        flows.run("name: t/wait\nsteps: [{name: a, tasks: [{do: wait_signal, signal: go}]}]")
        [wait] = flows.waits().values()
        assert None not in wait.values() and (wait["kind"], wait["signal"]) == ("signal", "go")
        [token] = flows.state()["engine"]["tokens"].values()
        [frame] = token["frames"]
        assert None not in frame.values() and frame["wait"] in flows.waits()
        assert None not in flows.state()["engine"].values()
        ops.signal(flows.world, "e1", "go", None)
        flows.adapters.drain()
        assert flows.state()["status"] == "completed"
    report = replay.verify_replay(tmp_path / "w")
    assert report.ok, report.divergence
