"""`import aos`: the public API runs flows in process with the names in `aos.__all__` only
(spec/11 §13): a playbook with its python tasks, a flow with a human task and a signal,
cancelling, reading a cell, and the refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

import aos

EXAMPLES = Path(__file__).resolve().parents[2] / "flows" / "examples"


def test_the_public_surface_is_what_all_lists() -> None:
    assert dir(aos) == sorted(aos.__all__)
    assert all(getattr(aos, name) is not None for name in aos.__all__)
    with pytest.raises(AttributeError):
        aos.HeldFlows  # noqa: B018 - a private name is not part of the API


def test_a_playbook_with_python_tasks_runs_and_waits() -> None:
    with aos.create() as flows:
        run = flows.run(EXAMPLES / "hello.yaml")
        outcome = run.wait()
        assert outcome == aos.Outcome(run.id, "completed", {"sum": 14}, None)
        assert outcome.exit_code == 0
        assert [e.step for e in run.events(kind="step.started")] == ["start", "square", "done"]
        assert run.status().status == "completed"


def test_a_human_task_and_a_signal_through_the_handle(tmp_path: Path) -> None:
    with aos.create(tmp_path / "shop", clock="manual") as flows:
        flows.deploy(EXAMPLES / "order.flow.yaml")
        run = flows.run("examples/order", {"amount": 250}, exec_id="o-1")
        assert run.wait().status == "running"  # waits for a person: the wait ends at once
        (task,) = flows.tasks()
        assert task.title == "Approve order A-1 for 250 EUR"
        flows.complete_task(task.intent, {"approved": True})
        assert flows.tasks() == []
        answer = run.signal("warehouse.picked", {"box": 7})
        assert answer.outcome == "delivered"
        outcome = run.wait()
        assert outcome.ok and outcome.result == {"order": "A-1", "closed": True}
        cell = flows.state("aos/FlowExec@1", "o-1")
        assert cell.status == "completed" and cell.state["exec"] == "o-1"


def test_cancel_ends_an_execution_that_waits() -> None:
    with aos.create() as flows:
        run = flows.run(EXAMPLES / "order.flow.yaml", {"amount": 5})
        assert run.wait().exit_code == 5
        assert run.cancel("not needed").status == "cancelled"
        assert run.wait().exit_code == 4


def test_refusals_are_typed_errors_and_change_nothing(tmp_path: Path) -> None:
    with aos.create() as flows:
        with pytest.raises(aos.AosError) as unknown:
            flows.run("no/such-flow")
        assert unknown.value.code == "flow.unknown"
        with pytest.raises(aos.AosError) as not_a_file:
            flows.deploy("no/such-flow")
        assert not_a_file.value.code == "flow.request_invalid"
        with pytest.raises(aos.AosError) as unreadable:
            flows.deploy(tmp_path / "missing.yaml")
        assert unreadable.value.code == "flow.error"
        run = flows.run(EXAMPLES / "hello.yaml")
        with pytest.raises(aos.AosError) as bad_wait:
            run.wait(timeout_s=-1)
        assert bad_wait.value.code == "flow.request_invalid"
        assert flows.executions().count == 1
    with pytest.raises(aos.AosError) as no_keys:
        aos.open(tmp_path / "nowhere")
    assert no_keys.value.code == "flow.local_world_invalid"


def test_a_definition_past_its_byte_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"#" * (8 * 1024 * 1024))
    with aos.create() as flows, pytest.raises(aos.AosError) as refused:
        flows.deploy(huge)
    assert refused.value.code == "flow.too_large"


def test_a_cell_that_is_not_there_is_refused() -> None:
    with aos.create() as flows:
        with pytest.raises(aos.AosError) as missing:
            flows.state("aos/FlowExec@1", "nobody")
        assert missing.value.code == "world.cell_missing"
        with pytest.raises(aos.AosError) as unknown:
            flows.state("no/Such@1")
        assert unknown.value.code == "world.workflow_unknown"


NAP = """
format: aos.flow/1
name: t/nap
steps:
  - name: nap
    tasks:
      - {name: sleep, do: wait_timer, duration_s: 1}
"""


def test_on_a_wall_clock_world_run_returns_and_wait_waits_for_the_timer(tmp_path: Path) -> None:
    flow = tmp_path / "nap.yaml"
    flow.write_text(NAP)
    with aos.create(tmp_path / "w") as flows:
        run = flows.run(flow)
        assert run.wait(timeout_s=0).exit_code == 5  # the timer is a second away
        outcome = run.wait(timeout_s=30)
    assert outcome.ok
