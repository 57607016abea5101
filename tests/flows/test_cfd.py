"""The canonical flow definition (spec/11-flows.md §1): loading, shorthands, the canonical form
and its hash, every check with its code and path, and every bound at its edge."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from aos.flows.define.cfd import (
    ACTIONS,
    FlowDefinition,
    canonical_value,
    decode_definition,
    definition_hash,
    encode_definition,
    load_definition,
)
from aos.flows.errors import FlowCheckError, FlowDecodeError, FlowError, FlowTooLargeError
from aos.flows.limits import (
    DEFINITION_BYTES_MAX,
    EXECUTION_LIMITS,
    LIMITS_WRITTEN_WHEN_SET,
    MIB,
    DefinitionLimits,
)
from aos.kernel import cbor
from aos.kernel.hashing import hash_bytes

EXAMPLE = Path(__file__).resolve().parents[2] / "flows" / "examples" / "order.flow.yaml"

# Every construct of §1.1-§1.4 at least once.
FULL_YAML = """
format: aos.flow/1
name: tests/full
description: every construct
workload: {amount: 12.5, items: [1, 2]}
entry: start
policy: {on_deny: discard, no_next_is_error: true, failure_mode: best_effort, final_step: report}
limits: {tokens_max: 50, loop_items_max: 20, in_flight_max: 4}
subflows:
  child: {flow: tests/child}
  pinned: {flow: tests/child@2, definition: "blake3:%s"}
steps:
  - name: start
    description: the entry
    admit: "workload.amount > 0"
    tasks:
      - {name: set_ctx, do: assign, set: {total: "{{ workload.amount }}", a.b: 1}}
      - {name: ref, do: business_ref, value: "order-{{ execution.id }}"}
      - name: charge
        do: call
        when: {jsonpath: "$.workload.amount"}
        tool: {kind: http, url: "https://x/{{ ctx.total }}", method: POST}
        args: {amount: "{{ ctx.total }}"}
        timeout_s: 2.5
        policy:
          rules:
            - when: "outcome.status == 'error'"
              then: {do: retry, attempts: 5, backoff: linear, delay_s: 0.25}
            - when: "$.outcome.error"
              then: {do: jump, to: ref}
            - else: {then: {do: continue, set_ctx: {last: "{{ _prev }}"}, set_iter: {n: 1}}}
        branches:
          ok: [{do: noop, result: ok}]
          error: [{do: fail, message: "charge failed: {{ outcome.error.message }}", kind: transport}]
          timeout: [{name: late, do: noop}]
      - name: route
        do: branch
        cases:
          - when: "ctx.total > 10"
            tasks: [{do: human, title: "Approve {{ ctx.total }}", roles: [finance], form: {ok: bool}, data: {t: 1}, assignee: ann, description: d, timeout_ms: 60000}]
        else: [{do: wait_signal, signal: approved, timeout_s: 30}]
      - name: each
        do: repeat
        over: "{{ workload.items }}"
        as: item
        tasks: [{do: wait_timer, duration_s: 1}, {do: wait_timer, until_ns: "{{ iter.item }}"}]
    result: "{{ ctx.total }}"
    next:
      mode: inclusive
      arcs:
        - {to: fan, when: "$.ctx.total", args: {n: "{{ ctx.total }}"}}
        - to: sub
  - name: fan
    loop: {in: [1, 2, 3], iterator: x, mode: parallel, max_in_flight: 2, exec: distributed}
    tasks: [{do: noop, result: "{{ iter.x }}"}]
    next: merge
  - name: sub
    tasks:
      - {do: subflow, flow: child, workload: {a: 1}, into: child.result}
      - {do: continue_with, flow: self, workload: {}}
      - {do: subflow, flow: pinned}
    next: [merge]
  - name: merge
    join: all
  - name: report
""" % ("0" * 64)


def load(value: Any, **kwargs: Any) -> FlowDefinition:
    """Load a definition given as data (sent as JSON) or text."""
    text = value if isinstance(value, (str, bytes)) else json.dumps(value)
    return load_definition(text, **kwargs)


def problems_of(value: Any, **kwargs: Any) -> list[tuple[str, str]]:
    with pytest.raises(FlowCheckError) as caught:
        load(value, **kwargs)
    return [(problem.code, problem.path) for problem in caught.value.problems]


def minimal(**fields: Any) -> dict[str, Any]:
    return {"name": "tests/min", "steps": [{"name": "a"}], **fields}


def with_tasks(*tasks: dict[str, Any]) -> dict[str, Any]:
    return minimal(steps=[{"name": "a", "tasks": list(tasks)}])


def round_trip_hash(defn: FlowDefinition) -> None:
    raw = encode_definition(defn)
    assert cbor.is_canonical(raw)
    back = decode_definition(raw)
    assert definition_hash(back) == definition_hash(defn) == hash_bytes(raw)
    assert canonical_value(back) == canonical_value(defn)


# --------------------------------------------------------------------------------------------
# Loading and the canonical form


def test_every_construct_loads_and_round_trips() -> None:
    defn = load(FULL_YAML)
    round_trip_hash(defn)
    value = canonical_value(defn)
    used = {task["do"] for step in value["steps"] for task in _all_tasks(step["tasks"])}
    assert used == set(ACTIONS)


def _all_tasks(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for task in tasks:
        found.append(task)
        for key in ("tasks", "else"):
            found += _all_tasks(task.get(key) or [])
        for case in task.get("cases", []):
            found += _all_tasks(case["tasks"])
        for branch in (task.get("branches") or {}).values():
            found += _all_tasks(branch)
    return found


def test_canonical_form_is_a_fixpoint() -> None:
    defn = load(FULL_YAML)
    again = load(canonical_value(defn))
    assert definition_hash(again) == definition_hash(defn)


def test_canonical_top_level_has_every_default() -> None:
    value = canonical_value(load(minimal()))
    assert value == {
        "format": "aos.flow/1",
        "name": "tests/min",
        "description": None,
        "workload": {},
        "entry": "a",
        "policy": {
            "on_deny": "keep",
            "no_next_is_error": False,
            "failure_mode": "fail_fast",
            "final_step": None,
        },
        "limits": {
            name: default
            for name, (default, _) in EXECUTION_LIMITS.items()
            if name not in LIMITS_WRITTEN_WHEN_SET
        },
        "subflows": {},
        "keychain": [],
        "steps": [
            {
                "name": "a",
                "description": None,
                "admit": None,
                "join": "none",
                "loop": None,
                "tasks": [],
                "result": None,
                "next": {"mode": "exclusive", "arcs": []},
            }
        ],
    }


EXECUTION_DEFAULTS = {name: default for name, (default, _) in EXECUTION_LIMITS.items()}


def test_a_limit_added_later_is_written_only_when_set() -> None:
    """`signals_buffered_max` came after definitions were deployed: at its default the
    canonical form leaves it out (their hashes stay), set it is written and reads back."""
    default = load(minimal())
    assert default.limits.signals_buffered_max == 100
    assert "signals_buffered_max" not in canonical_value(default)["limits"]
    written = cbor.encode({**canonical_value(default), "limits": EXECUTION_DEFAULTS})
    with pytest.raises(FlowDecodeError, match="canonical form"):
        decode_definition(written)  # the default, named: not the canonical form
    fewer = load(minimal(limits={"signals_buffered_max": 3}))
    assert canonical_value(fewer)["limits"]["signals_buffered_max"] == 3
    assert decode_definition(encode_definition(fewer)) == fewer
    assert load(minimal(limits={"signals_buffered_max": 1000})).limits.signals_buffered_max
    assert problems_of(minimal(limits={"signals_buffered_max": 1001})) == [
        ("flow.limit", "$.limits.signals_buffered_max")
    ]


COMMON = {"name": "task_1", "when": None, "policy": None}
CANONICAL_TASKS = [
    ({"do": "assign", "set": {"x": 1}}, {"set": {"x": 1}}),
    ({"do": "business_ref", "value": "r"}, {"value": "r"}),
    (
        {"do": "call", "tool": {"kind": "echo"}},
        {
            "tool": {"kind": "echo"},
            "args": {},
            "timeout_ms": None,
            "branches": {"ok": [], "error": [], "timeout": []},
        },
    ),
    ({"do": "branch"}, {"cases": [], "else": []}),
    ({"do": "repeat", "over": [1]}, {"over": [1], "as": "item", "tasks": []}),
    (
        {"do": "human"},
        {
            "title": "",
            "description": None,
            "assignee": None,
            "roles": [],
            "form": None,
            "data": None,
            "timeout_ms": None,
        },
    ),
    ({"do": "wait_signal", "signal": "go"}, {"signal": "go", "timeout_ms": None}),
    ({"do": "wait_timer", "duration_s": 1}, {"duration_ms": 1000, "until_ns": None}),
    ({"do": "subflow"}, {"flow": "self", "workload": {}, "into": None}),
    ({"do": "continue_with"}, {"flow": "self", "workload": {}}),
    ({"do": "fail"}, {"message": "", "kind": "expression"}),
    ({"do": "noop"}, {"result": None}),
]


@pytest.mark.parametrize(
    ("task", "fields"), CANONICAL_TASKS, ids=[t["do"] for t, _ in CANONICAL_TASKS]
)
def test_each_action_has_its_canonical_shape(task: dict[str, Any], fields: dict[str, Any]) -> None:
    defn = load(with_tasks(task))
    assert canonical_value(defn)["steps"][0]["tasks"] == [{**COMMON, "do": task["do"], **fields}]
    round_trip_hash(defn)


def test_loop_rule_and_arc_canonical_shapes() -> None:
    step = {
        "name": "a",
        "loop": {"in": "{{ workload.xs }}"},
        "tasks": [{"do": "noop", "policy": {"rules": [{"then": {}}]}}],
        "next": "a",
    }
    value = canonical_value(load(minimal(steps=[step])))["steps"][0]
    assert value["loop"] == {
        "in": "{{ workload.xs }}",
        "iterator": "item",
        "mode": "sequential",
        "max_in_flight": None,
        "exec": "local",
    }
    assert value["tasks"][0]["policy"] == {
        "rules": [
            {
                "when": None,
                "then": {
                    "do": "continue",
                    "attempts": 3,
                    "backoff": "none",
                    "delay_ms": 1000,
                    "to": None,
                    "set_ctx": {},
                    "set_iter": {},
                },
            }
        ]
    }
    assert value["next"] == {"mode": "exclusive", "arcs": [{"to": "a", "when": None, "args": {}}]}


def test_canonical_value_is_a_fresh_copy() -> None:
    defn = load(FULL_YAML)
    first = canonical_value(defn)
    first["subflows"]["child"]["definition"] = "changed"
    first["workload"]["items"].append(3)
    assert canonical_value(defn)["subflows"]["child"]["definition"] is None
    assert canonical_value(defn)["workload"]["items"] == [1, 2]


def test_example_loads() -> None:
    defn = load_definition(EXAMPLE.read_bytes(), source=str(EXAMPLE))
    value = canonical_value(defn)
    actions = {task["do"] for step in value["steps"] for task in _all_tasks(step["tasks"])}
    assert {"assign", "call", "branch", "human", "wait_signal"} <= actions
    calls = [t for s in value["steps"] for t in s["tasks"] if t["do"] == "call" and t["policy"]]
    assert calls[0]["timeout_ms"] == 5000
    assert calls[0]["policy"]["rules"][0]["then"]["do"] == "retry"
    assert any(
        s["next"]["mode"] == "inclusive" and len(s["next"]["arcs"]) == 2 for s in value["steps"]
    )
    assert any(s["join"] == "all" for s in value["steps"])
    round_trip_hash(defn)


# --------------------------------------------------------------------------------------------
# Shorthands (§1.5) and the same hash for the same meaning


def test_string_guards_expand_by_their_first_character() -> None:
    step = {"name": "a", "admit": "$.ctx.ok", "tasks": [{"do": "noop", "when": "ctx.ok"}]}
    value = canonical_value(load(minimal(steps=[step])))["steps"][0]
    assert value["admit"] == {"jsonpath": "$.ctx.ok"}
    assert value["tasks"][0]["when"] == {"template": "ctx.ok"}


@pytest.mark.parametrize(
    "authored",
    ["b", ["b"], [{"to": "b"}], {"arcs": ["b"]}, {"mode": "exclusive", "arcs": [{"to": "b"}]}],
)
def test_next_shorthands_expand(authored: Any) -> None:
    defn = load(minimal(steps=[{"name": "a", "next": authored}, {"name": "b"}]))
    arcs = canonical_value(defn)["steps"][0]["next"]
    assert arcs == {"mode": "exclusive", "arcs": [{"to": "b", "when": None, "args": {}}]}


@pytest.mark.parametrize(
    "rule",
    [
        {"else": {"then": {"do": "break"}}},
        {"else": True, "then": {"do": "break"}},
        {"when": None, "then": {"do": "break"}},
        {"then": {"do": "break"}},
    ],
)
def test_rule_else_forms_are_when_null(rule: dict[str, Any]) -> None:
    defn = load(with_tasks({"do": "noop", "policy": {"rules": [rule]}}))
    rules = canonical_value(defn)["steps"][0]["tasks"][0]["policy"]["rules"]
    assert rules[0]["when"] is None
    assert rules[0]["then"]["do"] == "break"


def test_unnamed_tasks_are_named_by_position_and_scope() -> None:
    call = {
        "do": "call",
        "tool": {"kind": "echo"},
        "branches": {"ok": [{"do": "noop"}], "error": [{"do": "noop"}, {"do": "noop"}]},
    }
    branch = {
        "name": "pick",
        "do": "branch",
        "cases": [
            {"when": "x", "tasks": [{"do": "noop"}]},
            {"when": "y", "tasks": [{"do": "noop"}]},
        ],
        "else": [{"do": "noop"}],
    }
    repeat = {
        "do": "repeat",
        "over": [1],
        "tasks": [{"do": "noop"}, {"name": "kept", "do": "noop"}],
    }
    defn = load(with_tasks(call, branch, repeat))
    names = [task.name for task in _model_tasks(defn.steps[0].tasks)]
    assert names == [
        "task_1",
        "task_1.ok.task_1",
        "task_1.error.task_1",
        "task_1.error.task_2",
        "pick",
        "pick.case_1.task_1",
        "pick.case_2.task_1",
        "pick.else.task_1",
        "task_3",
        "task_3.task_1",
        "kept",
    ]


def _model_tasks(tasks: list[Any]) -> list[Any]:
    found = []
    for task in tasks:
        found.append(task)
        for _, nested in task.task_lists():
            found += _model_tasks(nested)
    return found


@pytest.mark.parametrize(
    ("authored", "field", "ms"),
    [
        ({"do": "call", "tool": {"kind": "echo"}, "timeout_s": 1.5}, "timeout_ms", 1500),
        ({"do": "call", "tool": {"kind": "echo"}, "timeout_ms": 1500}, "timeout_ms", 1500),
        ({"do": "human", "timeout_s": 2}, "timeout_ms", 2000),
        ({"do": "wait_signal", "signal": "s", "timeout_s": 0.001}, "timeout_ms", 1),
        ({"do": "wait_timer", "duration_s": 0}, "duration_ms", 0),
        ({"do": "wait_timer", "duration_ms": 7}, "duration_ms", 7),
        ({"do": "wait_signal", "signal": "s", "timeout_s": None}, "timeout_ms", None),
    ],
)
def test_durations_become_integer_milliseconds(
    authored: dict[str, Any], field: str, ms: Any
) -> None:
    task = canonical_value(load(with_tasks(authored)))["steps"][0]["tasks"][0]
    assert task[field] == ms
    assert not any(key.endswith("_s") for key in task)


def test_rule_delay_seconds_become_milliseconds() -> None:
    rule = {"then": {"do": "retry", "delay_s": 0.25}}
    then = canonical_value(load(with_tasks({"do": "noop", "policy": {"rules": [rule]}})))
    assert then["steps"][0]["tasks"][0]["policy"]["rules"][0]["then"]["delay_ms"] == 250


def test_null_is_the_default_and_empty_policy_is_none() -> None:
    spelled = with_tasks({"do": "call", "tool": {"kind": "echo"}, "args": None, "branches": None})
    spelled["steps"][0].update({"join": None, "next": None})
    spelled["steps"][0]["tasks"][0]["policy"] = {"rules": []}
    spelled.update({"policy": None, "limits": None, "workload": None, "subflows": None})
    bare = with_tasks({"do": "call", "tool": {"kind": "echo"}})
    assert definition_hash(load(spelled)) == definition_hash(load(bare))


def test_yaml_and_json_in_any_key_order_with_or_without_defaults_hash_the_same() -> None:
    yaml_text = """
name: tests/same
steps:
  - name: a
    tasks:
      - do: call
        tool: {kind: echo}
        timeout_s: 1
        when: "ctx.go"
    next: b
  - name: b
"""
    verbose = {
        "steps": [
            {
                "next": {"arcs": [{"args": {}, "when": None, "to": "b"}], "mode": "exclusive"},
                "tasks": [
                    {
                        "branches": {"timeout": [], "error": [], "ok": []},
                        "timeout_ms": 1000,
                        "args": {},
                        "tool": {"kind": "echo"},
                        "policy": None,
                        "when": {"template": "ctx.go"},
                        "do": "call",
                        "name": "task_1",
                    }
                ],
                "loop": None,
                "join": "none",
                "name": "a",
            },
            {"tasks": [], "name": "b", "result": None},
        ],
        "policy": {"final_step": None, "on_deny": "keep"},
        "entry": "a",
        "name": "tests/same",
        "format": "aos.flow/1",
        "limits": {"tokens_max": 10_000},
    }
    from_yaml = load(yaml_text)
    from_json = load(json.dumps(verbose, indent=3))
    assert definition_hash(from_yaml) == definition_hash(from_json)


def test_a_different_meaning_has_a_different_hash() -> None:
    assert definition_hash(load(minimal())) != definition_hash(load(minimal(description="x")))


def test_a_subflow_named_by_a_template_is_aos_flow_2_only() -> None:
    named = {"do": "subflow", "flow": "{{ workload.child }}"}
    defn = load({**with_tasks(named), "format": "aos.flow/2"})
    assert canonical_value(defn)["steps"][0]["tasks"][0]["flow"] == "{{ workload.child }}"
    assert problems_of(with_tasks(named)) == [("flow.schema", "$.steps[0].tasks[0].flow")]
    broken = {"do": "subflow", "flow": "{{ workload.child"}
    assert problems_of({**with_tasks(broken), "format": "aos.flow/2"}) == [
        ("flow.template_invalid", "$.steps[0].tasks[0].flow")
    ]
    moved = {"do": "continue_with", "flow": "{{ workload.child }}"}
    assert problems_of({**with_tasks(moved), "format": "aos.flow/2"}) == [
        ("flow.schema", "$.steps[0].tasks[0].flow")
    ]


FULL_HASH_V1 = "blake3:5d0ba6dbfd1844f00a4e2a370024ae305039ed876c6e0ca0acbffca78cb60804"
"""FULL_YAML's hash as every aos before `aos.flow/2` computed it."""


def test_an_aos_flow_1_definition_keeps_its_canonical_form_and_hash() -> None:
    defn = load(FULL_YAML)
    assert str(definition_hash(defn)) == FULL_HASH_V1
    assert all("set_ctx" not in step for step in canonical_value(defn)["steps"])
    assert decode_definition(encode_definition(defn)) == defn


def test_aos_flow_2_writes_a_step_set_ctx_and_1_refuses_one() -> None:
    steps = [{"name": "a", "set_ctx": {"n": "{{ a.n }}"}, "next": "b"}, {"name": "b"}]
    defn = load(minimal(format="aos.flow/2", steps=steps))
    assert [step["set_ctx"] for step in canonical_value(defn)["steps"]] == [{"n": "{{ a.n }}"}, {}]
    round_trip_hash(defn)
    assert problems_of(minimal(steps=steps)) == [("flow.schema", "$.steps[0].set_ctx")]
    bad = [{"name": "a", "set_ctx": {"n": "{{ a.n"}}]
    assert problems_of(minimal(format="aos.flow/2", steps=bad)) == [
        ("flow.template_invalid", "$.steps[0].set_ctx.n")
    ]


def test_flow_style_yaml_that_is_not_json_loads() -> None:
    defn = load("{name: tests/flow-style, steps: [{name: a}]}")
    assert defn.entry == "a"


# --------------------------------------------------------------------------------------------
# Decoding and reading


@pytest.mark.parametrize(
    "text",
    [
        "name: a\nname: b\n",
        '{"name": "a", "name": "b"}',
        "steps:\n  - {name: a, name: b}\n",
        b"\xff\xfe\x00",
        "name: [",
        '{"name": NaN}',
        "--- 1\n--- 2\n",
    ],
)
def test_unreadable_documents_are_decode_errors(text: str | bytes) -> None:
    with pytest.raises(FlowDecodeError) as caught:
        load_definition(text, source="f.yaml")
    assert caught.value.code == "flow.decode"
    assert str(caught.value).startswith("f.yaml: ")


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("name: x\nsteps: [{name: a}]\nworkload: {when: 2024-01-01}\n", "$.workload.when"),
        ("name: x\nsteps: [{name: a}]\nworkload: {b: !!binary aGk=}\n", "$.workload.b"),
        ("name: x\nsteps: [{name: a}]\nworkload: {on: 1}\n", "$.workload"),
        ('{"name": "x", "steps": [{"name": "a"}], "workload": {"x": 1e999}}', "$.workload.x"),
        ("[1, 2]", "$"),
    ],
)
def test_values_a_flow_cannot_hold_are_schema_problems(text: str, path: str) -> None:
    assert problems_of(text) == [("flow.schema", path)]


def test_a_bom_is_ignored() -> None:
    assert load("\ufeff" + json.dumps(minimal())).name == "tests/min"


def test_yaml_merge_keys_are_not_duplicates() -> None:
    text = "base: &b {x: 1}\n"
    with pytest.raises(FlowCheckError) as caught:
        load(text + "name: x\nsteps: [{name: a}]\nworkload: {<<: *b, x: 2}\n")
    assert ("flow.schema", "$.base") in [(p.code, p.path) for p in caught.value.problems]


def test_decode_refuses_what_is_not_the_canonical_form() -> None:
    value = canonical_value(load(minimal()))
    del value["description"]
    with pytest.raises(FlowDecodeError, match="canonical form"):
        decode_definition(cbor.encode(value))
    with pytest.raises(FlowDecodeError, match="not canonical CBOR"):
        decode_definition(b"\xd9\xd9\xf7\xa1\x61a")
    with pytest.raises(FlowDecodeError, match="not canonical CBOR"):
        decode_definition(cbor.encode(value, self_describe=False))


def test_decode_checks_the_definition() -> None:
    value = canonical_value(load(minimal()))
    value["entry"] = "nowhere"
    with pytest.raises(FlowCheckError) as caught:
        decode_definition(cbor.encode(value))
    assert caught.value.codes == ["flow.step_unknown"]


def test_decode_refuses_too_many_bytes_before_decoding() -> None:
    raw = encode_definition(load(minimal()))
    assert decode_definition(raw, limits=DefinitionLimits(definition_bytes_max=len(raw)))
    with pytest.raises(FlowTooLargeError):
        decode_definition(raw, limits=DefinitionLimits(definition_bytes_max=len(raw) - 1))


# --------------------------------------------------------------------------------------------
# Checks: each code with its path


def _arc(to: str) -> dict[str, Any]:
    return {"to": to}


CHECKS: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "duplicate step",
        minimal(steps=[{"name": "a", "next": "b"}, {"name": "b"}, {"name": "b"}]),
        "flow.step_duplicate",
        "$.steps[2].name",
    ),
    ("unknown entry", minimal(entry="zz"), "flow.step_unknown", "$.entry"),
    (
        "unknown final step",
        minimal(policy={"final_step": "zz"}),
        "flow.step_unknown",
        "$.policy.final_step",
    ),
    (
        "arc to no step",
        minimal(steps=[{"name": "a", "next": [_arc("zz")]}]),
        "flow.step_unknown",
        "$.steps[0].next.arcs[0].to",
    ),
    (
        "duplicate task in nested list",
        with_tasks(
            {"name": "t", "do": "noop"},
            {"do": "repeat", "over": [], "tasks": [{"name": "t", "do": "noop"}]},
        ),
        "flow.task_duplicate",
        "$.steps[0].tasks[1].tasks[0].name",
    ),
    (
        "jump to no task",
        with_tasks({"do": "noop", "policy": {"rules": [{"then": {"do": "jump", "to": "zz"}}]}}),
        "flow.task_unknown",
        "$.steps[0].tasks[0].policy.rules[0].then.to",
    ),
    (
        "jump out of its list",
        with_tasks(
            {"name": "outer", "do": "noop"},
            {
                "do": "branch",
                "else": [
                    {"do": "noop", "policy": {"rules": [{"then": {"do": "jump", "to": "outer"}}]}}
                ],
            },
        ),
        "flow.task_unknown",
        "$.steps[0].tasks[1].else[0].policy.rules[0].then.to",
    ),
    (
        "unknown tool",
        with_tasks({"do": "call", "tool": {"kind": "ftp"}}),
        "flow.tool_unknown",
        "$.steps[0].tasks[0].tool.kind",
    ),
    (
        "unknown subflow",
        with_tasks({"do": "subflow", "flow": "other"}),
        "flow.subflow_unknown",
        "$.steps[0].tasks[0].flow",
    ),
    (
        "unknown continue-with flow",
        with_tasks({"do": "continue_with", "flow": "other"}),
        "flow.subflow_unknown",
        "$.steps[0].tasks[0].flow",
    ),
    (
        "bad template deep in args",
        with_tasks({"do": "call", "tool": {"kind": "echo"}, "args": {"a": [1, {"b": "{{ x"}]}}),
        "flow.template_invalid",
        "$.steps[0].tasks[0].args.a[1].b",
    ),
    (
        "bad template in a tool spec",
        with_tasks({"do": "call", "tool": {"kind": "http", "url": "{% if %}"}}),
        "flow.template_invalid",
        "$.steps[0].tasks[0].tool.url",
    ),
    (
        "bad template guard",
        minimal(steps=[{"name": "a", "admit": "x >"}]),
        "flow.template_invalid",
        "$.steps[0].admit.template",
    ),
    (
        "bad template in an odd key",
        with_tasks({"do": "assign", "set": {"a-b": "{{ }}"}}),
        "flow.template_invalid",
        "$.steps[0].tasks[0].set['a-b']",
    ),
    (
        "bad jsonpath guard",
        minimal(steps=[{"name": "a", "next": [{"to": "a", "when": "$["}]}]),
        "flow.jsonpath_invalid",
        "$.steps[0].next.arcs[0].when.jsonpath",
    ),
    (
        "jsonpath without a root",
        with_tasks({"do": "noop", "when": {"jsonpath": "a.b"}}),
        "flow.jsonpath_invalid",
        "$.steps[0].tasks[0].when.jsonpath",
    ),
    (
        "unreachable step",
        minimal(steps=[{"name": "a"}, {"name": "island"}]),
        "flow.unreachable",
        "$.steps[1]",
    ),
    (
        "limit over its ceiling",
        minimal(limits={"tokens_max": EXECUTION_LIMITS["tokens_max"][1] + 1}),
        "flow.limit",
        "$.limits.tokens_max",
    ),
    (
        "unknown field",
        minimal(steps=[{"name": "a", "taks": []}]),
        "flow.schema",
        "$.steps[0].taks",
    ),
    (
        "wrong type deep in a task",
        with_tasks({"do": "call", "tool": {"kind": 3}}),
        "flow.schema",
        "$.steps[0].tasks[0].tool.kind",
    ),
    ("unknown action", with_tasks({"do": "dance"}), "flow.schema", "$.steps[0].tasks[0]"),
    (
        "seconds and milliseconds both",
        with_tasks({"do": "wait_signal", "signal": "s", "timeout_s": 1, "timeout_ms": 1000}),
        "flow.schema",
        "$.steps[0].tasks[0]",
    ),
    (
        "negative seconds",
        with_tasks({"do": "wait_signal", "signal": "s", "timeout_s": -1}),
        "flow.schema",
        "$.steps[0].tasks[0].timeout_s",
    ),
    (
        "float milliseconds",
        with_tasks({"do": "wait_signal", "signal": "s", "timeout_ms": 1.5}),
        "flow.schema",
        "$.steps[0].tasks[0].timeout_ms",
    ),
    (
        "timer with no deadline",
        with_tasks({"do": "wait_timer"}),
        "flow.schema",
        "$.steps[0].tasks[0]",
    ),
    (
        "jump without a target",
        with_tasks({"do": "noop", "policy": {"rules": [{"then": {"do": "jump"}}]}}),
        "flow.schema",
        "$.steps[0].tasks[0].policy.rules[0].then",
    ),
    (
        "self as an alias",
        minimal(subflows={"self": {"flow": "x"}}),
        "flow.schema",
        "$.subflows.self",
    ),
    ("bad flow name", minimal(name="Tests/Upper"), "flow.schema", "$.name"),
    ("no steps", {"name": "x", "steps": []}, "flow.schema", "$.steps"),
    (
        "strict types",
        minimal(policy={"no_next_is_error": "yes"}),
        "flow.schema",
        "$.policy.no_next_is_error",
    ),
    ("bad format", minimal(format="aos.flow/3"), "flow.schema", "$.format"),
]


@pytest.mark.parametrize(
    ("value", "code", "path"), [c[1:] for c in CHECKS], ids=[c[0] for c in CHECKS]
)
def test_each_check_fires_with_its_code_and_path(
    value: dict[str, Any], code: str, path: str
) -> None:
    assert problems_of(value) == [(code, path)]


def test_every_problem_is_reported_at_once() -> None:
    value = minimal(
        entry="zz",
        steps=[
            {
                "name": "a",
                "tasks": [
                    {"do": "call", "tool": {"kind": "ftp"}, "args": "{{ x"},
                    {"name": "task_1", "do": "subflow", "flow": "nope"},
                ],
                "next": ["ghost"],
            },
            {"name": "a"},
        ],
    )
    found = problems_of(value)
    assert sorted(found) == sorted(
        [
            ("flow.step_duplicate", "$.steps[1].name"),
            ("flow.step_unknown", "$.entry"),
            ("flow.step_unknown", "$.steps[0].next.arcs[0].to"),
            ("flow.tool_unknown", "$.steps[0].tasks[0].tool.kind"),
            ("flow.template_invalid", "$.steps[0].tasks[0].args"),
            ("flow.task_duplicate", "$.steps[0].tasks[1].name"),
            ("flow.subflow_unknown", "$.steps[0].tasks[1].flow"),
        ]
    )


def test_every_schema_problem_is_reported_at_once() -> None:
    value = minimal(
        description=3,
        policy={"on_deny": "maybe"},
        steps=[{"name": "a", "join": "any", "tasks": [{"do": "noop", "extra": 1}]}],
    )
    assert sorted(problems_of(value)) == [
        ("flow.schema", "$.description"),
        ("flow.schema", "$.policy.on_deny"),
        ("flow.schema", "$.steps[0].join"),
        ("flow.schema", "$.steps[0].tasks[0].extra"),
    ]


def test_check_error_summarizes_and_serializes() -> None:
    with pytest.raises(FlowCheckError) as caught:
        load(minimal(entry="zz", steps=[{"name": "a", "next": "b"}]), source="f.json")
    error = caught.value
    assert str(error).startswith("f.json: [flow.step_unknown] $.entry: ")
    assert "(and 1 more problem)" in str(error)
    body = error.to_dict()
    assert body["code"] == "flow.invalid"
    assert [p["code"] for p in body["problems"]] == ["flow.step_unknown", "flow.step_unknown"]
    assert isinstance(error, FlowError)


def test_the_final_step_needs_no_arc() -> None:
    load(minimal(steps=[{"name": "a"}, {"name": "fin"}], policy={"final_step": "fin"}))


def test_a_distributed_sequential_loop_is_fine() -> None:
    load(minimal(steps=[{"name": "a", "loop": {"in": [1], "exec": "distributed"}}]))


# --------------------------------------------------------------------------------------------
# Bounds, each at its edge


def _padded(size: int) -> str:
    text = json.dumps(minimal())
    return text + " " * (size - len(text))


def test_definition_bytes_at_the_limit() -> None:
    assert len(_padded(DEFINITION_BYTES_MAX).encode()) == DEFINITION_BYTES_MAX == MIB
    load_definition(_padded(DEFINITION_BYTES_MAX).encode())
    with pytest.raises(FlowTooLargeError) as caught:
        load_definition(_padded(DEFINITION_BYTES_MAX + 1).encode())
    assert caught.value.code == "flow.too_large"
    with pytest.raises(FlowTooLargeError):
        load_definition(_padded(DEFINITION_BYTES_MAX + 1))  # as str too


def test_the_canonical_form_is_bounded_too() -> None:
    text = json.dumps(
        minimal(
            steps=[{"name": f"s{i}", "next": f"s{i + 1}"} for i in range(50)] + [{"name": "s50"}]
        )
    )
    size = len(encode_definition(load(text)))
    assert size > len(text)
    load(text, limits=DefinitionLimits(definition_bytes_max=size))
    with pytest.raises(FlowTooLargeError, match="canonical form"):
        load(text, limits=DefinitionLimits(definition_bytes_max=size - 1))


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_nesting_at_the_limit(form: str) -> None:
    def text(depth: int) -> str:
        value = minimal(workload=_nested(depth - 1))  # the root map counts 1
        return json.dumps(value) if form == "json" else yaml.safe_dump(value)

    load(text(64))
    assert problems_of(text(65))[0][0] == "flow.limit"


def test_very_deep_documents_are_refused_without_recursing() -> None:
    assert problems_of("[" * 200_000) == [("flow.limit", "$")]
    assert problems_of("a:\n" + "".join("  " * i + "a:\n" for i in range(1, 200))) == [
        ("flow.limit", "$")
    ]


def test_the_canonical_form_nests_64_at_most() -> None:
    # `next: [arc]` becomes `next: {arcs: [arc]}`: one level deeper than authored.
    def text(args_depth: int) -> dict[str, Any]:
        return minimal(steps=[{"name": "a", "next": [{"to": "a", "args": _nested(args_depth)}]}])

    load(text(64 - 6))
    assert problems_of(text(64 - 5)) == [("flow.limit", "$")]


def test_value_count_at_the_limit() -> None:
    value = minimal(workload={"xs": [0] * 10})
    count = _count(json.loads(json.dumps(value)))
    load(value, limits=DefinitionLimits(value_nodes_max=count))
    assert (
        problems_of(value, limits=DefinitionLimits(value_nodes_max=count - 1))[0][0] == "flow.limit"
    )


def _count(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_count(item) for item in value.values())
    if isinstance(value, list):
        return 1 + sum(_count(item) for item in value)
    return 1


def test_yaml_alias_bombs_are_bounded() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [
        f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 12)
    ]
    found = problems_of("\n".join([*lines, "name: x", "steps: [{name: a}]"]))
    assert found[-1][0] == "flow.limit"


def test_text_length_at_the_limit() -> None:
    load(minimal(description="x" * 64 * 1024))
    assert problems_of(minimal(description="x" * (64 * 1024 + 1))) == [
        ("flow.limit", "$.description")
    ]
    assert problems_of(minimal(workload={"k" * (64 * 1024 + 1): 1}))[0][0] == "flow.limit"


def _chain(count: int) -> dict[str, Any]:
    steps = [{"name": f"s{i}", "next": f"s{i + 1}"} for i in range(count - 1)]
    return minimal(steps=[*steps, {"name": f"s{count - 1}"}])


def test_steps_at_the_limit() -> None:
    load(_chain(1000))
    assert ("flow.limit", "$.steps") in problems_of(_chain(1001))


def test_tasks_per_step_at_the_limit() -> None:
    # Nested tasks count: COUNT - 2 at the top, then a repeat and its one task.
    def value(count: int) -> dict[str, Any]:
        repeat = {"do": "repeat", "over": [], "tasks": [{"do": "noop"}]}
        return with_tasks(*[{"do": "noop"}] * (count - 2), repeat)

    load(value(1000))
    assert problems_of(value(1001)) == [("flow.limit", "$.steps[0].tasks")]


def _nested_tasks(depth: int) -> dict[str, Any]:
    task: dict[str, Any] = {"do": "noop"}
    for _ in range(depth - 1):
        task = {"do": "repeat", "over": [], "tasks": [task]}
    return with_tasks(task)


def test_task_nesting_at_the_limit() -> None:
    load(_nested_tasks(16))
    path = "$.steps[0].tasks[0]" + ".tasks[0]" * 15 + ".tasks"  # the 17th list
    assert problems_of(_nested_tasks(17)) == [("flow.limit", path)]


def test_arcs_rules_and_subflows_at_their_limits() -> None:
    limits = DefinitionLimits(arcs_per_step_max=2, rules_per_task_max=2, subflows_max=2)
    arcs = minimal(steps=[{"name": "a", "next": ["a"] * 2}])
    load(arcs, limits=limits)
    arcs["steps"][0]["next"].append("a")
    assert problems_of(arcs, limits=limits) == [("flow.limit", "$.steps[0].next.arcs")]
    rules = with_tasks({"do": "noop", "policy": {"rules": [{"then": {}}] * 2}})
    load(rules, limits=limits)
    rules["steps"][0]["tasks"][0]["policy"]["rules"].append({"then": {}})
    assert problems_of(rules, limits=limits) == [("flow.limit", "$.steps[0].tasks[0].policy.rules")]
    subflows = minimal(subflows={f"s{i}": {"flow": "x"} for i in range(2)})
    load(subflows, limits=limits)
    subflows["subflows"]["s2"] = {"flow": "x"}
    assert problems_of(subflows, limits=limits) == [("flow.limit", "$.subflows")]


@pytest.mark.parametrize(
    ("field", "length"),
    [("flow", 128), ("step", 128), ("task", 256)],
)
def test_name_lengths_at_the_limit(field: str, length: int) -> None:
    def value(size: int) -> dict[str, Any]:
        if field == "flow":
            return minimal(name="n" * size)
        if field == "step":
            return minimal(steps=[{"name": "s" * size}])
        return with_tasks({"name": "t" * size, "do": "noop"})

    load(value(length))
    assert problems_of(value(length + 1))[0][0] == "flow.schema"


@pytest.mark.parametrize("name", ["fetch data", "step-1", "1st", "étape ü", "获取", "a:b/c"])
def test_a_step_name_is_any_text(name: str) -> None:
    steps = [{"name": "go", "next": name}, {"name": name, "next": {"arcs": [{"to": "go"}]}}]
    defn = load(minimal(steps=steps, policy={"final_step": name}))
    assert [step.name for step in defn.steps] == ["go", name]
    round_trip_hash(defn)


@pytest.mark.parametrize("name", ["", "a\nb", "tab\there", "nul\x00", "del\x7f", "c1\x85"])
def test_a_step_name_is_not_empty_and_holds_no_control_character(name: str) -> None:
    problems = problems_of(minimal(steps=[{"name": name}], entry="a"))
    assert ("flow.schema", "$.steps[0].name") in problems


@pytest.mark.parametrize("name", sorted(EXECUTION_LIMITS))
def test_execution_limits_at_their_ceilings(name: str) -> None:
    ceiling = EXECUTION_LIMITS[name][1]
    assert canonical_value(load(minimal(limits={name: ceiling})))["limits"][name] == ceiling
    assert problems_of(minimal(limits={name: ceiling + 1})) == [("flow.limit", f"$.limits.{name}")]
    assert problems_of(minimal(limits={name: 0})) == [("flow.schema", f"$.limits.{name}")]


def test_durations_at_their_ceiling() -> None:
    def value(**timeout: Any) -> dict[str, Any]:
        return with_tasks({"do": "wait_signal", "signal": "s", **timeout})

    load(value(timeout_ms=10**12))
    load(value(timeout_s=10**9))
    assert problems_of(value(timeout_ms=10**12 + 1))[0][0] == "flow.schema"
    assert problems_of(value(timeout_s=10**9 + 1))[0][0] == "flow.schema"


def test_loading_does_not_change_its_input() -> None:
    value = json.loads(json.dumps(with_tasks({"do": "branch", "else": [{"do": "noop"}]})))
    before = copy.deepcopy(value)
    FlowDefinition.model_validate(value)
    assert value == before


# --------------------------------------------------------------------------------------------
# Keychain (§1.7)


def test_keychain_entries_keep_their_spec_and_default_to_empty() -> None:
    assert canonical_value(load(minimal()))["keychain"] == []
    entry = {"name": "pg_local", "kind": "postgres", "host": "{{ workload.host }}", "port": 5432}
    defn = load(minimal(keychain=[entry]))
    assert canonical_value(defn)["keychain"] == [entry]
    round_trip_hash(defn)


def test_keychain_names_are_unique_identifiers_and_kinds_lower_case() -> None:
    twice = [{"name": "token", "kind": "secret"}, {"name": "token", "kind": "secret"}]
    assert problems_of(minimal(keychain=twice)) == [
        ("flow.keychain_duplicate", "$.keychain[1].name")
    ]
    bad = [{"name": "no-dash", "kind": "secret"}, {"name": "ok", "kind": "Upper"}, {"kind": "x"}]
    assert {path for _, path in problems_of(minimal(keychain=bad))} == {
        "$.keychain[0].name",
        "$.keychain[1].kind",
        "$.keychain[2].name",
    }


def test_keychain_entries_are_bounded() -> None:
    entries = [{"name": f"k{n}", "kind": "secret"} for n in range(3)]
    limits = DefinitionLimits(keychain_entries_max=2)
    assert problems_of(minimal(keychain=entries), limits=limits) == [("flow.limit", "$.keychain")]
    assert canonical_value(load(minimal(keychain=entries[:2]), limits=limits))["keychain"]
