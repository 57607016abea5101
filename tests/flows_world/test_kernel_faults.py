"""A step the kernel refuses ends its execution `failed` with the refusal's code and message
(spec/11 §3.7): the interpreter handles its cell's fault notice (spec/03 §7.1), so `aos flow
status`, the history, the listing, the inspector, the exit code of a run that waits, and a
parent waiting on the execution all see the failure; `replay --verify` reproduces it. A world
whose manifest predates notices shows the same status, read from the failed cell."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aos.cli.common import EXIT_FAILED
from aos.cli.main import main
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import EXEC_WORKFLOW, load_or_make_keys, write_manifest
from aos.flows.serve.local import LocalAdapters
from aos.kernel.audit import replay
from aos.kernel.node import Node
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World
from tests.flows_world.support import FlowWorld, make_flow_world
from tests.flows_world.test_execution_events import serve
from tests.test_world import engine

# Two nested loops of 100,000: far more than a step's fuel (spec/08 §5).
BURN = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"

AFTER_A_CALL = f"""
name: t/burns
steps:
  - name: ask
    tasks:
      - {{name: call, do: call, tool: {{kind: echo}}, args: {{n: 1}}}}
      - {{name: wait, do: wait_signal, signal: go, timeout_s: 3600}}
    next: burn
  - name: burn
    tasks:
      - {{do: noop, result: "{BURN}"}}
"""

AT_ONCE = f"""
name: t/burns-at-once
steps:
  - name: burn
    tasks:
      - {{do: noop, result: "{BURN}"}}
"""

PARENT = """
name: t/parent
subflows: {child: {flow: t/burns-at-once}}
steps:
  - name: spawn
    tasks:
      - {name: run_child, do: subflow, flow: child, workload: {}}
"""


@pytest.fixture
def flows(tmp_path: Path) -> Iterator[FlowWorld]:
    made = make_flow_world(tmp_path / "w")
    try:
        yield made
    finally:
        made.world.close()


def fuel_error(error: Any) -> None:
    assert error["kind"] == "engine" and error["code"] == "step.fuel_exhausted", error
    assert "fuel" in error["message"]


def test_a_step_the_kernel_refuses_fails_the_execution_with_its_reason(
    flows: FlowWorld,
) -> None:
    flows.run(AFTER_A_CALL)
    assert flows.state()["status"] == "running"  # at the signal wait, the timer armed
    ops.signal(flows.world, "e1", "go")
    state = flows.state()
    assert state["status"] == "failed"
    fuel_error(state["engine"]["error"])
    assert state["engine"]["waits"] == {}  # and nothing is left open
    assert flows.world.reader.open_intents() == []
    cell = next(c for c in flows.world.reader.cells(EXEC_WORKFLOW) if c.key == "e1")
    # The interpreter handled its fault notice: the kernel did not fail the cell, and its
    # views say failed because the execution did.
    assert not cell.faulted and cell.status == "failed"
    names = flows.names()
    assert names[-2:] == ["execution.faulted", "playbook.finished"]
    faulted = flows.events()[-2]
    assert faulted["code"] == "step.fuel_exhausted" and "fuel" in faulted["message"]
    assert flows.events()[-1]["status"] == "failed"
    listed = ops.listing(flows.world, ops.ExecutionFilter(status="failed"))["executions"]
    assert [e["exec"] for e in listed] == ["e1"]


def test_a_start_the_kernel_refuses_is_a_failed_execution(flows: FlowWorld) -> None:
    state = flows.run(AT_ONCE, exec_id="first")
    assert (state["status"], state["flow"], state["version"]) == ("failed", "t/burns-at-once", 1)
    fuel_error(state["engine"]["error"])
    # The refusal, then the notice's step: the execution made from its start, and failed.
    assert flows.names("first") == ["execution.faulted", "playbook.started", "playbook.finished"]


def test_a_parent_learns_that_the_kernel_failed_its_child(flows: FlowWorld) -> None:
    flows.deploy(AT_ONCE)
    state = flows.run(PARENT, exec_id="p")
    assert state["status"] == "failed"
    assert state["engine"]["waits"] == {}
    child = ops.status(flows.world, "p:spawn:1")
    assert child["status"] == "failed"
    ended = [e for e in flows.events("p") if e["event"] == "child.ended"]
    assert ended and ended[0]["status"] == "failed"
    failure = state["engine"]["summary"]["failures"][0]["error"]
    assert failure["code"] == "step.fuel_exhausted"


def test_faulted_executions_replay(flows: FlowWorld) -> None:
    flows.deploy(AT_ONCE)
    flows.run(PARENT, exec_id="p")
    flows.run(AFTER_A_CALL, exec_id="q")
    ops.signal(flows.world, "q", "go")
    flows.world.close()
    report = replay.verify_replay(flows.path)
    assert report.ok, report.divergence


def test_the_cli_exits_3_for_a_failed_run_and_status_says_why(tmp_path: Path) -> None:
    source = tmp_path / "burns.flow.yaml"
    source.write_text(AT_ONCE)
    world = tmp_path / "kept"
    done = CliRunner().invoke(
        main, ["flow", "run", str(source), "--local", "--keep", str(world), "--id", "x"]
    )
    assert done.exit_code == EXIT_FAILED, done.output
    assert re.search(r"status\s+failed", done.output)
    assert "step.fuel_exhausted" in done.output
    shown = CliRunner().invoke(main, ["flow", "status", "x", "--world", str(world)])
    assert shown.exit_code == 0, shown.output  # a status read answers; a run that waits fails
    assert "failed" in shown.output and "step.fuel_exhausted" in shown.output
    as_json = CliRunner().invoke(main, ["flow", "status", "x", "--world", str(world), "--json"])
    body = json.loads(as_json.stdout)
    assert body["status"] == "failed" and body["engine"]["error"]["code"] == "step.fuel_exhausted"


def test_the_inspector_and_a_waiting_request_see_the_failure(tmp_path: Path) -> None:
    made = make_flow_world(tmp_path / "w")
    made.deploy(AT_ONCE)
    made.world.close()
    with Node.open_path(made.path, sync=False, engine=engine()) as node:
        client = serve(node)
        answer = client.post(
            "/v1/flows/t%2Fburns-at-once/run", json={"exec": "n1", "wait_ms": 20_000}
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "failed"
        page = client.get("/ui/flows/executions/n1")
        assert page.status_code == 200, page.text
        assert 'id="execution-status">failed<' in page.text
        assert "step.fuel_exhausted" in page.text


# -- a world whose manifest predates fault notices ---------------------------------------------


def old_flow_world(path: Path) -> FlowWorld:
    """A flow world whose `aos/FlowExecEvent@1` has no arm for `sys/StepFault@1`."""
    keys = load_or_make_keys(None)
    with tempfile.TemporaryDirectory() as scratch:
        manifest = write_manifest(Path(scratch) / "flow", keys)
        schemas = manifest / "defs" / "schemas.yaml"
        arm = "    Faulted: {ref: sys/StepFault@1}\n"
        assert arm in schemas.read_text()
        schemas.write_text(schemas.read_text().replace(arm, ""))
        world = World.create(
            path,
            manifest,
            clock="manual",
            sync=False,
            engine=engine(),
            stamps=PinnedStampSource(),
        )
    return FlowWorld(world, keys, LocalAdapters(world, keys), path)


def test_without_notices_the_status_is_read_from_the_failed_cell(tmp_path: Path) -> None:
    flows = old_flow_world(tmp_path / "old")
    try:
        flows.run(AFTER_A_CALL, exec_id="late")
        ops.signal(flows.world, "late", "go")
        late = ops.status(flows.world, "late")
        assert late["status"] == "failed"
        fuel_error(late["fault"])
        assert flows.names("late")[-1] == "execution.faulted"
        flows.deploy(AT_ONCE)
        ops.start(flows.world, "t/burns-at-once", exec_id="early")
        early = ops.status(flows.world, "early")  # no state at all: read from the journal
        assert (early["status"], early["flow"], early["version"]) == (
            "failed",
            "t/burns-at-once",
            1,
        )
        fuel_error(early["fault"])
        with pytest.raises(ops.ExecutionEndedError):
            ops.signal(flows.world, "late", "go")
        listed = ops.listing(flows.world, ops.ExecutionFilter(status="failed"))["executions"]
        assert sorted(e["exec"] for e in listed) == ["early", "late"]
    finally:
        flows.world.close()
