"""A subflow named by a template (spec/11 §3.5, `aos.flow/2`): the task renders the name when
it runs and asks the registry cell of that name, which starts the child at its latest version
or ends the parent's wait with `subflow.unknown`, naming the flow and the path."""

from __future__ import annotations

from typing import Any

from tests.flow_interpreter.harness import (
    Execution,
    domain,
    events,
    flow,
    registry_input,
    registry_step,
    step,
    task,
)

LOOKUP = "aos/FlowLookup@1"
H1, H2 = "blake3:" + "1" * 64, "blake3:" + "2" * 64


def _parent(child: str, format: str = "aos.flow/2") -> tuple[Execution, Any]:
    ex = Execution()
    call = task("sub", "subflow", flow="{{ workload.child }}", workload={"n": 1})
    return ex, ex.start(flow([step("a", [call])], format=format), {"child": child})


def test_the_task_renders_the_name_and_asks_its_registry_cell() -> None:
    ex, out = _parent("/lib/child")
    (lookup,) = domain(out, LOOKUP)
    assert lookup.value == {
        "name": "lib/child",
        "path": "{{ workload.child }}",
        "exec": "e1:a:1",
        "workload": {"n": 1},
        "parent": {"exec": "e1", "token": "w1"},
        "business_ref": None,
    }
    (started,) = [e for e in events(out) if e["event"] == "child.started"]
    assert (started["flow"], started["child"]) == ("lib/child", "e1:a:1")
    assert ex.status == "running"


def test_a_name_that_cannot_name_a_flow_fails_the_task() -> None:
    ex, out = _parent("Not A Flow")
    assert not domain(out, LOOKUP)
    (failure,) = ex.engine["summary"]["failures"]
    assert failure["error"]["code"] == "subflow.unknown"
    assert "'Not A Flow'" in failure["error"]["message"]


def test_aos_flow_1_reads_the_flow_as_an_alias_as_it_always_did() -> None:
    ex, out = _parent("lib/child", format="aos.flow/1")
    assert not domain(out, LOOKUP)
    assert ex.engine["summary"]["failures"][0]["error"]["code"] == "subflow.unknown"


def _lookup() -> dict[str, Any]:
    return {
        "name": "lib/child",
        "path": "{{ workload.child }}",
        "exec": "e1:a:1",
        "workload": {"n": 1},
        "parent": {"exec": "e1", "token": "w1"},
        "business_ref": "order-7",
    }


def test_the_registry_starts_the_child_at_the_latest_version() -> None:
    state = registry_step(registry_step(None, "lib/child", H1).state, "lib/child", H2).state
    out = registry_input(state, "lib/child", "Lookup", _lookup())
    assert out.state == state
    (start,) = domain(out, "aos/FlowStart@1")
    assert start.value == {
        "exec": "e1:a:1",
        "flow": "lib/child",
        "version": 2,
        "definition": H2,
        "workload": {"n": 1},
        "parent": {"exec": "e1", "token": "w1"},
        "business_ref": "order-7",
    }


def test_the_registry_of_a_flow_never_deployed_ends_the_wait() -> None:
    out = registry_input(None, "lib/child", "Lookup", _lookup())
    assert not out.has_state  # no cell is made for it
    (ended,) = domain(out, "aos/FlowEnded@1")
    assert ended.value["status"] == "failed" and ended.value["token"] == "w1"
    assert ended.value["error"]["code"] == "subflow.unknown"
    assert "'lib/child'" in ended.value["error"]["message"]
    ex, _ = _parent("lib/child")
    ex.ended(ended.value["child"], ended.value["token"], "failed", None, ended.value["error"])
    assert ex.status == "failed"
    assert ex.engine["summary"]["failures"][0]["error"]["code"] == "subflow.unknown"
