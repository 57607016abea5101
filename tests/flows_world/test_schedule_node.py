"""Schedules over the node's HTTP API (spec/11-flows.md §12.4): each route's scope, refusals
that are typed 401/403/4xx and change nothing, and the node's own firing loop starting a
slot's execution once the clock reaches it."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning

from aos.flows.serve.routes import add_flow_routes
from aos.flows.serve.schedules.routes import SCHEDULE_FIRE_POLL_MS_DEFAULT
from aos.kernel.node import Node
from aos.kernel.node.app import create_app
from aos.kernel.node.identities import READ
from tests.auth_fixtures import bearer, token_for
from tests.flows_world.support import make_flow_world
from tests.test_world import engine

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

QUICK = "name: t/quick\nsteps: [{name: a, tasks: [{do: noop}]}]"
FIRE_WAIT_S = 20.0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, Node]]:
    made = make_flow_world(tmp_path / "w")
    made.deploy(QUICK)
    made.world.close()
    with Node.open_path(made.path, sync=False, engine=engine()) as node:
        app = create_app(node)
        add_flow_routes(app, node)
        with TestClient(app) as client:  # runs the app's lifespan: the firing loop
            yield client, node


def test_scopes_refuse_and_change_nothing(served: tuple[TestClient, Node]) -> None:
    client, node = served
    body = {"name": "q", "flow": "t/quick", "cron": "*/15 * * * *"}
    reader = bearer(token_for(node, [READ]))
    before = client.get("/v1/schedules", headers=reader).json()
    assert client.post("/v1/schedules", json=body).status_code == 401
    refused = client.post("/v1/schedules", json=body, headers=reader)
    assert refused.status_code == 403
    admin = bearer(token_for(node))
    assert (
        client.post("/v1/schedules", json={**body, "cron": "* *"}, headers=admin).json()["error"][
            "code"
        ]
        == "schedule.invalid"
    )
    assert client.post("/v1/schedules/q/pause", headers=reader).status_code == 403
    assert client.get("/v1/schedules", headers=reader).json() == before == {"schedules": []}
    assert client.post("/v1/schedules/q/pause", headers=admin).status_code == 404


def test_the_node_fires_a_due_slot_once(served: tuple[TestClient, Node]) -> None:
    client, node = served
    admin = bearer(token_for(node))
    body = {"name": "q", "flow": "t/quick", "every": "1h"}
    created = client.post("/v1/schedules", json=body, headers=admin)
    assert created.status_code == 200, created.text
    assert created.json()["next_slots"][0] == "1970-01-01T01:00:00Z"
    assert client.post("/v1/time/jump-next", headers=admin).status_code == 200
    shown = wait_fired(client, admin)
    assert shown["recent"][0]["exec"] == "sched~q~19700101T010000Z"
    status = client.get("/v1/executions/sched~q~19700101T010000Z", headers=admin).json()
    assert status["status"] == "completed"
    time.sleep(2.5 * SCHEDULE_FIRE_POLL_MS_DEFAULT / 1000)  # more polls fire nothing more
    assert client.get("/v1/schedules/q", headers=admin).json()["fired"] == 1
    triggered = client.post("/v1/schedules/q/trigger", headers=admin).json()
    assert triggered["exec"].startswith("sched~q~trigger-")


def wait_fired(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    deadline = time.monotonic() + FIRE_WAIT_S
    while time.monotonic() < deadline:
        shown: dict[str, Any] = client.get("/v1/schedules/q", headers=headers).json()
        if shown["fired"]:
            return shown
        time.sleep(0.1)
    raise AssertionError("the node did not fire the due slot")
