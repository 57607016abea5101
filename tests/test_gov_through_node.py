"""Governance decisions and apply while `aos node up` (a real process) serves the world: the
CLI sends them through the node; proposing and shadowing ran before, with the world alone."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.test_cli_world import run, run_json
from tests.test_governance import (
    REFACTOR,
    counter_world,
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
    with node_process(world) as (url, _), httpx.Client(base_url=url, timeout=30) as http:
        refused = run_json("gov", "apply", good[:16], world=world, code=1)["error"]
        assert refused["code"] == "gov.not_approved"
        code, out, _ = run(
            "gov", "approve", good[:16], "--approver", "ann", "--reason", "ok", world=world
        )
        assert code == 0 and out.startswith(f"approved  {good}")
        again = run_json(
            "gov", "reject", good[:16], "--approver", "bo", "--reason", "no", world=world, code=1
        )
        assert again["error"]["code"] == "gov.already_decided"
        applied = run_json("gov", "apply", good[:16], world=world)
        assert http.get("/v1/world").json()["manifest"] == applied["manifest"]
        listed = run_json("gov", "ls", world=world)["proposals"]
        assert [p["status"] for p in listed] == ["applied"]
