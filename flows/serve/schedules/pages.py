"""The inspector's schedules page (spec/11-flows.md §12.4): every schedule with its next
slots, counts and recent runs, and every trigger; and the `started_by` filter the flow pages
use to say which schedule or trigger started an execution."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from aos.flows.serve.schedules import operations as sched
from aos.flows.serve.schedules import triggers
from aos.flows.serve.schedules.origin import started_by
from aos.kernel.node import routes
from aos.kernel.node.identities import READ
from aos.kernel.node.inspector import UI_PATH, Inspector
from aos.kernel.node.routes import Handlers, Route
from aos.kernel.world.world import World

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
NEXT_SLOTS_SHOWN = 3
RECENT_SHOWN = 10


SCHEDULE_PAGES = (
    Route("GET", UI_PATH + "/schedules", "schedules", (READ,), "inspector", page=True),
)
"""The schedules page, an extension of the node's route table (kernel/node/routes.py)."""


def add_schedule_pages(app: FastAPI, inspector: Inspector) -> None:
    inspector.add_templates(TEMPLATES_DIR)
    inspector.env.filters["started_by"] = started_by
    inspector.nav.append(("Schedules", f"{UI_PATH}/schedules"))
    handler = Handlers()

    @handler
    async def schedules(request: Request) -> Response:
        return await inspector.page(request, "schedules.html", partial(_schedules))

    routes.mount(app, SCHEDULE_PAGES, handler)


def _schedules(world: World) -> dict[str, Any]:
    if sched.SCHEDULE_WORKFLOW not in world.runtime.workflows:
        return {"flow_world": False, "schedules": [], "triggers": []}
    shown = [
        {**found, "recent": found["recent"][-RECENT_SHOWN:][::-1]}
        for found in (
            sched.show(world, str(s["name"]), NEXT_SLOTS_SHOWN) for s in sched.listing(world)
        )
    ]
    return {"flow_world": True, "schedules": shown, "triggers": triggers.listing(world)}
