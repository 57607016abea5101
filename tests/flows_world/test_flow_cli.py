"""`aos flow` on embedded worlds, through click's CliRunner (spec/11-flows.md §9): check,
compile, draw, `run --local`, and a flow world driven with `--world` (deploy, run, status,
events, signal, cancel, ls); usage errors exit 2, refusals exit 1 with `error[code]`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from aos.cli.common import EXIT_FAILED, EXIT_RUNNING
from aos.cli.main import main
from aos.flows.serve.flow_world import ADAPTER_KEY_FILES
from aos.flows.serve.numbers import execution_number
from aos.kernel import cbor
from aos.kernel.hashing import hash_bytes

GOOD_FLOW = """
name: t/good
steps:
  - name: a
    tasks:
      - {name: hello, do: call, tool: {kind: echo}, args: {n: "{{ workload.n }}"}}
    next:
      - {to: b, when: "{{ workload.n > 1 }}"}
      - {to: c}
  - name: b
    tasks: []
  - name: c
    tasks:
      - {do: noop, result: 1}
"""

BAD_FLOW = """
name: t/bad
entry: nowhere
steps:
  - name: a
    tasks:
      - {do: call, tool: {kind: carrier_pigeon}}
      - {name: j, do: noop, policy: {rules: [{then: {do: jump, to: missing}}]}}
    next: elsewhere
"""

BAD_PROBLEMS = {
    ("flow.step_unknown", "$.entry"),
    ("flow.tool_unknown", "$.steps[0].tasks[0].tool.kind"),
    ("flow.task_unknown", "$.steps[0].tasks[1].policy.rules[0].then.to"),
}

RETRY_FLOW = """
name: t/retry
steps:
  - name: pay
    tasks:
      - name: charge
        do: call
        tool: {kind: echo}
        args: {amount: "{{ workload.amount }}"}
        policy:
          rules:
            - when: "{{ _attempt < 2 }}"
              then: {do: retry, attempts: 3, backoff: linear, delay_s: 30}
"""

HUMAN_FLOW = """
name: t/human
steps:
  - name: ask
    tasks:
      - name: approve
        do: human
        title: "Approve {{ workload.order }}"
        roles: [finance]
    next: done
  - name: done
    tasks:
      - {do: noop, result: "{{ steps.ask }}"}
"""

SIGNAL_FLOW = """
name: t/signal
steps:
  - name: hold
    tasks:
      - {name: picked, do: wait_signal, signal: warehouse.picked}
    next:
      - {to: done, args: {parcel: "{{ event.payload }}"}}
  - name: done
    tasks:
      - {do: noop, result: {parcel: "{{ args.parcel }}", who: "{{ workload.who }}"}}
"""


def aos(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def ok_json(*args: str | Path) -> Any:
    result = aos(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def failed_json(*args: str | Path) -> Any:
    """A run whose execution ended `failed`: it prints the execution and exits 3."""
    result = aos(*args, "--json")
    assert result.exit_code == EXIT_FAILED, result.output
    body = json.loads(result.stdout)
    assert body["status"] == "failed"
    return body


def ok_text(*args: str | Path) -> str:
    result = aos(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


def refused(code: str, *args: str | Path) -> None:
    """Exit 1, `error[code]` on stderr, and the same code as JSON with --json."""
    result = aos(*args)
    assert result.exit_code == 1, result.output
    assert f"error[{code}]" in result.stderr, result.output
    as_json = aos(*args, "--json")
    assert as_json.exit_code == 1, as_json.output
    assert json.loads(as_json.stdout)["error"]["code"] == code


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --------------------------------------------------------------------------------------------
# check, compile, draw


def test_check_a_good_and_a_bad_file(tmp_path: Path) -> None:
    good = write(tmp_path, "good.flow.yaml", GOOD_FLOW)
    bad = write(tmp_path, "bad.flow.yaml", BAD_FLOW)

    text = ok_text("flow", "check", good)
    assert text.startswith("ok") and "t/good" in text
    [checked] = ok_json("flow", "check", good)
    assert checked["ok"] is True and checked["name"] == "t/good"
    assert checked["hash"].startswith("blake3:") and checked["hash"] in text

    result = aos("flow", "check", bad)
    assert result.exit_code == 1
    assert "error" in result.stdout and str(bad) in result.stdout
    for code, path in BAD_PROBLEMS:
        assert any(code in line and path in line for line in result.stdout.splitlines()), (
            code,
            result.stdout,
        )

    result = aos("flow", "check", good, bad, "--json")
    assert result.exit_code == 1
    first, second = json.loads(result.stdout)
    assert first == checked
    assert (second["file"], second["ok"]) == (str(bad), False)
    problems = second["problems"]
    assert {(p["code"], p["path"]) for p in problems} >= BAD_PROBLEMS, problems
    assert all(p["path"].startswith("$") and p["message"] for p in problems)

    undecodable = write(tmp_path, "dup.yaml", "name: t/x\nname: t/y\nsteps: []\n")
    [found] = json.loads(aos("flow", "check", undecodable, "--json").stdout)
    assert found["ok"] is False and found["problems"][0]["code"] == "flow.decode"
    missing = aos("flow", "check", tmp_path / "none.yaml", "--json")
    assert missing.exit_code == 1 and json.loads(missing.stdout)[0]["ok"] is False


def test_compile_writes_the_canonical_form_named_by_the_checked_hash(tmp_path: Path) -> None:
    good = write(tmp_path, "good.flow.yaml", GOOD_FLOW)
    [checked] = ok_json("flow", "check", good)

    canonical = json.loads(ok_text("flow", "compile", good))
    assert canonical["format"] == "aos.flow/1" and canonical["name"] == "t/good"
    assert canonical["entry"] == "a"
    assert canonical["steps"][0]["next"]["mode"] == "exclusive"  # shorthands expanded

    out = tmp_path / "good.cbor"
    written = ok_text("flow", "compile", good, "-o", out)
    data = out.read_bytes()
    assert str(hash_bytes(data)) == checked["hash"]
    assert checked["hash"] in written
    assert cbor.encode(cbor.decode(data)) == data  # canonical CBOR
    assert cbor.to_json(cbor.decode(data)) == canonical

    as_json = tmp_path / "good.json"
    ok_text("flow", "compile", good, "--out", as_json)
    assert json.loads(as_json.read_text()) == canonical

    refused("flow.invalid", "flow", "compile", write(tmp_path, "bad.yaml", BAD_FLOW))


def test_draw(tmp_path: Path) -> None:
    good = write(tmp_path, "good.flow.yaml", GOOD_FLOW)
    mermaid = ok_text("flow", "draw", good, "--format", "mermaid")
    assert mermaid.startswith("stateDiagram-v2")
    assert ok_text("flow", "draw", good).startswith("stateDiagram-v2")  # the default
    for step in ("a", "b", "c"):
        assert step in mermaid
    drawn = ok_json("flow", "draw", good, "--format", "text")
    assert drawn["format"] == "text" and "a" in drawn["text"]
    refused("flow.invalid", "flow", "draw", write(tmp_path, "bad.yaml", BAD_FLOW))


# --------------------------------------------------------------------------------------------
# run --local


def test_run_local_retries_an_echo_call_through_a_timer(tmp_path: Path) -> None:
    flow = write(tmp_path, "retry.flow.yaml", RETRY_FLOW)
    body = ok_json("flow", "run", flow, "--local", "--workload", '{"amount": 7}', "--id", "r1")
    assert (body["exec"], body["flow"], body["version"]) == ("r1", "t/retry", 1)
    assert body["status"] == "completed"
    assert body["result"] == {"amount": 7}
    assert body["human_tasks"] == []
    assert (body["receipts"], body["timers_skipped"]) == (2, 1)
    names = [e["event"] for e in body["events"]]
    assert names[0] == "playbook.started"
    assert names.count("task.started") == 2 and "task.attempt.failed" in names
    assert body["events"][-1] == {**body["events"][-1], "event": "playbook.finished"}
    assert body["events"][-1]["status"] == "completed"
    seqs = [e["seq"] for e in body["events"]]
    assert all(isinstance(s, int) for s in seqs) and seqs == sorted(seqs)

    workload = write(tmp_path, "workload.json", '{"amount": 8}')
    text = ok_text("flow", "run", flow, "--local", "--workload", f"@{workload}")
    assert "playbook.finished" in text and "status    completed" in text


def running_json(*args: str | Path) -> Any:
    """A run that stopped while its execution still runs (a person to ask): exit 5."""
    result = aos(*args, "--json")
    assert result.exit_code == EXIT_RUNNING, result.output
    return json.loads(result.stdout)


def test_run_local_stops_at_a_human_task(tmp_path: Path) -> None:
    flow = write(tmp_path, "human.flow.yaml", HUMAN_FLOW)
    body = running_json("flow", "run", flow, "--local", "--workload", '{"order": "A-1"}')
    assert body["status"] == "running"
    assert len(body["human_tasks"]) == 1 and body["human_tasks"][0].startswith("blake3:")
    names = [e["event"] for e in body["events"]]
    assert "human.task.created" in names and "playbook.finished" not in names
    result = aos("flow", "run", flow, "--local", "--workload", '{"order": "B-2"}')
    assert result.exit_code == EXIT_RUNNING, result.output
    text = result.stdout
    assert "human.task.created" in text and "ask.approve" in text
    assert "waiting   1 human task(s)" in text and "status    running" in text


def test_run_local_refusals(tmp_path: Path) -> None:
    flow = write(tmp_path, "retry.flow.yaml", RETRY_FLOW)
    refused("flow.request_invalid", "flow", "run", flow, "--local", "--workload", "{nope")
    missing = str(tmp_path / "none.json")
    refused("flow.request_invalid", "flow", "run", flow, "--local", "--workload", f"@{missing}")
    refused("flow.request_invalid", "flow", "run", flow, "--local", "--id", "bad id")
    refused("flow.invalid", "flow", "run", write(tmp_path, "bad.yaml", BAD_FLOW), "--local")


CHILD_PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child, path: tests/child}
workload: {n: 1}
workflow:
  - step: double
    tool: {kind: python, code: "result = {'doubled': n * 2}", args: {n: "{{ workload.n }}"}}
"""
PARENT_PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: parent, path: tests/parent}
workflow:
  - step: call
    tool: {kind: playbook, path: tests/child, args: {n: 21}}
"""


def test_run_local_on_a_flow_world_finds_the_flows_deployed_there(tmp_path: Path) -> None:
    world = tmp_path / "w"
    ok_json("flow", "world", "create", world, "--clock", "manual", "--no-sync")
    ok_json("flow", "deploy", write(tmp_path, "child.yaml", CHILD_PLAYBOOK), "--world", world)
    parent = write(tmp_path, "parent.yaml", PARENT_PLAYBOOK)
    body = ok_json("flow", "run", parent, "--local", "--world", world, "--id", "p1")
    assert body["status"] == "completed", body["events"]
    assert body["result"] == {"doubled": 42}
    assert body["number"] == execution_number("p1")
    # the execution stays in the world: `aos flow status` reads it afterwards
    status = ok_json("flow", "status", "p1", "--world", world)
    assert (status["status"], status["number"]) == ("completed", execution_number("p1"))
    assert f"number {execution_number('p1')}" in ok_text("flow", "status", "p1", "--world", world)


def test_run_local_refuses_a_world_that_is_no_flow_world(tmp_path: Path) -> None:
    parent = write(tmp_path, "parent.yaml", PARENT_PLAYBOOK)
    keyless = tmp_path / "keyless"
    ok_json("flow", "world", "create", keyless, "--clock", "manual", "--no-sync")
    for key in (tmp_path / "keyless.keys").iterdir():
        key.unlink()
    (tmp_path / "keyless.keys").rmdir()
    refused("flow.local_world_invalid", "flow", "run", parent, "--local", "--world", keyless)


# --------------------------------------------------------------------------------------------
# A flow world on disk, with --world


def test_a_flow_world_driven_by_the_cli(tmp_path: Path) -> None:
    world = tmp_path / "w"
    created = ok_json("flow", "world", "create", world, "--clock", "manual", "--no-sync")
    keys = Path(created["keys"])
    assert keys == tmp_path / "w.keys"
    assert {p.name for p in keys.iterdir()} == set(ADAPTER_KEY_FILES.values())
    assert created["manifest"].startswith("blake3:")
    at = ["--world", str(world)]

    flow = write(tmp_path, "signal.flow.yaml", SIGNAL_FLOW)
    deployed = ok_json("flow", "deploy", flow, *at)
    assert (deployed["name"], deployed["version"], deployed["changed"]) == ("t/signal", 1, True)
    [checked] = ok_json("flow", "check", flow)
    assert deployed["definition"] == checked["hash"]
    again = ok_text("flow", "deploy", flow, *at)
    assert "t/signal v1" in again and "unchanged" in again

    started = ok_json("flow", "run", "t/signal", *at, "--id", "x", "--workload", '{"who": "ann"}')
    assert started == {**started, "exec": "x", "flow": "t/signal", "version": 1}
    assert started["status"] == "running"
    state = ok_json("flow", "status", "x", *at)
    assert (state["exec"], state["status"]) == ("x", "running")
    [wait] = state["engine"]["waits"].values()
    assert (wait["kind"], wait["signal"]) == ("signal", "warehouse.picked")
    text = ok_text("flow", "status", "x", *at)
    assert "status    running" in text and "warehouse.picked" in text
    assert "task.started" in ok_text("flow", "events", "x", *at)

    signalled = ok_json("flow", "signal", "x", "warehouse.picked", *at, "--payload", '{"box": 3}')
    assert signalled == {**signalled, "exec": "x", "outcome": "delivered", "status": "completed"}
    state = ok_json("flow", "status", "x", *at)
    assert state["business"]["steps"]["done"] == {"parcel": {"box": 3}, "who": "ann"}
    events = ok_json("flow", "events", "x", *at)
    names = [e["event"] for e in events]
    assert names[0] == "playbook.started" and "signal.received" in names
    assert (events[-1]["event"], events[-1]["status"]) == ("playbook.finished", "completed")
    assert all(isinstance(e["seq"], int) for e in events)

    # A second execution: started from the file (deployed first: unchanged), then cancelled.
    started = ok_json("flow", "run", flow, *at, "--id", "y")
    assert (started["version"], started["status"]) == (1, "running")
    text = ok_text("flow", "cancel", "y", *at, "--reason", "no longer needed")
    assert "cancelled y; status cancelled" in text
    assert ok_json("flow", "status", "y", *at)["status"] == "cancelled"
    assert "execution.cancelled" in [e["event"] for e in ok_json("flow", "events", "y", *at)]
    started = ok_json("flow", "run", "t/signal", *at, "--id", "z", "--version", "1")
    assert ok_json("flow", "cancel", "z", *at) == {"exec": "z", "status": "cancelled"}

    listing = ok_json("flow", "ls", *at)
    [registered] = listing["flows"]
    assert registered["name"] == "t/signal"
    assert [v["version"] for v in registered["versions"]] == [1]
    statuses = {e["exec"]: e["status"] for e in listing["executions"]}
    assert statuses == {"x": "completed", "y": "cancelled", "z": "cancelled"}
    text = ok_text("flow", "ls", *at)
    assert "t/signal" in text and "cancelled" in text and "completed" in text

    # Refusals: exit 1 with the error's code, and nothing changed.
    refused("flow.execution_ended", "flow", "signal", "x", "warehouse.picked", *at)
    refused("flow.execution_ended", "flow", "cancel", "y", *at)
    refused("flow.execution_unknown", "flow", "status", "nope", *at)
    refused("flow.execution_unknown", "flow", "events", "nope", *at)
    refused("flow.execution_unknown", "flow", "signal", "nope", "go", *at)
    refused("flow.execution_unknown", "flow", "cancel", "nope", *at)
    refused("flow.unknown", "flow", "run", "t/none", *at)
    refused("flow.version_unknown", "flow", "run", "t/signal", "--version", "7", *at)
    refused("flow.execution_exists", "flow", "run", "t/signal", "--id", "x", *at)
    refused("flow.request_invalid", "flow", "run", "t/signal", "--id", "a:b", *at)
    refused("flow.request_invalid", "flow", "run", "t/signal", "--workload", "[", *at)
    refused("flow.invalid", "flow", "deploy", write(tmp_path, "bad.yaml", BAD_FLOW), *at)
    refused("world.missing", "flow", "ls", "--world", str(tmp_path / "none"))
    assert ok_json("flow", "ls", *at) == listing


def test_signal_payloads_and_versions(tmp_path: Path) -> None:
    world = tmp_path / "w"
    ok_json("flow", "world", "create", world, "--keys", tmp_path / "k", "--clock", "manual")
    assert (tmp_path / "k" / "echo.key").exists()
    at = ["--world", str(world)]
    flow = write(tmp_path, "signal.flow.yaml", SIGNAL_FLOW)
    ok_json("flow", "deploy", flow, *at)
    ok_json("flow", "run", "t/signal", "--id", "s1", "--workload", '{"who": "bo"}', *at)
    refused(
        "flow.request_invalid", "flow", "signal", "s1", "warehouse.picked", "--payload", "{", *at
    )
    refused("flow.request_invalid", "flow", "signal", "s1", "bad name", *at)
    [wait] = ok_json("flow", "status", "s1", *at)["engine"]["waits"].values()
    wait_version = wait["version"]
    wrong = str(wait_version + 5)
    refused(
        "flow.signal_stale",
        "flow",
        "signal",
        "s1",
        "warehouse.picked",
        "--expect-version",
        wrong,
        *at,
    )
    refused("flow.signal_unknown", "flow", "signal", "s1", "nobody.waits", *at)
    assert ok_json("flow", "status", "s1", *at)["status"] == "running"
    text = ok_text(
        "flow", "signal", "s1", "warehouse.picked", "--expect-version", str(wait_version), *at
    )
    assert "signalled s1 warehouse.picked: delivered (seq " in text
    assert text.rstrip().endswith("; status completed")

    # A second version pins later executions; s1 stays on version 1.
    ok_json("flow", "deploy", write(tmp_path, "v2.yaml", SIGNAL_FLOW + "description: v2\n"), *at)
    later = ok_json("flow", "run", "t/signal", "--id", "s2", *at)
    assert later["version"] == 2
    assert ok_json("flow", "status", "s1", *at)["version"] == 1
    assert ok_json("flow", "run", "t/signal", "--id", "s3", "--version", "1", *at)["version"] == 1


@pytest.mark.parametrize(
    "args",
    [
        ["flow"],
        ["flow", "check"],
        ["flow", "compile"],
        ["flow", "run"],
        ["flow", "nope"],
        ["flow", "draw", "f.yaml", "--format", "png"],
        ["flow", "signal", "x"],
        ["flow", "status"],
        ["flow", "run", "t/x", "--version", "one"],
        ["flow", "run", "t/x", "--bogus"],
        ["flow", "world", "create"],
        ["flow", "world", "create", "d", "--clock", "sundial"],
    ],
)
def test_bad_usage_exits_2(args: list[str]) -> None:
    result = aos(*args)
    assert result.exit_code == 2, result.output
