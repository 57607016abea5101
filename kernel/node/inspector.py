"""The web inspector `aos node up` serves at /ui: server-rendered HTML (Jinja2, every value
escaped) over the same read layer as the JSON API (views.py), with htmx (vendored under
static/, nothing fetched from the network) for filters and paging in place, and a live tail
over the API's server-sent events. Times are shown as ISO 8601 (times.py).

Pages read; their actions (retrying a failed cell here, an execution's cancel, signal and
retry and a person's task on the flow pages) are the JSON API's own routes, sent by
static/actions.js with the page token (`access.page_token`) beside the session cookie, and
each is shown disabled, with the scope it needs, to a caller without that scope.

    /ui                         the world: workflows, intents, proposals, a live tail
    /ui/cells/{workflow}        cells with a status filter, paged by key hash
    /ui/cell?workflow=&key=     a cell: its state and its timeline (receipts with their
                                signature status; the state at any step)
    /ui/steps/{seq}/state       the state a step left (a fragment the cell page loads)
    /ui/journal                 the journal newest first: kind, cell and "failed only" filters
    /ui/records/{seq}           one record, and what it came from and caused
    /ui/intents                 open intents and their leases
    /ui/proposals[/{id}]        governance proposals, shadow reports side by side
    /ui/login                   a token entered once sets the session cookie (`_add_login`)

Every page needs `read`; a caller without `read:params` sees params and payloads redacted
(kernel/node/redaction.py); an action needs its route's scope (spec/04 §9.8).

Flow pages are added by `aos.flows.serve.pages` on a world that runs flows.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

import jinja2
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from aos.kernel import cbor
from aos.kernel.errors import AosError
from aos.kernel.hashing import hash_value
from aos.kernel.node import read_model as views
from aos.kernel.node import routes
from aos.kernel.node.access import (
    LOGIN_PATH,
    PAGE_TOKEN_HEADER,
    SESSION_COOKIE,
    page_token,
    principal_of,
    same_origin,
    session_token,
)
from aos.kernel.node.adapter_api import route_path
from aos.kernel.node.app import query_invalid
from aos.kernel.node.errors import http_status
from aos.kernel.node.identities import (
    OPERATE,
    READ_PARAMS,
    TASK,
    AuthError,
    CrossSiteError,
    Principal,
)
from aos.kernel.node.node import Node
from aos.kernel.node.read_api import bounds_of, journal_filter, journal_in_turns
from aos.kernel.node.redaction import redact
from aos.kernel.node.routes import UI_PATH as UI_PATH
from aos.kernel.node.routes import Handlers
from aos.kernel.node.times import RecordTimes, iso_duration, iso_instant, logical_text, time_json
from aos.kernel.world import records
from aos.kernel.world.world import World

STATIC_DIR = Path(__file__).resolve().parent / "static"
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
JSON_SHOWN_CHARS_MAX = 20_000
"""Longest pretty-printed JSON a page shows (the JSON API has the whole value)."""
SUMMARY_CHARS_MAX = 120
TIMELINE_ROWS = 50
JOURNAL_ROWS = 100
CELL_ROWS = 100
INTENT_ROWS = 200
PAGE_SCAN_RECORDS_MAX = 10_000
"""Most journal records one filtered page (journal, timeline) reads, so that a page answers
in about a second even when nothing matches; its "older" link goes on from there."""
# Scripts and styles come only from the node itself; htmx's own inline indicator style is
# turned off in base.html so nothing inline is needed.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

Read = Callable[[World], dict[str, Any]]


@dataclass
class Inspector:
    """The inspector of one node: its templates and the pages in its navigation."""

    node: Node
    env: jinja2.Environment
    nav: list[tuple[str, str]] = field(default_factory=list)

    async def page(
        self, request: Request, template: str, read: Read, *, status: int = 200
    ) -> Response:
        """Render `template` with what `read` returns (run on the host thread); an error of
        the world is shown as a page with its code and the status the API would answer."""
        try:
            context = await self.node.host.run(read)
        except AosError as error:
            return self.error_page(request, error)
        return self.render(request, template, context, status=status)

    def error_page(self, request: Request, error: AosError) -> Response:
        """An error of the world shown as a page, with the status the API would answer."""
        return self.render(request, "error.html", {"error": error}, status=http_status(error))

    def add_templates(self, directory: Path) -> None:
        """Let pages added from elsewhere (flows) render templates of their own folder."""
        self.env.loader = jinja2.ChoiceLoader(
            [loader for loader in (self.env.loader,) if loader is not None]
            + [jinja2.FileSystemLoader(str(directory))]
        )

    def render(
        self, request: Request, template: str, context: dict[str, Any], *, status: int = 200
    ) -> Response:
        # Behind a mount (several worlds per process) every link starts with the world's prefix.
        root = str(request.scope.get("root_path", ""))
        nav = [(name, root + href) for name, href in self.nav]
        principal = principal_of(request.scope)
        if not principal.may(READ_PARAMS):
            # Params and payloads as their hashes (redaction.py).
            context = redact(context, tasks=not principal.may(TASK))
        session = session_token(request.headers)
        html = self.env.get_template(template).render(
            request=request,
            nav=nav,
            ui=root + UI_PATH,
            root=root,
            caller=principal,
            page_token=page_token(self.node.authority, session) if session else "",
            page_token_header=PAGE_TOKEN_HEADER,
            allowed=lambda scope: allowed(principal, scope),
            **context,
        )
        return HTMLResponse(html, status_code=status, headers=_HEADERS)


_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def environment(template_dirs: list[Path]) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(d) for d in template_dirs]),
        autoescape=True,  # every page is HTML: everything is escaped unless marked safe
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pretty"] = pretty
    env.filters["short"] = short
    env.filters["summary"] = summary
    env.filters["key_text"] = key_text
    env.filters["key_json"] = key_json
    env.filters["iso"] = iso_instant
    env.filters["duration"] = iso_duration
    env.filters["logical"] = logical_text
    env.globals["query"] = query
    return env


def allowed(caller: Principal, scope: str) -> str | None:
    """Why `caller` may not take an action that needs `scope` (None: it may), for a page to
    show the action disabled with the reason; the node refuses it anyway (spec/04 §9.8)."""
    if caller.may(scope):
        return None
    held = sorted(caller.scopes) or ["no scope"]
    return f"needs the {scope} scope; {caller.name} has {', '.join(held)}"


def add_inspector(app: FastAPI, node: Node) -> Inspector:
    """Serve the inspector at /ui; returns it so that other pages (flows) can join it."""
    inspector = Inspector(node, environment([TEMPLATES_DIR]))
    inspector.nav += [
        ("World", UI_PATH),
        ("Journal", f"{UI_PATH}/journal"),
        ("Intents", f"{UI_PATH}/intents"),
        ("Proposals", f"{UI_PATH}/proposals"),
    ]
    app.mount(f"{UI_PATH}/static", StaticFiles(directory=STATIC_DIR), name="inspector-static")
    routes.mount(app, routes.INSPECTOR, _login_handlers(inspector) | _page_handlers(inspector))
    _show_invalid_parameters(app, inspector)
    return inspector


def _login_handlers(inspector: Inspector) -> Handlers:
    """The inspector's login: a token entered once into a form sets the `aos_session`
    cookie (HttpOnly, SameSite=Strict, the world's path), which authenticates the inspector's
    reads (GET only, kernel/node/access.py). Both forms are refused unless posted from the
    node's own pages (Origin or Referer), so no other site can log a browser in or out."""
    handler = Handlers()

    @handler
    async def login_page(request: Request) -> Response:
        return inspector.render(request, "login.html", {"failed": None})

    @handler
    async def login(request: Request) -> Response:
        if not same_origin(request.headers):
            error = CrossSiteError("the login form is posted from the node's own login page")
            return inspector.error_page(request, error)
        fields = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=4)
        token = (fields.get("token") or [""])[0].strip()
        try:
            identity = inspector.node.authority.identity(token)
        except AuthError as error:
            inspector.node.authority.audit.refused(request.scope, error, None)
            return inspector.render(request, "login.html", {"failed": error}, status=401)
        root = str(request.scope.get("root_path", ""))
        answer = RedirectResponse(root + UI_PATH, status_code=303)
        answer.set_cookie(
            SESSION_COOKIE,
            token,
            path=root or "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        inspector.node.authority.audit.write("login", request.scope, identity=identity.name)
        return answer

    @handler
    async def logout(request: Request) -> Response:
        if not same_origin(request.headers):
            error = CrossSiteError("the logout form is posted from the node's own pages")
            return inspector.error_page(request, error)
        root = str(request.scope.get("root_path", ""))
        answer = RedirectResponse(root + LOGIN_PATH, status_code=303)
        answer.delete_cookie(SESSION_COOKIE, path=root or "/", httponly=True, samesite="strict")
        return answer

    return handler


def _show_invalid_parameters(app: FastAPI, inspector: Inspector) -> None:
    """A page's malformed parameter (`?before=abc`) is an error page, as any refusal is; the
    API's own handler answers everything else."""
    api_handler = app.exception_handlers[RequestValidationError]

    async def on_invalid(request: Request, error: Exception) -> Response:
        path = route_path(request.scope)
        if path.startswith(UI_PATH + "/") or path == UI_PATH:
            assert isinstance(error, RequestValidationError)
            found = query_invalid(error)
            return inspector.render(request, "error.html", {"error": found}, status=400)
        answer = api_handler(request, error)
        return await answer if inspect.isawaitable(answer) else answer

    app.add_exception_handler(RequestValidationError, on_invalid)


def _page_handlers(inspector: Inspector) -> Handlers:
    handler = Handlers()
    node = inspector.node
    api_bounds = bounds_of(node)
    bounds = views.Bounds(
        api_bounds.rows_max,
        min(api_bounds.scan_max, PAGE_SCAN_RECORDS_MAX),
        api_bounds.value_bytes_max,
    )
    page = inspector.page

    @handler
    async def overview(request: Request) -> Response:
        def read(world: World) -> dict[str, Any]:
            found = views.overview(world, bounded_failures=True)
            return {"world": found, "leases": node.leases.counts()}

        return await page(request, "overview.html", read)

    @handler
    async def cells(
        request: Request,
        workflow: str,
        status: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> Response:
        def read(world: World) -> dict[str, Any]:
            wanted = views.cell_status(status or None)
            rows = views.rows(limit, bounds, CELL_ROWS)
            found = views.cells(
                world,
                workflow,
                status=wanted,
                after=after,
                limit=rows,
                scan_max=bounds.scan_max,
            )
            return {
                "found": found,
                "status": wanted,
                "statuses": views.CELL_STATUSES,
                "limit": limit,
            }

        return await page(request, "cells.html", read)

    @handler
    async def cell(
        request: Request, workflow: str, key: str | None = None, before: int | None = None
    ) -> Response:
        def read(world: World) -> dict[str, Any]:
            ref = views.cell_ref(world, workflow, key)
            below = views.sequence(before, "before")
            return {
                "cell": views.cell(world, ref, bounds),
                "retry_scope": OPERATE,
                "timeline": views.timeline(
                    world, ref, before=below, limit=TIMELINE_ROWS, bounds=bounds
                ),
                "key_json": key,
            }

        return await page(request, "cell.html", read)

    @handler
    async def state_at(request: Request, seq: int) -> Response:
        def read(world: World) -> dict[str, Any]:
            # A fragment of the cell page: a refusal (a replay too long, say) is shown in it.
            try:
                found = views.state_at(
                    world, seq, bounds, replay_records_max=node.limits.state_replay_records_max
                )
            except AosError as error:
                return {"seq": seq, "at": None, "error": error}
            return {"seq": seq, "at": found, "error": None}

        return await page(request, "state_at.html", read)

    @handler
    async def journal(
        request: Request,
        before: int | None = None,
        kind: Annotated[list[str] | None, Query()] = None,
        workflow: str | None = None,
        key: str | None = None,
        failed: bool = False,
        limit: int | None = None,
    ) -> Response:
        def where(world: World) -> views.JournalFilter:
            return journal_filter(
                world, kind or [], workflow or None, key or None, failed, node.derived
            )

        try:
            cursor = views.JournalCursor(None, views.sequence(before, "before"))
            rows = views.rows(limit, bounds, JOURNAL_ROWS)
            found = await journal_in_turns(inspector.node, cursor, rows, bounds, where)
        except AosError as error:
            return inspector.error_page(request, error)

        def read(world: World) -> dict[str, Any]:
            return {
                "found": found,
                "kinds": records.KINDS,
                "chosen": set(kind or []),
                "workflows": sorted(world.runtime.workflows),
                "workflow": workflow or "",
                "key": key or "",
                "failed": failed,
                "filters": _journal_filters(kind or [], workflow, key, failed, limit),
            }

        return await page(request, "journal.html", read)

    @handler
    async def record(request: Request, seq: int) -> Response:
        def read(world: World) -> dict[str, Any]:
            found = views.record_at(world, seq)
            cell = None
            if isinstance(found.get("workflow"), str) and "key" in found:
                key = cbor.decode(found["key"]) if found["key"] else None
                cell = {"workflow": found["workflow"], "key": cbor.to_json(key)}
            # Found at once from its own sequence; what it caused is searched from there.
            target = str(hash_value(found))
            caused = views.traced(world, target, bounds, seq)
            return {"seq": seq, "record": cbor.to_json(found), "cell": cell, "trace": caused}

        return await page(request, "record.html", read)

    @handler
    async def intents(request: Request, after: str | None = None) -> Response:
        def read(world: World) -> dict[str, Any]:
            found = views.open_intents(world, node.leases.is_leased, after=after, limit=INTENT_ROWS)
            times = RecordTimes(world)
            for row in found["intents"]:
                row["opened"] = time_json(times.at(int(row["seq"])))
                record = world.reader.open_intent(str(row["intent"])) or {}
                row["task"] = views.task_shown(row["intent"], row["effect"], record.get("params"))
            return {
                "found": found,
                "leases": node.leases.counts(),
                "clock": world.clock,
                "logical_ns": world.logical_ns,
            }

        return await page(request, "intents.html", read)

    @handler
    async def proposals(request: Request) -> Response:
        return await page(request, "proposals.html", views.proposals)

    @handler
    async def proposal(request: Request, proposal: str) -> Response:
        return await page(
            request, "proposal.html", lambda world: {"p": views.proposal(world, proposal)}
        )

    return handler


def _journal_filters(
    kinds: list[str], workflow: str | None, key: str | None, failed: bool, limit: int | None
) -> dict[str, Any]:
    """The filter parameters, to carry into the next page's link."""
    found: dict[str, Any] = {"kind": kinds, "limit": limit}
    if workflow:
        found["workflow"] = workflow
    if key:
        found["key"] = key
    if failed:
        found["failed"] = "true"
    return found


# --------------------------------------------------------------------------------------------
# Filters


def pretty(value: Any) -> str:
    """JSON, indented, cut at JSON_SHOWN_CHARS_MAX (escaped by the template)."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    if len(text) > JSON_SHOWN_CHARS_MAX:
        return text[:JSON_SHOWN_CHARS_MAX] + f"\n... ({len(text) - JSON_SHOWN_CHARS_MAX} more)"
    return text


def short(text: Any, digits: int = 12) -> str:
    value = str(text)
    if value.startswith("blake3:"):
        return value[7 : 7 + digits]
    return value


def key_text(key: Any) -> str:
    if key is None:
        return "(unkeyed)"
    return key if isinstance(key, str) else json.dumps(key, sort_keys=True)


def key_json(key: Any) -> str | None:
    """A cell key (JSON form) as the JSON text a `key=` parameter takes (None: unkeyed)."""
    return None if key is None else json.dumps(key, sort_keys=True, ensure_ascii=False)


def query(**params: Any) -> str:
    """A query string of the given parameters, leaving out the empty ones."""
    kept = {k: v for k, v in params.items() if v not in (None, "", [], False)}
    return urlencode(kept, doseq=True)


def summary(record: dict[str, Any]) -> str:
    """One line about a record (in JSON form): what it says that is not its kind."""
    kind = record.get("kind")
    parts: list[str] = []
    if kind == records.DOMAIN_EVENT:
        parts = [str(record.get("schema")), _compact(record.get("value"))]
    elif kind in (records.STEP, records.STEP_FAULT, records.DELIVERY_DROPPED):
        cell = f"{record.get('workflow')} {_key_in(record.get('key'))}".rstrip()
        parts = [cell, f"input #{record.get('input')}"]
        if kind == records.STEP_FAULT:
            parts.append(f"{record.get('code')}: {record.get('message')}")
        if kind == records.DELIVERY_DROPPED:
            parts.append(str(record.get("reason")))
    elif kind == records.EFFECT_INTENT:
        origin = record.get("origin") or {}
        parts = [str(record.get("effect")), f"from {origin.get('workflow')}"]
    elif kind == records.EFFECT_RECEIPT:
        body = record.get("body") or {}
        parts = [f"{body.get('status')} by {body.get('adapter')}", short(record.get("intent"))]
    elif kind in (records.INGRESS_REJECTED, records.RECEIPT_REJECTED):
        parts = [f"{record.get('code')}: {record.get('message')}"]
    elif kind == records.GOVERNANCE:
        parts = [str(record.get("action")), short(record.get("proposal"))]
    elif kind == records.MANIFEST:
        parts = [short(record.get("manifest"))]
    text = "  ".join(p for p in parts if p)
    return text if len(text) <= SUMMARY_CHARS_MAX else text[: SUMMARY_CHARS_MAX - 3] + "..."


def _key_in(key_json: Any) -> str:
    """A record's canonical key bytes (in JSON form) as the key's text ("" when unkeyed)."""
    if key_json is None:
        return ""
    # A key that does not decode is shown as such rather than failing the whole page.
    with contextlib.suppress(AosError):
        data = cbor.from_json(key_json)
        if isinstance(data, bytes):
            return key_text(cbor.to_json(cbor.decode(data)))
    return "(a key that does not decode)"


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
