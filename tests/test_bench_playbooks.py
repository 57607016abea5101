"""The playbook benchmark's own logic (bench/bench_playbooks.py, bench/peers/noetl_stack.py):
its playbooks and their stand-ins, and how it reads each side's answers. The benchmark itself
runs under `make bench`, with NoETL in its own virtualenv, never here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from aos.flows.define.cfd import load_definition
from aos.flows.define.document import load_flow
from bench import bench_playbooks as bp
from bench.peers import aos_python_inprocess, noetl_stack
from bench.playbooks import tasks
from tests import pg_cluster


def _playbook(case: str) -> dict[str, Any]:
    value: dict[str, Any] = yaml.safe_load(bp.NOETL_FILES[case].read_text())
    return value


@pytest.mark.parametrize("case", bp.CASES)
def test_the_compiled_playbook_and_its_stand_in_have_its_steps_and_workload(case: str) -> None:
    playbook = _playbook(case)
    compiled = load_flow(bp.AOS_FILES[case].read_bytes(), source=str(bp.AOS_FILES[case]))
    stand_in_file = bp.PLAYBOOKS / "cfd" / f"{case}.flow.yaml"
    stand_in = load_definition(stand_in_file.read_bytes(), source=str(stand_in_file))
    steps = [s["step"] for s in playbook["workflow"]]
    for definition in (compiled, stand_in):
        assert [s.name for s in definition.steps] == steps
        assert definition.workload == playbook["workload"]
    assert playbook["workflow"][-1]["step"] == noetl_stack.LAST_STEP


@pytest.mark.parametrize("case", bp.CASES)
def test_playbooks_route_without_set_ctx(case: str) -> None:
    # 2.13.1 does not pass set_ctx values to arc conditions: the bench must not need them.
    def keys(value: Any) -> set[str]:
        if isinstance(value, dict):
            return set(value).union(*(keys(v) for v in value.values()))
        if isinstance(value, list):
            return set().union(*(keys(v) for v in value))
        return set()

    assert "set_ctx" not in keys(_playbook(case))
    assert "workflow" in keys(_playbook(case))


def _inline(code: str, args: dict[str, Any]) -> Any:
    scope = dict(args)
    exec(code, {}, scope)  # the playbook's own inline code, as NoETL's worker runs it
    return scope["result"]


def test_stand_in_functions_compute_what_the_inline_code_computes() -> None:
    hello = {s["step"]: s for s in _playbook("hello_world")["workflow"]}
    args = {"message": "Hello World"}
    functions = {"greet": tasks.greet, "shout": tasks.shout, "end": tasks.hello_end}
    for step, function in functions.items():
        assert function(args) == _inline(hello[step]["tool"]["code"], args)
        assert function(args) == bp.EXPECTED["hello_world"][step]
    loop = {s["step"]: s for s in _playbook("loop20")["workflow"]}
    for item in (1, 7, 20):
        assert tasks.square({"item": item}) == _inline(
            loop["square"]["tool"]["code"], {"item": item}
        )
    assert tasks.loop_end({}) == _inline(loop["end"]["tool"]["code"], {})
    assert len(_playbook("loop20")["workload"]["items"]) == bp.LOOP_ITEMS


def test_check_results_accepts_the_expected_results_and_calls() -> None:
    bp.check_results("hello_world", dict(bp.EXPECTED["hello_world"]), {})
    bp.check_results("loop20", {"end": {"done": True}, "square": []}, {"square": 20, "end": 1})


@pytest.mark.parametrize(
    ("case", "results", "calls", "complaint"),
    [
        ("hello_world", {"greet": {"greeting": "Hello World"}}, {}, "step shout"),
        ("hello_world", {**bp.EXPECTED["hello_world"], "end": {"done": False}}, {}, "step end"),
        ("loop20", {"end": {"done": True}}, {"square": 19}, "19 calls in square"),
        ("loop20", {"end": {"done": True}}, {}, "0 calls in square"),
    ],
)
def test_check_results_refuses_missing_or_wrong_results(
    case: str, results: dict[str, Any], calls: dict[str, int], complaint: str
) -> None:
    with pytest.raises(bp.BenchCheckError, match=complaint):
        bp.check_results(case, results, calls)


def test_noetl_results_unwrap_each_steps_context_without_the_command_id() -> None:
    status = {
        "variables": {
            "message": "Hello World",  # a workload value, not a step
            "greet": {"status": "COMPLETED", "context": {"greeting": "hi", "command_id": "1:g:2"}},
            "end": {"status": "COMPLETED", "context": {"done": True}},
            "odd": {"status": "COMPLETED", "context": "text"},
        }
    }
    assert bp.noetl_results(status) == {"greet": {"greeting": "hi"}, "end": {"done": True}}
    assert bp.noetl_results({}) == {}


def test_noetl_calls_count_completed_commands_by_step() -> None:
    events = [
        {"event_type": "command.completed", "node_name": "square"},
        {"event_type": "command.completed", "node_name": "square"},
        {"event_type": "command.started", "node_name": "square"},
        {"event_type": "command.completed", "node_name": "end"},
    ]
    assert bp.noetl_calls(events) == {"square": 2, "end": 1}


def test_aos_results_and_calls_read_status_and_history() -> None:
    status = {"business": {"steps": {"end": {"done": True}}}, "status": "completed"}
    assert bp.aos_results(status) == {"end": {"done": True}}
    assert bp.aos_results({"business": None}) == {}
    events = [
        {"event": "task.done", "step": "square"},
        {"event": "task.started", "step": "square"},
        {"event": "task.done", "step": "square"},
        {"event": "task.failed", "step": "end"},
    ]
    assert bp.aos_calls(events) == {"square": 2}


def test_noetl_side_says_why_it_cannot_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(noetl_stack, "NOETL_PYTHON", tmp_path / "missing" / "python")
    assert "make bench-noetl-setup" in str(noetl_stack.unavailable())
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.touch()
    monkeypatch.setattr(noetl_stack, "NOETL_PYTHON", python)
    assert "nats-server" in str(noetl_stack.unavailable())


def test_pg_bin_dir_from_the_environment_must_hold_initdb(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AOS_PG_BIN", str(tmp_path))
    assert pg_cluster.find_bin_dir() is None
    (tmp_path / "initdb").touch()
    assert pg_cluster.find_bin_dir() == tmp_path


def test_in_process_adapter_calls_allowed_functions_and_reports_failures() -> None:
    allow = ("bench.playbooks",)
    square = {"tool": {"kind": "python", "function": "bench.playbooks.tasks:square"}}
    done = aos_python_inprocess.call({**square, "args": {"item": 3}}, allow)
    assert (done.status, done.payload) == ("ok", {"item": 3, "square": 9})
    raised = aos_python_inprocess.call({**square, "args": {}}, allow)
    assert raised.status == "error" and raised.payload["code"] == "python.raised"
    assert "KeyError" in raised.payload["message"]
    for refused in (("bench.play",), ("other",), ()):
        answer = aos_python_inprocess.call({**square, "args": {"item": 3}}, refused)
        assert answer.status == "error"
        assert answer.payload["kind"] == "authorization"


def test_in_process_adapter_runs_inline_code_as_noetls_worker_does() -> None:
    loop = {s["step"]: s for s in _playbook("loop20")["workflow"]}
    tool = {"kind": "python", "code": loop["square"]["tool"]["code"]}
    done = aos_python_inprocess.call({"tool": tool, "args": {"item": 4}}, ())
    assert (done.status, done.payload) == ("ok", {"item": 4, "square": 16})
    raised = aos_python_inprocess.call({"tool": tool, "args": {}}, ())
    assert raised.status == "error" and "NameError" in raised.payload["message"]


def test_side_times_each_execution_counts_its_cpu_and_checks_them_all() -> None:
    runs = iter([(0.5, "e1"), (1.5, "e2"), (1.0, "e3"), (1.0, "e4")])
    checked: list[str] = []
    side = bp.Side(
        "aos", "hello_world", lambda: next(runs), checked.append, lambda: {"me": os.getpid()}
    )
    contender = side.contender(2)
    assert [contender.run(0), contender.run(1)] == [1.0, 1.0]  # each round: mean of 2
    extra = contender.extra()
    assert extra["executions_checked"] == 4
    assert set(extra["cpu_s_per_execution_by_process"]) == {"me"}
    assert extra["cpu_s_per_execution"] >= 0
    assert "wal_syncs_per_execution" not in extra
    side.check_all()
    assert checked == ["e1", "e2", "e3", "e4"]


def test_the_aos_side_runs_a_playbook_on_a_node_it_starts_as_its_admin(tmp_path: Path) -> None:
    """The bench's own node side, end to end (a node refuses callers without a token since
    issue 31: the bench must present the world's first admin's)."""
    with bp.AosNode.started(tmp_path, in_process=True) as node:
        name = node.register(bp.AOS_FILES["hello_world"])
        _, execution = node.execute(name)
        node.check("hello_world", execution)
        assert node.host_figures()["commits"] >= 1
