"""The inspector's schedules page and the flow pages' "started by" (spec/11-flows.md §12):
a schedule's next slots and recent runs, a trigger and what it started, and each execution
a schedule or trigger started named so on the flows page."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from starlette.exceptions import StarletteDeprecationWarning

from aos.flows.serve.pages import add_flow_pages
from aos.flows.serve.routes import add_flow_routes
from aos.flows.serve.schedules import operations as sched
from aos.flows.serve.schedules import triggers
from aos.flows.serve.schedules.slots import ScheduleSpec
from aos.kernel.node import Node
from aos.kernel.node.app import create_app
from aos.kernel.node.inspector import add_inspector
from tests.auth_fixtures import authorize
from tests.flows_world.support import make_flow_world
from tests.test_world import engine

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

QUICK = "name: t/quick\nsteps: [{name: a, tasks: [{do: noop}]}]"
HOUR_NS = 3_600 * 10**9


def test_schedules_page_and_started_by(tmp_path: Path) -> None:
    made = make_flow_world(tmp_path / "w")
    with made.world:
        made.deploy(QUICK)
        spec = ScheduleSpec.parse({"flow": "t/quick", "cron": "0 * * * *"})
        sched.create(made.world, "hourly", spec)
        sched.advance(made.world, 2 * HOUR_NS)
        hook = triggers.TriggerSpec(flow="t/quick", key="$.id")
        triggers.create_trigger(made.world, "hook", hook)
        triggers.deliver_webhook(made.world, "hook", {"id": "x1"})
    with Node.open_path(made.path, sync=False, engine=engine()) as node:
        app = create_app(node)
        add_flow_routes(app, node)
        add_flow_pages(app, add_inspector(app, node))
        client = authorize(TestClient(app), node)
        page = client.get("/ui/schedules")
        assert page.status_code == 200, page.text
        html = page.text
        assert re.findall(r'<tr data-schedule="([^"]+)"', html) == ["hourly"]
        assert re.findall(r'<tr data-trigger="([^"]+)"', html) == ["hook"]
        assert "1970-01-01T03:00:00Z" in html  # the next slot
        assert "sched~hourly~19700101T020000Z" in html  # a recent run
        assert "trig~hook~x1" in html
        flows = client.get("/ui/flows").text
        assert "schedule hourly" in flows and "trigger hook" in flows
