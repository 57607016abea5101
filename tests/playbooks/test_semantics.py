"""One test per rule of FLOWS.md §3 (seeds 000 and 003), each on a small playbook run by the
interpreter with the real python worker."""

from __future__ import annotations

from typing import Any

import yaml

from tests.playbooks.driver import Run, run_playbook


def py(code: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "python", "code": code, **fields}


def step(name: str, tool: Any = None, **fields: Any) -> dict[str, Any]:
    return {"step": name, "tool": tool if tool is not None else {"kind": "noop"}, **fields}


def arcs(*targets: Any, mode: str = "exclusive") -> dict[str, Any]:
    return {
        "spec": {"mode": mode},
        "arcs": [t if isinstance(t, dict) else {"step": t} for t in targets],
    }


def run(*steps: dict[str, Any], workload: Any = None, executor: Any = None) -> Run:
    doc: dict[str, Any] = {
        "apiVersion": "noetl.io/v2",
        "kind": "Playbook",
        "metadata": {"name": "t", "path": "t/semantics"},
        "workload": workload or {},
        "workflow": list(steps),
    }
    if executor is not None:
        doc["executor"] = executor
    return run_playbook(yaml.safe_dump(doc, sort_keys=False))


def rules(*rule_list: Any) -> dict[str, Any]:
    return {"policy": {"rules": list(rule_list)}}


def started(done: Run) -> list[str]:
    return [str(e["step"]) for e in done.of("step.started")]


# -- entry -----------------------------------------------------------------------------------


def test_entry_is_the_first_step_by_default() -> None:
    done = run(step("a"), step("b"))
    assert started(done) == ["a"] and done.status == "completed"


def test_entry_step_overrides_the_first() -> None:
    done = run(step("a"), step("b"), executor={"spec": {"entry_step": "b"}})
    assert started(done) == ["b"]


# -- admission ---------------------------------------------------------------------------------


def admit(when: str) -> dict[str, Any]:
    return {
        "policy": {
            "admit": {
                "rules": [
                    {"when": when, "then": {"allow": True}},
                    {"else": {"then": {"allow": False}}},
                ]
            }
        }
    }


def test_admission_allows_and_denies() -> None:
    allowed = run(step("a", spec=admit("{{ workload.go }}")), workload={"go": True})
    assert started(allowed) == ["a"]
    denied = run(step("a", spec=admit("{{ workload.go }}")), workload={"go": False})
    assert started(denied) == [] and denied.status == "completed"
    assert [e["admitted"] for e in denied.of("policy.admit.evaluated")] == [False]


def test_a_denied_token_stays_pending_until_ctx_admits_it() -> None:
    setter = py(
        "result = 1", spec=rules({"else": {"then": {"do": "continue", "set_ctx": {"ready": True}}}})
    )
    done = run(
        step("fork", next=arcs("gate", "setter", mode="inclusive")),
        step("gate", spec=admit("{{ ctx.ready | default(false) }}")),
        step("setter", setter),
    )
    verdicts = [e["admitted"] for e in done.of("policy.admit.evaluated") if e["step"] == "gate"]
    assert verdicts == [False, True] and "gate" in done.steps
    assert started(done).index("setter") < started(done).index("gate")


def test_on_deny_discard_drops_the_token() -> None:
    done = run(
        step("fork", next=arcs("gate", "setter", mode="inclusive")),
        step("gate", spec=admit("{{ ctx.ready | default(false) }}")),
        step(
            "setter", py("result = 1", spec=rules({"else": {"then": {"set_ctx": {"ready": True}}}}))
        ),
        executor={"spec": {"on_deny": "discard"}},
    )
    assert "gate" not in done.steps and "token.discarded" in done.names()


# -- routing -----------------------------------------------------------------------------------


def test_exclusive_takes_the_first_matching_arc() -> None:
    done = run(
        step(
            "a",
            next=arcs(
                {"step": "b", "when": "{{ false }}"}, {"step": "c", "when": "{{ true }}"}, "d"
            ),
        ),
        step("b"),
        step("c"),
        step("d"),
    )
    assert started(done) == ["a", "c"]


def test_inclusive_fans_out_to_every_matching_arc() -> None:
    done = run(
        step("a", next=arcs("b", {"step": "c", "when": "{{ false }}"}, "d", mode="inclusive")),
        step("b"),
        step("c"),
        step("d"),
    )
    assert sorted(started(done)) == ["a", "b", "d"]


def test_arc_args_are_rendered_at_the_source_and_immutable() -> None:
    done = run(
        step(
            "a",
            py("result = 1", spec=rules({"else": {"then": {"set_ctx": {"n": 1}}}})),
            next=arcs({"step": "b", "args": {"seen": "{{ ctx.n }}"}}),
        ),
        step(
            "b",
            [
                py(
                    "result = 2",
                    name="bump",
                    spec=rules({"else": {"then": {"set_ctx": {"n": 99}}}}),
                ),
                py(
                    "result = {'seen': seen, 'ctx': now}",
                    name="read",
                    args={"seen": "{{ args.seen }}", "now": "{{ ctx.n }}"},
                ),
            ],
        ),
    )
    assert done.steps["b"]["results"]["read"] == {"seen": 1, "ctx": 99}


def test_no_matching_arc_ends_the_branch_or_fails_it_when_asked() -> None:
    ended = run(step("a", next=arcs({"step": "b", "when": "{{ false }}"})), step("b"))
    assert ended.status == "completed" and started(ended) == ["a"]
    failed = run(
        step("a", next=arcs({"step": "b", "when": "{{ false }}"})),
        step("b"),
        executor={"spec": {"no_next_is_error": True}},
    )
    assert failed.status == "failed"


def test_implicit_join_merges_a_token_into_the_running_step() -> None:
    done = run(
        step("fork", next=arcs("quick", "slow", mode="inclusive")),
        step("quick", next=arcs("join")),
        step("slow", py("result = 'slow'"), next=arcs("join")),
        step("join", py("result = 'joined'")),
    )
    assert started(done).count("join") == 1 and "token.merged" in done.names()
    assert done.status == "completed"


def test_quiescence_waits_for_every_parallel_branch() -> None:
    done = run(
        step("fork", next=arcs("left", "right", mode="inclusive")),
        step("left", py("result = 'l'")),
        step("right", [py("result = 1"), py("result = 2")]),
    )
    assert done.status == "completed"
    assert done.names()[-1] == "playbook.finished"
    assert {"left", "right"} <= set(done.steps)


# -- final status and final_step -----------------------------------------------------------------


def test_an_unhandled_failure_fails_the_execution() -> None:
    done = run(step("a", py("raise ValueError('x')")))
    assert done.status == "failed"


def test_best_effort_is_partial_and_final_step_runs_once_with_a_summary() -> None:
    done = run(
        step("fork", next=arcs("good", "bad", mode="inclusive")),
        step("good", py("result = 1")),
        step("bad", py("raise ValueError('boom')")),
        step("summary", py("result = summary", args={"summary": "{{ args }}"})),
        executor={"spec": {"failure": {"mode": "best_effort"}, "final_step": "summary"}},
    )
    assert done.status == "partial"
    assert started(done).count("summary") == 1
    summary = done.steps["summary"]
    assert summary["execution"]["id"] == "e1" and summary["failures"][0]["step"] == "bad"


# -- task policies -------------------------------------------------------------------------------


def test_continue_retry_with_linear_backoff_and_fail() -> None:
    flaky = py(
        "import random\nraise ValueError('always')",
        spec=rules(
            {
                "when": "{{ outcome.status == 'error' }}",
                "then": {"do": "retry", "attempts": 3, "backoff": "linear", "delay": 2},
            },
        ),
    )
    done = run(step("a", flaky))
    assert len(done.of("task.attempt.failed")) == 2 and done.status == "failed"
    assert [b - a for a, b in zip([1000 * 10**9, *done.fired], done.fired, strict=False)] == [
        2 * 10**9,
        4 * 10**9,
    ]
    failing = run(step("a", py("result = 1", spec=rules({"else": {"then": {"do": "fail"}}}))))
    assert failing.status == "failed"


def test_jump_and_break_with_set_ctx_before_set_iter() -> None:
    count = {
        "name": "count",
        "kind": "noop",
        "spec": rules(
            {
                "when": "{{ (ctx.n | default(0)) < 3 }}",
                "then": {
                    "do": "jump",
                    "to": "count",
                    "set_ctx": {"n": "{{ (ctx.n | default(0)) + 1 }}"},
                    "set_iter": {"seen": "{{ ctx.n }}"},
                },
            },
            {"else": {"then": {"do": "break"}}},
        ),
    }
    never = py("raise RuntimeError('after break')", name="never")
    done = run(step("loop", [count, never]))
    assert done.status == "completed" and done.ctx == {"n": 3}
    assert not [e for e in done.of("task.started") if e["task"] == "never"]


def test_a_policy_rule_can_retry_an_ok_outcome() -> None:
    again = {
        "do": "retry",
        "attempts": 5,
        "delay": 0,
        "set_ctx": {"n": "{{ outcome.result.n + 1 }}"},
    }
    poll = py(
        "result = {'n': n}",
        args={"n": "{{ ctx.n | default(0) }}"},
        spec=rules({"when": "{{ outcome.result.n < 2 }}", "then": again}),
    )
    done = run(step("poll", poll))
    assert done.steps["poll"] == {"n": 2}


# -- loops ---------------------------------------------------------------------------------------


def in_flight_peak(done: Run, step_name: str) -> int:
    peak = current = 0
    for event in done.history:
        if event.get("step") != step_name:
            continue
        if event["event"] == "loop.iteration.started":
            current += 1
            peak = max(peak, current)
        elif event["event"] in ("loop.iteration.done", "loop.iteration.failed"):
            current -= 1
    return peak


def test_parallel_loops_never_run_more_than_max_in_flight() -> None:
    loop = {
        "in": "{{ workload.items }}",
        "iterator": "x",
        "spec": {"mode": "parallel", "max_in_flight": 2},
    }
    done = run(
        step("each", py("result = x * 10", args={"x": "{{ iter.x }}"}), loop=loop),
        workload={"items": [1, 2, 3, 4, 5]},
    )
    assert done.steps["each"]["results"] == [10, 20, 30, 40, 50]
    assert in_flight_peak(done, "each") == 2


def test_sequential_loops_run_one_at_a_time_and_route_on_loop_done() -> None:
    loop = {"in": "{{ workload.items }}", "iterator": "x", "spec": {"mode": "sequential"}}
    done = run(
        step(
            "each",
            py("result = x", args={"x": "{{ iter.x }}"}),
            loop=loop,
            next=arcs({"step": "after", "when": "{{ event.name == 'loop.done' }}"}),
        ),
        step("after", py("result = stats", args={"stats": "{{ each.stats }}"})),
        workload={"items": ["a", "b"]},
    )
    assert in_flight_peak(done, "each") == 1
    assert done.steps["after"] == {"total": 2, "success": 2, "failed": 0}


def test_a_loop_over_a_mapping_is_one_item() -> None:
    loop = {"in": "{{ workload.one }}", "iterator": "x"}
    done = run(step("each", loop=loop), workload={"one": {"k": 1}})
    assert done.steps["each"]["stats"]["total"] == 1


# -- templates -----------------------------------------------------------------------------------


def test_template_coercion() -> None:
    args = {
        "native": "{{ workload.n }}",
        "number": "{{ workload.n + 1 }}",
        "flag": "{{ workload.n > 1 }}",
        "text": "n={{ workload.n }}",
        "top": "{{ n }}",
        "list": "{{ workload.xs | tojson }}",
    }
    done = run(step("a", py("result = input_data", args=args)), workload={"n": 2, "xs": [1, "a"]})
    assert done.steps["a"] == {
        "native": 2,
        "number": 3,
        "flag": True,
        "text": "n=2",
        "top": 2,
        "list": '[1, "a"]',  # `| tojson` gives NoETL's text (spec/12 §6)
    }


def test_a_when_that_fails_to_render_is_false_and_recorded() -> None:
    done = run(
        step("a", next=arcs({"step": "b", "when": "{{ nothing.here > 1 }}"}, "c")),
        step("b"),
        step("c"),
    )
    assert started(done) == ["a", "c"] and "template.failed" in done.names()


def test_call_done_is_read_as_step_done() -> None:
    done = run(
        step(
            "a",
            py("result = 1"),
            next=arcs({"step": "b", "when": "{{ event.name == 'call.done' }}"}),
        ),
        step("b"),
    )
    assert started(done) == ["a", "b"]


def test_results_over_max_payload_bytes_are_references_that_templates_load() -> None:
    done = run(
        step("big", py("result = {'rows': list(range(200))}"), next=arcs("use")),
        step("use", py("result = n", args={"n": "{{ big.rows | length }}"})),
        executor={"spec": {"policy": {"limits": {"max_payload_bytes": 100}}}},
    )
    assert done.status == "completed"
    assert set(done.steps["big"]) == {"$ref", "size"}
    assert done.steps["use"] == 200
