"""A flow world served by a real `aos node up` process, with a real `aos adapter run tool-echo`
process settling tool calls, and every `aos flow` / `aos task` command its own process talking
to the node over HTTP (spec/11-flows.md §5, §9): deploy, run, a human task claimed and
completed, a signal, an inclusive fork and a join, history, listing, a cancel that withdraws
the execution's open intents; then, with the node stopped, `aos world replay --verify`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.auth_fixtures import node_http, remember_node

_AOS = [sys.executable, "-c", "from aos.cli.main import main; main()"]
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
COMMAND_TIMEOUT_S = 60.0
POLL_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.2


# The commands must talk to the node (or world) they are given, whatever the environment says.
def _env() -> dict[str, str]:
    """The test's environment (its AOS_TOKEN included) less the world and node it names."""
    return {k: v for k, v in os.environ.items() if k not in ("AOS_NODE", "AOS_WORLD")}


NODE_FLOW = """
name: t/order
steps:
  - name: charge
    tasks:
      - name: pay
        do: call
        tool: {kind: echo}
        args: {order: "{{ workload.order }}", amount: "{{ workload.amount }}"}
      - name: approve
        do: human
        title: "Approve {{ workload.order }}"
        roles: [finance]
    next: ship
  - name: ship
    tasks:
      - {name: picked, do: wait_signal, signal: warehouse.picked}
    next:
      mode: inclusive
      arcs:
        - {to: pack, args: {parcel: "{{ event.payload }}"}}
        - {to: invoice, when: "{{ workload.amount > 10 }}"}
  - name: pack
    tasks:
      - {name: box, do: call, tool: {kind: echo}, args: {pack: "{{ args.parcel }}"}}
    next: close
  - name: invoice
    tasks:
      - {name: bill, do: call, tool: {kind: echo}, args: {invoice: "{{ workload.order }}"}}
    next: close
  - name: close
    join: all
    tasks:
      - {do: noop, result: {closed: true, sources: "{{ inputs | length }}"}}
"""

HOLD_FLOW = """
name: t/hold
steps:
  - name: hold
    tasks:
      - {name: go, do: wait_signal, signal: go, timeout_s: 3600}
"""


# --------------------------------------------------------------------------------------------
# Processes


QUICK_FLOW = """
name: t/quick
steps: [{name: a, tasks: [{do: call, tool: {kind: echo}, args: {n: 1}}]}]
"""


def _readline(process: subprocess.Popen[str], timeout_s: float) -> str:
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(process.stdout.readline()))  # type: ignore[union-attr]
    reader.daemon = True
    reader.start()
    reader.join(timeout_s)
    if not found or not found[0]:
        process.kill()
        stderr = process.stderr.read() if process.stderr else ""
        raise AssertionError(f"the process printed nothing: {stderr}")
    return found[0]


def _stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGTERM, then wait; its exit code and stderr."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    stderr = process.stderr.read() if process.stderr else ""
    return code, stderr


@contextmanager
def running(*command: str) -> Iterator[subprocess.Popen[str]]:
    """A long-running `aos` process, stopped (SIGTERM) on the way out whatever happened."""
    process = subprocess.Popen(
        [*_AOS, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            _stop(process)


def aos(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_AOS, *(str(a) for a in args)],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
        env=_env(),
    )


def aos_json(*args: str | Path) -> Any:
    done = aos(*args, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def waits(state: dict[str, Any]) -> list[dict[str, Any]]:
    return list(state["engine"]["waits"].values())


def poll(url: str, exec_id: str, until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """`aos flow status EXEC --json` until `until` holds (the execution may not end before)."""
    deadline = time.monotonic() + POLL_TIMEOUT_S
    while True:
        state: dict[str, Any] = aos_json("flow", "status", exec_id, "--node", url)
        if until(state):
            return state
        assert state["status"] == "running", state
        assert time.monotonic() < deadline, f"gave up waiting: {state}"
        time.sleep(POLL_INTERVAL_S)


def waiting_for(kind: str) -> Callable[[dict[str, Any]], bool]:
    return lambda state: kind in [w["kind"] for w in waits(state)]


def http_status(url: str, exec_id: str) -> dict[str, Any]:
    """GET /v1/executions/EXEC: a check beside the commands, without a process's start-up."""
    answer = node_http.get(f"{url}/v1/executions/{exec_id}", timeout=30)
    assert answer.status_code == 200, answer.text
    state: dict[str, Any] = answer.json()
    return state


def open_intents(url: str) -> int:
    return int(node_http.get(f"{url}/v1/world", timeout=30).json()["open_intents"])


def in_order(names: list[str], wanted: list[str]) -> bool:
    """Whether `wanted` occurs in `names` in this order (not necessarily adjacent)."""
    found = iter(names)
    return all(name in found for name in wanted)


# --------------------------------------------------------------------------------------------


# The suite's longest test (~45-50 s alone): a node and three adapter processes run a flow.
@pytest.mark.timeout(900)
def test_a_flow_on_a_node_with_adapter_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, keys = tmp_path / "w", tmp_path / "keys"
    created = aos_json(
        "flow", "world", "create", world, "--keys", keys, "--clock", "wall", "--no-sync"
    )
    monkeypatch.setenv("AOS_TOKEN", created["admin_token"])  # the first admin, printed once
    made = aos_json(
        "identity", "create", "ann", "--scope", "task", "--role", "finance", "--world", world
    )
    ann = ["--token", made["token"]]  # a task acts as its identity, with the identity's roles
    assert Path(created["keys"]) == keys and (keys / "human.key").exists()
    flow = tmp_path / "order.flow.yaml"
    flow.write_text(NODE_FLOW)
    hold = tmp_path / "hold.flow.yaml"
    hold.write_text(HOLD_FLOW)

    up = ["node", "up", "--world", str(world), "--bind", "127.0.0.1:0", "--json"]
    up += ["--human-adapter", "aos/human@1", "--human-key", str(keys / "human.key"), "--no-sync"]
    with running(*up) as node:
        announced = json.loads(_readline(node, START_TIMEOUT_S))
        url = str(announced["url"])
        remember_node(url, created["admin_token"])
        assert announced["human_adapter"] == "aos/human@1"
        echo_command = ["adapter", "run", "tool-echo", "--node", url]
        with running(*echo_command, "--key", str(keys / "echo.key")) as echo:
            at = ["--node", url]
            deployed = aos_json("flow", "deploy", flow, *at)
            assert (deployed["name"], deployed["version"], deployed["changed"]) == (
                "t/order",
                1,
                True,
            )
            workload = json.dumps({"order": "A-1", "amount": 250})
            started = aos_json("flow", "run", "t/order", "--id", "e1", "--workload", workload, *at)
            assert started == {
                **started,
                "exec": "e1",
                "flow": "t/order",
                "version": 1,
                "definition": deployed["definition"],
            }

            # The echo call is settled by the adapter process; then a person is asked.
            state = poll(url, "e1", waiting_for("human"))
            [wait] = waits(state)
            assert wait["kind"] == "human"
            assert (wait["step"], wait["task"]) == ("charge", "approve")
            [task] = aos_json("task", "ls", *at)["tasks"]
            assert (task["title"], task["roles"]) == ("Approve A-1", ["finance"])
            assert task["origin"] == {"workflow": "aos/FlowExec@1", "key": "e1"}
            assert task["effect"] == "aos/human.task@1" and task["status"] == "open"
            claimed = aos_json(
                "task", "claim", task["intent"], "--user", "ann", "--role", "finance", *at, *ann
            )
            assert (claimed["status"], claimed["holder"]) == ("claimed", "ann")
            done = aos_json(
                "task",
                "complete",
                task["intent"],
                "--user",
                "ann",
                "--payload-json",
                '{"approved": true}',
                *at,
                *ann,
            )
            assert done["delivered"] is True
            assert node_http.get(f"{url}/v1/tasks", timeout=30).json()["tasks"] == []

            # Then the warehouse's signal; the fork runs both echo calls; the join closes it.
            state = poll(url, "e1", waiting_for("signal"))
            [wait] = waits(state)
            assert wait["signal"] == "warehouse.picked"
            assert state["business"]["steps"]["charge"] == {"approved": True}
            signalled = aos_json(
                "flow", "signal", "e1", "warehouse.picked", "--payload", '{"box": 3}', *at
            )
            assert signalled["exec"] == "e1"
            state = poll(url, "e1", lambda s: s["status"] != "running")
            assert state["status"] == "completed"
            assert state["business"]["steps"]["pack"] == {"pack": {"box": 3}}
            assert state["business"]["steps"]["invoice"] == {"invoice": "A-1"}
            assert state["business"]["steps"]["close"] == {"closed": True, "sources": 2}
            assert waits(state) == []

            events = aos_json("flow", "events", "e1", *at)
            names = [e["event"] for e in events]
            assert in_order(
                names,
                [
                    "playbook.started",
                    "human.task.created",
                    "human.task.completed",
                    "signal.received",
                    "join.waiting",
                    "join.completed",
                    "playbook.finished",
                ],
            ), names
            assert names[0] == "playbook.started" and names[-1] == "playbook.finished"
            assert events[-1]["status"] == "completed"
            [joined] = [e for e in events if e["event"] == "join.completed"]
            assert joined["step"] == "close" and sorted(joined["sources"]) == ["invoice", "pack"]
            seqs = [e["seq"] for e in events]
            assert all(isinstance(s, int) and s > 0 for s in seqs) and seqs == sorted(seqs)
            assert open_intents(url) == 0

            # A second execution waits on a signal (and its timeout's timer): cancelled.
            second = aos_json("flow", "run", hold, "--id", "e2", *at)  # deploys the file first
            assert (second["flow"], second["status"]) == ("t/hold", "running")
            state = http_status(url, "e2")
            assert sorted(w["kind"] for w in waits(state)) == ["signal", "timeout"]
            assert open_intents(url) == 1  # the signal wait's timeout timer
            cancelled = aos_json("flow", "cancel", "e2", "--reason", "not needed", *at)
            assert cancelled == {"exec": "e2", "status": "cancelled"}
            assert open_intents(url) == 0
            state = http_status(url, "e2")
            assert state["status"] == "cancelled" and waits(state) == []
            refused = node_http.post(
                f"{url}/v1/executions/e2/signal", json={"name": "go"}, timeout=30
            )
            assert refused.status_code == 409
            assert refused.json()["error"]["code"] == "flow.execution_ended"

            # --wait polls the node until the run ends; --follow prints events until then.
            quick = tmp_path / "quick.flow.yaml"
            quick.write_text(QUICK_FLOW)
            third = aos_json("flow", "run", quick, "--id", "e3", "--wait", "60", *at)
            assert third["status"] == "completed"
            followed = aos("flow", "events", "e3", "--follow", "--json", *at)
            lines = [json.loads(line) for line in followed.stdout.splitlines()]
            assert lines[-1]["event"] == "playbook.finished"

            listing = aos_json("flow", "ls", *at)
            assert [f["name"] for f in listing["flows"]] == ["t/hold", "t/order", "t/quick"]
            assert {e["exec"]: e["status"] for e in listing["executions"]} == {
                "e1": "completed",
                "e2": "cancelled",
                "e3": "completed",
            }

            code, stderr = _stop(echo)
            assert code == 0, stderr
        code, stderr = _stop(node)
        assert code == 0, stderr

    replayed = aos("world", "replay", "--verify", "--world", world)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "ok: every record and the head match" in replayed.stdout
