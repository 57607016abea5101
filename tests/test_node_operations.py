"""`POST /v1/operations` on the node: retry, reset and cancel through the world's writer, the
leases of a cancelled intent withdrawn, bad requests refused with nothing journaled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.node_fixtures import (  # noqa: F401 (fixtures)
    client_fixture,
    node_fixture,
    world_path_fixture,
)
from tests.test_node import KEYED, TestClient, lease, send

AOS = [sys.executable, "-c", "from aos.cli.main import main; main()"]


def operate(client: TestClient, code: int = 200, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/operations", json=body)
    assert response.status_code == code, response.text
    return dict(response.json())


def height(client: TestClient) -> int:
    return int(client.get("/v1/world").json()["height"])


def test_cancel_through_the_node_withdraws_the_lease(client: TestClient, world_path: Path) -> None:
    send(client, "z", "effect", 1)
    [leased] = lease(client)
    body = operate(client, action="intent_cancel", intent=leased["intent"], reason="not wanted")
    assert body["action"] == "intent_cancel" and body["report"]["steps"] == 1
    assert lease(client, wait_ms=0) == []
    again = operate(client, 409, action="intent_cancel", intent=leased["intent"])
    assert again["error"]["code"] == "world.intent_not_open"


def test_retry_and_reset_through_the_node(client: TestClient) -> None:
    send(client, "x", "trap")
    body = operate(client, action="cell_retry", workflow=KEYED, key="x")
    assert body["report"]["faults"] == 1
    body = operate(client, action="cell_reset", workflow=KEYED, key="x")
    assert body["report"]["steps"] == 0
    cells = client.get(f"/v1/cells/{KEYED}").json()["cells"]
    assert [c["key"] for c in cells] == []


def test_bad_operations_are_refused_and_journal_nothing(client: TestClient) -> None:
    send(client, "ok", "none")
    before = height(client)
    cases = [
        ({"action": "cell_rewind", "workflow": KEYED, "key": "ok"}, 400, "world.operation_invalid"),
        ({"action": "cell_retry", "workflow": KEYED, "key": "ok"}, 409, "world.cell_not_failed"),
        ({"action": "cell_reset", "workflow": KEYED, "key": "nope"}, 404, "world.cell_missing"),
        ({"action": "intent_cancel", "intent": "x"}, 400, "world.operation_invalid"),
        (
            {"action": "cell_reset", "workflow": "demo/no@1", "key": "a"},
            404,
            "world.workflow_unknown",
        ),
    ]
    for body, code, error in cases:
        assert operate(client, code, **body)["error"]["code"] == error, body
    assert client.post("/v1/operations", json={"nothing": 1}).status_code == 422
    assert height(client) == before


def test_operations_through_the_node_replay(world_path: Path, client: TestClient) -> None:
    send(client, "x", "trap")
    send(client, "z", "effect", 1)
    operate(client, action="cell_reset", workflow=KEYED, key="x")
    [leased] = lease(client)
    operate(client, action="intent_cancel", intent=leased["intent"])
    # Replay reads the store read-only, from another process, while the node keeps it.
    done = subprocess.run(
        [*AOS, "world", "replay", "--verify", "--world", str(world_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "ok: every record and the head match" in done.stdout
