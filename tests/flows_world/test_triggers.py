"""Event triggers (spec/11-flows.md §12.7): a domain event and a webhook, each delivered
twice, start one execution each; refusals change nothing; a world whose triggers started
executions replays."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from starlette.exceptions import StarletteDeprecationWarning

from aos.flows.serve import flow_operations as ops
from aos.flows.serve.routes import add_flow_routes
from aos.flows.serve.schedules import triggers
from aos.flows.serve.schedules.errors import ScheduleError, ScheduleUnknownError
from aos.flows.serve.schedules.triggers import TriggerSpec
from aos.kernel.audit import replay
from aos.kernel.node import Node
from aos.kernel.node.app import create_app
from aos.kernel.node.identities import READ
from aos.kernel.world.world import World
from tests.auth_fixtures import bearer, token_for
from tests.flows_world.support import make_flow_world
from tests.test_world import engine

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

ORDER = "name: t/order\nsteps: [{name: a, tasks: [{do: noop}]}]"
SHIP = "name: t/ship\nsteps: [{name: a, tasks: [{do: noop, result: '{{ workload.order }}'}]}]"


def triggered(world: World, prefix: str) -> list[str]:
    listed = ops.listing(world, page=ops.Page(limit=1000))["executions"]
    return sorted(str(e["exec"]) for e in listed if str(e["exec"]).startswith(prefix))


def test_a_domain_event_delivered_twice_starts_one_execution(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    with flows.world:
        flows.deploy(ORDER)
        flows.deploy(SHIP)
        spec = TriggerSpec(
            flow="t/ship",
            event="aos/FlowStart@1",
            key="$.workload.order",
            when="$.workload.ship",
            workload={"order": "$.workload.order"},
        )
        triggers.create_trigger(flows.world, "ship", spec)
        # The same order's event twice (a resend), one not to ship, one of another order.
        ops.start(flows.world, "t/order", workload={"order": "o7", "ship": True}, exec_id="a")
        ops.start(flows.world, "t/order", workload={"order": "o7", "ship": True}, exec_id="b")
        ops.start(flows.world, "t/order", workload={"order": "o8", "ship": False}, exec_id="c")
        ops.start(flows.world, "t/order", workload={"order": "o9", "ship": True}, exec_id="d")
        assert triggers.pump_triggers(flows.world) == ["ship"]
        assert triggers.pump_triggers(flows.world) == []  # read: nothing new
        assert triggered(flows.world, "trig~") == ["trig~ship~o7", "trig~ship~o9"]
        state = ops.status(flows.world, "trig~ship~o7")
        assert state["status"] == "completed"
        assert state["business"]["workload"] == {"order": "o7"}
    assert replay.verify_replay(tmp_path / "w").ok


def test_a_webhook_delivered_twice_starts_one_execution(tmp_path: Path) -> None:
    made = make_flow_world(tmp_path / "w")
    made.deploy(SHIP)
    made.world.close()
    with Node.open_path(made.path, sync=False, engine=engine()) as node:
        app = create_app(node)
        add_flow_routes(app, node)
        client = TestClient(app)
        admin = bearer(token_for(node))
        reader = bearer(token_for(node, [READ]))
        body = {"name": "hook", "flow": "t/ship", "key": "$.id", "workload": {"order": "$.id"}}
        assert client.post("/v1/triggers", json=body, headers=reader).status_code == 403
        assert client.post("/v1/triggers", json=body, headers=admin).status_code == 200
        posted = {"id": "o7", "amount": 3}
        assert client.post("/v1/triggers/hook/webhook", json=posted).status_code == 401
        assert (
            client.post("/v1/triggers/hook/webhook", json=posted, headers=reader).status_code == 403
        )
        first = client.post("/v1/triggers/hook/webhook", json=posted, headers=admin).json()
        again = client.post("/v1/triggers/hook/webhook", json=posted, headers=admin).json()
        assert (first["exec"], first["duplicate"]) == ("trig~hook~o7", False)
        assert (again["exec"], again["duplicate"]) == ("trig~hook~o7", True)
        keyless = client.post("/v1/triggers/hook/webhook", json={"x": 1}, headers=admin)
        assert keyless.json()["error"]["code"] == "schedule.invalid"
        missing = client.post("/v1/triggers/nope/webhook", json=posted, headers=admin)
        assert missing.status_code == 404


def test_bad_triggers_are_refused_and_change_nothing(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    with flows.world:
        flows.deploy(SHIP)
        height = flows.world.height
        with pytest.raises(ScheduleError):
            triggers.create_trigger(flows.world, "x", TriggerSpec(flow="t/ship", key="$[["))
        with pytest.raises(ScheduleError):
            triggers.create_trigger(
                flows.world, "x", TriggerSpec(flow="t/ship", key="$." + "a" * 600)
            )
        with pytest.raises(ops.FlowUnknownError):
            triggers.create_trigger(flows.world, "x", TriggerSpec(flow="t/none", key="$.id"))
        with pytest.raises(ScheduleUnknownError):
            triggers.deliver_webhook(flows.world, "x", {"id": 1})
        assert flows.world.height == height
        triggers.create_trigger(
            flows.world, "ev", TriggerSpec(flow="t/ship", key="$.id", event="aos/FlowStart@1")
        )
        with pytest.raises(ScheduleError):  # an event trigger takes no webhook
            triggers.deliver_webhook(flows.world, "ev", {"id": 1})
