"""NoETL 2.13.1's template rules, context by context (`aos.flow/2`, spec/11 §3.6, spec/12 §6):
the routing contexts (admission, arcs, a loop's `in`, a step's `set_ctx`) render with strict
undefined; the pipeline (task fields, `args`, tool fields, a task's `when`, policy rules) with
Jinja's lenient undefined; `| tojson` gives text everywhere. An `aos.flow/1` definition keeps
strict undefined everywhere and reads `| tojson` back, as it always did."""

from __future__ import annotations

from typing import Any

import pytest

from tests.flow_interpreter.harness import (
    Execution,
    arc,
    effects,
    events,
    flow,
    rule,
    step,
    task,
)

V2 = "aos.flow/2"


def _args(template: Any, workload: Any = None, format: str = V2) -> Any:
    """The args a call renders from `template`, or the execution's error."""
    ex = Execution()
    call = task("c", "call", tool={"kind": "echo"}, args={"v": template})
    out = ex.start(flow([step("a", [call])], format=format), workload or {})
    if ex.status != "running":
        return ex.engine["summary"]["failures"][0]["error"]["code"]
    (effect,) = effects(out)
    return effect.params["args"]["v"]


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ a.x if a else b.x }}", 2),  # a undefined: falsy, the else branch
        ("{{ missing }}", ""),
        ("{{ missing.deep.path }}", ""),
        ("{{ workload.b.nothing }}", ""),
        ("{{ missing | default('d') }}", "d"),
        ("{{ missing == 1 }}", False),
        ("{{ missing | length }}", 0),
        ("{% for x in missing %}{{ x }}{% endfor %}", ""),
        ("n={{ missing }}", "n="),
        ("{{ missing | tojson }}", "null"),
        ("{{ {'b': 1, 'a': [1]} | tojson }}", '{"b": 1, "a": [1]}'),  # NoETL's text, kept
        ("{{ [1, 'é'] | tojson }}", '[1, "\\u00e9"]'),
        ("{{ workload.b | tojson }}", '{"x": 2}'),
        ("{{ b.x + 1 }}", 3),
        ("{{ workload.b }}", {"x": 2}),
    ],
)
def test_the_pipeline_renders_with_lenient_undefined(template: str, expected: Any) -> None:
    assert _args(template, {"b": {"x": 2}}) == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ a.x if a else b.x }}", "template"),
        ("{{ missing }}", "template"),
        ("{{ {'a': [1]} | tojson }}", {"a": [1]}),
    ],
)
def test_aos_flow_1_keeps_strict_undefined_and_reads_tojson_back(
    template: str, expected: Any
) -> None:
    assert _args(template, {"b": {"x": 2}}, format="aos.flow/1") == expected


def test_an_error_in_the_pipeline_is_still_the_tasks_expression_error() -> None:
    assert _args("{{ missing + 1 }}") == "template"  # lenient, but arithmetic on it fails


def test_arcs_are_strict_and_a_failing_when_is_false_and_recorded() -> None:
    ex = Execution()
    arcs = [arc("b", "{{ not missing }}"), arc("c", "{{ missing is undefined }}")]
    out = ex.start(flow([step("a", arcs=arcs), step("b"), step("c")], format=V2))
    assert ex.status == "completed"
    assert set(ex.business["steps"]) == {"a", "c"}
    failed = [e for e in events(out) if e["event"] == "template.failed"]
    assert [e["to"] for e in failed] == ["b"]


def test_admission_is_strict() -> None:
    ex = Execution()
    out = ex.start(flow([step("a", admit="{{ not missing }}")], format=V2))
    assert "a" not in ex.business["steps"]
    assert "template.failed" in [e["event"] for e in events(out)]


def test_policy_rules_and_a_tasks_when_are_lenient() -> None:
    ex = Execution()
    rules = [
        rule("{{ not outcome.result.more }}", set_ctx={"x": "{{ a.x if a else 'else' }}"}),
    ]
    tasks = [
        task("v", "noop", result={"n": 1}, rules=rules),
        task("w", "noop", result="ran", when="{{ not missing }}"),
    ]
    ex.start(flow([step("s", tasks)], format=V2))
    assert ex.status == "completed"
    assert ex.business["ctx"] == {"x": "else"}
    assert ex.business["steps"]["s"] == "ran"


def test_a_loops_in_is_strict() -> None:
    ex = Execution()
    ex.start(flow([step("a", loop={"in": "{{ missing }}"})], format=V2))
    assert ex.status == "failed"
    assert ex.engine["summary"]["failures"][0]["error"]["code"] == "loop.in"


def test_a_steps_set_ctx_is_strict() -> None:
    ex = Execution()
    ex.start(flow([step("a", set_ctx={"x": "{{ missing }}"})], format=V2))
    assert ex.status == "failed"
    assert ex.engine["summary"]["failures"][0]["error"]["code"] == "step.set_ctx"
