"""Running `.flow` files with `echo` tasks on a flow world: seed 004's data rules (a single
input as is, empty objects merged or omitted, several inputs a list, `>` merging, guards
skipping and passing their input on, iteration one invocation per item in order), and a
replay audit of a world that ran them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.flows.define import flowlang
from aos.flows.serve import flow_operations as ops
from aos.kernel.audit import replay
from tests.flows_world.support import FlowWorld, make_flow_world

ECHO = [{"name": name, "tool": {"kind": "echo"}} for name in "ABCDEFX"]


@pytest.fixture(scope="module")
def flows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlowWorld]:
    made = make_flow_world(tmp_path_factory.mktemp("flowlang") / "w")
    try:
        yield made
    finally:
        made.world.close()


_count = iter(range(1, 10_000))


def run(flows: FlowWorld, text: str, workload: Any = None) -> tuple[dict[str, Any], str]:
    number = next(_count)
    definition = flowlang.load_flow(text, source=f"t{number}.flow", workbook=ECHO)
    name = ops.deploy(flows.world, definition).name
    exec_id = f"e{number}"
    ops.start(flows.world, name, workload=workload or {}, exec_id=exec_id)
    flows.adapters.drain()
    state = flows.state(exec_id)
    assert state["status"] == "completed", flows.events(exec_id)
    return state["engine"]["result"], exec_id


def calls(flows: FlowWorld, exec_id: str, step_prefix: str) -> list[Any]:
    """The `call` tasks that ran in steps named STEP_PREFIX.N, in order."""
    return [
        e
        for e in flows.events(exec_id)
        if e["event"] == "task.started"
        and str(e["step"]).startswith(step_prefix + ".")
        and e["task"] == "run"
    ]


def test_a_single_input_is_passed_as_is(flows: FlowWorld) -> None:
    result, _ = run(flows, "A → B", {"k": [1, 2]})
    assert result == {"k": [1, 2]}


def test_several_inputs_form_a_list_in_edge_order(flows: FlowWorld) -> None:
    text = '<{"fruit": "banana"}> → A → :x B;\n<{"animal": "monkey"}> → C → :x'
    result, _ = run(flows, text)
    assert result == [{"fruit": "banana"}, {"animal": "monkey"}]


def test_the_merge_operator_merges_the_inputs(flows: FlowWorld) -> None:
    text = '<{"fruit": "banana"}> → A → :x > B;\n<{"animal": "monkey"}> → C → :x'
    result, _ = run(flows, text)
    assert result == {"fruit": "banana", "animal": "monkey"}


def test_a_merge_before_the_end_merges_the_flows_result(flows: FlowWorld) -> None:
    text = '<{"fruit": "banana"}> → A → > :end;\n<{"animal": "monkey"}> → C'
    result, _ = run(flows, text)
    assert result == {"fruit": "banana", "animal": "monkey"}
    result, _ = run(flows, text.replace("> :end", ":end"))
    assert result == [{"fruit": "banana"}, {"animal": "monkey"}]


def test_a_merge_before_a_label_merges_into_what_it_feeds(flows: FlowWorld) -> None:
    text = '<{"fruit": "banana"}> → A → > :x;\n<{"animal": "monkey"}> → C → :x;\n:x B'
    result, _ = run(flows, text)
    assert result == {"fruit": "banana", "animal": "monkey"}


def test_a_merge_before_a_subflows_end_merges_its_join(flows: FlowWorld) -> None:
    text = '<{"a": 1}> → { A → > :end; <{"b": 2}> → C } → D'
    assert run(flows, text)[0] == {"a": 1, "b": 2}


def test_empty_literals_are_empty_maps(flows: FlowWorld) -> None:
    assert run(flows, "< > → A ( ) → B", {"k": 1})[0] == {}
    assert run(flows, "<> → A", {"k": 1})[0] == {}


def test_empty_objects_merge_into_one(flows: FlowWorld) -> None:
    result, _ = run(flows, "<{}> → A → :x B;\n<{}> → C → :x")
    assert result == {}


def test_empty_objects_are_omitted_beside_a_non_empty_one(flows: FlowWorld) -> None:
    result, _ = run(flows, '<{}> → A → :x B;\n<{"animal": "monkey"}> → C → :x;\n<{}> → D → :x')
    assert result == {"animal": "monkey"}


def test_the_end_aggregates_like_any_task(flows: FlowWorld) -> None:
    result, _ = run(flows, "A → { B C } → D", {"n": 1})
    assert result == [{"n": 1}, {"n": 1}]


def test_a_true_guard_runs_the_task(flows: FlowWorld) -> None:
    result, exec_id = run(flows, "A → ? `$[?(@.status=0)]` B → C", {"status": 0})
    assert result == {"status": 0}
    assert len(calls(flows, exec_id, "B")) == 1


def test_a_false_guard_skips_the_task_and_passes_its_input_on(flows: FlowWorld) -> None:
    result, exec_id = run(flows, "A → ? `$[?(@.status=0)]` B → C", {"status": 1})
    assert result == {"status": 1}
    assert calls(flows, exec_id, "B") == []
    assert len(calls(flows, exec_id, "C")) == 1  # the guard is B's alone


def test_guards_in_a_subflow_choose_their_branches(flows: FlowWorld) -> None:
    text = (
        "A → { ? `$[?(@.status=0)]` B\n"
        "      ? `$[?(@.status>0)]` C\n"
        "      ? `$[?(@.status>1)]` D } → E"
    )
    ran = {}
    for status in (0, 1, 2, -1):
        _, exec_id = run(flows, text, {"status": status})
        ran[status] = [n for n in "BCD" if calls(flows, exec_id, n)]
    assert ran == {0: ["B"], 1: ["C"], 2: ["C", "D"], -1: []}


def test_a_false_guard_on_a_subflow_skips_it_whole(flows: FlowWorld) -> None:
    text = "A → ? `$[?(@.go==true)]` { B → C D } → E"
    result, exec_id = run(flows, text, {"go": False})
    assert result == {"go": False}  # the subflow's input, passed on as one value
    assert calls(flows, exec_id, "B") == calls(flows, exec_id, "C") == []
    result, exec_id = run(flows, text, {"go": True})
    assert result == [{"go": True}, {"go": True}]
    assert len(calls(flows, exec_id, "C")) == 1


def test_iteration_invokes_once_per_item_in_order(flows: FlowWorld) -> None:
    items = [{"x": 12, "y": 24}, {"x": 3, "y": 96}, {"x": 7, "y": 12}, {"x": 7, "y": 7}]
    result, exec_id = run(flows, f"<{json.dumps(items)}> → * B")
    assert result == items
    assert len(calls(flows, exec_id, "B")) == len(items)


def test_iterating_a_subflow_iterates_each_of_its_tasks(flows: FlowWorld) -> None:
    # seed 004: `A → * { B → C D } → E` is `A :out → * B → * C → :in E ; :out → * D → :in`
    result, exec_id = run(flows, "<[1, 2, 3]> → * { B → C D } → E")
    assert result == [[1, 2, 3], [1, 2, 3]]
    assert len(calls(flows, exec_id, "C")) == 3
    assert len(calls(flows, exec_id, "D")) == 3


def test_declared_defaults_and_aliases_run(flows: FlowWorld) -> None:
    text = "@task X = echo (- {fruit: banana} -);\n@task Y { A → B }\nX → Y"
    result, _ = run(flows, text, {"n": 2})
    assert result == {"n": 2}


def test_replay_verifies_a_world_that_ran_flow_files(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    with flows.world:
        run(flows, "A → ? `$[?(@.status=0)]` { B C } → * D", {"status": 0})
        run(flows, '<[{"a": 1}, {"a": 2}]> → * A → :x > B;\n<{"c": 3}> → C → :x')
    report = replay.verify_replay(tmp_path / "w")
    assert report.ok, report.divergence
