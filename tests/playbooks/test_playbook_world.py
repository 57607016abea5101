"""Playbooks on a real flow world (the interpreter component, the kernel, signed receipts):
`aos flow events` on a run of the corpus's v10 example shows the history under the event
names of FLOWS §6 and `aos world replay --verify` passes; the CLI checks the corpus and runs
the README's hello playbook with `--local`."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from aos.cli.main import main
from aos.flows import operations as ops
from aos.flows.document import load_flow
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
