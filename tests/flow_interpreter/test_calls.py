"""Tool calls: receipts, branches, timeouts racing calls, policies and retries."""

from __future__ import annotations

from typing import Any

from tests.flow_interpreter.harness import (
    SEC,
    TIMER,
    Execution,
    effects,
    events,
    flow,
    names,
    rule,
    step,
    task,
)

ECHO = "aos/tool.echo@1"
HTTP = "aos/tool.http@1"


def _call(**fields: Any) -> dict[str, Any]:
    fields.setdefault("tool", {"kind": "http", "url": "https://x/{{ workload.id }}"})
    fields.setdefault("args", {"id": "{{ workload.id }}"})
    return task("charge", "call", **fields)


def _branches() -> dict[str, Any]:
    return {
        "ok": [task("paid", "assign", set={"outcome": "paid"})],
        "error": [task("declined", "assign", set={"outcome": "{{ _prev.error.code }}"})],
        "timeout": [task("late", "assign", set={"outcome": "timeout"})],
    }


def _start(**fields: Any) -> tuple[Execution, Any]:
    ex = Execution()
    out = ex.start(flow([step("pay", [_call(**fields)])]), {"id": 7})
    return ex, out


def test_call_emits_the_tool_effect_with_its_waiting_token() -> None:
    ex, out = _start()
    (call,) = effects(out)
    assert call.effect == HTTP
    assert call.issuer_ref == "w1"
    assert call.params == {
        "exec": "e1",
        "step": "pay",
        "task": "charge",
        "attempt": 1,
        "tool": {"url": "https://x/7", "kind": "http"},
        "args": {"id": 7},
        "result_inline_bytes_max": 65536,
    }
    assert ex.engine["waits"]["w1"]["kind"] == "call"
    assert ex.engine["waits"]["w1"]["version"] == 1
    frame = ex.engine["tokens"]["k1"]["frames"][0]
    assert frame["stack"] == [
        {"list": ["tasks"], "pos": 0, "after": "root", "repeat": None, "attempt": 1}
    ]


def test_call_ok_runs_the_ok_branch() -> None:
    ex, out = _start(branches=_branches())
    out = ex.receipt(effects(out)[0], {"charged": True})
    assert ex.status == "completed"
    assert ex.business["ctx"] == {"outcome": "paid"}
    assert ex.engine["result"] == {"outcome": "paid"}
    assert "task.done" in names(out)


def test_call_error_runs_the_error_branch_with_the_error() -> None:
    ex, out = _start(branches=_branches())
    ex.receipt(
        effects(out)[0],
        {"kind": "authorization", "code": "http.403", "message": "no"},
        status="error",
    )
    assert ex.status == "completed"
    assert ex.business["ctx"] == {"outcome": "http.403"}


def test_call_error_without_branch_fails_the_step_and_the_execution() -> None:
    ex, out = _start()
    out = ex.receipt(effects(out)[0], {"message": "boom"}, status="error")
    assert ex.status == "failed"
    failure = ex.engine["summary"]["failures"][0]
    assert failure["step"] == "pay"
    assert failure["error"] == {
        "kind": "transport",
        "category": "transport",
        "code": "tool.error",
        "message": "boom",
        "retryable": False,
    }
    assert "step.failed" in names(out) and "task.failed" in names(out)


def test_timeout_wins_runs_the_timeout_branch_and_cancels_the_call() -> None:
    ex, out = _start(timeout_ms=30_000, branches=_branches())
    _call_intent, timer = effects(out)
    assert timer.effect == TIMER
    assert timer.params == {"deliver_at_ns": ex.now_ns + 30 * SEC, "key": "w2"}
    assert timer.issuer_ref == "w2"
    out = ex.fire(timer)
    assert out.cancel == ["w1"]
    assert ex.business["ctx"] == {"outcome": "timeout"}
    assert ex.status == "completed"


def test_timeout_without_its_branch_takes_the_error_branch() -> None:
    branches = _branches()
    branches["timeout"] = []
    ex, out = _start(timeout_ms=1000, branches=branches)
    ex.fire(effects(out)[1])
    assert ex.business["ctx"] == {"outcome": "timeout"}  # the error code of a timeout


def test_call_wins_cancels_the_timer_and_a_late_timer_receipt_is_stale() -> None:
    ex, out = _start(timeout_ms=30_000, branches=_branches())
    call, timer = effects(out)
    out = ex.receipt(call, {"ok": 1})
    assert out.cancel == ["w2"]
    before = ex.state_bytes()
    late = ex.fire(timer)
    assert ex.state_bytes() == before
    assert events(late) == [
        {"event": "timer.stale", "issuer_ref": "w2", "effect": TIMER, "reason": "no open wait"}
    ]
    assert late.effects == [] and late.cancel == []


def test_a_duplicate_receipt_is_stale_and_changes_nothing() -> None:
    ex, out = _start()
    call = effects(out)[0]
    ex.receipt(call, {"ok": 1})
    before = ex.state_bytes()
    again = ex.receipt(call, {"ok": 2})
    assert ex.state_bytes() == before
    assert events(again)[0]["event"] == "receipt.stale"


def test_a_receipt_with_an_unknown_issuer_ref_is_stale() -> None:
    ex, out = _start()
    before = ex.state_bytes()
    stale = ex.receipt(effects(out)[0], {"ok": 1}, issuer_ref="w99")
    assert ex.state_bytes() == before and events(stale)[0]["event"] == "receipt.stale"


def test_adapter_timeout_status_is_a_timeout_error() -> None:
    ex, out = _start(branches=_branches())
    ex.receipt(effects(out)[0], None, status="timeout")
    assert ex.business["ctx"] == {"outcome": "timeout"}


# -- policies ---------------------------------------------------------------------------------


def _retrying(attempts: int, backoff: str, delay_ms: int = 1000) -> dict[str, Any]:
    return _call(
        rules=[
            rule(
                "{{ outcome.status == 'error' }}",
                "retry",
                attempts=attempts,
                backoff=backoff,
                delay_ms=delay_ms,
            )
        ]
    )


def test_retry_with_exponential_backoff_goes_through_timers() -> None:
    ex = Execution()
    out = ex.start(flow([step("pay", [_retrying(4, "exponential")])]), {"id": 1})
    delays = []
    for attempt in (1, 2, 3):
        (call,) = effects(out)
        assert call.params["attempt"] == attempt
        out = ex.receipt(call, {"message": "down"}, status="error")
        assert "task.attempt.failed" in names(out)
        (timer,) = effects(out)
        assert timer.effect == TIMER
        delays.append(timer.params["deliver_at_ns"] - ex.now_ns)
        assert ex.engine["waits"][timer.issuer_ref]["kind"] == "retry"
        out = ex.fire(timer)
    assert delays == [1 * SEC, 2 * SEC, 4 * SEC]
    (call,) = effects(out)
    assert call.params["attempt"] == 4 and call.issuer_ref != "w1"
    out = ex.receipt(call, {"ok": True})
    assert ex.status == "completed"
    assert ex.business["steps"]["pay"] == {"ok": True}


def test_retry_attempts_edge_the_last_allowed_attempt_then_failure() -> None:
    ex = Execution()
    out = ex.start(flow([step("pay", [_retrying(2, "linear", 500)])]), {"id": 1})
    out = ex.receipt(effects(out)[0], {"message": "1"}, status="error")
    (timer,) = effects(out)
    assert timer.params["deliver_at_ns"] - ex.now_ns == 500_000_000  # linear: delay x 1
    out = ex.fire(timer)
    (second,) = effects(out)
    assert second.params["attempt"] == 2
    out = ex.receipt(second, {"message": "2"}, status="error")
    assert effects(out) == []  # attempts=2: the second failure is final
    assert ex.status == "failed"
    assert "task.failed" in names(out) and "task.attempt.failed" not in names(out)


def test_retry_with_no_backoff_still_arms_a_timer_of_zero() -> None:
    ex = Execution()
    out = ex.start(flow([step("pay", [_retrying(3, "none")])]), {"id": 1})
    out = ex.receipt(effects(out)[0], {}, status="error")
    (timer,) = effects(out)
    assert timer.params["deliver_at_ns"] == ex.now_ns


def test_exhausted_retries_fall_to_the_error_branch() -> None:
    call = _retrying(1, "none")
    call["branches"] = _branches()
    ex = Execution()
    out = ex.start(flow([step("pay", [call])]), {"id": 1})
    ex.receipt(effects(out)[0], {"code": "E1"}, status="error")
    assert ex.status == "completed"
    assert ex.business["ctx"] == {"outcome": "E1"}


def test_policy_continue_keeps_the_error_as_the_result() -> None:
    ex = Execution()
    definition = flow(
        [
            step(
                "pay",
                [
                    _call(
                        rules=[
                            rule(
                                "{{ outcome.status == 'error' }}",
                                "continue",
                                set_ctx={"failed_with": "{{ outcome.error.code }}"},
                            )
                        ]
                    ),
                    task(
                        "after",
                        "noop",
                        result="{{ _prev.error.code }}/{{ results.charge.error.kind }}",
                    ),
                ],
            )
        ]
    )
    out = ex.start(definition, {"id": 1})
    ex.receipt(effects(out)[0], {"code": "E9", "kind": "authorization"}, status="error")
    assert ex.status == "completed"
    assert ex.business["ctx"] == {"failed_with": "E9"}
    assert ex.business["steps"]["pay"] == "E9/authorization"


def test_policy_fail_fails_the_step_even_on_ok() -> None:
    ex = Execution()
    definition = flow(
        [
            step(
                "pay",
                [
                    _call(rules=[rule("{{ outcome.result.amount > 10 }}", "fail")]),
                    task("never", "noop", result=1),
                ],
            )
        ]
    )
    out = ex.start(definition, {"id": 1})
    ex.receipt(effects(out)[0], {"amount": 11})
    assert ex.status == "failed"
    assert ex.engine["summary"]["failures"][0]["error"]["code"] == "policy.fail"


def test_policy_jump_and_break_with_set_iter() -> None:
    """A poll loop written with jump: count in iter, break when done."""
    definition = flow(
        [
            step(
                "poll",
                [
                    task(
                        "init", "noop", result=0, rules=[rule(None, "continue", set_iter={"n": 0})]
                    ),
                    task(
                        "tick",
                        "noop",
                        result="{{ iter.n + 1 }}",
                        rules=[
                            rule(
                                "{{ outcome.result >= 3 }}",
                                "break",
                                set_ctx={"done_at": "{{ outcome.result }}"},
                            ),
                            rule(None, "jump", to="tick", set_iter={"n": "{{ outcome.result }}"}),
                        ],
                    ),
                    task("never", "noop", result="unreachable"),
                ],
            )
        ]
    )
    ex = Execution()
    out = ex.start(definition)
    assert ex.status == "completed"
    assert ex.business["ctx"] == {"done_at": 3}
    assert ex.business["steps"]["poll"] == 3
    assert names(out).count("task.started") == 4
    evaluated = [e for e in events(out) if e["event"] == "policy.task.evaluated"]
    assert [e["do"] for e in evaluated] == ["continue", "jump", "jump", "break"]


def test_set_ctx_is_applied_before_set_iter() -> None:
    definition = flow(
        [
            step(
                "a",
                [
                    task(
                        "t",
                        "noop",
                        result=5,
                        rules=[
                            rule(
                                None,
                                "continue",
                                set_ctx={"x": "{{ outcome.result }}"},
                                set_iter={"y": "{{ ctx.x }}"},
                            )
                        ],
                    ),
                    task("u", "noop", result="{{ iter.y }}"),
                ],
            )
        ]
    )
    ex = Execution()
    ex.start(definition)
    assert ex.business["steps"]["a"] == 5


def test_when_false_skips_a_task_and_keeps_prev() -> None:
    definition = flow(
        [
            step(
                "a",
                [
                    task("one", "noop", result=1),
                    task("two", "noop", result=2, when="{{ false }}"),
                    task("three", "noop", result="{{ _prev }}"),
                ],
            )
        ]
    )
    ex = Execution()
    out = ex.start(definition)
    assert ex.business["steps"]["a"] == 1
    assert "task.skipped" in names(out)


def test_a_failing_when_is_false_and_recorded() -> None:
    definition = flow([step("a", [task("one", "noop", result=1, when="{{ nothing.here }}")])])
    ex = Execution()
    out = ex.start(definition)
    failed = [e for e in events(out) if e["event"] == "template.failed"]
    assert failed and failed[0]["task"] == "one"
    assert ex.status == "completed" and ex.business["steps"]["a"] is None


def test_a_failing_template_in_a_task_is_an_expression_error() -> None:
    definition = flow([step("a", [task("one", "noop", result="{{ nothing.here }} x")])])
    ex = Execution()
    ex.start(definition)
    assert ex.status == "failed"
    assert ex.engine["summary"]["failures"][0]["error"]["kind"] == "expression"


def test_echo_tool_kind_is_its_own_effect() -> None:
    ex = Execution()
    out = ex.start(flow([step("a", [task("e", "call", tool={"kind": "echo"}, args=[1, 2])])]))
    assert effects(out)[0].effect == ECHO and effects(out)[0].params["args"] == [1, 2]


def test_a_composite_task_keeps_its_attempt_count_across_its_body() -> None:
    """A poll written as a retried branch: its rules see the branch's attempt, not the body's."""
    poll = task(
        "poll",
        "branch",
        cases=[{"when": {"template": "{{ true }}"}, "tasks": [task("probe", "noop", result="p")]}],
        rules=[rule("{{ _attempt < 3 }}", "retry", attempts=5, backoff="none")],
    )
    ex = Execution()
    out = ex.start(flow([step("a", [poll])]))
    for _ in range(2):
        (timer,) = effects(out)
        out = ex.fire(timer)
    assert ex.status == "completed"
    started = [e for e in events(out) if e["event"] == "task.started" and e["task"] == "poll"]
    assert started[0]["attempt"] == 3


def test_an_ok_outcome_carries_the_tools_protocol_details() -> None:
    seen = rule(None, "continue", set_ctx={"status": "{{ outcome.http.status }}"})
    ex, out = _start(policy={"rules": [seen]})
    ex.receipt(effects(out)[0], {"status": 201, "http": {"status": 201, "headers": {}}})
    assert ex.status == "completed" and ex.business["ctx"] == {"status": 201}
