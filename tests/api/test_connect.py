"""`aos.connect`: the same handle and answers through a node that serves the world (spec/11
§12.1), against a real `aos node up` process: deploy, run, a wait that runs out (running,
exit 5), a signal, a wait that ends, the history, a cell, and a refusal with its code."""

from __future__ import annotations

from pathlib import Path

import pytest

import aos
from aos.cli.common import EXIT_OK
from tests.flows_world.test_flow_client_cli import SIGNAL_FLOW, as_json
from tests.test_node_process import node_process


def test_the_handle_through_a_node(tmp_path: Path) -> None:
    world = tmp_path / "w"
    created = as_json(EXIT_OK, "flow", "world", "create", world, "--no-sync")
    flow = tmp_path / "signal.yaml"
    flow.write_text(SIGNAL_FLOW)
    with (
        node_process(world) as (url, _node),
        aos.connect(url, token=created["admin_token"]) as flows,
    ):
        assert flows.deploy(flow).name == "t/signal"
        run = flows.run("t/signal", exec_id="s-1")
        waited = run.wait(timeout_s=0.2)
        assert (waited.status, waited.exit_code) == ("running", 5)
        assert run.signal("warehouse.picked", {"box": 7}).outcome == "delivered"
        outcome = run.wait(timeout_s=10)
        assert outcome.ok and outcome.exec == "s-1"
        assert run.events()[0].event == "playbook.started"
        assert [e.event for e in run.events(kind="signal.received")] == ["signal.received"]
        assert flows.state("aos/FlowExec@1", "s-1").status == "completed"
        assert flows.executions(flow="t/signal").count == 1
        with pytest.raises(aos.AosError) as unknown:
            flows.run("no/such-flow")
        assert unknown.value.code == "flow.unknown"


APPROVAL = """
name: t/approve
steps:
  - name: ask
    tasks:
      - {name: approve, do: human, title: "Approve it", form: {approved: boolean}}
"""


def test_a_human_task_through_a_node(tmp_path: Path) -> None:
    world = tmp_path / "w"
    created = as_json(EXIT_OK, "flow", "world", "create", world, "--no-sync")
    flow = tmp_path / "approve.yaml"
    flow.write_text(APPROVAL)
    human = ["--human-adapter", "aos/human@1", "--human-key", str(tmp_path / "w.keys/human.key")]
    token = created["admin_token"]
    with node_process(world, *human) as (url, _node), aos.connect(url, token=token) as flows:
        run = flows.run(flow, exec_id="a-1")
        assert run.wait(timeout_s=0.2).status == "running"
        (task,) = flows.tasks()
        assert task.title == "Approve it"
        flows.complete_task(task.intent, {"approved": True})
        assert run.wait(timeout_s=10).ok
        assert flows.tasks() == []
