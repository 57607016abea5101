"""The node's route table (spec/04-effects.md §9): every HTTP route a node serves, one row
each, with the scopes a caller needs for it (§9.8) and what else it declares.

A row names its handler; the handlers live with their area (app.py: the world, adapters,
human tasks, governance, operations, time, metrics; read_api.py; identity_api.py;
registry_api.py; inspector.py), each area collecting them in a `Handlers`, and `mount` wires
a table's rows to them (in the table's order, which is the order the router tries them). A
layer served beside the kernel (flows) brings its own table and mounts it on the node's app
the same way, so the kernel imports nothing of it. Every mounted row is kept on the app
(`served`): a test checks that every route the app answers is a row with its scopes.

What a row declares:
- `scopes`: any one of them lets a caller in (`AccessGuard`, access.py; `PUBLIC`,
  `AUTHENTICATED` and `ADAPTER` are the pseudo-scopes). Routes the frameworks make themselves
  (the API document, the inspector's static files) are declared in `access.BUILT_IN_ROUTES`.
- `body_limit`: the `NodeLimits` field that bounds the route's body instead of
  `request_bytes_max`, for bodies of `body_media_type` (any, when None) (`RequestGuard`,
  app.py). The write rate (`WriteRateLimit`, rate.py) holds every route whose method is not
  GET: `rate` says which class a row is in.
- `tag`: its group in the OpenAPI document; `read` marks the read API, whose malformed
  parameters are `query.invalid` (app.py `is_read`).
- `response_model`, `openapi`: how the OpenAPI document shows it; `page`: an inspector page,
  left out of the document.

The adapters' two hot routes (`POST /v1/leases`, `POST /v1/receipts`) and the flows' two
polled reads are also answered ahead of FastAPI by the same functions (adapter_api.py): they
are rows here like any other, and the guards in front of both see the same table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import FastAPI
from fastapi.responses import Response
from pydantic import BaseModel

from aos.kernel.node import models
from aos.kernel.node.access import LOGIN_PATH, LOGOUT_PATH, needs
from aos.kernel.node.adapter_api import CBOR_MEDIA_TYPE, LEASES_PATH, RECEIPTS_PATH
from aos.kernel.node.identities import (
    ADAPTER,
    ADMIN,
    AUTHENTICATED,
    DEPLOY,
    GOVERN,
    OPERATE,
    PUBLIC,
    READ,
    SEND,
    TASK,
)
from aos.kernel.node.metrics import METRICS_PATH
from aos.kernel.node.rate import READ_METHODS

Handler = Callable[..., Any]
F = TypeVar("F", bound=Handler)

UI_PATH = "/ui"
"""Where the web inspector's pages are (inspector.py; flows add theirs below it)."""
BLOB_MEDIA_TYPE = "application/octet-stream"


@dataclass(frozen=True)
class Route:
    """One route: `method` and `path` answered by the handler named `handler`, for callers
    holding one of `scopes` (see the module's docstring for the rest)."""

    method: str
    path: str
    handler: str
    scopes: tuple[str, ...]
    tag: str
    response_model: type[BaseModel] | None = None
    body_limit: str | None = None
    body_media_type: str | None = None
    openapi: Mapping[str, Any] | None = None
    page: bool = False
    plain_text: str | None = None
    """The answer is plain text, not JSON (metrics): what it is, for the OpenAPI document."""

    @property
    def rate(self) -> str:
        """`write`: held to the caller's write rate (rate.py); `read`: not."""
        return "read" if self.method in READ_METHODS else "write"


class Handlers(dict[str, Handler]):
    """An area's handlers by name: `@handlers` on each adds it under its function's name."""

    def __call__(self, handler: F) -> F:
        name = handler.__name__
        if name in self:
            raise ValueError(f"two handlers are named {name}")
        self[name] = handler
        return handler


class RouteTableError(Exception):
    """A table and its handlers disagree: a wiring mistake, found when the app is built."""


def mount(app: FastAPI, table: Sequence[Route], handlers: Mapping[str, Handler]) -> None:
    """Serve each row of `table` on `app` by its handler; every handler must have its row."""
    unused = sorted(set(handlers) - {row.handler for row in table})
    if unused:
        raise RouteTableError(f"handlers without a route: {', '.join(unused)}")
    for row in table:
        if row.handler not in handlers:
            raise RouteTableError(f"{row.method} {row.path}: no handler {row.handler}")
    for row in table:
        app.add_api_route(row.path, handlers[row.handler], methods=[row.method], **_options(row))
    served(app).extend(table)


def served(app: FastAPI) -> list[Route]:
    """The rows mounted on `app`, in the order they were."""
    found = getattr(app.state, "route_table", None)
    if found is None:
        found = app.state.route_table = []
    assert isinstance(found, list)
    return found


def _options(row: Route) -> dict[str, Any]:
    options: dict[str, Any] = needs(*row.scopes, openapi_extra=dict(row.openapi or {}))
    if row.response_model is not None:
        options["response_model"] = row.response_model
    if row.page:  # out of the API's document: its tag groups it only in the table
        options["include_in_schema"] = False
    else:
        options["tags"] = [row.tag]
    if row.plain_text is not None:
        options["response_class"] = Response
        options["responses"] = {200: {"content": {"text/plain": {}}, "description": row.plain_text}}
    return options


def body_schema(model: str, *media_types: str) -> dict[str, Any]:
    """The OpenAPI request body of a route that reads its body itself."""
    schema = {"$ref": f"#/components/schemas/{model}"}
    return {
        "requestBody": {"required": True, "content": {m: {"schema": schema} for m in media_types}}
    }


_BLOB_BODY = {
    "requestBody": {
        "required": True,
        "content": {BLOB_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
    }
}


# --------------------------------------------------------------------------------------------
# The tables. Read one as: METHOD PATH -> handler, who may call it.

API = (
    # The world (app.py)
    Route("GET", "/v1/health", "get_health", (PUBLIC,), "world", models.HealthResponse),
    Route("GET", "/v1/world", "get_world", (READ,), "world", models.WorldResponse),
    Route("POST", "/v1/events", "post_event", (SEND,), "world", models.SendResponse),
    Route("GET", "/v1/state/{workflow:path}", "get_state", (READ,), "world", models.StateResponse),
    # Adapters (app.py; the first and the receipt also in adapter_api.py)
    Route("GET", "/v1/adapters", "get_adapters", (PUBLIC,), "adapters", models.AdaptersResponse),
    Route(
        "POST",
        LEASES_PATH,
        "post_leases",
        (ADAPTER,),
        "adapters",
        models.LeaseResponse,
        openapi=body_schema("LeaseRequest", "application/json"),
    ),
    Route(
        "POST",
        "/v1/leases/{lease_id}/renew",
        "post_lease_renew",
        (ADAPTER,),
        "adapters",
        models.RenewResponse,
    ),
    Route(
        "POST",
        "/v1/leases/{lease_id}/progress",
        "post_lease_progress",
        (ADAPTER,),
        "adapters",
        models.RenewResponse,
    ),
    Route("GET", "/v1/intents/{intent}", "get_intent", (READ,), "world", models.IntentResponse),
    Route(
        "POST",
        RECEIPTS_PATH,
        "post_receipt",
        (ADAPTER,),
        "adapters",
        models.SettleResponse,
        openapi=body_schema("ReceiptRequest", "application/json", CBOR_MEDIA_TYPE),
    ),
    Route(
        "POST",
        "/v1/blobs",
        "post_blob",
        (ADAPTER,),
        "adapters",
        models.BlobResponse,
        body_limit="blob_bytes_max",
        openapi=_BLOB_BODY,
    ),
    # Human tasks (app.py, over human.py's inbox)
    Route("GET", "/v1/tasks", "get_tasks", (TASK, READ), "human", models.TasksResponse),
    Route("GET", "/v1/tasks/{intent}", "get_task", (TASK, READ), "human", models.TaskBody),
    Route(
        "POST",
        "/v1/tasks/{intent}/complete",
        "complete_task",
        (TASK,),
        "human",
        models.SettleResponse,
    ),
    Route("POST", "/v1/tasks/{intent}/claim", "claim_task", (TASK,), "human", models.TaskBody),
    Route("POST", "/v1/tasks/{intent}/release", "release_task", (TASK,), "human", models.TaskBody),
    Route(
        "POST", "/v1/tasks/{intent}/reassign", "reassign_task", (TASK,), "human", models.TaskBody
    ),
    Route(
        "GET",
        "/v1/tasks/{intent}/history",
        "get_task_history",
        (TASK, READ),
        "human",
        models.TaskHistoryResponse,
    ),
    # Governance (app.py; the proposal's body read by proposals.py). JSON proposals carry no
    # binaries: request_bytes_max holds them.
    Route(
        "POST",
        "/v1/gov/proposals",
        "post_gov_proposal",
        (DEPLOY,),
        "governance",
        models.ProposalResponse,
        body_limit="proposal_bytes_max",
        body_media_type=CBOR_MEDIA_TYPE,
    ),
    Route(
        "POST",
        "/v1/gov/{proposal}/shadow",
        "post_gov_shadow",
        (DEPLOY,),
        "governance",
        models.ShadowResponse,
    ),
    Route(
        "POST",
        "/v1/gov/{proposal}/decision",
        "post_gov_decision",
        (GOVERN,),
        "governance",
        models.ProposalResponse,
    ),
    Route(
        "POST",
        "/v1/gov/{proposal}/apply",
        "post_gov_apply",
        (GOVERN,),
        "governance",
        models.ApplyResponse,
    ),
    # Operations and time (app.py)
    Route(
        "POST", "/v1/operations", "post_operation", (OPERATE,), "world", models.OperationResponse
    ),
    Route("POST", "/v1/time/advance", "advance_time", (OPERATE,), "time", models.TimeResponse),
    Route("POST", "/v1/time/jump-next", "jump_next", (OPERATE,), "time", models.TimeResponse),
)
"""The world, its adapters, human tasks, governance, operations and time (app.py)."""

READS = (
    Route("GET", "/v1/overview", "get_overview", (READ,), "read"),
    Route("GET", "/v1/cells/{workflow:path}", "get_cells", (READ,), "read", models.CellsResponse),
    Route("GET", "/v1/cell", "get_cell", (READ,), "read"),
    Route("GET", "/v1/timeline", "get_timeline", (READ,), "read"),
    Route("GET", "/v1/steps/{seq}/state", "get_state_at", (READ,), "read"),
    Route("GET", "/v1/journal", "get_journal", (READ,), "read", models.JournalResponse),
    Route("GET", "/v1/journal/stream", "stream_journal", (READ,), "read"),
    Route("GET", "/v1/records/{seq}", "get_record", (READ,), "read"),
    Route("GET", "/v1/trace/{target}", "get_trace", (READ,), "read"),
    Route("GET", "/v1/intents", "get_intents", (READ,), "read"),
    Route("GET", "/v1/proposals", "get_proposals", (READ,), "read"),
    Route("GET", "/v1/proposals/{proposal}", "get_proposal", (READ,), "read"),
)
"""The read API (read_api.py, spec/04 §9.4)."""

IDENTITIES = (
    Route("GET", "/v1/identity", "whoami", (AUTHENTICATED,), "identities"),
    Route("GET", "/v1/identities", "listing", (ADMIN,), "identities"),
    Route("POST", "/v1/identities", "create", (ADMIN,), "identities"),
    Route("POST", "/v1/identities/{name}/revoke", "revoke", (ADMIN,), "identities"),
)
"""Identities (identity_api.py, spec/04 §9.8)."""

METRICS = (Route("GET", METRICS_PATH, "get_metrics", (READ,), "read", plain_text="The metrics."),)
"""The node's metrics (app.py over metrics.py, spec/04 §9.7)."""

REGISTRY = (
    Route(
        "GET",
        "/v1/worlds/{world}/node",
        "world_node",
        (PUBLIC,),
        "world",
        models.WorldNodeResponse,
    ),
)
"""Where a world is served (registry_api.py, spec/07 §11.5), added by `aos node up`."""

INSPECTOR = (
    Route("GET", LOGIN_PATH, "login_page", (PUBLIC,), "inspector", page=True),
    Route("POST", LOGIN_PATH, "login", (PUBLIC,), "inspector", page=True),
    Route("POST", LOGOUT_PATH, "logout", (PUBLIC,), "inspector", page=True),
    Route("GET", UI_PATH, "overview", (READ,), "inspector", page=True),
    Route("GET", UI_PATH + "/cells/{workflow:path}", "cells", (READ,), "inspector", page=True),
    Route("GET", UI_PATH + "/cell", "cell", (READ,), "inspector", page=True),
    Route("GET", UI_PATH + "/steps/{seq}/state", "state_at", (READ,), "inspector", page=True),
    Route("GET", UI_PATH + "/journal", "journal", (READ,), "inspector", page=True),
    Route("GET", UI_PATH + "/records/{seq}", "record", (READ,), "inspector", page=True),
    Route("GET", UI_PATH + "/intents", "intents", (READ,), "inspector", page=True),
    Route("GET", UI_PATH + "/proposals", "proposals", (READ,), "inspector", page=True),
    Route("GET", UI_PATH + "/proposals/{proposal}", "proposal", (READ,), "inspector", page=True),
)
"""The web inspector's pages (inspector.py), added by `aos node up`; its static files are a
framework route (`access.BUILT_IN_ROUTES`)."""

NODE = (*API, *READS, *IDENTITIES, *METRICS)
"""What `create_app` serves: every node has these."""
