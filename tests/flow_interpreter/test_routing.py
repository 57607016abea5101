"""Branch and repeat tasks, arcs, joins, admission, quiescence and final status."""

from __future__ import annotations

from tests.flow_interpreter.harness import (
    Execution,
    arc,
    effects,
    events,
    flow,
    names,
    step,
    task,
)


def test_branch_runs_the_first_true_case_else_the_else() -> None:
    branch = task(
        "route",
        "branch",
        cases=[
            {
                "when": {"template": "{{ workload.n > 10 }}"},
                "tasks": [task("big", "noop", result="big")],
            },
            {
                "when": {"template": "{{ workload.n > 5 }}"},
                "tasks": [task("mid", "noop", result="mid")],
            },
        ],
        **{"else": [task("small", "noop", result="small")]},
    )
    definition = flow([step("a", [branch, task("after", "noop", result="{{ _prev }}!")])])
    for n, expected in ((20, "big!"), (7, "mid!"), (1, "small!")):
        ex = Execution()
        ex.start(definition, {"n": n})
        assert ex.business["steps"]["a"] == expected


def test_a_branch_case_that_waits_resumes_inside_the_case() -> None:
    branch = task(
        "route",
        "branch",
        cases=[
            {
                "when": None,
                "tasks": [
                    task("c", "call", tool={"kind": "echo"}),
                    task("after_call", "noop", result="{{ _prev.v }}"),
                ],
            },
        ],
    )
    ex = Execution()
    out = ex.start(flow([step("a", [branch, task("last", "noop", result="{{ _prev }}+")])]))
    stack = ex.engine["tokens"]["k1"]["frames"][0]["stack"]
    assert [b["list"] for b in stack] == [["tasks"], ["tasks", 0, "cases", 0, "tasks"]]
    ex.receipt(effects(out)[0], {"v": "x"})
    assert ex.business["steps"]["a"] == "x+"


def test_repeat_runs_the_body_per_item_with_an_iteration_context() -> None:
    body = [
        task(
            "line",
            "noop",
            result="{{ line.sku }}#{{ iter.index }}{{ '<' if iter.first }}{{ '>' if iter.last }}",
        ),
    ]
    definition = flow(
        [
            step(
                "a",
                [task("each", "repeat", over="{{ workload.lines }}", **{"as": "line"}, tasks=body)],
            )
        ]
    )
    ex = Execution()
    ex.start(definition, {"lines": [{"sku": "A"}, {"sku": "B"}, {"sku": "C"}]})
    assert ex.business["steps"]["a"] == ["A#0<", "B#1", "C#2>"]


def test_repeat_with_a_wait_in_its_body_keeps_its_iteration() -> None:
    body = [task("c", "call", tool={"kind": "echo"}, args={"item": "{{ item }}"})]
    definition = flow([step("a", [task("each", "repeat", over=[1, 2], tasks=body)])])
    ex = Execution()
    out = ex.start(definition)
    assert effects(out)[0].params["args"] == {"item": 1}
    repeat = ex.engine["tokens"]["k1"]["frames"][0]["stack"][1]["repeat"]
    assert repeat["index"] == 0 and repeat["items"] == [1, 2]
    out = ex.receipt(effects(out)[0], "r1")
    assert effects(out)[0].params["args"] == {"item": 2}
    ex.receipt(effects(out)[0], "r2")
    assert ex.business["steps"]["a"] == ["r1", "r2"]


def test_exclusive_takes_the_first_matching_arc_with_args_rendered_in_the_source() -> None:
    definition = flow(
        [
            step(
                "a",
                [task("n", "noop", result=3)],
                arcs=[
                    arc("b", "{{ a > 5 }}", {"from": "first"}),
                    arc("c", "{{ a > 1 }}", {"from": "second", "value": "{{ a * 10 }}"}),
                    arc("d", None, {"from": "third"}),
                ],
            ),
            step("b", [task("n", "noop", result="{{ args }}")]),
            step("c", [task("n", "noop", result="{{ args }}")]),
            step("d", [task("n", "noop", result="{{ args }}")]),
        ]
    )
    ex = Execution()
    out = ex.start(definition)
    assert ex.business["steps"] == {"a": 3, "c": {"from": "second", "value": 30}}
    evaluated = [e for e in events(out) if e["event"] == "next.evaluated"]
    assert evaluated[0]["to"] == ["c"]


def test_inclusive_takes_every_matching_arc() -> None:
    definition = flow(
        [
            step(
                "a",
                [task("n", "noop", result=3)],
                mode="inclusive",
                arcs=[
                    arc("b", "{{ a > 5 }}"),
                    arc("c", "{{ a > 1 }}", {"k": "c"}),
                    arc("d", None, {"k": "d"}),
                ],
            ),
            step("b", [task("n", "noop", result="{{ args }}")]),
            step("c", [task("n", "noop", result="{{ args.k }}")]),
            step("d", [task("n", "noop", result="{{ args.k }}")]),
        ]
    )
    ex = Execution()
    ex.start(definition)
    assert ex.business["steps"] == {"a": 3, "c": "c", "d": "d"}
    assert ex.engine["summary"]["branches_completed"] == 2


def test_jsonpath_guards_on_arcs() -> None:
    definition = flow(
        [
            step(
                "a",
                [task("n", "noop", result={"ok": False, "items": [1]})],
                mode="inclusive",
                arcs=[
                    arc("b", "$.a.items[0]"),
                    arc("c", "$.a.ok"),
                    arc("d", "$.a.missing"),
                ],
            ),
            step("b"),
            step("c"),
            step("d"),
        ]
    )
    ex = Execution()
    out = ex.start(definition)
    assert next(e["to"] for e in events(out) if e["event"] == "next.evaluated") == ["b"]


def test_inclusive_fork_and_join_all_waits_for_every_source() -> None:
    definition = flow(
        [
            step(
                "fork",
                mode="inclusive",
                arcs=[arc("left", args={"n": 1}), arc("right", args={"n": 2})],
            ),
            step(
                "left",
                [task("c", "call", tool={"kind": "echo"}, args="{{ args.n }}")],
                arcs=[arc("join", args={"got": "{{ left }}"})],
            ),
            step(
                "right",
                [task("n", "noop", result="R")],
                arcs=[arc("join", args={"got": "{{ right }}"})],
            ),
            step(
                "join",
                [
                    task(
                        "n",
                        "noop",
                        result="{{ args.left.got }}+{{ args.right.got }}|{{ inputs | length }}",
                    )
                ],
                join="all",
            ),
        ]
    )
    ex = Execution()
    out = ex.start(definition)
    assert ex.engine["joins"] == {"join": {"right": {"got": "R"}}}
    assert "join.waiting" in names(out)
    assert ex.status == "running"
    ex.receipt(effects(out)[0], "L")
    assert ex.business["steps"]["join"] == "L+R|2"
    assert ex.status == "completed"


def test_a_join_that_can_never_complete_fails_at_quiescence() -> None:
    definition = flow(
        [
            step("fork", mode="inclusive", arcs=[arc("left"), arc("right", "{{ false }}")]),
            step("left", arcs=[arc("join")]),
            step("right", arcs=[arc("join")]),
            step("join", join="all"),
        ],
        failure_mode="best_effort",
    )
    ex = Execution()
    ex.start(definition)
    assert ex.status == "failed"
    assert ex.engine["summary"]["failures"][0]["error"]["code"] == "join.incomplete"


def test_implicit_join_merges_a_token_into_the_running_step() -> None:
    definition = flow(
        [
            step("fork", mode="inclusive", arcs=[arc("slow"), arc("fast")]),
            step("fast", arcs=[arc("slow")]),
            step("slow", [task("w", "wait_signal", signal="go")]),
        ]
    )
    ex = Execution()
    out = ex.start(definition)
    assert "token.merged" in names(out)
    assert [t["step"] for t in ex.engine["tokens"].values()] == ["slow"]
    ex.signal("go")
    assert ex.status == "completed"
    assert ex.engine["summary"]["steps_started"] == 3


def test_admission_keeps_a_token_pending_until_a_ctx_change_admits_it() -> None:
    definition = flow(
        [
            step("fork", mode="inclusive", arcs=[arc("gate"), arc("work")]),
            step(
                "gate",
                admit="{{ ctx.ready is defined and ctx.ready }}",
                tasks=[task("n", "noop", result="in")],
            ),
            step(
                "work",
                [
                    task("w", "wait_signal", signal="go"),
                    task("open", "assign", set={"ready": True}),
                ],
            ),
        ]
    )
    ex = Execution()
    out = ex.start(definition)
    admits = [e for e in events(out) if e["event"] == "policy.admit.evaluated"]
    assert admits == [
        {"event": "policy.admit.evaluated", "step": "gate", "token": "k2", "admitted": False}
    ]
    assert ex.engine["tokens"]["k2"]["status"] == "pending"
    out = ex.signal("go")
    admits = [e for e in events(out) if e["event"] == "policy.admit.evaluated"]
    assert admits[-1]["admitted"] is True
    assert ex.business["steps"]["gate"] == "in" and ex.status == "completed"


def test_a_pending_token_never_admitted_is_dropped_at_quiescence() -> None:
    definition = flow([step("a", arcs=[arc("b")]), step("b", admit="{{ false }}")])
    ex = Execution()
    out = ex.start(definition)
    assert ex.status == "completed"
    assert {
        "event": "token.discarded",
        "step": "b",
        "token": "k2",
        "reason": "quiescent",
    } in events(out)


def test_on_deny_discard_drops_the_token() -> None:
    definition = flow(
        [step("a", arcs=[arc("b")]), step("b", admit="{{ false }}")], on_deny="discard"
    )
    ex = Execution()
    out = ex.start(definition)
    assert {"event": "token.discarded", "step": "b", "token": "k2", "reason": "denied"} in events(
        out
    )
    assert ex.status == "completed"


def test_no_match_ends_the_branch_and_no_next_is_error_fails_it() -> None:
    steps = [step("a", arcs=[arc("b", "{{ false }}")]), step("b")]
    ex = Execution()
    ex.start(flow(steps))
    assert ex.status == "completed"
    strict = Execution()
    strict.start(flow(steps, no_next_is_error=True))
    assert strict.status == "failed"
    assert strict.engine["summary"]["failures"][0]["error"]["code"] == "next.no_match"
    terminal = Execution()
    terminal.start(flow([step("only")], no_next_is_error=True))
    assert terminal.status == "completed"  # a step without arcs ends its branch normally


def test_a_failed_step_takes_an_arc_that_matches_its_failure() -> None:
    definition = flow(
        [
            step(
                "a",
                [task("f", "fail", message="bad {{ workload.x }}", kind="transport")],
                arcs=[
                    arc("ok_path"),
                    arc(
                        "recover",
                        "{{ event.name == 'step.failed' }}",
                        {"why": "{{ event.payload.message }}"},
                    ),
                ],
            ),
            step("ok_path"),
            step("recover", [task("n", "noop", result="{{ args.why }}")]),
        ]
    )
    ex = Execution()
    ex.start(definition, {"x": 1})
    assert ex.status == "completed"
    assert ex.business["steps"] == {"recover": "bad 1"}


def test_best_effort_with_a_failed_and_a_completed_branch_is_partial() -> None:
    definition = flow(
        [
            step("fork", mode="inclusive", arcs=[arc("good"), arc("bad")]),
            step("good", [task("n", "noop", result=1)]),
            step("bad", [task("f", "fail", message="no")]),
        ],
        failure_mode="best_effort",
    )
    ex = Execution()
    ex.start(definition)
    assert ex.status == "partial"
    assert ex.business["steps"]["good"] == 1
    fast = Execution()
    fast.start(flow(definition["steps"]))
    assert fast.status == "failed"


def test_fail_fast_cancels_the_other_branches() -> None:
    definition = flow(
        [
            step("fork", mode="inclusive", arcs=[arc("slow"), arc("bad")]),
            step("slow", [task("c", "call", tool={"kind": "echo"})]),
            step("bad", [task("f", "fail", message="no")]),
        ]
    )
    ex = Execution()
    out = ex.start(definition)
    assert ex.status == "failed"
    assert out.cancel == [effects(out)[0].issuer_ref]
    assert ex.engine["waits"] == {}


def test_final_step_runs_once_after_quiescence_with_a_summary() -> None:
    definition = flow(
        [
            step("fork", mode="inclusive", arcs=[arc("good"), arc("bad")]),
            step("good", [task("n", "noop", result=1)]),
            step("bad", [task("f", "fail", message="no")]),
            step(
                "report",
                [
                    task(
                        "n",
                        "noop",
                        result={
                            "failed": "{{ args.branches.failed }}",
                            "done": "{{ args.branches.completed }}",
                            "first": "{{ args.failures[0].step }}",
                            "good": "{{ args.results.good }}",
                            "exec": "{{ args.execution.id }}",
                        },
                    )
                ],
            ),
        ],
        failure_mode="best_effort",
        final_step="report",
    )
    ex = Execution()
    out = ex.start(definition, parent={"exec": "p", "token": "w1"})
    assert ex.business["steps"]["report"] == {
        "failed": 1,
        "done": 1,
        "first": "bad",
        "good": 1,
        "exec": "e1",
    }
    assert ex.status == "partial"
    assert names(out).count("playbook.finished") == 1
    (ended,) = [e for e in out.domain_events if e.schema == "aos/FlowEnded@1"]
    assert ended.value["result"] == ex.business["steps"]["report"]
    assert ended.value["status"] == "partial"
    assert ended.value["error"]["message"] == "no"
