"""The HTTP API of a node (spec/04-effects.md §9): a FastAPI app over a `Node`.

Handlers are thin: they check the request's shape (pydantic; the adapters' two hot endpoints
are served ahead of FastAPI by kernel/node/adapter_api.py), call the node, and turn any
`AosError` into `{"error": {...}}` with the status `errors.http_status` gives. The HTTP layer
never dies of a request: an unexpected exception here is a 500 `node.internal`, and the next
request is served as usual (one inside a world operation closes the world: kernel/node/host.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from aos.kernel.buckets import Buckets
from aos.kernel.errors import AosError
from aos.kernel.node import models, routes
from aos.kernel.node import read_model as views
from aos.kernel.node.access import AccessGuard, acting_user, principal_of
from aos.kernel.node.adapter_api import (
    CBOR_MEDIA_TYPE,
    AdapterFastPath,
    FastRead,
    route_path,
    serve_lease,
    serve_receipt,
)
from aos.kernel.node.errors import (
    MediaTypeUnsupportedError,
    NodeBusyError,
    NodeInternalError,
    QueryInvalidError,
    RequestInvalidError,
    RequestTimeoutError,
    RequestTooLargeError,
    answer_early,
    http_status,
)
from aos.kernel.node.human import InboxError
from aos.kernel.node.identities import ADMIN
from aos.kernel.node.identity_api import identity_handlers
from aos.kernel.node.metrics import (
    METRICS_PATH,
    CountingAnswers,
    HostCounts,
    HttpCounts,
    Scrape,
    exposition,
)
from aos.kernel.node.node import Node
from aos.kernel.node.proposal_body import read_proposal
from aos.kernel.node.rate import TokenBuckets, WriteRateLimit
from aos.kernel.node.read_api import read_handlers
from aos.kernel.node.routes import BLOB_MEDIA_TYPE, Handlers
from aos.kernel.text import jsontext
from aos.kernel.text.jsontext import JsonInvalidError
from aos.kernel.world.world import World

API_VERSION = "1"
_CBOR_MEDIA = CBOR_MEDIA_TYPE.encode()

log = logging.getLogger("aos.node")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": models.ErrorResponse}
    for status in (400, 401, 403, 404, 409, 413, 415, 422, 429, 503)
}


def create_app(node: Node) -> FastAPI:
    """The ASGI app serving `node` (which must be started)."""
    app = FastAPI(
        title="aos node",
        version=API_VERSION,
        description="One aos world: events, state, journal, leases, receipts, human tasks.",
        responses=_ERRORS,
    )
    _add_error_handlers(app)
    routes.mount(app, routes.API, _api_handlers(node))
    routes.mount(app, routes.READS, read_handlers(node))
    routes.mount(app, routes.IDENTITIES, identity_handlers(node.authority))
    _add_body_schemas(app)
    answers = HttpCounts()
    routes.mount(app, routes.METRICS, _metrics_handlers(node, answers))
    reads: list[FastRead] = []
    app.state.fast_reads = reads  # add_fast_read
    # Added first, so it runs inside the guard: the guard's limits hold for the fast path.
    app.add_middleware(AdapterFastPath, node=node, reads=reads)
    app.add_middleware(
        RequestGuard,
        bytes_max=node.limits.request_bytes_max,
        body_ms_max=node.limits.request_body_ms_max,
        json_depth_max=node.limits.json_depth_max,
        large_bodies_max=node.limits.large_bodies_max,
        by_path=body_limits(node, routes.NODE),
    )
    # Inside the access guard, so a caller's bucket is its identity's once it has proved one;
    # before the body guard: a caller over its write rate is refused before its body is read.
    buckets = TokenBuckets(node.limits.write_rate_per_s, node.limits.write_burst_max)
    app.add_middleware(WriteRateLimit, buckets=buckets)
    # Outside the body guard: an unauthenticated or unauthorized request is refused before
    # its body is read.
    app.add_middleware(
        AccessGuard, authority=node.authority, router=app.router, verifier=node.verifier
    )
    # Outermost: every answer is counted, the guard's refusals too.
    app.add_middleware(CountingAnswers, counts=answers)
    return app


# --------------------------------------------------------------------------------------------
# Routes


def body_limits(node: Node, table: Sequence[routes.Route]) -> dict[str, BodyLimit]:
    """The body limits `table` declares, with this node's values."""
    return {
        row.path: BodyLimit(
            row.body_limit,
            int(getattr(node.limits, row.body_limit)),
            None if row.body_media_type is None else row.body_media_type.encode(),
        )
        for row in table
        if row.body_limit is not None
    }


def _api_handlers(node: Node) -> Handlers:
    """The handlers of `routes.API`."""
    handler = Handlers()

    async def adapter_identity(request: Request) -> str:
        """The adapter that signed this request (kernel/signing/request_auth.py), checked before the
        body is looked at; the routes that write or show intent params depend on it."""
        query = request.url.query
        return node.verifier.verify(
            method=request.method,
            target=request.url.path + (f"?{query}" if query else ""),
            body=await request.body(),
            headers=request.headers,
        )

    signed = Depends(adapter_identity)

    @handler
    async def get_health() -> models.HealthResponse:
        """Whether the node serves, and its world's id (what an adapter signs its requests
        for). Public: it shows nothing else."""
        return models.HealthResponse(status="ok", world_id=node.world_id, api=API_VERSION)

    @handler
    async def get_world() -> models.WorldResponse:
        """Height, manifest, logical time, cells per workflow, open intents, leases."""
        return await node.info()

    @handler
    async def post_event(
        request: models.EventRequest,
        idempotency_key: str | None = Header(None, alias="Idempotency-Key"),
    ) -> models.SendResponse:
        """Ingress one event and run the world to idle; durable when this returns. With an
        idempotency key (the body's `idempotency_key` or the `Idempotency-Key` header), a
        repeat answers the first admission, marked `duplicate`, and journals nothing."""
        key = request.idempotency_key
        if key is not None and idempotency_key is not None and key != idempotency_key:
            raise RequestInvalidError(
                "the Idempotency-Key header and the body's idempotency_key differ",
                path="$.idempotency_key",
            )
        return await node.send(request.schema_, request.value, key or idempotency_key)

    @handler
    async def get_state(
        workflow: str, key: str | None = Query(None, description="The cell key as JSON.")
    ) -> models.StateResponse:
        """The state of one cell (leave `key` out for an unkeyed workflow)."""
        return await node.state(workflow, _json_text(key, "$.key"), key is not None)

    @handler
    async def get_adapters() -> models.AdaptersResponse:
        """The manifest's adapter identities: name, public key, the effects each may settle.
        Public: an adapter checks its own key here before it can sign (spec/10 §2), and a
        public key is no secret."""
        return node.adapters()

    @handler
    async def post_leases(request: Request, identity: str = signed) -> models.LeaseResponse:
        """Lease open intents the adapter may settle; long-poll up to `wait_ms` for work.
        Signed by the adapter named in the body. (Served by kernel/node/adapter_api.py ahead
        of this route, with the same function.)"""
        return await serve_lease(node, identity, await request.body())

    @handler
    async def post_lease_renew(lease_id: str, identity: str = signed) -> models.RenewResponse:
        """Extend a held lease by lease_ms (signed by its holder). `lease.revoked` (409) when
        the workflow cancelled the intent: the adapter should stop, since its receipt would be
        refused."""
        return node.renew(lease_id, identity)

    @handler
    async def post_lease_progress(
        lease_id: str, request: models.ProgressRequest, identity: str = signed
    ) -> models.RenewResponse:
        """A signed progress frame for a held lease: extends it like a renewal; kept (the
        newest few per intent), never journaled, never seen by a workflow."""
        return node.progress(lease_id, request.model_dump(), identity)

    @handler
    async def get_intent(intent: str) -> models.IntentResponse:
        """An intent: open with its record, or settled or cancelled; its progress frames."""
        return await node.intent(intent)

    @handler
    async def post_receipt(request: Request, identity: str = signed) -> models.SettleResponse:
        """Settle an intent with a signed receipt (JSON or application/cbor), then run the
        world to idle so the origin cell steps; with `lease`, lease for the same adapter
        once it is durable. Posted by the receipt's own adapter. (Served by
        kernel/node/adapter_api.py ahead of this route, with the same function.)"""
        body, content_type = await request.body(), request.headers.get("content-type")
        return await serve_receipt(node, identity, body, content_type)

    @handler
    async def post_blob(request: Request, identity: str = signed) -> models.BlobResponse:
        """Store the raw body (application/octet-stream, at most blob_bytes_max) in the
        world's CAS and answer its hash, for a receipt payload to name (a large HTTP
        response body, say). Durable when this returns; a blob no receipt names is garbage
        at the next `aos world gc`. Signed by an adapter of the manifest."""
        del identity  # any adapter of the manifest may upload
        media_type = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
        if media_type != BLOB_MEDIA_TYPE:
            raise MediaTypeUnsupportedError(
                f"a blob is sent as {BLOB_MEDIA_TYPE}, not {media_type or 'no content type'}"
            )
        return await node.put_blob(await request.body())

    @handler
    async def get_tasks(
        limit: int = 100,
        assignee: str | None = None,
        role: str | None = None,
        status: Literal["open", "claimed"] | None = None,
    ) -> models.TasksResponse:
        """Open tasks of the human adapter this node hosts, oldest first: only those assigned
        to `assignee`, naming `role`, or (not) claimed, when given."""
        return await node.tasks(limit, assignee=assignee, role=role, status=status)

    @handler
    async def get_task(intent: str) -> models.TaskBody:
        return await node.task(intent)

    @handler
    async def complete_task(
        intent: str, body: models.TaskCompleteRequest, request: Request
    ) -> models.SettleResponse:
        """Complete a task as the caller's identity: the node signs the receipt with the
        human adapter's key. A claimed task only by its holder; an unclaimed one only by
        whoever may claim it (its assignee, holding one of its roles)."""
        acting = acting_user(request, body.user, [], required=False)
        return await node.complete_task(
            intent, body.status, body.payload, acting.user, acting.checked_roles
        )

    @handler
    async def claim_task(
        intent: str, body: models.TaskClaimRequest, request: Request
    ) -> models.TaskBody:
        """Claim a task as the caller's identity: it must not be held by or assigned to
        someone else, and the identity must hold one of its roles (if it names any).
        Idempotent for its holder."""
        acting = acting_user(request, body.user, body.roles)
        assert acting.user is not None
        return await node.claim_task(intent, acting.user, list(acting.roles))

    @handler
    async def release_task(
        intent: str, body: models.TaskReleaseRequest, request: Request
    ) -> models.TaskBody:
        """Give a claimed task back (its holder only)."""
        user = acting_user(request, body.user, []).user
        assert user is not None
        return await node.release_task(intent, user)

    @handler
    async def reassign_task(
        intent: str, body: models.TaskReassignRequest, request: Request
    ) -> models.TaskBody:
        """Set a task's assignee: its holder may, or while it is not claimed whoever may
        claim it (or an admin); handing it to someone else releases the claim."""
        acting = acting_user(request, body.user, [])
        roles = None if principal_of(request.scope).may(ADMIN) else acting.checked_roles
        assert acting.user is not None
        return await node.reassign_task(intent, acting.user, body.to, roles)

    @handler
    async def get_task_history(intent: str) -> models.TaskHistoryResponse:
        """A task's history, oldest first; also of a closed task the inbox remembers."""
        return await node.task_history(intent)

    parsing = asyncio.Semaphore(1)  # one proposal decoded at a time: a bound on its memory

    @handler
    async def post_gov_proposal(request: Request) -> models.ProposalResponse:
        """Propose a patch (journaled), as `aos gov propose`: `{"patch": ..., "modules":
        [binary, ...], "expected_hash": HASH or null}` as application/cbor (module binaries
        are byte strings; at most proposal_bytes_max and proposal_values_max), or JSON without
        binaries (at most request_bytes_max)."""
        body = await request.body()
        is_cbor = _media_type(request.headers.get("content-type", "").encode()) == _CBOR_MEDIA
        values_max = node.limits.proposal_values_max
        async with parsing:  # decoded, hashed and validated beside the writer thread
            proposal = await asyncio.to_thread(
                functools.partial(read_proposal, body, is_cbor=is_cbor, values_max=values_max)
            )
        return await node.gov_propose(proposal)

    @handler
    async def post_gov_shadow(proposal: str) -> models.ShadowResponse:
        """Shadow a proposal against the live history (in a worker process, beside the
        writer) and journal the report, as `aos gov shadow`; answers the report."""
        return await node.gov_shadow(proposal)

    @handler
    async def post_gov_decision(
        proposal: str, body: models.GovDecisionRequest, request: Request
    ) -> models.ProposalResponse:
        """Approve or reject a proposal (journaled with the caller's identity as approver),
        as `aos gov approve|reject`."""
        approver = acting_user(request, body.approver, [], required=False).user or "local"
        return await node.gov_decide(
            proposal, approve=body.approve, approver=approver, reason=body.reason
        )

    @handler
    async def post_gov_apply(proposal: str) -> models.ApplyResponse:
        """Switch the world to an approved, currently shadowed proposal's manifest; needs
        strict quiescence (`gov.not_quiescent`, 409, lists the blockers)."""
        return await node.gov_apply(proposal)

    @handler
    async def post_operation(request: models.OperationRequest) -> models.OperationResponse:
        """Retry or reset a cell, or cancel an open intent (journaled; see spec/03 §13)."""
        return await node.operate(request)

    @handler
    async def advance_time(request: models.TimeAdvanceRequest) -> models.TimeResponse:
        """Move a manual-clock world's logical time forward; due timers fire."""
        return await node.advance_time(request.by_ns)

    @handler
    async def jump_next() -> models.TimeResponse:
        """Move a manual-clock world to its next timer deadline (report null: none pending)."""
        return await node.jump_next_timer()

    return handler


# --------------------------------------------------------------------------------------------
# Bodies


def _json_text(text: str | None, path: str) -> Any:
    """Strict JSON (kernel/text/jsontext.py): one value, no duplicate keys, no NaN, bounded."""
    if text is None:
        return None
    return jsontext.parse(text, path=path)


def _add_body_schemas(app: FastAPI) -> None:
    """The lease and receipt routes read their bodies themselves (a receipt may be CBOR, and
    a malformed one must still reach the kernel to be journaled), so their schemas are added
    to the document here."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            components = document.setdefault("components", {}).setdefault("schemas", {})
            for model in (models.ReceiptRequest, models.LeaseRequest):
                schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(schema.pop("$defs", {}))
                components[model.__name__] = schema
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


# --------------------------------------------------------------------------------------------
# Errors


def is_read(request: Request) -> bool:
    """A request to a route of the read API (tag `read`, spec/04 §9.4)."""
    return "read" in getattr(request.scope.get("route"), "tags", ())


def query_invalid(error: RequestValidationError) -> QueryInvalidError:
    """A read's malformed parameter (not a number, say): `query.invalid`, like any other."""
    problems = list(error.errors())
    first: dict[str, Any] = dict(problems[0]) if problems else {}
    where = [str(part) for part in first.get("loc", ()) if part not in ("query", "path")]
    return QueryInvalidError(
        f"{'.'.join(where) or 'a parameter'}: {first.get('msg', 'invalid')}",
        path="$" + "".join(f".{part}" for part in where),
    )


def error_response(error: AosError) -> JSONResponse:
    return JSONResponse({"error": error.to_dict()}, status_code=http_status(error))


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AosError)
    async def on_aos_error(_: Request, error: AosError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(InboxError)
    async def on_inbox_error(_: Request, error: InboxError) -> JSONResponse:
        # The inbox's codes carry their own status (human.py).
        return JSONResponse({"error": error.to_dict()}, status_code=error.http_status)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = list(error.errors())
        first = problems[0] if problems else {}
        if first.get("type") == "json_invalid":
            return error_response(JsonInvalidError("the body is not JSON", path="$"))
        if is_read(request):
            return error_response(query_invalid(error))
        where = [str(part) for part in first.get("loc", ()) if part != "body"]
        invalid = RequestInvalidError(
            f"{first.get('msg', 'invalid request')}",
            path="$" + "".join(f".{part}" for part in where),
            errors=[
                {"loc": [str(p) for p in e.get("loc", ())], "msg": e.get("msg"), "type": e["type"]}
                for e in problems
            ],
        )
        return error_response(invalid)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(_: Request, error: StarletteHTTPException) -> JSONResponse:
        code = {404: "http.not_found", 405: "http.method_not_allowed"}.get(
            error.status_code, "http.error"
        )
        body = {"error": {"code": code, "message": str(error.detail)}}
        return JSONResponse(body, status_code=error.status_code, headers=error.headers)

    @app.exception_handler(Exception)
    async def on_bug(_: Request, error: Exception) -> JSONResponse:
        log.error("request failed", exc_info=error)
        return error_response(NodeInternalError(f"{type(error).__name__}: {error}"))


# --------------------------------------------------------------------------------------------
# Metrics


def _metrics_handlers(node: Node, answers: HttpCounts) -> Handlers:
    handler = Handlers()

    @handler
    async def get_metrics(request: Request) -> Response:
        """The node's metrics in Prometheus's text format, or OpenMetrics when the `Accept`
        header asks for it (spec/04 §9.7). Takes no parameters."""
        for name in request.query_params:
            raise QueryInvalidError(f"{METRICS_PATH} takes no parameters", path=f"$.{name}")

        def read(world: World) -> tuple[dict[str, Any], HostCounts, Buckets]:
            found = views.overview(world)
            found["engine"] = dataclasses.asdict(world.engine.stats)
            counts = node.host.counts
            return found, counts.snapshot(), counts.commit_seconds(world.store.commit_times.seconds)

        world, counts, commits = await node.host.run(read)
        scrape = Scrape(
            world=world,
            host=counts,
            commit_seconds=commits,
            host_queue_jobs=node.host.queue_jobs,
            leases=node.leases.counts(),
            lease_waiters=node.leases.waiters,
            cell_waiters=node.host.cells.waiters,
            http=dict(answers.answers),
        )
        body, media_type = exposition(scrape, request.headers.get("accept", ""))
        return Response(body, media_type=media_type)

    return handler


# --------------------------------------------------------------------------------------------
# Body size


@dataclass(frozen=True)
class BodyLimit:
    """A route's own body limit, larger than `request_bytes_max`: for bodies of `media_type`
    (any, when None); others on that route are held to `request_bytes_max`."""

    name: str
    bytes_max: int
    media_type: bytes | None = None


class RequestGuard:
    """Reads a request's whole body before the app sees it, so no handler ever holds more than
    a limit or waits on a stalled client:
    - past its size limit (by its Content-Length, before a byte of it is read, or by what has
      arrived) it is refused with 413 `request.too_large`; the limit is `bytes_max`
      (`request_bytes_max`), or the `BodyLimit` that `by_path` gives for the request's exact
      path and media type;
    - bodies under such a larger limit are read at most `large_bodies_max` at once, each until
      the app has answered: what they hold in memory is bounded (one that cannot start within
      `body_ms_max` is 503 `node.busy`);
    - a body not complete within `body_ms_max` of the headers is 408 `request.timeout`;
    - a JSON body (by its media type, or none given) must be strict JSON nested at most
      `json_depth_max` (kernel/text/jsontext.py), else 400 `input.invalid_json` /
      `input.json_too_deep`: everything behind this recurses over the parsed value.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        bytes_max: int,
        body_ms_max: int,
        json_depth_max: int,
        large_bodies_max: int,
        by_path: dict[str, BodyLimit] | None = None,
    ) -> None:
        self.app = app
        self.bytes_max = bytes_max
        self.body_s_max = body_ms_max / 1000
        self.json_depth_max = json_depth_max
        self.large_bodies = asyncio.Semaphore(large_bodies_max)
        self.by_path = by_path or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", ()))
        limit = self._limit(route_path(scope), headers.get(b"content-type"))
        if limit.bytes_max <= self.bytes_max:
            await self._guarded(scope, receive, send, headers, limit)
            return
        try:
            await asyncio.wait_for(self.large_bodies.acquire(), timeout=self.body_s_max)
        except TimeoutError:
            busy = NodeBusyError(f"{limit.name} bodies are being read; retry shortly")
            await answer_early(send, busy)
            return
        try:
            await self._guarded(scope, receive, send, headers, limit)
        finally:
            self.large_bodies.release()

    def _limit(self, path: str, content_type: bytes | None) -> BodyLimit:
        found = self.by_path.get(path)
        if found is None or (
            found.media_type is not None and _media_type(content_type) != found.media_type
        ):
            return BodyLimit("request_bytes_max", self.bytes_max)
        return found

    async def _guarded(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
        limit: BodyLimit,
    ) -> None:
        name, bytes_max = limit.name, limit.bytes_max
        try:
            body = await self._body(receive, headers.get(b"content-length"), name, bytes_max)
            if body is None:
                return  # the client went away
            if body and _is_json(headers.get(b"content-type")):
                jsontext.parse(body, path="$", depth_max=self.json_depth_max, bytes_max=bytes_max)
        except AosError as error:
            await answer_early(send, error)
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _body(
        self, receive: Receive, declared: bytes | None, name: str, bytes_max: int
    ) -> bytes | None:
        if declared is not None and declared.isdigit() and int(declared) > bytes_max:
            raise _too_large(int(declared), name, bytes_max)
        deadline = asyncio.get_running_loop().time() + self.body_s_max
        chunks: list[bytes] = []
        size = 0
        while True:
            left_s = deadline - asyncio.get_running_loop().time()
            try:
                message = await asyncio.wait_for(receive(), timeout=max(left_s, 0.0))
            except TimeoutError:
                raise RequestTimeoutError(
                    f"the body did not arrive within {self.body_s_max:g} s (request_body_ms_max)",
                    received_bytes=size,
                ) from None
            if message["type"] != "http.request":
                return None
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size > bytes_max:
                raise _too_large(size, name, bytes_max)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _too_large(size: int, name: str, bytes_max: int) -> RequestTooLargeError:
    return RequestTooLargeError(
        f"the body is at least {size} bytes; the limit is {bytes_max} ({name})",
        limit=bytes_max,
        limit_name=name,
    )


def _media_type(content_type: bytes | None) -> bytes:
    return (content_type or b"").split(b";")[0].strip().lower()


def _is_json(content_type: bytes | None) -> bool:
    """JSON by its media type; a body with none is read as JSON by the routes too."""
    if content_type is None:
        return True
    media = _media_type(content_type)
    return media == b"application/json" or media.endswith(b"+json")
