"""Every construct of seed 002 run end to end on a real world: the interpreter component, the
kernel, signed receipts from the tool adapters (in process), timers on a manual clock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from aos.flows.serve import flow_operations as ops
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


class _Flaky(BaseHTTPRequestHandler):
    """/flaky answers 503 to its first two requests, then 200; /fail always 500."""

    calls: ClassVar[dict[str, int]] = {}

    def do_POST(self) -> None:
        count = self.calls[self.path] = self.calls.get(self.path, 0) + 1
        ok = self.path == "/flaky" and count > 2
        body = b'{"charged": true}' if ok else b'{"error": "unavailable"}'
        self.send_response(200 if ok else (503 if self.path == "/flaky" else 500))
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return None


@pytest.fixture
def server() -> Iterator[str]:
    _Flaky.calls = {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


def test_state_and_business_reference_assignment(flows: FlowWorld) -> None:
    state = flows.run(
        """
        name: t/assign
        steps:
          - name: a
            tasks:
              - {do: assign, set: {total: "{{ workload.n * 2 }}", who: "{{ workload.who }}"}}
              - {do: business_ref, value: "order-{{ workload.n }}"}
        """,
        {"n": 21, "who": "ann"},
    )
    assert state["status"] == "completed"
    assert state["business"]["ctx"] == {"total": 42, "who": "ann"}
    assert state["business"]["business_ref"] == "order-21"
    assert "playbook.finished" in flows.names()


def test_a_run_of_inline_steps_is_one_module_call(flows: FlowWorld) -> None:
    steps = "\n".join(
        f"""
          - name: s{i}
            tasks: [{{do: assign, set: {{s{i}: {i}}}}}]
            next: {f"s{i + 1}" if i < 9 else "[]"}"""
        for i in range(10)
    )
    state = flows.run(f"name: t/inline\nsteps:{steps}")
    assert state["status"] == "completed"
    key = flows.world.reader.key_bytes("aos/FlowExec@1", "e1")
    steps_of_exec = [r for _, r in flows.journal() if r["kind"] == records.STEP and r["key"] == key]
    assert len(steps_of_exec) == 1


CALL_WITH_BRANCHES = """
name: t/call
steps:
  - name: pay
    tasks:
      - name: charge
        do: call
        tool: {kind: http, method: POST, url: "{{ workload.url }}"}
        args: {}
        branches:
          ok: [{do: assign, set: {path: ok}}]
          error: [{do: assign, set: {path: error, status: "{{ _prev.http.status }}", code: "{{ _prev.error.code }}"}}]
          timeout: [{do: assign, set: {path: timeout}}]
"""


def test_a_tool_call_takes_its_success_branch(flows: FlowWorld, server: str) -> None:
    _Flaky.calls = {"/flaky": 2}  # the next call succeeds
    state = flows.run(CALL_WITH_BRANCHES, {"url": f"{server}/flaky"})
    assert state["status"] == "completed"
    assert state["business"]["ctx"]["path"] == "ok"


def test_a_tool_call_takes_its_failure_branch(flows: FlowWorld, server: str) -> None:
    state = flows.run(CALL_WITH_BRANCHES, {"url": f"{server}/fail"})
    assert state["status"] == "completed"  # the error branch handled the failure
    assert state["business"]["ctx"] == {"path": "error", "status": 500, "code": "http.status"}


def test_a_step_timeout_races_the_call_and_the_loser_is_cancelled(flows: FlowWorld) -> None:
    flows.deploy(
        """
        name: t/timeout
        steps:
          - name: slow
            tasks:
              - name: call
                do: call
                tool: {kind: echo}
                args: {x: 1}
                timeout_s: 5
                branches:
                  timeout: [{do: assign, set: {path: timeout}}]
        """
    )
    ops.start(flows.world, "t/timeout", exec_id="e1")
    call = next(i for i in flows.world.reader.open_intents() if i["effect"] == "aos/tool.echo@1")
    flows.world.jump_next_timer()  # the timer fires before any adapter answered
    state = flows.state()
    assert state["status"] == "completed"
    assert state["business"]["ctx"]["path"] == "timeout"
    cancelling = [r for _, r in flows.journal() if r.get("cancelled")]
    assert cancelling and cancelling[0]["cancelled"] == [call["intent"]]
    height = flows.world.height
    with pytest.raises(ReceiptError) as late:
        flows.adapters.settle(str(call["intent"]), "aos/echo@1", "ok", {"x": 1})
    assert late.value.code == "receipt.intent_cancelled"
    assert flows.world.height == height + 1  # only the receipt_rejected record
    assert flows.state()["engine_version"] == state["engine_version"]


def test_retries_with_backoff_go_through_timers(flows: FlowWorld, server: str) -> None:
    state = flows.run(
        """
        name: t/retry
        steps:
          - name: pay
            tasks:
              - name: charge
                do: call
                tool: {kind: http, method: POST, url: "{{ workload.url }}"}
                args: {}
                policy:
                  rules:
                    - when: "{{ outcome.status == 'error' }}"
                      then: {do: retry, attempts: 3, backoff: exponential, delay_s: 2}
        """,
        {"url": f"{server}/flaky"},
    )
    assert state["status"] == "completed"
    assert state["business"]["steps"]["pay"]["json"] == {"charged": True}
    assert flows.names().count("task.attempt.failed") == 2
    timers = [r for _, r in flows.journal() if r.get("effect") == "sys/timer.set@1"]
    delays = [t["params"]["deliver_at_ns"] for t in timers]
    assert delays[1] - delays[0] >= 4_000_000_000  # 2 s, then 4 s (exponential)


def test_a_conditional_branch_runs_one_case(flows: FlowWorld) -> None:
    text = """
        name: t/branch
        steps:
          - name: decide
            tasks:
              - do: branch
                cases:
                  - when: "{{ workload.amount > 100 }}"
                    tasks: [{do: assign, set: {route: review}}]
                  - when: "$[?@.vip == true]"
                    tasks: [{do: assign, set: {route: vip}}]
                else: [{do: assign, set: {route: auto}}]
        """
    assert flows.run(text, {"amount": 500, "vip": False}, "e1")["business"]["ctx"] == {
        "route": "review"
    }
    assert flows.run(text, {"amount": 5, "vip": True}, "e2")["business"]["ctx"] == {"route": "vip"}
    assert flows.run(text, {"amount": 5, "vip": False}, "e3")["business"]["ctx"] == {
        "route": "auto"
    }


def test_repeat_over_a_collection_with_an_iteration_context(flows: FlowWorld) -> None:
    state = flows.run(
        """
        name: t/repeat
        steps:
          - name: each
            tasks:
              - name: lines
                do: repeat
                over: "{{ workload.items }}"
                as: line
                tasks:
                  - do: call
                    tool: {kind: echo}
                    args: {sku: "{{ line.sku }}", index: "{{ iter.index }}"}
        """,
        {"items": [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}]},
    )
    assert state["status"] == "completed"
    assert state["business"]["steps"]["each"] == [
        {"sku": "a", "index": 0},
        {"sku": "b", "index": 1},
        {"sku": "c", "index": 2},
    ]


def test_fork_and_join(flows: FlowWorld) -> None:
    state = flows.run(
        """
        name: t/fork
        steps:
          - name: start
            next:
              mode: inclusive
              arcs:
                - {to: left, args: {side: L}}
                - {to: right, args: {side: R}}
          - name: left
            tasks: [{do: call, tool: {kind: echo}, args: {side: "{{ args.side }}"}}]
            next: join
          - name: right
            tasks: [{do: call, tool: {kind: echo}, args: {side: "{{ args.side }}"}}]
            next: join
          - name: join
            join: all
            tasks: [{do: noop, result: "{{ steps.left.side ~ steps.right.side }}"}]
        """
    )
    assert state["status"] == "completed"
    assert state["business"]["steps"]["join"] == "LR"
    assert "join.completed" in flows.names()


def test_a_human_task_waits_until_completed(flows: FlowWorld) -> None:
    state = flows.run(
        """
        name: t/human
        steps:
          - name: approve
            tasks:
              - name: ask
                do: human
                title: "Approve {{ workload.order }}"
                assignee: ann
                roles: [finance]
                form: {approved: boolean}
        """,
        {"order": "A-1"},
    )
    assert state["status"] == "running"
    (task,) = flows.human_tasks()
    params = flows.world.reader.open_intent(str(task["intent"]))["params"]  # type: ignore[index]
    assert (params["title"], params["assignee"], params["roles"]) == (
        "Approve A-1",
        "ann",
        ["finance"],
    )
    flows.adapters.complete_task(str(task["intent"]), {"approved": True})
    state = flows.state()
    assert state["status"] == "completed"
    assert state["business"]["steps"]["approve"] == {"approved": True}
    assert flows.names().count("human.task.completed") == 1


def test_a_signal_wait_resumes_on_its_signal(flows: FlowWorld) -> None:
    state = flows.run(
        """
        name: t/signal
        steps:
          - name: wait
            tasks: [{name: picked, do: wait_signal, signal: warehouse.picked}]
        """
    )
    assert state["status"] == "running"
    ops.signal(flows.world, "e1", "warehouse.picked", {"box": 7})
    state = flows.state()
    assert state["status"] == "completed"
    assert state["business"]["steps"]["wait"] == {"box": 7}


def test_a_timer_wait(flows: FlowWorld) -> None:
    before = flows.world.logical_ns
    state = flows.run(
        """
        name: t/timer
        steps:
          - name: pause
            tasks: [{do: wait_timer, duration_s: 90}]
        """
    )
    assert state["status"] == "completed"
    assert flows.world.logical_ns - before >= 90_000_000_000


CHILD = """
name: t/child
steps:
  - name: work
    tasks: [{do: call, tool: {kind: echo}, args: {doubled: "{{ workload.n * 2 }}"}}]
"""


def test_a_subflow_is_a_child_execution_the_parent_waits_for(flows: FlowWorld) -> None:
    flows.deploy(CHILD)
    state = flows.run(
        """
        name: t/parent
        subflows: {child: {flow: t/child}}
        steps:
          - name: delegate
            tasks: [{do: subflow, flow: child, workload: {n: 21}, into: answer}]
        """
    )
    assert state["status"] == "completed"
    assert state["business"]["ctx"]["answer"] == {"doubled": 42}
    children = [e for e in ops.listing(flows.world)["executions"] if e["exec"] != "e1"]
    assert [(c["flow"], c["status"]) for c in children] == [("t/child", "completed")]
    assert "child.ended" in flows.names()


def test_continue_with_starts_a_new_execution_without_waiting(flows: FlowWorld) -> None:
    state = flows.run(
        """
        name: t/continue
        steps:
          - name: hop
            tasks:
              - do: branch
                cases:
                  - when: "{{ workload.round < 2 }}"
                    tasks: [{do: continue_with, flow: self, workload: {round: "{{ workload.round + 1 }}"}}]
        """,
        {"round": 0},
    )
    assert state["status"] == "completed"
    executions = {e["exec"]: e for e in ops.listing(flows.world)["executions"]}
    assert len(executions) == 3
    assert all(e["status"] == "completed" for e in executions.values())


def test_cancelling_an_execution_closes_its_waits_and_children(flows: FlowWorld) -> None:
    flows.deploy(
        """
        name: t/waits-forever
        steps:
          - name: wait
            tasks: [{do: wait_signal, signal: never, timeout_s: 3600}]
        """
    )
    state = flows.run(
        """
        name: t/cancel
        subflows: {child: {flow: t/waits-forever}}
        steps:
          - name: fan
            next:
              mode: inclusive
              arcs: [{to: ask}, {to: delegate}]
          - name: ask
            tasks: [{do: human, title: "never answered"}]
          - name: delegate
            tasks: [{do: subflow, flow: child}]
        """
    )
    assert state["status"] == "running"
    assert flows.world.reader.open_intents()
    ops.cancel(flows.world, "e1", "changed my mind")
    assert flows.state()["status"] == "cancelled"
    statuses = {e["exec"]: e["status"] for e in ops.listing(flows.world)["executions"]}
    assert set(statuses.values()) == {"cancelled"}
    assert not flows.world.reader.open_intents()  # the human task and the child's timer are closed
    assert "execution.cancelled" in flows.names()


def test_a_parallel_loop_keeps_item_order(flows: FlowWorld) -> None:
    state = flows.run(
        """
        name: t/loop
        steps:
          - name: each
            loop: {in: "{{ workload.items }}", iterator: item, mode: parallel, max_in_flight: 4}
            tasks: [{do: call, tool: {kind: echo}, args: {n: "{{ iter.item }}"}}]
        """,
        {"items": list(range(20))},
    )
    assert state["status"] == "completed"
    result = state["business"]["steps"]["each"]
    assert [r["n"] for r in result["results"]] == list(range(20))
    assert result["stats"] == {"total": 20, "success": 20, "failed": 0}
    first_step_intents = next(
        r for _, r in flows.journal() if r["kind"] == records.STEP and r.get("intents")
    )["intents"]
    assert len(first_step_intents) == 4  # max_in_flight


def test_an_execution_is_pinned_to_the_definition_it_started_with(flows: FlowWorld) -> None:
    v1 = flows.deploy("name: t/pin\nsteps: [{name: a, tasks: [{do: wait_signal, signal: go}]}]")
    ops.start(flows.world, "t/pin", exec_id="old")
    v2 = flows.deploy(
        "name: t/pin\nsteps: [{name: a, tasks: [{do: wait_signal, signal: go}, {do: noop}]}]"
    )
    assert (v1.version, v2.version) == (1, 2)
    ops.start(flows.world, "t/pin", exec_id="new")
    assert ops.status(flows.world, "old")["definition"] == v1.definition
    assert ops.status(flows.world, "new")["definition"] == v2.definition
    assert (
        flows.deploy(
            "name: t/pin\nsteps: [{name: a, tasks: [{do: wait_signal, signal: go}, {do: noop}]}]"
        ).changed
        is False
    )
