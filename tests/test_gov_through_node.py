"""Governance while `aos node up` (a real process) serves the world: every `aos gov` action
goes through the node (the shadow runs in a worker process the node starts), and a refused
one changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from aos.kernel.errors import AosError
from aos.kernel.world.world import World
from tests.auth_fixtures import admin_headers, node_http
from tests.test_cli_world import run, run_json
from tests.test_governance import (
    DOUBLE,
    REFACTOR,
    counter_world,
    folder_patch,
    propose_folder,
    run_shadow,
    variant,
)
from tests.test_node_process import node_process
from tests.test_world import reopen


def test_approve_reject_and_apply_go_through_the_node(tmp_path: Path) -> None:
    world = tmp_path / "w"
    counter_world(world, {"a": [1, 2]})
    with reopen(world) as opened:
        good = propose_folder(opened, variant(tmp_path, "refactor", REFACTOR))
    run_shadow(world, good)
    with (
        node_process(world) as (url, _),
        httpx.Client(base_url=url, timeout=30, headers=admin_headers(url)) as http,
    ):
        refused = run_json("gov", "apply", good[:16], world=world, code=1)["error"]
        assert refused["code"] == "gov.not_approved"
        code, out, _ = run(
            "gov", "approve", good[:16], "--approver", "admin", "--reason", "ok", world=world
        )
        assert code == 0 and out.startswith(f"approved  {good}")
        again = run_json(
            "gov", "reject", good[:16], "--approver", "admin", "--reason", "no", world=world, code=1
        )
        assert again["error"]["code"] == "gov.already_decided"
        applied = run_json("gov", "apply", good[:16], world=world)
        assert http.get("/v1/world").json()["manifest"] == applied["manifest"]
        listed = run_json("gov", "ls", world=world)["proposals"]
        assert [p["status"] for p in listed] == ["applied"]


def _journal_height(url: str) -> int:
    return int(node_http.get(url + "/v1/world", timeout=30).json()["height"])


def test_the_whole_cycle_runs_through_a_serving_node(tmp_path: Path) -> None:
    world = tmp_path / "w"
    counter_world(world, {"a": [1, 2], "b": [3]})
    folder = variant(tmp_path, "double", DOUBLE)
    with node_process(world) as (url, _):
        proposed = run_json("gov", "propose", str(folder), world=world)
        proposal = proposed["proposal"]
        assert proposed["status"] == "proposed" and proposed["seq"] == _journal_height(url)
        report = run_json("gov", "shadow", proposal[:16], world=world)
        assert report["proposal"] == proposal
        assert report["summary"]["cells"] == 2 and report["summary"]["diverge"] == 2
        code, out, _ = run("gov", "show", proposal[:16], world=world)  # a read, beside
        assert code == 0 and "shadowed" in out
        run("gov", "approve", proposal[:16], "--approver", "admin", "--reason", "ok", world=world)
        applied = run_json("gov", "apply", proposal[:16], world=world)
        assert (
            node_http.get(url + "/v1/world", timeout=30).json()["manifest"] == applied["manifest"]
        )
    with reopen(world) as opened:  # the node journaled it all: it replays
        assert opened.proposals[proposal]["status"] == "applied"
    assert run_json("world", "replay", "--verify", world=world)["ok"] is True


def test_a_patch_file_with_its_binary_is_proposed_through_the_node(tmp_path: Path) -> None:
    world = tmp_path / "w"
    counter_world(world, {"a": [1]})
    with reopen(world) as opened:
        patch, blobs = folder_patch(opened, variant(tmp_path, "refactor", REFACTOR))
    (tmp_path / "patch.json").write_text(json.dumps(patch))
    [(module_hash, binary)] = blobs.items()
    (tmp_path / "m.wasm").write_bytes(binary)
    with node_process(world) as (url, _):
        args = ("gov", "propose", str(tmp_path / "patch.json"))
        missing = run_json(*args, world=world, code=1)["error"]
        assert missing["code"] == "gov.patch_invalid" and str(module_hash) in missing["message"]
        proposed = run_json(*args, "--wasm", str(tmp_path / "m.wasm"), world=world)
        assert proposed["seq"] == _journal_height(url)
        again = run_json(*args, "--wasm", str(tmp_path / "m.wasm"), world=world, code=1)
        assert again["error"]["code"] == "gov.duplicate_proposal"
        assert _journal_height(url) == proposed["seq"]


def test_refused_proposals_and_shadows_change_nothing(tmp_path: Path) -> None:
    world = tmp_path / "w"
    counter_world(world, {"a": [1]})
    with (
        node_process(world, "--proposal-bytes-max", "4096") as (url, _),
        httpx.Client(base_url=url, timeout=30, headers=admin_headers(url)) as http,
    ):
        before = _journal_height(url)
        cbor_headers = {"content-type": "application/cbor"}
        cases = [
            http.post("/v1/gov/proposals", content=b"\xff", headers=cbor_headers),
            http.post("/v1/gov/proposals", json={"patch": {}, "extra": 1}),
            http.post("/v1/gov/proposals", json={"patch": {"$kind": "patch"}}),
            http.post("/v1/gov/proposals", json={"patch": {}, "expected_hash": 7}),
            http.post("/v1/gov/proposals", content=b"\x00" * 5000, headers=cbor_headers),
            http.post("/v1/gov/blake3:" + "0" * 64 + "/shadow"),
        ]
        codes = [response.json()["error"]["code"] for response in cases]
        assert codes == [
            "cbor.non_canonical",
            "request.invalid",
            "gov.patch_invalid",
            "request.invalid",
            "request.too_large",
            "gov.unknown_proposal",
        ], codes
        assert [r.status_code for r in cases][-2] == 413
        assert _journal_height(url) == before


def test_a_shadow_past_its_time_limit_is_killed_and_journals_nothing(tmp_path: Path) -> None:
    world = tmp_path / "w"
    counter_world(world, {"a": [1, 2]})
    with reopen(world) as opened:
        proposal = propose_folder(opened, variant(tmp_path, "double", DOUBLE))
    with node_process(world, "--shadow-ms-max", "1") as (url, _):
        before = _journal_height(url)
        refused = run_json("gov", "shadow", proposal[:16], world=world, code=1)["error"]
        assert refused["code"] == "node.shadow_timeout" and refused["detail"]["limit"] == 1
        assert _journal_height(url) == before
        listed = run_json("gov", "ls", world=world)["proposals"]
        assert [p["status"] for p in listed] == ["proposed"]


def test_a_node_without_a_world_folder_cannot_shadow(tmp_path: Path) -> None:
    import asyncio

    from aos.kernel.node.node import Node

    world = tmp_path / "w"
    counter_world(world, {"a": [1]})
    with reopen(world) as opened:
        proposal = propose_folder(opened, variant(tmp_path, "double", DOUBLE))
    node = Node(lambda: World.open(world, sync=False)).start()
    try:
        with pytest.raises(AosError) as refused:
            asyncio.run(node.gov_shadow(proposal))
        assert refused.value.code == "node.shadow_unavailable"
    finally:
        node.close()
