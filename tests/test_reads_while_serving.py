"""While `aos node up` (a real process) serves a world, every read command works (the store
is opened read-only, without the writer lock, and each command sees one commit) and every
write goes through the node (found from the world's owner record, or `--node`)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from aos.kernel.node.owner import owner_url
from aos.kernel.world.world import World
from tests.auth_fixtures import admin_headers
from tests.test_cli_world import run, run_json
from tests.test_node_process import make_world, node_process
from tests.test_world import ping

KEYED = "demo/keyed@1"
PING = "demo/Ping@1"


def test_every_read_command_works_beside_a_serving_node(tmp_path: Path) -> None:
    world = make_world(tmp_path / "w")
    with (
        node_process(world) as (url, _),
        httpx.Client(base_url=url, timeout=30, headers=admin_headers(url)) as http,
    ):
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
    with World.reading(world) as after:  # the node stopped; reading needs no writer either
        assert after.height == served["height"]


def test_writes_go_through_the_node_that_owns_the_world(tmp_path: Path) -> None:
    world = make_world(tmp_path / "w")
    with (
        node_process(world) as (url, _),
        httpx.Client(base_url=url, timeout=30, headers=admin_headers(url)) as http,
    ):
        assert owner_url(world) == url

        def height() -> int:
            return int(http.get("/v1/world").json()["height"])

        before = height()
        code, out, _ = run(
            "world", "send", PING, "--value-json", json.dumps(ping("a")), world=world
        )
        assert code == 0 and out.startswith(f"admitted  seq {before + 1}  blake3:")
        assert height() > before
        code, out, err = run(
            "world", "send", PING, "--value-json", json.dumps(ping("x", "trap")), world=world
        )
        assert code == 1 and "fault     demo/keyed@1[x]" in out
        assert "error[world.event_not_applied]" in err
        body = run_json("world", "cell", "reset", KEYED, "x", world=world)
        assert body["action"] == "cell_reset" and body["seq"] == height()
        run("world", "send", PING, "--value-json", json.dumps(ping("z", "effect", 1)), world=world)
        assert run("world", "cell", "reset", "demo/global@1", world=world)[0] == 0
        [intent] = [i["intent"] for i in run_json("world", "status", world=world)["intents"]]
        code, out, _ = run("world", "intent", "cancel", intent[:20], world=world)
        assert code == 0 and out.startswith(f"cancelled {intent}")
        assert http.get("/v1/world").json()["open_intents"] == 0
        # The node's refusals come back with its codes (this world follows the wall clock).
        code, _, err = run("world", "time", "jump-next", world=world)
        assert code == 1 and err.startswith("error[world.clock_manual_only]")
        # --node names a node explicitly; one that does not answer is a typed error.
        code, _, err = run(
            "world", "cell", "reset", KEYED, "a", "--node", "http://127.0.0.1:9", world=world
        )
        assert code == 1 and err.startswith("error[node.unreachable]")
    assert owner_url(world) is None  # the node removed its record
    code, out, err = run("world", "send", PING, "--value-json", json.dumps(ping("b")), world=world)
    assert code == 0, (out, err)  # and the CLI writes the world itself again
