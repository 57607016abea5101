"""`aos world explain | cell retry|reset | intent cancel` and `send`'s faults by cell, on the
scripted fixture world (a Python workflow that does what each event asks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aos.kernel.audit import replay
from aos.kernel.world.world import World
from tests.test_cli_world import error_of, run, run_json
from tests.test_world import SCRIPTED

PING = "demo/Ping@1"
KEYED = "demo/keyed@1"


def ping(key: str, action: str = "none", n: int = 0) -> str:
    return json.dumps({"id": key, "n": n, "action": action})


@pytest.fixture
def world(tmp_path: Path) -> Path:
    path = tmp_path / "s"
    World.create(path, SCRIPTED, sync=False, clock="manual").close()
    return path


def send(world: Path, key: str, action: str = "none", n: int = 0) -> tuple[int, str, str]:
    return run("world", "send", PING, "--value-json", ping(key, action, n), world=world)


def test_a_raising_workflow_is_named_by_send_and_explained(world: Path) -> None:
    code, out, err = send(world, "x", "trap")
    assert code == 1
    assert (
        "fault     demo/keyed@1[x]  seq 3  step.guest_exception: RuntimeError: asked to trap" in out
    )
    assert "fault     demo/global@1  seq 4  step.guest_exception" in out
    assert "error[world.event_not_applied]: the event faulted or was dropped in 2 of its 2" in err
    code, out, _ = run("world", "explain", "3", world=world)
    assert code == 0
    assert "  raised  RuntimeError: asked to trap" in out
    assert "  at      _act:" in out
    assert "  input   2  domain_event" in out
    assert "aos world cell retry demo/keyed@1 x" in out
    body = run_json("world", "explain", "3", world=world)
    assert body["record"]["guest"]["type"] == "RuntimeError" and body["cause"]["seq"] == 2
    # The input itself: which deliveries went wrong.
    _, out, _ = run("world", "explain", "2", world=world)
    assert "its deliveries that went wrong:" in out and out.count("step_fault") == 2


def test_a_dropped_delivery_is_explained_by_the_fault_that_failed_the_cell(world: Path) -> None:
    send(world, "x", "trap")
    code, out, _ = send(world, "x")
    assert code == 1 and "dropped   demo/keyed@1[x]  seq 6  cell_failed" in out
    _, out, _ = run("world", "explain", "6", world=world)
    assert "the cell failed at seq 3:" in out and "raised  RuntimeError: asked to trap" in out


def test_a_clean_send_exits_0_and_lists_no_problems(world: Path) -> None:
    code, out, _ = send(world, "x", "emit")
    assert code == 0 and "0 faults, 0 dropped" in out and "\nfault " not in out
    body = run_json("world", "send", PING, "--value-json", ping("y"), world=world)
    assert body["problems"] == []


def test_retry_reset_and_cancel_from_the_command_line(world: Path) -> None:
    send(world, "x", "trap")
    code, out, _ = run("world", "cell", "retry", KEYED, "x", "--reason", "try again", world=world)
    assert code == 0 and out.startswith("retried   demo/keyed@1[x]  seq 5\n")
    assert "0 steps, 1 faults" in out  # the same module raises again
    body = run_json("world", "cell", "reset", KEYED, "x", world=world)
    assert body["action"] == "cell_reset" and body["target"] == "demo/keyed@1[x]"
    assert send(world, "x")[0] == 1  # the global cell is still failed ...
    run("world", "cell", "reset", "demo/global@1", world=world)
    assert send(world, "x")[0] == 0  # ... now every delivery steps
    send(world, "z", "effect", 1)
    status = run_json("world", "status", world=world)
    [intent] = [i["intent"] for i in status["intents"]]
    code, out, _ = run("world", "intent", "cancel", intent[:19], world=world)
    assert code == 0 and out.startswith(f"cancelled {intent}  seq ")
    assert "1 steps" in out
    assert run_json("world", "status", world=world)["open_intents"] == 0
    assert replay.verify_replay(world).ok


def test_operation_refusals_are_typed_and_move_nothing(world: Path) -> None:
    send(world, "ok")
    height = run_json("world", "status", world=world)["height"]
    assert error_of("world", "cell", "retry", KEYED, "ok", world=world)["code"] == (
        "world.cell_not_failed"
    )
    assert error_of("world", "cell", "reset", KEYED, "nobody", world=world)["code"] == (
        "world.cell_missing"
    )
    assert error_of("world", "intent", "cancel", "blake3:00", world=world)["code"] == (
        "world.intent_not_open"
    )
    long = "r" * 501
    assert (
        error_of("world", "cell", "reset", KEYED, "ok", "--reason", long, world=world)["code"]
        == "world.operation_invalid"
    )
    assert error_of("world", "explain", "999", world=world)["code"] == "world.not_found"
    assert run_json("world", "status", world=world)["height"] == height
