"""Playbooks on a real flow world (the interpreter component, the kernel, signed receipts):
`aos flow events` on a run of the corpus's v10 example shows the history under the event
names of FLOWS §6 and `aos world replay --verify` passes; the CLI checks the corpus and runs
the README's hello playbook with `--local`."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from aos.cli.main import main
from aos.flows.define.document import load_flow
from aos.flows.serve import flow_operations as ops
from tests.flows_world.support import make_flow_world
from tests.playbooks.driver import PLAYBOOKS
from tests.playbooks.server import serving

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "flows" / "examples" / "hello.yaml"
HISTORY_NAMES = {
    "playbook.started",
    "step.started",
    "policy.admit.evaluated",
    "task.started",
    "task.attempt.failed",
    "task.done",
    "task.failed",
    "policy.task.evaluated",
    "loop.started",
    "loop.iteration.started",
    "loop.iteration.done",
    "loop.iteration.failed",
    "loop.done",
    "step.done",
    "step.failed",
    "next.evaluated",
    "playbook.finished",
}
"""FLOWS §6: the names a v10 playbook's history uses (signals and human tasks aside)."""


def aos(*args: str | Path) -> dict[str, object] | list[object]:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_v10_canonical_example_history_and_replay(tmp_path: Path) -> None:
    text = (PLAYBOOKS / "v10_canonical_example.yaml").read_bytes()
    flows = make_flow_world(tmp_path / "w")
    with serving() as url:
        deployed = ops.deploy(flows.world, load_flow(text, source="v10"))
        ops.start(flows.world, deployed.name, workload={"api_url": url}, exec_id="v10")
        flows.adapters.drain()
    flows.world.close()
    events = aos("flow", "events", "v10", "--world", tmp_path / "w", "--json")
    assert isinstance(events, list)
    names = [str(e["event"]) for e in events]  # type: ignore[index]
    assert set(names) <= HISTORY_NAMES, set(names) - HISTORY_NAMES
    assert names[0] == "playbook.started" and names[-1] == "playbook.finished"
    for expected in ("policy.admit.evaluated", "policy.task.evaluated", "loop.started"):
        assert expected in names
    assert names.count("loop.iteration.started") == names.count("loop.iteration.done")
    assert events[-1]["status"] == "completed"  # type: ignore[index]
    seqs = [e["seq"] for e in events]  # type: ignore[index]
    assert seqs == sorted(seqs)
    state = aos("flow", "status", "v10", "--world", tmp_path / "w", "--json")
    steps = state["business"]["steps"]  # type: ignore[call-overload,index]
    assert steps["process_data"]["results"]["transform"] == {"transformed": True, "items": 3}
    assert steps["end"]["status"] == "COMPLETED"
    result = CliRunner().invoke(
        main, ["world", "replay", "--verify", "--world", str(tmp_path / "w")]
    )
    assert result.exit_code == 0, result.output
    assert "ok: every record and the head match" in result.stdout


def test_the_cli_checks_the_corpus(tmp_path: Path) -> None:
    files = sorted(PLAYBOOKS.rglob("*.yaml"))
    result = CliRunner().invoke(main, ["flow", "check", *map(str, files), "--json"])
    assert result.exit_code == 1  # the broken playbook
    checked = {Path(r["file"]).name: r for r in json.loads(result.stdout)}
    assert [n for n, r in checked.items() if not r["ok"]] == ["should_error_tool_is_required.yaml"]
    problems = checked["should_error_tool_is_required.yaml"]["problems"]
    assert {p["code"] for p in problems} >= {"playbook.tool_missing", "playbook.tool_field_missing"}


def test_run_hello_local() -> None:
    body = aos("flow", "run", HELLO, "--local", "--json")
    assert body["status"] == "completed"  # type: ignore[call-overload]
    assert body["result"] == {"sum": 14}  # type: ignore[call-overload]


CHILD = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child, path: lib/child}
workload: {n: 0}
workflow:
  - step: double
    tool: {kind: python, args: {n: "{{ workload.n }}"}, code: "result = {'doubled': n * 2}"}
"""
PARENT = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: parent, path: lib/parent}
workflow:
  - step: call_child
    tool: {kind: playbook, path: lib/child, args: {n: 21}}
"""


def test_a_playbook_task_runs_the_deployed_child_playbook(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    try:
        ops.deploy(flows.world, load_flow(CHILD, source="child"))
        deployed = ops.deploy(flows.world, load_flow(PARENT, source="parent"))
        ops.start(flows.world, deployed.name, exec_id="p")
        flows.adapters.drain()
        state = flows.state("p")
        assert state["status"] == "completed"
        assert "child.started" in flows.names("p") and "child.ended" in flows.names("p")
        children = [e["child"] for e in flows.events("p") if e["event"] == "child.started"]
        assert flows.state(children[0])["business"]["steps"]["double"] == {"doubled": 42}
    finally:
        flows.world.close()


def test_a_refused_playbook_deploy_changes_nothing(tmp_path: Path) -> None:
    world = tmp_path / "w"
    aos("flow", "world", "create", world, "--clock", "manual", "--no-sync", "--json")
    bad = tmp_path / "bad.yaml"
    bad.write_text(PARENT.replace("kind: playbook", "kind: carrier_pigeon"))
    before = sorted(p.name for p in world.rglob("*"))
    status_before = aos("world", "status", "--world", world, "--json")
    journal_before = aos("world", "journal", "tail", "--world", world, "--json")
    result = CliRunner().invoke(main, ["flow", "deploy", str(bad), "--world", str(world)])
    assert result.exit_code == 1 and "error[flow.invalid]" in result.stderr
    assert aos("world", "journal", "tail", "--world", world, "--json") == journal_before
    assert aos("world", "status", "--world", world, "--json") == status_before
    assert sorted(p.name for p in world.rglob("*")) == before
    drawn = CliRunner().invoke(main, ["flow", "draw", str(HELLO)])
    assert drawn.exit_code == 0 and "square" in drawn.stdout
