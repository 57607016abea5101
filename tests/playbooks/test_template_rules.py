"""Templates as NoETL 2.13.1 renders them, context by context (spec/12 §6): a task's `args`
and fields and its policy render with Jinja's lenient undefined, arcs and admission with
strict undefined (a `when` that fails is false and recorded), `| tojson` gives text."""

from __future__ import annotations

from tests.playbooks.test_semantics import arcs, py, rules, run, step


def test_an_undefined_name_is_falsy_in_a_tasks_args() -> None:
    args = {
        "picked": "{{ a.x if a else b.x }}",
        "missing": "{{ nothing.here }}",
        "body": "{{ b | tojson }}",
    }
    done = run(
        step("s", py("result = [picked, missing, body, type(body).__name__]", args=args)),
        workload={"b": {"x": 2}},
    )
    assert done.status == "completed"
    assert done.steps["s"] == [2, "", '{"x": 2}', "str"]


def test_a_policy_renders_leniently() -> None:
    policy = rules(
        {
            "when": "{{ not outcome.result.more }}",
            "then": {"do": "continue", "set_ctx": {"cursor": "{{ outcome.result.next }}"}},
        }
    )
    done = run(step("s", py("result = {'n': 1}", spec=policy)))
    assert done.ctx == {"cursor": ""}


def test_arcs_are_strict_an_undefined_when_is_false_and_recorded() -> None:
    done = run(
        step("a", next=arcs({"step": "b", "when": "{{ not nothing }}"}, "c")),
        step("b"),
        step("c"),
    )
    assert "b" not in done.steps and "c" in done.steps
    [failed] = done.of("template.failed")
    assert failed["to"] == "b" and "nothing" in failed["error"]
