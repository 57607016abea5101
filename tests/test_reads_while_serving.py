"""Every read command works while `aos node up` (a real process) serves the world: the store
is opened read-only, without the writer lock, and each command sees one commit."""

from __future__ import annotations

from pathlib import Path

import httpx

from aos.kernel.world.world import World
from tests.test_cli_world import run, run_json
from tests.test_node_process import make_world, node_process
from tests.test_world import ping

KEYED = "demo/keyed@1"


def test_every_read_command_works_beside_a_serving_node(tmp_path: Path) -> None:
    world = make_world(tmp_path / "w")
    with node_process(world) as (url, _), httpx.Client(base_url=url, timeout=30) as http:
        for key, action in (("b", "effect"), ("c", "trap")):
            sent = http.post(
                "/v1/events", json={"schema": "demo/Ping@1", "value": ping(key, action, 1)}
            )
            assert sent.status_code == 200, sent.text
        served = http.get("/v1/world").json()
        status = run_json("world", "status", world=world)
        assert status["height"] == served["height"] and status["open_intents"] == 1
        assert run_json("world", "state", "get", KEYED, "b", world=world)["status"] == "waiting"
        cells = run_json("world", "state", "cells", KEYED, world=world)["cells"]
        assert {c["key"]: c["status"] for c in cells} == {"b": "waiting", "c": "failed"}
        tail = run_json("world", "journal", "tail", "--limit", "2", world=world)["records"]
        assert tail[-1]["seq"] == served["height"]
        assert run_json("world", "journal", "head", world=world)["head"] == served["height"]
        event = sent.json()["event_hash"]
        traced = run_json("world", "trace", event, world=world)
        assert {e["record"]["kind"] for e in traced["entries"]} >= {"domain_event", "step_fault"}
        fault_seq = next(e["seq"] for e in traced["entries"] if e["record"]["kind"] == "step_fault")
        explained = run_json("world", "explain", str(fault_seq), world=world)
        assert explained["record"]["guest"]["message"] == "asked to trap"
        assert run_json("gov", "ls", world=world)["proposals"] == []
        # Writing still needs the writer: the node has it.
        code, _, err = run("world", "cell", "reset", KEYED, "c", world=world)
        assert code == 1 and err.startswith("error[store.locked]")
    with World.reading(world) as after:  # the node stopped; reading needs no writer either
        assert after.height == served["height"]
