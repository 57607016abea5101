"""`aos flow` through one client (issue 32; spec/11 §9): exit codes that say how an
execution ended, its error and traceback in text output and in `aos flow explain`, `--local
--keep DIR` and `--with CHILD`, execution ids by unique prefix, the precedence of `--world`
and `--node` over the environment, reads beside a serving node, and the kernel's views of
flow cells (`running`, `failed`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from aos.cli.common import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK, EXIT_RUNNING
from aos.cli.flow_cmd import MESSAGE_CHARS_MAX, error_lines
from aos.cli.main import main
from aos.flows.serve.flow_world import EXEC_WORKFLOW
from aos.kernel.node.models import TaskError
from tests.flows_world.test_flow_cli import write
from tests.playbooks.test_playbook_world import CHILD, PARENT
from tests.test_node_process import node_process

FAILING = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: failing, path: t/failing}
workload: {order: A-1}
workflow:
  - step: look_up
    tool:
      kind: python
      args: {order: "{{ workload.order }}"}
      code: |
        raise ValueError(f"no such order {order}")
"""
KEYED = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: keyed, path: t/keyed}
workflow:
  - step: count
    tool:
      kind: python
      code: |
        result = {"by": {1: "one", None: "none"}}
"""
SIGNAL_FLOW = """
name: t/signal
steps:
  - name: hold
    tasks:
      - {name: picked, do: wait_signal, signal: warehouse.picked}
"""


def aos(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def exits(code: int, *args: str | Path, env: dict[str, str] | None = None) -> str:
    result = aos(*args, env=env)
    assert result.exit_code == code, result.output
    return result.stdout


def as_json(code: int, *args: str | Path, env: dict[str, str] | None = None) -> Any:
    return json.loads(exits(code, *args, "--json", env=env))


def refused(code: str, *args: str | Path, env: dict[str, str] | None = None) -> str:
    result = aos(*args, env=env)
    assert result.exit_code == 1, result.output
    assert f"error[{code}]" in result.stderr, result.output
    return result.stderr


def test_a_failed_local_run_exits_3_and_shows_its_error(tmp_path: Path) -> None:
    failing = write(tmp_path, "failing.yaml", FAILING)
    text = exits(EXIT_FAILED, "flow", "run", failing, "--local")
    assert "status    failed" in text
    assert "error     python.raised (schema): ValueError: no such order A-1" in text
    assert "a scratch world, gone now (--keep DIR keeps it)" in text
    body = as_json(EXIT_FAILED, "flow", "run", failing, "--local")
    assert body["status"] == "failed" and body["world"] is None
    assert (body["error"]["code"], body["error"]["kind"]) == ("python.raised", "schema")
    # The traceback of the author's code, its line shown, none of the worker's frames.
    trace = body["error"]["traceback"]
    assert trace.startswith("Traceback (most recent call last):")
    assert 'File "<code>", line 1' in trace and 'raise ValueError(f"no such order' in trace
    assert trace.count('File "') == 1 and trace.endswith("ValueError: no such order A-1\n")
    assert "traceback\n" in text and 'File "<code>", line 1' in text
    assert "no such order A-1" in body["error"]["message"]
    done = write(tmp_path, "child.yaml", CHILD)
    assert as_json(EXIT_OK, "flow", "run", done, "--local")["status"] == "completed"


def test_keep_children_prefixes_explain_and_the_kernel_views(tmp_path: Path) -> None:
    kept, child = tmp_path / "kept", write(tmp_path, "child.yaml", CHILD)
    parent = write(tmp_path, "parent.yaml", PARENT)
    text = exits(EXIT_OK, "flow", "run", parent, "--local", "--with", child, "--keep", kept)
    assert f"world     {kept}" in text
    at = ["--world", str(kept)]
    [run] = [
        e for e in as_json(EXIT_OK, "flow", "ls", *at)["executions"] if e["flow"] == "lib/parent"
    ]
    assert run["status"] == "completed"
    exec_id = run["exec"]
    events = [e["event"] for e in as_json(EXIT_OK, "flow", "events", exec_id, *at)]
    assert "child.started" in events and "child.ended" in events
    # An execution by a unique prefix; several named is refused with the candidates; a whole
    # id names its execution even when it is the prefix of another (its child's).
    child_id = f"{exec_id}:call_child:1"
    assert as_json(EXIT_OK, "flow", "status", exec_id + ":c", *at)["exec"] == child_id
    assert as_json(EXIT_OK, "flow", "status", exec_id, *at)["exec"] == exec_id
    message = refused("flow.execution_ambiguous", "flow", "status", exec_id[:-4], *at)
    assert exec_id in message and child_id in message
    refused("flow.execution_unknown", "flow", "status", "zzz", *at)

    # A failed run on the kept world: exit 3, explained in one screen.
    failing = write(tmp_path, "failing.yaml", FAILING)
    exits(EXIT_FAILED, "flow", "run", failing, "--local", *at, "--id", "bad-1")
    explained = exits(EXIT_OK, "flow", "explain", "bad", *at)
    assert "execution bad-1" in explained and "status    failed" in explained
    assert "failed    look_up.look_up_task attempt 1  (task.failed at seq" in explained
    assert "error     python.raised (schema): ValueError: no such order A-1" in explained
    found = as_json(EXIT_OK, "flow", "explain", "bad-1", *at)
    assert (found["failed_at"]["step"], found["failed_at"]["attempt"]) == ("look_up", 1)
    assert found["error"]["code"] == "python.raised"
    status_text = exits(EXIT_OK, "flow", "status", "bad-1", *at)
    assert "python.raised (schema): ValueError: no such order A-1" in status_text

    # The kernel's own views say failed for the failed execution's cell.
    cells = as_json(EXIT_OK, "world", "state", "cells", EXEC_WORKFLOW, *at, "--limit", "100")
    statuses = {c["key"]: c["status"] for c in cells["cells"]}
    assert statuses["bad-1"] == "failed" and statuses[exec_id] == "completed"
    counts = as_json(EXIT_OK, "world", "status", *at)["workflows"][EXEC_WORKFLOW]
    assert counts["failed"] == 1


def test_local_world_refusals_change_nothing(tmp_path: Path) -> None:
    child = write(tmp_path, "child.yaml", CHILD)
    full = tmp_path / "full"
    full.mkdir()
    (full / "note").write_text("mine")
    refused("flow.local_world_invalid", "flow", "run", child, "--local", "--keep", full)
    assert [p.name for p in full.iterdir()] == ["note"]
    kept = tmp_path / "kept"
    args = ["flow", "run", child, "--local", "--keep", kept, "--world", tmp_path / "other"]
    refused("flow.local_world_invalid", *args)
    assert not kept.exists()
    refused("flow.local_world_invalid", "flow", "run", child, "--local", "--world", full)
    assert aos("flow", "run", "lib/child", "--keep", kept).exit_code == 2


def test_world_and_node_precedence(tmp_path: Path) -> None:
    world = tmp_path / "w"
    as_json(EXIT_OK, "flow", "world", "create", world, "--clock", "manual", "--no-sync")
    nowhere = "http://127.0.0.1:1"
    message = refused("cli.target_conflict", "flow", "ls", "--world", world, "--node", nowhere)
    assert str(world) in message and nowhere in message
    both = {"AOS_WORLD": str(world), "AOS_NODE": nowhere}
    message = refused("cli.target_conflict", "flow", "ls", env=both)
    assert "AOS_WORLD" in message and "AOS_NODE" in message
    # An option wins over the environment: --world opens the world, AOS_NODE set or not.
    listing = as_json(EXIT_OK, "flow", "ls", "--world", world, env={"AOS_NODE": nowhere})
    assert listing["executions"] == []
    refused("node.unreachable", "flow", "ls", "--node", nowhere, env={"AOS_WORLD": str(world)})


def test_an_error_shows_its_kind_message_retry_and_traceback() -> None:
    error = TaskError.model_validate(
        {
            "kind": "python.exception",
            "code": "python.raised",
            "message": "ValueError: boom",
            "retryable": True,
            "traceback": 'Traceback (most recent call last):\n  File "t.py", line 1\nValueError: boom\n',
        }
    )
    assert error_lines(error) == [
        "error     python.raised (python.exception): ValueError: boom",
        "          retryable",
        "traceback",
        "  Traceback (most recent call last):",
        '    File "t.py", line 1',
        "  ValueError: boom",
    ]
    long = error.model_copy(update={"message": "x" * 5000, "traceback": None, "retryable": False})
    assert [len(line) for line in error_lines(long)] == [MESSAGE_CHARS_MAX]
    assert error_lines(None) == []


def test_reads_beside_a_serving_node_and_exit_codes_through_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = tmp_path / "w"
    created = as_json(EXIT_OK, "flow", "world", "create", world, "--no-sync")
    monkeypatch.setenv("AOS_TOKEN", created["admin_token"])
    flow = write(tmp_path, "signal.yaml", SIGNAL_FLOW)
    with node_process(world) as (url, _node):
        node = ["--node", url]
        exits(EXIT_OK, "flow", "deploy", flow, *node)
        started = as_json(
            EXIT_RUNNING, "flow", "run", "t/signal", *node, "--id", "s-1", "--wait", "0.2"
        )
        assert started["status"] == "running"
        assert as_json(EXIT_OK, "flow", "run", "t/signal", *node, "--id", "s-2")["exec"] == "s-2"
        # Reads open the world read-only beside the node; a write goes through it.
        at = ["--world", str(world)]
        assert as_json(EXIT_OK, "flow", "status", "s-1", *at)["status"] == "running"
        assert len(as_json(EXIT_OK, "flow", "ls", *at)["executions"]) == 2
        assert as_json(EXIT_OK, "flow", "events", "s-1", *at)[0]["event"] == "playbook.started"
        [wait] = as_json(EXIT_OK, "flow", "explain", "s-1", *at)["waits"]
        assert (wait["kind"], wait["signal"]) == ("signal", "warehouse.picked")
        cells = as_json(EXIT_OK, "world", "state", "cells", EXEC_WORKFLOW, *at)["cells"]
        assert {c["status"] for c in cells} == {"running"}
        exits(EXIT_OK, "flow", "cancel", "s-1", *at)
        assert as_json(EXIT_CANCELLED, "flow", "status", "s-1", *node, "--wait", "5")["status"] == (
            "cancelled"
        )
        exits(EXIT_RUNNING, "flow", "status", "s-2", *at, "--wait", "0.1")
        exits(EXIT_OK, "flow", "signal", "s-2", "warehouse.picked", *node)
        exits(EXIT_OK, "flow", "status", "s-2", *node, "--wait", "5")


def test_a_world_whose_python_task_raised_replays_with_its_traceback(tmp_path: Path) -> None:
    """The traceback and the JSON-made keys travel in the receipt and the interpreter's error:
    a world that holds them replays byte for byte."""
    failing = write(tmp_path, "failing.yaml", FAILING)
    keyed = write(tmp_path, "keyed.yaml", KEYED)
    kept = tmp_path / "kept"
    failed = as_json(EXIT_FAILED, "flow", "run", failing, "--local", "--keep", kept)
    assert failed["error"]["traceback"].endswith("ValueError: no such order A-1\n")
    done = as_json(EXIT_OK, "flow", "run", keyed, "--local", "--world", kept)
    assert done["result"] == {"by": {"1": "one", "null": "none"}}
    replayed = aos("world", "replay", "--verify", "--world", kept)
    assert replayed.exit_code == 0, replayed.output
    assert "ok: every record and the head match" in replayed.stdout
