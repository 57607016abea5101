"""The flow pages of the web inspector (kernel/node/inspector.py, spec/04-effects.md §9.5):
deployed flows and their executions in the order they started (searched by id, business
reference and flow, filtered by status, paged), and one execution: its error, its definition
drawn (draw_svg.py, server-side) under its current marking, its pending work and its history a
page at a time back to its start, with times, over the read model of flows/serve/execution_views.py.

Actions (cancel, signal, retry, complete a person's task) are the JSON API's routes
(flows/serve/routes.py, `/v1/tasks/{intent}/complete`), sent by the page's script with its page token;
each is shown disabled, with the scope it needs, to a caller without it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from aos.flows.define.cfd import decode_definition
from aos.flows.define.draw_svg import Marking, to_svg
from aos.flows.serve import execution_views as views
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import EXEC_WORKFLOW, is_flow_world
from aos.flows.serve.retry import RETRYABLE_STATUSES
from aos.flows.serve.schedules.pages import add_schedule_pages
from aos.kernel import cbor
from aos.kernel.errors import AosError
from aos.kernel.node import read_model as kernel_views
from aos.kernel.node import routes
from aos.kernel.node.identities import OPERATE, READ, SEND, TASK
from aos.kernel.node.inspector import PAGE_SCAN_RECORDS_MAX, UI_PATH, Inspector
from aos.kernel.node.node import Node
from aos.kernel.node.read_api import bounds_of
from aos.kernel.node.routes import Handlers, Route
from aos.kernel.node.times import RecordTimes, time_json
from aos.kernel.world.world import World

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
EXECUTION_ROWS = 50
"""Executions a flows page lists unless it asks for another `limit` (at most the node's
`journal_records_per_request_max`)."""
HISTORY_ROWS = 100
"""History events an execution page shows unless it asks for another `limit`."""
ORDERS = ("newest", "oldest")


FLOW_PAGES = (
    Route("GET", UI_PATH + "/flows", "flows", (READ,), "inspector", page=True),
    Route(
        "GET",
        UI_PATH + "/flows/executions/{exec_id:path}",
        "execution",
        (READ,),
        "inspector",
        page=True,
    ),
)
"""The inspector's flow pages: an extension of the node's route table (kernel/node/routes.py)."""


def add_flow_pages(app: FastAPI, inspector: Inspector) -> None:
    inspector.add_templates(TEMPLATES_DIR)
    inspector.nav.append(("Flows", f"{UI_PATH}/flows"))
    add_schedule_pages(app, inspector)
    routes.mount(app, FLOW_PAGES, _page_handlers(inspector))


def _page_handlers(inspector: Inspector) -> Handlers:
    handler = Handlers()
    node = inspector.node
    bounds = bounds_of(node)

    @handler
    async def flows(
        request: Request,
        q: str = "",
        flow: str = "",
        status: str = "",
        order: str = "newest",
        cursor: int | None = None,
        limit: int | None = None,
    ) -> Response:
        try:
            search = _search(q, flow, status, order)
            rows = kernel_views.rows(limit, bounds, EXECUTION_ROWS)
            cursor = kernel_views.sequence(cursor, "cursor")
            found = await _executions(node, search, cursor, rows)
        except AosError as error:
            return inspector.error_page(request, error)
        chosen = {"q": q, "flow": flow, "status": status, "order": order, "limit": limit}
        return await inspector.page(
            request, "flows.html", partial(_listing, found=found, chosen=chosen, search=search)
        )

    @handler
    async def execution(
        request: Request,
        exec_id: str,
        before: int | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> Response:
        try:
            rows = kernel_views.rows(limit, bounds, HISTORY_ROWS)
            page = _HistoryPage(
                kernel_views.sequence(before, "before"),
                after if after is None else max(after, 0),
                rows,
                limit,
            )
            found = await node.host.run(partial(_execution, exec_id=exec_id, page=page))
            await _with_inbox(node, found["pending"])
        except AosError as error:
            return inspector.error_page(request, error)
        found["human_disabled"] = _human_disabled(node)
        return inspector.render(request, "execution.html", found)

    return handler


# --------------------------------------------------------------------------------------------
# Executions


def _search(q: str, flow: str, status: str, order: str) -> views.ExecutionSearch:
    if order not in ORDERS:
        raise ops.FlowRequestInvalidError(f"order is one of {', '.join(ORDERS)}", path="$.order")
    where = ops.ExecutionFilter(flow=flow or None, status=status or None)
    return views.ExecutionSearch(q.strip(), where, oldest_first=order == "oldest")


async def _executions(
    node: Node, search: views.ExecutionSearch, cursor: int | None, rows: int
) -> dict[str, Any]:
    """A page of executions, scanned in turns of at most `journal_scan_records_per_turn`
    records on the writer thread (writes run between them), at most
    `PAGE_SCAN_RECORDS_MAX` records in all, as the journal page is."""
    found: list[dict[str, Any]] = []
    scanned = 0
    while True:
        budget = min(node.limits.journal_scan_records_per_turn, PAGE_SCAN_RECORDS_MAX - scanned)
        turn = partial(_executions_turn, search, cursor, rows - len(found), budget)
        page = await node.host.run(turn)
        found += page["executions"]
        scanned += page["scanned"]
        if len(found) >= rows or scanned >= PAGE_SCAN_RECORDS_MAX or page["next"] is None:
            return {**page, "executions": found, "scanned": scanned}
        cursor = page["next"]


def _executions_turn(
    search: views.ExecutionSearch, cursor: int | None, rows: int, budget: int, world: World
) -> dict[str, Any]:
    return views.executions(
        world, search, cursor=cursor, limit=rows, scan_max=budget, times=RecordTimes(world)
    )


def _listing(
    world: World, *, found: dict[str, Any], chosen: dict[str, Any], search: views.ExecutionSearch
) -> dict[str, Any]:
    if not is_flow_world(world):
        return {"flow_world": False}
    deployed = ops.listing(world, page=ops.Page(limit=1, scan_max=1))["flows"]
    return {
        "flow_world": True,
        "flows": cbor.to_json(deployed),
        "count": world.reader.cell_count(EXEC_WORKFLOW),
        "found": cbor.to_json(found),
        "chosen": chosen,
        "statuses": ops.LISTED_STATUSES,
        "orders": ORDERS,
        "exact": _exact(world, search.text),
        "clock": world.clock,
    }


def _exact(world: World, text: str) -> str | None:
    """The execution whose id is `text`, if there is one (found at once, by its cell)."""
    if not text:
        return None
    try:
        found = world.reader.cell_info(EXEC_WORKFLOW, world.reader.key_bytes(EXEC_WORKFLOW, text))
    except AosError:
        return None
    return text if found is not None else None


# --------------------------------------------------------------------------------------------
# One execution


@dataclass(frozen=True)
class _HistoryPage:
    """Which history events an execution page shows (views.history's cursors), `rows` of them
    (`limit`, as asked, carried into the page's links)."""

    before: int | None
    after: int | None
    rows: int
    limit: int | None


def _execution(world: World, *, exec_id: str, page: _HistoryPage) -> dict[str, Any]:
    state = ops.shown_status(world, exec_id)  # raises flow.execution_unknown
    raw = ops.definition_blob(world, str(state["definition"])) if state["definition"] else None
    marking = Marking.of_state(state)
    drawing = to_svg(decode_definition(raw), marking) if raw is not None else None
    times = RecordTimes(world)
    history = views.history(
        world,
        exec_id,
        before=page.before,
        after=page.after,
        limit=page.rows,
        scan_max=PAGE_SCAN_RECORDS_MAX,
        times=times,
    )
    cell = world.reader.cell_info(EXEC_WORKFLOW, world.reader.key_bytes(EXEC_WORKFLOW, exec_id))
    started = times.at(int(state["started_seq"]))
    last = times.at(cell.last_active_seq) if cell is not None else None
    business = state.get("business") if isinstance(state.get("business"), dict) else {}
    return {
        "state": cbor.to_json(state),
        "error": cbor.to_json(ops.failure(state)),
        "failed_at": views.failed_at(world, exec_id, state, scan_max=PAGE_SCAN_RECORDS_MAX),
        "drawing": drawing,
        "marking": marking,
        "pending": views.pending(world, exec_id, state, scan_max=PAGE_SCAN_RECORDS_MAX),
        "history": history,
        "history_order": "newest" if page.after is None else "oldest",
        "limit": page.limit,
        "business_ref": (business or {}).get("business_ref"),
        "started": time_json(started),
        "last": time_json(last),
        "last_seq": cell.last_active_seq if cell is not None else None,
        "clock": world.clock,
        "logical_ns": world.logical_ns,
        "retryable": state["status"] in RETRYABLE_STATUSES,
        "scopes": {"operate": OPERATE, "send": SEND, "task": TASK},
    }


async def _with_inbox(node: Node, pending: list[dict[str, Any]]) -> None:
    """A person's task as the node's inbox has it now (its assignee after a reassign, who holds
    it), when this node hosts the inbox."""
    for row in pending:
        human = row.get("human")
        if human is None or node.inbox is None:
            continue
        try:
            task = await node.task(str(human["intent"]))
        except AosError:
            continue
        human.update(assignee=task.assignee, holder=task.holder)
        human["claimed"] = task.status == "claimed"


def _human_disabled(node: Node) -> str | None:
    if node.inbox is None:
        return "this node hosts no task inbox (aos node up --human-adapter NAME --human-key FILE)"
    return None
