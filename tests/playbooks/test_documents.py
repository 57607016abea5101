"""Valid documents that were refused (spec/12 §2, §4): a `kind: playbook` task whose `path` is a
template, resolved when the task runs against the flows deployed then (an unknown one is the
task's typed error naming the path); step names that are not identifiers; a `metadata.path`
that starts with `/`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from aos.flows.define.cfd import canonical_value
from aos.flows.define.document import load_flow
from aos.flows.errors import FlowCheckError
from aos.flows.serve import flow_operations as ops
from aos.kernel.audit import replay
from tests.flows_world.support import FlowWorld, make_flow_world
from tests.playbooks.driver import run_playbook


def playbook(path: str, *steps: dict[str, Any], workload: Any = None) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "noetl.io/v2",
            "kind": "Playbook",
            "metadata": {"name": path.rsplit("/", 1)[-1], "path": path},
            "workload": workload or {},
            "workflow": list(steps),
        },
        sort_keys=False,
        allow_unicode=True,
    )


CHILD = playbook(
    "/tests/child",
    {
        "step": "double",
        "tool": {"kind": "python", "args": {"n": "{{ n }}"}, "code": "result = n * 2"},
    },
    workload={"n": 0},
)
PARENT = playbook(
    "tests/parent",
    {
        "step": "call child",
        "tool": {"kind": "playbook", "path": "{{ workload.child }}", "args": {"n": 21}},
        "next": {
            "arcs": [
                {"step": "done", "when": "{{ event.name == 'call.done' }}"},
                {
                    "step": "missing",
                    "when": "{{ event.name == 'call.error' }}",
                    "args": {"error": "{{ event.payload }}"},
                },
            ]
        },
    },
    {"step": "done", "tool": {"kind": "noop"}},
    {
        "step": "missing",
        "tool": {"kind": "python", "args": {"e": "{{ args.error }}"}, "code": "result = e"},
    },
)


@pytest.fixture
def flows(tmp_path: Path) -> Iterator[FlowWorld]:
    made = make_flow_world(tmp_path / "w")
    try:
        yield made
    finally:
        made.world.close()


def test_a_templated_playbook_path_is_resolved_when_the_task_runs(
    flows: FlowWorld, tmp_path: Path
) -> None:
    parent = ops.deploy(flows.world, load_flow(PARENT, source="parent")).name
    for exec_id, path in (
        ("slash", "/tests/child"),
        ("plain", "tests/child"),
        ("nope", "tests/nope"),
    ):
        if exec_id == "plain":  # deployed after the parent: found when the task runs
            assert ops.deploy(flows.world, load_flow(CHILD, source="child")).name == "tests/child"
        ops.start(flows.world, parent, workload={"child": path}, exec_id=exec_id)
        flows.adapters.drain()
    slash, plain, nope = (flows.state(e) for e in ("slash", "plain", "nope"))
    assert slash["business"]["steps"]["missing"]["code"] == "subflow.unknown"  # not yet deployed
    assert "'tests/child'" in slash["business"]["steps"]["missing"]["message"]
    assert plain["status"] == "completed"
    assert plain["business"]["steps"]["call child"] == 42
    started = [e for e in flows.events("plain") if e["event"] == "child.started"]
    assert [e["flow"] for e in started] == ["tests/child"]
    error = nope["business"]["steps"]["missing"]
    assert error["code"] == "subflow.unknown" and "'tests/nope'" in error["message"]
    assert "{{ workload.child }}" in error["message"]
    flows.world.close()
    report = replay.verify_replay(tmp_path / "w")
    assert report.ok, report.divergence


def test_a_templated_path_compiles_to_a_subflow_named_when_it_runs() -> None:
    definition = canonical_value(load_flow(PARENT, source="parent"))
    (task,) = definition["steps"][0]["tasks"]
    assert (task["do"], task["flow"]) == ("subflow", "{{ workload.child }}")
    assert definition["subflows"] == {}


def test_a_leading_slash_in_metadata_path_is_not_part_of_the_flow_name() -> None:
    assert canonical_value(load_flow(CHILD, source="child"))["name"] == "tests/child"
    literal = playbook(
        "tests/p", {"step": "a", "tool": {"kind": "playbook", "path": "/tests/child"}}
    )
    assert list(canonical_value(load_flow(literal, source="p"))["subflows"].values()) == [
        {"flow": "tests/child", "definition": None}
    ]


def test_a_literal_path_that_names_no_flow_is_refused_at_its_own_path() -> None:
    bad = playbook("tests/p", {"step": "a", "tool": {"kind": "playbook", "path": "Lib/Child"}})
    with pytest.raises(FlowCheckError) as refused:
        load_flow(bad, source="p")
    [problem] = refused.value.problems
    assert problem.path == "$.workflow[0].tool.path" and "'Lib/Child'" in problem.message


STEP_NAMES = playbook(
    "tests/step-names",
    {
        "step": "fetch data",
        "tool": {"kind": "python", "code": "result = {'n': 2}"},
        "next": {"arcs": [{"step": "step-1"}]},
    },
    {
        "step": "step-1",
        "tool": {
            "kind": "python",
            "args": {"n": "{{ steps['fetch data'].n }}"},
            "code": "result = n * 10",
        },
        "next": {"arcs": [{"step": "étape ü", "when": "{{ steps['step-1'] == 20 }}"}]},
    },
    {"step": "étape ü", "tool": {"kind": "noop", "args": {"from": "{{ steps['step-1'] }}"}}},
)


def test_step_names_that_are_not_identifiers_compile_route_and_show() -> None:
    done = run_playbook(STEP_NAMES)
    assert done.status == "completed"
    assert done.steps == {"fetch data": {"n": 2}, "step-1": 20, "étape ü": {"from": 20}}
    started = [e["step"] for e in done.of("step.started")]
    assert started == ["fetch data", "step-1", "étape ü"]
    assert [e["to"] for e in done.of("next.evaluated")] == [["step-1"], ["étape ü"], []]


def test_step_names_that_are_not_identifiers_on_a_world(flows: FlowWorld, tmp_path: Path) -> None:
    deployed = ops.deploy(flows.world, load_flow(STEP_NAMES, source="names")).name
    ops.start(flows.world, deployed, exec_id="names")
    flows.adapters.drain()
    state = flows.state("names")
    assert state["status"] == "completed"
    assert state["business"]["steps"]["étape ü"] == {"from": 20}
    flows.world.close()
    assert replay.verify_replay(tmp_path / "w").ok
