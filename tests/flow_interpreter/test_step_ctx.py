"""A step's own `set_ctx` (spec/11 §3.4, `aos.flow/2`): after the step's tasks, before its
arcs, with the step's result in scope; after each iteration of a loop step; never in an
`aos.flow/1` definition, whose executions keep the meaning they had."""

from __future__ import annotations

from tests.flow_interpreter.harness import Execution, arc, effects, flow, names, step, task

V2 = "aos.flow/2"


def test_set_ctx_runs_after_the_tasks_and_before_the_arcs() -> None:
    ex = Execution()
    first = step(
        "fetch",
        [task("get", "call", tool={"kind": "echo"}, args={"page": "{{ ctx.page | default(1) }}"})],
        set_ctx={"page": "{{ fetch.page + 1 }}", "on": "{{ event.name }}"},
        arcs=[arc("fetch", "{{ ctx.page <= 3 }}"), arc("done")],
    )
    out = ex.start(flow([first, step("done")], format=V2))
    pages = []
    while ex.status == "running":
        (call,) = effects(out)
        pages.append(call.params["args"]["page"])
        out = ex.receipt(call, call.params["args"])
    assert pages == [1, 2, 3]
    assert ex.business["ctx"] == {"page": 4, "on": "step.done"}
    assert ex.status == "completed"
    history = names(out)
    assert history.index("task.done") < history.index("step.done") < history.index("next.evaluated")


def test_the_error_is_in_scope_after_a_failure() -> None:
    ex = Execution()
    failing = step(
        "a",
        [task("boom", "fail", message="down", kind="transport")],
        set_ctx={"why": "{{ event.payload.message }}"},
        arcs=[arc("b", "{{ event.name == 'step.failed' and ctx.why == 'down' }}")],
    )
    ex.start(flow([failing, step("b")], format=V2))
    assert ex.status == "completed"
    assert ex.business["ctx"] == {"why": "down"} and "b" in ex.business["steps"]


def test_a_loop_step_sets_ctx_after_each_iteration_and_routes_once() -> None:
    ex = Execution()
    each = step(
        "each",
        [task("v", "noop", result="{{ iter.item * 2 }}")],
        loop={"in": [1, 2, 3]},
        set_ctx={"seen": "{{ (ctx.seen | default([])) + [each] }}"},
        arcs=[arc("after")],
    )
    ex.start(flow([each, step("after", [task("n", "noop", result="{{ ctx.seen }}")])], format=V2))
    assert ex.status == "completed"
    assert ex.business["steps"]["after"] == [2, 4, 6]
    assert ex.business["steps"]["each"]["results"] == [2, 4, 6]


def test_a_set_ctx_that_fails_fails_the_step_and_changes_nothing() -> None:
    ex = Execution()
    bad = step(
        "a",
        [task("v", "noop", result="text")],
        set_ctx={"ok": 1, "n": "{{ a + 1 }}"},
    )
    ex.start(flow([bad], format=V2))
    assert ex.status == "failed"
    assert ex.business["ctx"] == {} and "a" not in ex.business["steps"]
    (failure,) = ex.engine["summary"]["failures"]
    assert failure["error"]["code"] == "step.set_ctx"


def test_an_aos_flow_1_step_has_no_set_ctx() -> None:
    """A definition written before `aos.flow/2` never held one; the interpreter reads none."""
    ex = Execution()
    ex.start(flow([step("a", [task("v", "noop", result=1)], set_ctx={"n": 1})]))
    assert ex.status == "completed" and ex.business["ctx"] == {}
