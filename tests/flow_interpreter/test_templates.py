"""Templates (spec/11 §3.6): native paths, literal read-back, filters, truthiness,
namespaces, and results stored by reference."""

from __future__ import annotations

from typing import Any

import pytest
from aos_flow import blobs as blobs_module
from aos_flow import workflow as app

from aos_sdk import envelope as sdk_envelope
from aos_sdk import testing
from tests.flow_interpreter.harness import (
    EXEC_EVENT,
    Execution,
    arc,
    effects,
    envelope,
    events,
    flow,
    step,
    store,
    task,
)


def _value(template: Any, workload: Any = None, **ctx: Any) -> Any:
    """The result of a noop rendering `template` (after an assign of `ctx`)."""
    tasks = [task("set", "assign", set=ctx)] if ctx else []
    ex = Execution()
    ex.start(flow([step("a", [*tasks, task("v", "noop", result=template)])]), workload or {})
    assert ex.status == "completed", ex.engine["summary"]["failures"]
    return ex.business["steps"]["a"]


def test_a_plain_path_yields_the_native_value() -> None:
    workload = {"order": {"lines": [{"qty": 2, "tags": ["a"]}], "id": "7"}}
    assert _value("{{ workload.order.lines[0] }}", workload) == {"qty": 2, "tags": ["a"]}
    assert _value("{{ order.lines[0].tags }}", workload) == ["a"]
    assert _value("{{ workload.order.id }}", workload) == "7"  # text stays text


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ 1 + 2 }}", 3),
        ("{{ 1.5 * 2 }}", 3.0),
        ("{{ 'true' }}", True),
        ("{{ 'None' }}", None),
        ("{{ [1, 2] }}", [1, 2]),
        ("{{ {'a': 1} }}", {"a": 1}),
        ("{{ '{\"a\": [1, null]}' }}", {"a": [1, None]}),
        ("n={{ 1 }}", "n=1"),
        ("{{ 'a' }}-{{ 'b' }}", "a-b"),
        ("{% if true %}yes{% endif %}", "yes"),
    ],
)
def test_rendered_text_is_read_back_as_a_literal(template: str, expected: Any) -> None:
    assert _value(template) == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("j={{ {'b': 1, 'a': [2]} | tojson }}", 'j={"a":[2],"b":1}'),
        ("{{ 'hi' | b64encode }}", "aGk="),
        ("{{ '42' | int + 1 }}", 43),
        ("{{ coalesce(none, missing, 3) }}", 3),
        ("{{ none | coalesce('d') }}", "d"),
        ("{{ concat([1], [2, 3]) }}", [1, 2, 3]),
        ("{{ concat('a', 1) }}", "a1"),
        ("{{ add(2, 3) }}", 5),
        ("{{ if(true, 'y', 'n') }}", "y"),
        ("{{ 0 | if('y', 'n') }}", "n"),
        ("{{ is_null_or_whitespace('  ') }}", True),
        ("{{ is_null_or_whitespace('x') }}", False),
        ("{{ length([1, 2]) }} {{ [1] | length }}", "2 1"),
        ("{{ upper('ab') }}", "AB"),
        ("{{ first([4, 5]) }}", 4),
        (
            "{{ merge_objects({'a': {'x': 1}}, {'a': {'y': 2}, 'b': 3}) }}",
            {"a": {"x": 1, "y": 2}, "b": 3},
        ),
        ("{{ missing | default('d') }}", "d"),
    ],
)
def test_filters_and_functions(template: str, expected: Any) -> None:
    assert _value(template) == expected


@pytest.mark.parametrize(
    ("when", "runs"),
    [
        ("{{ 'no' }}", False),
        ("{{ 'NONE' }}", False),
        ("{{ '0' }}", False),
        ("{{ '' }}", False),
        ("{{ 'False' }}", False),
        ("{{ 'yes' }}", True),
        ("{{ 1 }}", True),
        ("{{ [] }}", False),
        ("ctx.flag", True),
        ("not ctx.flag", False),
    ],
)
def test_truthiness_of_when(when: str, runs: bool) -> None:
    result = _value_when(when)
    assert result == ("ran" if runs else None)


def _value_when(when: str) -> Any:
    ex = Execution()
    ex.start(
        flow(
            [
                step(
                    "a",
                    [
                        task("set", "assign", set={"flag": True}),
                        task("v", "noop", result="ran", when=when),
                    ],
                )
            ]
        )
    )
    return ex.business["steps"]["a"] if ex.business["steps"]["a"] == "ran" else None


def test_map_keys_win_over_methods() -> None:
    assert (
        _value("{{ workload.d.items }}-{{ workload.d['keys'] }}", {"d": {"items": 1, "keys": 2}})
        == "1-2"
    )


def test_the_sandbox_refuses_mutation() -> None:
    ex = Execution()
    ex.start(flow([step("a", [task("v", "noop", result="{{ ctx.l.append(1) }}x")])]))
    assert ex.status == "failed"
    assert ex.engine["summary"]["failures"][0]["error"]["kind"] == "expression"


def test_namespaces() -> None:
    ex = Execution()
    definition = flow(
        [
            step(
                "a",
                [
                    task(
                        "v",
                        "noop",
                        result={
                            "execution": "{{ execution.id }}/{{ execution.flow }}/{{ execution.version }}",
                            "ref": "{{ business_ref }}",
                            "defined": "{{ iter is defined and args is defined and event is none }}",
                        },
                    )
                ],
            )
        ]
    )
    ex.start(definition, business_ref="B")
    assert ex.business["steps"]["a"] == {"execution": "e1/t/flow/1", "ref": "B", "defined": True}


# -- results by reference ---------------------------------------------------------------------


def test_a_ref_result_stays_a_ref_and_is_loaded_when_a_template_walks_into_it() -> None:
    ex = Execution()
    big = {"rows": [{"id": 1}, {"id": 2}], "count": 2}
    digest = store(ex.blobs, big)
    ref = {"$ref": digest, "size": 99}
    definition = flow(
        [
            step("fetch", [task("get", "call", tool={"kind": "http"})], arcs=[arc("use")]),
            step(
                "use",
                [
                    task("first", "noop", result="{{ fetch.rows[1].id }}"),
                    task(
                        "jinja",
                        "noop",
                        result="{{ steps.fetch.rows | length }}/{{ fetch['count'] }}/{{ _prev }}",
                    ),
                    task(
                        "each",
                        "repeat",
                        over="{{ fetch }}",
                        tasks=[task("n", "noop", result="{{ item.count }}")],
                    ),
                ],
                result="{{ results }}",
            ),
        ]
    )
    blobs_module._DECODED.clear()
    out = ex.start(definition)
    out = ex.receipt(effects(out)[0], ref)
    assert ex.status == "completed", ex.engine["summary"]
    assert ex.business["steps"]["fetch"] == ref  # the state keeps the reference
    assert ex.business["steps"]["use"] == {"first": 2, "jinja": "2/2/2", "n": 2, "each": [2]}


def test_a_missing_ref_is_a_read_request() -> None:
    ex = Execution()
    digest = store(ex.blobs, {"x": 1})
    definition = flow(
        [
            step(
                "a",
                [
                    task("get", "call", tool={"kind": "http"}),
                    task("x", "noop", result="{{ _prev.x }}"),
                ],
            )
        ]
    )
    out = ex.start(definition)
    call = effects(out)[0]
    blobs_module._DECODED.clear()
    event = {"$tag": "Receipt", "$value": envelope("e1", call, {"$ref": digest, "size": 3})}
    ctx = testing.make_ctx(workflow="aos/FlowExec@1", now_ns=ex.now_ns, key="e1")
    data = testing.input_bytes(ex.state, testing.Event(EXEC_EVENT, event, key="e1"), ctx)
    raw = sdk_envelope.decode_output(app.flow.step_bytes(data))
    assert digest in raw.reads
    served = testing.step(
        app.flow, ex.state, testing.Event(EXEC_EVENT, event, key="e1"), ctx, blobs=ex.blobs
    )
    assert served.state["business"]["steps"]["a"] == 1
    assert served.state["business"]["steps"] != {"$ref": digest}
    assert events(served)[-1]["status"] == "completed"


def test_one_jinja_environment_reads_each_steps_own_blobs() -> None:
    """The environment is shared by every step: a step whose blob was not sent asks for it,
    even when the step before it (another execution) rendered with that very blob."""
    definition = flow(
        [
            step(
                "a",
                [
                    task("get", "call", tool={"kind": "http"}),
                    task("x", "noop", result="{{ _prev.x * 10 }}"),
                ],
            )
        ]
    )
    first = Execution("e1")
    first.receipt(effects(first.start(definition))[0], {"$ref": store(first.blobs, {"x": 1})})
    assert first.business["steps"]["a"] == 10
    second = Execution("e2")
    call = effects(second.start(definition))[0]
    digest = store(second.blobs, {"x": 1})  # the first execution's blob
    blobs_module._DECODED.clear()
    event = {"$tag": "Receipt", "$value": envelope("e2", call, {"$ref": digest, "size": 3})}
    ctx = testing.make_ctx(workflow="aos/FlowExec@1", now_ns=second.now_ns, key="e2")
    data = testing.input_bytes(second.state, testing.Event(EXEC_EVENT, event, key="e2"), ctx)
    assert digest in sdk_envelope.decode_output(app.flow.step_bytes(data)).reads
    served = testing.step(
        app.flow, second.state, testing.Event(EXEC_EVENT, event, key="e2"), ctx, blobs=second.blobs
    )
    assert served.state["business"]["steps"]["a"] == 10


def test_jinja_literals_are_constants_not_paths() -> None:
    assert _value(
        {"t": "{{ true }}", "f": "{{ false }}", "n": "{{ none }}", "T": "{{ True }}"}
    ) == {
        "t": True,
        "f": False,
        "n": None,
        "T": True,
    }


def test_a_missing_path_reads_on_to_default_but_stays_strict_when_used() -> None:
    workload = {"a": {"x": 1}}
    assert _value("{{ workload.a.b.c | default(7) }}", workload) == 7
    assert _value("{{ workload.a.b['c'].d is defined }}", workload) is False
    ex = Execution()
    ex.start(flow([step("s", [task("v", "noop", result="n={{ workload.a.b.c }}")])]), workload)
    assert ex.status == "failed"
    ex = Execution()
    ex.start(flow([step("s", [task("v", "noop", result="{{ workload.a.b.c > 1 }}")])]), workload)
    assert ex.status == "failed"


def test_args_a_loop_item_and_the_execution_id_at_the_top_level() -> None:
    looped = step(
        "each",
        [
            task(
                "v",
                "noop",
                result={"x": "{{ x }}", "i": "{{ loop_index }}", "e": "{{ execution_id }}"},
            )
        ],
        loop={"in": "{{ workload.xs }}", "iterator": "x"},
        arcs=[arc("after", args={"n": 5})],
    )
    after = step("after", [task("v", "noop", result="{{ n }}")])
    ex = Execution()
    ex.start(flow([looped, after]), {"xs": ["a", "b"]})
    assert ex.status == "completed"
    assert ex.business["steps"]["each"]["results"] == [
        {"x": "a", "i": 0, "e": "e1"},
        {"x": "b", "i": 1, "e": "e1"},
    ]
    assert ex.business["steps"]["after"] == 5


def test_a_task_result_is_in_scope_by_name_in_aos_flow_2_only() -> None:
    """Above workload keys (and step results and args), below the named namespaces."""
    read = task("read", "noop", result="{{ [fetch.n, w, workload.w, results.fetch.n] }}")
    steps = [step("a", [task("fetch", "noop", result={"n": 1}), task("w", "noop", result=2), read])]
    ex = Execution()
    ex.start(flow(steps, format="aos.flow/2"), {"w": "workload"})
    assert ex.business["steps"]["a"] == [1, 2, "workload", 1]
    old = Execution()  # aos.flow/1: not in scope, as it never was
    old_read = task("read", "noop", result="{{ fetch.n }}")
    old.start(flow([step("a", [task("fetch", "noop", result={"n": 1}), old_read])]))
    assert old.status == "failed"
    assert "'fetch' is undefined" in old.engine["summary"]["failures"][0]["error"]["message"]
