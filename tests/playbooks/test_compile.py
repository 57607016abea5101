"""Playbooks compile onto the canonical flow definition: the whole corpus checks, the broken
playbook and every rejection of FLOWS §3 are refused with the playbook's path and a fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from aos.flows.define.document import load_flow
from aos.flows.define.playbook import PLAYBOOK_TOOL_KINDS, compile_value, merge_specs
from aos.flows.errors import FlowCheckError, FlowDecodeError, FlowTooLargeError
from aos.flows.limits import DefinitionLimits
from tests.playbooks.driver import PLAYBOOKS, definition

VALID = sorted(p for p in PLAYBOOKS.rglob("*.yaml") if "broken_playbooks" not in p.parts)
BROKEN = sorted((PLAYBOOKS / "broken_playbooks").glob("*.yaml"))


def playbook(*steps: dict[str, Any], **root: Any) -> dict[str, Any]:
    return {
        "apiVersion": "noetl.io/v2",
        "kind": "Playbook",
        "metadata": {"name": "t", "path": "t/pb"},
        "workflow": list(steps),
        **root,
    }


def noop(name: str, **fields: Any) -> dict[str, Any]:
    return {"step": name, "tool": {"kind": "noop"}, **fields}


def problems(doc: Any) -> list[tuple[str, str]]:
    with pytest.raises(FlowCheckError) as caught:
        load_flow(yaml.safe_dump(doc), source="t.yaml")
    for problem in caught.value.problems:
        assert "fix: " in problem.message or "compiled: " in problem.message
    return [(p.code, p.path) for p in caught.value.problems]


def test_the_corpus_is_all_there() -> None:
    assert len(VALID) == 13 and len(BROKEN) == 1


@pytest.mark.parametrize("path", VALID, ids=lambda p: str(p.relative_to(PLAYBOOKS)))
def test_every_corpus_playbook_checks(path: Path) -> None:
    defn = load_flow(path.read_bytes(), source=str(path))
    doc = yaml.safe_load(path.read_text())
    assert [step.name for step in defn.steps] == [s["step"] for s in doc["workflow"]]


def test_the_broken_playbook_is_rejected_naming_what_is_missing() -> None:
    (path,) = BROKEN
    with pytest.raises(FlowCheckError) as caught:
        load_flow(path.read_bytes(), source=str(path))
    found = {(p.code, p.path) for p in caught.value.problems}
    assert found == {
        ("playbook.field_unknown", "$.workflow[1].command"),
        ("playbook.tool_field_missing", "$.workflow[1].tool"),
        ("playbook.tool_missing", "$.workflow[2]"),
    }
    messages = " ".join(p.message for p in caught.value.problems)
    assert "needs `command` or `commands`" in messages and "has no `tool`" in messages


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (playbook(noop("a"), vars={"x": 1}), ("playbook.root_vars", "$.vars")),
        (playbook(noop("a", when="{{ true }}")), ("playbook.legacy_when", "$.workflow[0].when")),
        (playbook(noop("a", case=[])), ("playbook.legacy_case", "$.workflow[0].case")),
        (playbook(noop("a", eval=[])), ("playbook.legacy_eval", "$.workflow[0].eval")),
        (playbook(noop("a", expr="x")), ("playbook.legacy_expr", "$.workflow[0].expr")),
        (playbook(noop("a", sink={})), ("playbook.legacy_sink", "$.workflow[0].sink")),
        (playbook(noop("a", next=[{"step": "a"}])), ("playbook.next_list", "$.workflow[0].next")),
        (playbook(noop("a"), noop("a")), ("playbook.step_duplicate", "$.workflow[1].step")),
        (
            playbook(noop("a", next={"arcs": [{"step": "zz"}]})),
            ("playbook.step_unknown", "$.workflow[0].next.arcs[0].step"),
        ),
        (playbook(noop("a", loop={"in": [1]})), ("playbook.loop_invalid", "$.workflow[0].loop")),
        (
            playbook(noop("a", loop={"iterator": "x"})),
            ("playbook.loop_invalid", "$.workflow[0].loop"),
        ),
        (
            playbook({"step": "a", "tool": {"kind": "smtp"}}),
            ("playbook.tool_unknown", "$.workflow[0].tool.kind"),
        ),
        (
            playbook({"step": "a", "tool": {"kind": "noop", "spec": {"policy": [{"when": "x"}]}}}),
            ("playbook.policy_invalid", "$.workflow[0].tool.spec.policy"),
        ),
        (
            playbook({"step": "a", "tool": [{"fetch": {"kind": "noop"}}]}),
            ("playbook.task_sugar", "$.workflow[0].tool[0]"),
        ),
        (
            playbook({"step": "a", "tool": {"kind": "workbook", "name": "nope"}}),
            ("playbook.workbook_unknown", "$.workflow[0].tool.name"),
        ),
        (
            playbook(noop("a"), executor={"spec": {"entry_step": "zz"}}),
            ("playbook.step_unknown", "$.executor.spec.entry_step"),
        ),
        (playbook(noop("a"), extra=1), ("playbook.root_unknown", "$.extra")),
        (
            playbook(
                {
                    "step": "a",
                    "tool": [
                        {
                            "name": "t",
                            "kind": "noop",
                            "spec": {
                                "policy": {"rules": [{"else": {"then": {"do": "jump", "to": "x"}}}]}
                            },
                        }
                    ],
                }
            ),
            ("flow.task_unknown", "$.workflow[0].tool[0].policy.rules[0].then.to"),
        ),
    ],
)
def test_each_rejection_names_its_path(doc: dict[str, Any], expected: tuple[str, str]) -> None:
    assert expected in problems(doc)


def test_an_unknown_kind_lists_the_supported_ones() -> None:
    with pytest.raises(FlowCheckError) as caught:
        load_flow(yaml.safe_dump(playbook({"step": "a", "tool": {"kind": "smtp"}})), source="t")
    assert all(kind in caught.value.problems[0].message for kind in PLAYBOOK_TOOL_KINDS)


def test_task_lists_normalize_as_seed_003_says() -> None:
    value = compile_value(
        playbook(
            {"step": "one", "tool": {"kind": "noop"}},
            {
                "step": "many",
                "tool": [{"kind": "noop"}, {"name": "x", "kind": "noop"}, {"kind": "noop"}],
            },
        )
    )
    assert [t["name"] for t in value["steps"][0]["tasks"]] == ["one_task"]
    assert [t["name"] for t in value["steps"][1]["tasks"]] == ["task_0", "x", "task_2"]


def test_spec_layering_inner_wins_maps_merge_lists_replace() -> None:
    merged = merge_specs(
        {"timeout": {"connect": 1, "read": 2}, "tags": [1, 2], "mode": "a"},
        {"timeout": {"read": 9}, "tags": [3]},
        None,
        {"mode": "b"},
    )
    assert merged == {"timeout": {"connect": 1, "read": 9}, "tags": [3], "mode": "b"}


def test_spec_layers_reach_the_tool_from_executor_step_loop_and_task() -> None:
    doc = playbook(
        {
            "step": "a",
            "spec": {"knob": {"step": 1, "both": "step"}},
            "loop": {"in": [1], "iterator": "i", "spec": {"mode": "sequential", "lanes": [1]}},
            "tool": {
                "kind": "http",
                "url": "http://127.0.0.1:1/x",
                "spec": {"knob": {"both": "task"}, "lanes": [2]},
            },
        },
        executor={"spec": {"knob": {"executor": True}, "lanes": [0]}},
    )
    tool = definition(yaml.safe_dump(doc))["steps"][0]["tasks"][0]["tool"]
    assert tool["spec"] == {"knob": {"executor": True, "step": 1, "both": "task"}, "lanes": [2]}


def test_tool_fields_under_spec_are_lifted_beside_kind() -> None:
    doc = playbook(
        {"step": "a", "tool": {"kind": "python", "spec": {"code": "result = 1", "args": {"a": 1}}}}
    )
    task = definition(yaml.safe_dump(doc))["steps"][0]["tasks"][0]
    assert task["tool"] == {"kind": "python", "code": "result = 1"}
    assert task["args"] == {"a": 1}


def test_the_workbook_entry_runs_with_its_args_under_the_tasks() -> None:
    path = PLAYBOOKS / "control_flow_workbook" / "control_flow_workbook.yaml"
    task = definition(path.read_bytes())["steps"][1]["tasks"][0]
    assert task["name"] == "compute_flag" and task["do"] == "call"
    assert task["tool"]["kind"] == "python" and "is_hot" in task["tool"]["code"]
    assert task["args"] == {"temperature_c": "{{ temperature_c }}"}


def test_the_keychain_is_compiled_unchanged() -> None:
    keychain = [{"name": "pg_k8s", "kind": "postgres_credential", "scope": "db"}]
    value = definition(yaml.safe_dump(playbook(noop("a"), keychain=keychain)))
    assert value["keychain"] == keychain


def test_a_playbook_task_is_a_subflow_of_the_deployed_playbook_at_its_path() -> None:
    doc = playbook(
        {"step": "a", "tool": {"kind": "playbook", "path": "lib/child", "args": {"x": 1}}}
    )
    value = definition(yaml.safe_dump(doc))
    (task,) = value["steps"][0]["tasks"]
    assert task["do"] == "subflow" and task["workload"] == {"x": 1}
    assert value["subflows"][task["flow"]]["flow"] == "lib/child"


def test_upstream_event_names_are_read_as_the_boundary_events() -> None:
    doc = playbook(
        noop("a", next={"arcs": [{"step": "b", "when": "{{ event.name == 'call.done' }}"}]}),
        noop("b", next={"arcs": [{"step": "a", "when": '{{ event.name == "call.error" }}'}]}),
    )
    value = definition(yaml.safe_dump(doc))
    assert (
        value["steps"][0]["next"]["arcs"][0]["when"]["template"]
        == "{{ event.name == 'step.done' }}"
    )
    assert '"step.failed"' in value["steps"][1]["next"]["arcs"][0]["when"]["template"]


def test_compiling_is_deterministic() -> None:
    path = PLAYBOOKS / "v10_canonical_example.yaml"
    assert definition(path.read_bytes()) == definition(path.read_bytes())


def test_playbook_input_is_bounded() -> None:
    small = DefinitionLimits(definition_bytes_max=200)
    text = yaml.safe_dump(playbook(noop("a", desc="x" * 300)))
    with pytest.raises(FlowTooLargeError):
        load_flow(text, source="t", limits=small)
    deep: Any = "leaf"
    for _ in range(80):
        deep = {"k": deep}
    with pytest.raises(FlowCheckError) as caught:
        load_flow(yaml.safe_dump(playbook(noop("a"), workload=deep)), source="t")
    assert caught.value.codes == ["flow.limit"]
    with pytest.raises(FlowDecodeError):
        load_flow(b"apiVersion: noetl.io/v2\nkind: Playbook\nkind: Playbook\n", source="t")
    with pytest.raises(FlowCheckError) as caught:
        load_flow("[1, 2]", source="t")  # not a map: read as a CFD, refused as one
    assert caught.value.codes == ["flow.schema"]


def test_specs_and_step_maps_must_be_maps() -> None:
    found = problems(
        playbook(noop("a", spec=[1], args="x", loop={"in": [1], "iterator": "i", "spec": 3}))
    )
    assert ("playbook.schema", "$.workflow[0].spec") in found
    assert ("playbook.schema", "$.workflow[0].args") in found
    assert ("playbook.loop_invalid", "$.workflow[0].loop.spec") in found


def test_a_workbook_entry_with_its_fields_under_spec() -> None:
    workbook = [
        {
            "name": "calc",
            "tool": {"kind": "python", "spec": {"args": {"x": None}, "code": "result = x"}},
        }
    ]
    doc = playbook(
        {"step": "a", "tool": {"kind": "workbook", "name": "calc", "args": {"x": 3}}},
        workbook=workbook,
    )
    (task,) = definition(yaml.safe_dump(doc))["steps"][0]["tasks"]
    assert task["tool"] == {"kind": "python", "code": "result = x"}
    assert task["args"] == {"x": 3}
