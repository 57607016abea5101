"""The flow pages of the web inspector (kernel/node/inspector.py): deployed flows and their
executions, and one execution with its definition drawn (draw_svg.py, server-side) under its
current marking, its waits and its history. Read-only, like the rest of the inspector."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from aos.flows import operations as ops
from aos.flows.cfd import decode_definition
from aos.flows.draw_svg import Marking, to_svg
from aos.flows.world import is_flow_world
from aos.kernel import cbor
from aos.kernel.node.access import needs
from aos.kernel.node.identities import READ
from aos.kernel.node.inspector import PAGE_SCAN_RECORDS_MAX, UI_PATH, Inspector
from aos.kernel.world.world import World

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
EXECUTIONS_SHOWN_MAX = 500
"""Executions the flows page lists (the JSON API's GET /v1/flows has them all)."""
HISTORY_SHOWN_MAX = 200
"""The newest history events an execution page shows (found within the inspector's
`PAGE_SCAN_RECORDS_MAX` records back from the head)."""


def add_flow_pages(app: FastAPI, inspector: Inspector) -> None:
    inspector.add_templates(TEMPLATES_DIR)
    inspector.nav.append(("Flows", f"{UI_PATH}/flows"))

    @app.get(UI_PATH + "/flows", include_in_schema=False, **needs(READ))
    async def flows(
        request: Request, after: str | None = None, status: str | None = None
    ) -> Response:
        return await inspector.page(
            request, "flows.html", lambda world: _listing(world, after, status or None)
        )

    @app.get(UI_PATH + "/flows/executions/{exec_id:path}", include_in_schema=False, **needs(READ))
    async def execution(request: Request, exec_id: str) -> Response:
        return await inspector.page(request, "execution.html", lambda w: _execution(w, exec_id))


def _listing(world: World, after: str | None, status: str | None) -> dict[str, Any]:
    """The flows and a page of executions (at most `EXECUTIONS_SHOWN_MAX`, read as
    `GET /v1/flows` reads them: bounded however many executions there are)."""
    if not is_flow_world(world):
        return {"flow_world": False, "flows": [], "executions": [], "count": 0}
    wanted = ops.ExecutionFilter(status=status)
    page = ops.Page(after=after, limit=EXECUTIONS_SHOWN_MAX)
    return {
        "flow_world": True,
        "status": status,
        "statuses": ops.LISTED_STATUSES,
        **cbor.to_json(ops.listing(world, wanted, page)),
    }


def _execution(world: World, exec_id: str) -> dict[str, Any]:
    state = ops.shown_status(world, exec_id)  # raises flow.execution_unknown
    raw = ops.definition_blob(world, str(state["definition"])) if state["definition"] else None
    drawing = None
    if raw is not None:
        drawing = to_svg(decode_definition(raw), Marking.of_state(state))
    history = ops.history_tail(
        world, exec_id, events_max=HISTORY_SHOWN_MAX, scan_records_max=PAGE_SCAN_RECORDS_MAX
    )
    engine = state.get("engine") if isinstance(state.get("engine"), dict) else {}
    return {
        "state": cbor.to_json(state),
        "error": cbor.to_json(ops.failure(state)),
        "drawing": drawing,
        "marking": Marking.of_state(state),
        "waits": cbor.to_json((engine or {}).get("waits", {})),
        "history": [
            (event.seq, ops.describe_event(event.event)) for event in reversed(history.events)
        ],
        "history_complete": history.complete,
    }
