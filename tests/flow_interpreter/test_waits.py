"""Wait boundaries: human tasks, signals, timers, child executions, cancellation."""

from __future__ import annotations

from tests.flow_interpreter.harness import (
    SEC,
    TIMER,
    Execution,
    arc,
    domain,
    effects,
    events,
    flow,
    names,
    step,
    task,
)

HUMAN = "aos/human.task@1"


def test_human_task_is_created_and_its_receipt_is_the_result() -> None:
    definition = flow(
        [
            step(
                "approve",
                [
                    task(
                        "ask",
                        "human",
                        title="Approve {{ workload.id }}",
                        description="amount {{ workload.amount }}",
                        assignee="{{ workload.who }}",
                        roles=["finance"],
                        form={"approved": "bool"},
                        data={"amount": "{{ workload.amount }}"},
                    ),
                    task("keep", "assign", set={"approved": "{{ _prev.approved }}"}),
                ],
            )
        ]
    )
    ex = Execution()
    out = ex.start(definition, {"id": "o1", "amount": 30, "who": "ann"})
    (human,) = effects(out)
    assert human.effect == HUMAN and human.issuer_ref == "w1"
    assert human.params == {
        "exec": "e1",
        "step": "approve",
        "task": "ask",
        "title": "Approve o1",
        "description": "amount 30",
        "assignee": "ann",
        "roles": ["finance"],
        "form": {"approved": "bool"},
        "data": {"amount": 30},
    }
    assert "human.task.created" in names(out)
    out = ex.receipt(human, {"approved": True})
    assert "human.task.completed" in names(out)
    assert ex.business["ctx"] == {"approved": True}
    assert ex.status == "completed"


def test_human_task_error_receipt_fails_the_step() -> None:
    ex = Execution()
    out = ex.start(flow([step("a", [task("ask", "human", title="t")])]))
    ex.receipt(effects(out)[0], {"code": "rejected", "message": "no"}, status="error")
    assert ex.status == "failed"


def test_wait_signal_resumes_with_the_payload() -> None:
    definition = flow(
        [
            step(
                "a",
                [
                    task("wait", "wait_signal", signal="approved"),
                    task("keep", "assign", set={"by": "{{ _prev.by }}"}),
                ],
            )
        ]
    )
    ex = Execution()
    out = ex.start(definition)
    assert out.effects == []
    assert ex.engine["waits"]["w1"]["kind"] == "signal"
    out = ex.signal("approved", {"by": "bob"}, expect_version=1)
    assert "signal.received" in names(out)
    assert ex.business["ctx"] == {"by": "bob"} and ex.status == "completed"
    assert ex.state["engine_version"] == 2


def test_a_redelivered_signal_is_buffered_and_dropped_at_the_end() -> None:
    """Redelivery is the kernel's idempotency keys' to catch: the interpreter keeps a second
    `go` for a later wait of that name (signals.py), and drops it, recorded, if none comes."""
    definition = flow(
        [
            step(
                "a",
                [task("w1", "wait_signal", signal="go"), task("w2", "wait_signal", signal="other")],
            )
        ]
    )
    ex = Execution()
    ex.start(definition)
    ex.signal("go", 1)
    again = ex.signal("go", 1)
    assert names(again) == ["signal.buffered"]
    out = ex.signal("other")
    assert ex.status == "completed"
    dropped = [e for e in events(out) if e["event"] == "signal.dropped"]
    assert dropped == [
        {
            "event": "signal.dropped",
            "name": "go",
            "signal_seq": ex.height - 2,
            "reason": "the execution is completed",
        }
    ]


def test_a_signal_with_the_wrong_expect_version_is_stale() -> None:
    ex = Execution()
    ex.start(flow([step("a", [task("w", "wait_signal", signal="go")])]))
    before = ex.state_bytes()
    stale = ex.signal("go", 1, expect_version=7)
    assert ex.state_bytes() == before
    assert events(stale)[0] == {
        "event": "signal.stale",
        "name": "go",
        "expect_version": 7,
        "reason": "version",
    }
    ex.signal("go", 1, expect_version=1)
    assert ex.status == "completed"


def test_signal_wait_with_a_timeout() -> None:
    definition = flow(
        [step("a", [task("w", "wait_signal", signal="go", timeout_ms=2000, rules=[])])]
    )
    ex = Execution()
    out = ex.start(definition)
    (timer,) = effects(out)
    assert timer.params == {"deliver_at_ns": ex.now_ns + 2 * SEC, "key": "w2"}
    out = ex.fire(timer)
    assert out.cancel == []  # a signal wait is no intent
    assert ex.status == "failed"
    assert ex.engine["summary"]["failures"][0]["error"]["kind"] == "timeout"
    late = ex.signal("go")
    assert events(late)[0]["event"] == "signal.stale"


def test_signal_before_its_timeout_cancels_the_timer() -> None:
    ex = Execution()
    out = ex.start(flow([step("a", [task("w", "wait_signal", signal="go", timeout_ms=2000)])]))
    timer = effects(out)[0]
    out = ex.signal("go", "x")
    assert out.cancel == ["w2"]
    before = ex.state_bytes()
    assert events(ex.fire(timer))[0]["event"] == "timer.stale"
    assert ex.state_bytes() == before


def test_wait_timer_by_duration_and_until() -> None:
    definition = flow(
        [
            step(
                "a",
                [
                    task("sleep", "wait_timer", duration_ms=1500),
                    task("until", "wait_timer", until_ns="{{ workload.at }}"),
                ],
            )
        ]
    )
    ex = Execution()
    out = ex.start(definition, {"at": 5_000 * SEC})
    (timer,) = effects(out)
    assert timer.effect == TIMER and timer.params["deliver_at_ns"] == ex.now_ns + 1_500_000_000
    out = ex.fire(timer)
    (until,) = effects(out)
    assert until.params == {"deliver_at_ns": 5_000 * SEC, "key": "w2"}
    ex.fire(until)
    assert ex.status == "completed"
    assert ex.business["steps"]["a"] == {"delivered_at_ns": 5_000 * SEC, "key": "w2"}


# -- children ---------------------------------------------------------------------------------


def test_subflow_starts_a_child_and_its_end_resumes_the_parent() -> None:
    child_definition = flow(
        [step("c", [task("n", "noop", result="{{ workload.x * 2 }}")])], name="t/child"
    )
    parent = Execution()
    child_hash = parent.deploy(child_definition)
    definition = flow(
        [
            step(
                "p",
                [
                    task(
                        "sub",
                        "subflow",
                        flow="double",
                        workload={"x": "{{ workload.x }}"},
                        into="doubled",
                    ),
                    task("after", "noop", result="{{ ctx.doubled + 1 }}"),
                ],
            )
        ],
        subflows={"double": {"flow": "t/child", "definition": child_hash}},
    )
    out = parent.start(definition, {"x": 4}, business_ref="b-1")
    (start,) = domain(out, "aos/FlowStart@1")
    assert start.value == {
        "exec": "e1:p:1",
        "flow": "t/child",
        "version": 0,
        "definition": child_hash,
        "workload": {"x": 4},
        "parent": {"exec": "e1", "token": "w1"},
        "business_ref": "b-1",
    }
    assert parent.engine["children"] == {"e1:p:1": "w1"}
    assert "child.started" in names(out)

    child = Execution(exec_id="e1:p:1", blobs=parent.blobs)
    child_out = child.send("Start", start.value)
    assert child.status == "completed"
    (ended,) = domain(child_out, "aos/FlowEnded@1")
    assert ended.value == {
        "exec": "e1",
        "child": "e1:p:1",
        "token": "w1",
        "status": "completed",
        "result": 8,
        "error": None,
    }

    out = parent.send("Ended", ended.value)
    assert "child.ended" in names(out)
    assert parent.business["ctx"] == {"doubled": 8}
    assert parent.business["steps"]["p"] == 9
    assert parent.engine["children"] == {}


def test_a_failed_child_is_the_subflow_task_error() -> None:
    ex = Execution()
    out = ex.start(flow([step("p", [task("sub", "subflow", flow="self")])]))
    (start,) = domain(out)
    ex.ended(
        start.value["exec"],
        "w1",
        status="failed",
        error={"kind": "transport", "code": "x", "message": "m", "retryable": False},
    )
    assert ex.status == "failed"
    assert ex.engine["summary"]["failures"][0]["error"]["code"] == "x"


def test_a_late_child_completion_is_stale() -> None:
    ex = Execution()
    out = ex.start(flow([step("p", [task("sub", "subflow", flow="self")])]))
    child = domain(out)[0].value["exec"]
    before = ex.state_bytes()
    unknown = ex.ended(child, "w9")
    assert ex.state_bytes() == before
    assert events(unknown)[0] == {
        "event": "child.stale",
        "child": child,
        "token": "w9",
        "reason": "no open wait",
    }
    wrong_child = ex.ended("someone-else", "w1")
    assert ex.state_bytes() == before and events(wrong_child)[0]["event"] == "child.stale"
    ex.ended(child, "w1", result=1)
    done = ex.state_bytes()
    again = ex.ended(child, "w1", result=2)
    assert ex.state_bytes() == done and events(again)[0]["event"] == "child.stale"


def test_unknown_subflow_alias_fails_the_task() -> None:
    ex = Execution()
    ex.start(flow([step("p", [task("sub", "subflow", flow="nope")])]))
    assert ex.status == "failed"
    assert ex.engine["summary"]["failures"][0]["error"]["code"] == "subflow.unknown"


# -- cancellation -----------------------------------------------------------------------------


def test_cancel_ends_every_wait_cancels_children_and_tells_the_parent() -> None:
    definition = flow(
        [
            step("fork", arcs=[arc("call"), arc("sub"), arc("sig")], mode="inclusive"),
            step("call", [task("c", "call", tool={"kind": "echo"}, timeout_ms=1000)]),
            step("sub", [task("s", "subflow", flow="self")]),
            step("sig", [task("w", "wait_signal", signal="go")]),
        ]
    )
    ex = Execution()
    out = ex.start(definition, parent={"exec": "boss", "token": "w5"})
    call, timer = effects(out)
    child = domain(out, "aos/FlowStart@1")[0].value["exec"]
    out = ex.cancel("user asked")
    assert ex.status == "cancelled"
    assert sorted(out.cancel) == sorted([call.issuer_ref, timer.issuer_ref])
    assert [e.value for e in domain(out, "aos/FlowCancel@1")] == [
        {"exec": child, "reason": "user asked"}
    ]
    (ended,) = domain(out, "aos/FlowEnded@1")
    assert ended.value["exec"] == "boss" and ended.value["token"] == "w5"
    assert ended.value["status"] == "cancelled"
    assert ex.engine["waits"] == {} and ex.engine["tokens"] == {}
    assert names(out) == ["execution.cancelled", "playbook.finished"]
    before = ex.state_bytes()
    for late in (ex.receipt(call, {}), ex.signal("go"), ex.ended(child, "w3"), ex.cancel()):
        assert late.has_ann and late.effects == []
    assert ex.state_bytes() == before


def test_expect_version_picks_the_wait_created_at_that_version() -> None:
    definition = flow(
        [
            step("fork", mode="inclusive", arcs=[arc("first"), arc("second")]),
            step("first", [task("w", "wait_signal", signal="go")]),
            step(
                "second",
                [task("t", "wait_timer", duration_ms=10), task("w", "wait_signal", signal="go")],
            ),
        ]
    )
    ex = Execution()
    out = ex.start(definition)
    ex.fire(effects(out)[0])  # version 2: `second` now waits for "go" too
    versions = sorted(w["version"] for w in ex.engine["waits"].values())
    assert versions == [1, 2]
    ex.signal("go", "late", expect_version=2)
    (left,) = ex.engine["waits"].values()
    assert left["step"] == "first" and left["version"] == 1
    assert ex.business["steps"] == {"fork": None, "second": "late"}


def test_human_task_timeout_cancels_the_task() -> None:
    ex = Execution()
    out = ex.start(flow([step("a", [task("ask", "human", title="t", timeout_ms=60_000)])]))
    human, timer = effects(out)
    out = ex.fire(timer)
    assert out.cancel == [human.issuer_ref]
    assert ex.status == "failed"
    assert ex.engine["summary"]["failures"][0]["error"]["kind"] == "timeout"
    assert events(ex.receipt(human, {"approved": True}))[0]["event"] == "receipt.stale"


def test_inputs_after_the_end_are_stale() -> None:
    ex = Execution()
    out = ex.start(flow([step("a", [task("c", "call", tool={"kind": "echo"})])]))
    call = effects(out)[0]
    ex.receipt(call, 1)
    assert ex.status == "completed"
    before = ex.state_bytes()
    for late in (ex.signal("go"), ex.cancel(), ex.receipt(call, 2)):
        assert late.effects == [] and late.domain_events == [] and late.has_ann
    assert ex.state_bytes() == before
