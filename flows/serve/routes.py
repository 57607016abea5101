"""The flow operations on a node's HTTP API (spec/11-flows.md §9.1): the same as `aos flow`,
each run on the node's host thread, the world's one writer.

Each route's scope (spec/04 §9.8) is declared in `FLOW_ROUTES`, this layer's extension of the
node's route table (kernel/node/routes.py): deploying, shadowing and migrating
need `deploy` (a definition may carry inline code that tool adapters run), running needs
`send` (so does retrying, which starts a new execution), signalling and cancelling need
`operate`, reading needs `read`. The node's reads say an execution's status for its cell
(flows/serve/execution_views.py `register`).

    POST /v1/flows                        {text, source?}  deploy  -> {name, version, definition, changed}
    GET  /v1/flows                        flows and executions
    POST /v1/flows/{name}/run             {workload, exec?, version?, business_ref?, wait_ms?}
    GET  /v1/executions/{exec}[?wait_ms=N] the execution's state (once it ended, or N ms passed)
    GET  /v1/executions/{exec}/events[?after=SEQ&limit=N&wait_ms=N]
                                          {events: [{seq, event, ...}], status, last_seq, more}
    GET  /v1/executions/{exec}/explain    why it failed, or what it waits on
    POST /v1/executions/{exec}/signal     {name, payload, expect_version?}
                                          -> {exec, name, seq, outcome, status}
    POST /v1/executions/{exec}/cancel     {reason?}
    POST /v1/executions/{exec}/retry      {exec?}  a failed, partial or cancelled execution
                                          started again as a new one (flows/serve/retry.py)
    POST /v1/flows/{name}/shadow          {version? | text, source?; exec?, executions_max?}
                                          the shadow report (spec/11 §10.1), from a worker process
    POST /v1/executions/{exec}/migrate    {version?}  shadowed in a worker, then journaled (§10.2)
    POST /v1/flows/{name}/migrate         {version?, executions_max?}  every running execution
                                          the shadow allows, each journaled on its own
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import parse_qsl

from fastapi import FastAPI, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from aos.flows.define.document import load_flow
from aos.flows.serve import execution_views as views
from aos.flows.serve import flow_operations as ops
from aos.flows.serve import migration
from aos.flows.serve.flow_explain import explain, state_answer
from aos.flows.serve.flow_shadow import (
    SHADOW_EXECS_NAMED_MAX,
    SHADOW_EXECUTIONS_LIMIT,
    SHADOW_EXECUTIONS_MAX_DEFAULT,
)
from aos.flows.serve.flow_shadow_worker import plan_flow_in_worker, plan_in_worker, shadow_in_worker
from aos.flows.serve.flow_world import EXEC_WORKFLOW
from aos.flows.serve.retry import retry as retried
from aos.flows.serve.schedules.routes import add_schedule_routes
from aos.kernel import cbor
from aos.kernel.node import models, routes
from aos.kernel.node.adapter_api import FastRead, add_fast_read
from aos.kernel.node.cell_watch import Cell, Look, wait_for_cell
from aos.kernel.node.errors import RequestInvalidError
from aos.kernel.node.identities import DEPLOY, OPERATE, READ, SEND
from aos.kernel.node.node import Node, within
from aos.kernel.node.routes import Handlers, Route
from aos.kernel.node.shadow_worker import ShadowUnavailableError
from aos.kernel.world.world import World

T = TypeVar("T")


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeployRequest(_Request):
    # No length bound of its own: the node's request_bytes_max bounds the body, and a text
    # over definition_bytes_max is refused by `load_definition` as `flow.too_large` (413).
    text: str = Field(description="YAML or JSON.")
    source: str = Field("", max_length=1000, description="A name for errors (a file name).")


class RunRequest(_Request):
    workload: Any = Field(None, description="JSON; bytes as {'$bytes': hex}.")
    exec: str | None = None
    version: int | None = Field(None, ge=1)
    business_ref: str | None = Field(None, max_length=1000)
    wait_ms: int = Field(
        0, ge=0, description="Answer once the execution ended, or after this many ms."
    )


class SignalRequest(_Request):
    name: str = Field(max_length=128)
    payload: Any = None
    expect_version: int | None = Field(None, ge=0)


class CancelRequest(_Request):
    reason: str | None = Field(None, max_length=1000)


EXEC_ID_LENGTH_MAX = 128


class RetryRequest(_Request):
    exec: str | None = Field(None, description="The new execution's id [made one].")


class ShadowRequest(_Request):
    version: int | None = Field(None, ge=1, description="A deployed version [the latest].")
    text: str | None = Field(None, description="Or a definition of the flow, not deployed.")
    source: str = Field("", max_length=1000, description="A name for errors (a file name).")
    exec: list[Annotated[str, Field(max_length=EXEC_ID_LENGTH_MAX)]] = Field(
        default_factory=list,
        max_length=SHADOW_EXECS_NAMED_MAX,
        description="Only these executions [every execution of the flow].",
    )
    executions_max: int = Field(SHADOW_EXECUTIONS_MAX_DEFAULT, ge=1, le=SHADOW_EXECUTIONS_LIMIT)


class MigrateRequest(_Request):
    version: int | None = Field(None, ge=1, description="A deployed version [the latest].")


class MigrateFlowRequest(_Request):
    version: int | None = Field(None, ge=1, description="A deployed version [the latest].")
    executions_max: int = Field(SHADOW_EXECUTIONS_MAX_DEFAULT, ge=1, le=SHADOW_EXECUTIONS_LIMIT)


EXECUTIONS_PREFIX = "/v1/executions/"
EVENTS_SUFFIX = ops.EVENTS_SUFFIX
EXPLAIN_SUFFIX = ops.EXPLAIN_SUFFIX


WAIT_PARAMETER = "wait_ms"
WAIT_DIGITS_MAX = 9  # a wait past long_poll_ms_max is refused anyway; this bounds the parse
AFTER_PARAMETER = "after"
AFTER_DIGITS_MAX = 18  # a journal sequence stays below 2**63
LIMIT_PARAMETER = "limit"
LIMIT_DIGITS_MAX = 9


async def execution_status(node: Node, exec_id: str, query: str = "") -> dict[str, Any]:
    """`GET /v1/executions/{exec}[?wait_ms=N]`: the execution's state (ops.status) as JSON;
    with `wait_ms`, once the execution has ended or after N ms (a long-poll: no step of the
    execution is missed, and what is answered is durable)."""
    wait_ms = _wait_ms(node, _query(query, {WAIT_PARAMETER: WAIT_DIGITS_MAX}))
    execution = {"exec": exec_id}

    def look(world: World) -> tuple[bool, dict[str, Any]]:
        # An unknown execution is refused at the first look; a prefix names its full id.
        state = ops.shown_status(world, execution["exec"])
        execution["exec"] = state["exec"]
        return state["status"] in ops.TERMINAL_STATUSES, cbor.to_json(state_answer(state))

    return await wait_for_execution(node, execution, look, wait_ms)


_EVENTS_QUERY = {
    AFTER_PARAMETER: AFTER_DIGITS_MAX,
    LIMIT_PARAMETER: LIMIT_DIGITS_MAX,
    WAIT_PARAMETER: WAIT_DIGITS_MAX,
}


async def execution_events(node: Node, exec_id: str, query: str = "") -> dict[str, Any]:
    """`GET /v1/executions/{exec}/events[?after=SEQ&limit=N&wait_ms=N]`: the history events of
    the execution's step records after journal sequence `after` (0: from its start), at most
    `limit` (whole records) and at most `journal_scan_records_per_turn` records looked at;
    `last_seq` is where the next page starts, `more` says it stopped before the journal's head.
    With `wait_ms`, an empty page of a running execution is answered after its next step (or
    after N ms): `aos flow events --follow` reads the history as it is journaled."""
    found = _query(query, _EVENTS_QUERY)
    wait_ms = _wait_ms(node, found)
    limits = node.limits
    limit = found.get(LIMIT_PARAMETER, limits.events_per_request_max)
    within(LIMIT_PARAMETER, limit, limits.events_per_request_max, at="$query")
    after = found.get(AFTER_PARAMETER, 0)
    execution = {"exec": exec_id}

    def look(world: World) -> tuple[bool, dict[str, Any]]:
        execution["exec"] = ops.status(world, execution["exec"])["exec"]
        page = ops.history_page(
            world,
            execution["exec"],
            after=after,
            events_max=limit,
            scan_records_max=limits.journal_scan_records_per_turn,
        )
        done = bool(page.events) or page.more or page.status in ops.TERMINAL_STATUSES
        events = [{"seq": e.seq, **cbor.to_json(e.event)} for e in page.events]
        answer = {"events": events, "status": page.status, "last_seq": page.last_seq}
        return done, {**answer, "more": page.more}

    return await wait_for_execution(node, execution, look, wait_ms)


_LISTING_QUERY = ("after", "flow", LIMIT_PARAMETER, "status")


def listing_query(query: str) -> tuple[ops.ExecutionFilter, ops.Page]:
    """`GET /v1/flows`'s query: `flow`, `status`, `after` and `limit`, each at most once."""
    found = _texts(query, _LISTING_QUERY)
    limit = ops.EXECUTIONS_PER_PAGE_DEFAULT
    if LIMIT_PARAMETER in found:
        limit = _whole(LIMIT_PARAMETER, found[LIMIT_PARAMETER], LIMIT_DIGITS_MAX)
        within(LIMIT_PARAMETER, limit, ops.EXECUTIONS_PER_PAGE_MAX, at="$query")
    page = ops.Page(after=found.get("after"), limit=limit)
    return ops.ExecutionFilter(flow=found.get("flow"), status=found.get("status")), page


def _texts(query: str, allowed: Sequence[str]) -> dict[str, str]:
    """The query's parameters by name: any name not `allowed`, or a repeated one, is refused."""
    names = ", ".join(sorted(allowed))
    try:
        pairs = parse_qsl(
            query, keep_blank_values=True, strict_parsing=True, max_num_fields=len(allowed)
        )
    except ValueError:
        raise RequestInvalidError(f"the query parameters are {names}", path="$query") from None
    found: dict[str, str] = {}
    for name, text in pairs:
        if name not in allowed or name in found:
            raise RequestInvalidError(f"the query parameters are {names}, each once", path="$query")
        found[name] = text
    return found


def _query(query: str, allowed: Mapping[str, int]) -> dict[str, int]:
    """The query's parameters, each a whole number: any name not in `allowed` (a name and the
    most digits it may have), a repeated name, or a value that is not digits is refused."""
    texts = _texts(query, tuple(allowed))
    return {name: _whole(name, text, allowed[name]) for name, text in texts.items()}


def _whole(name: str, text: str, digits_max: int) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= digits_max):
        raise RequestInvalidError(f"{name} is a whole number", path=f"$query.{name}")
    return int(text)


def _wait_ms(node: Node, query: Mapping[str, int]) -> int:
    """The query's `wait_ms` (0 when absent), within the node's `long_poll_ms_max`."""
    wait_ms = query.get(WAIT_PARAMETER, 0)
    within(WAIT_PARAMETER, wait_ms, node.limits.long_poll_ms_max, minimum=0, at="$query")
    return wait_ms


async def wait_for_execution(
    node: Node,
    execution: dict[str, Any],
    look: Look[T],
    wait_ms: int,
    *,
    first: Look[T] | None = None,
) -> T:
    """`look` on the host thread (`first` the first time), again after each step of the
    execution `execution["exec"]` (known once `first` ran), until it says the execution ended
    or `wait_ms` passed; its last value."""

    def cell(world: World) -> Cell:
        return EXEC_WORKFLOW, world.reader.key_bytes(EXEC_WORKFLOW, execution["exec"])

    return await wait_for_cell(node.host, cell, look, wait_ms, first=first)


def add_flow_routes(app: FastAPI, node: Node) -> None:
    """Serve the flow operations (a world without the flow workflows answers
    `world.workflow_unknown`). A client polls (or long-polls) an execution's status and its
    events while it runs, so those two routes are also served ahead of FastAPI
    (kernel/node/adapter_api.py), by the same functions as their FastAPI routes."""
    views.register(node.derived)
    routes.mount(app, FLOW_ROUTES, _handlers(node))
    add_schedule_routes(app, node)
    add_fast_read(
        app,
        FastRead(
            EXECUTIONS_PREFIX,
            lambda rest: rest.endswith(EVENTS_SUFFIX),
            lambda rest, query: execution_events(node, rest[: -len(EVENTS_SUFFIX)], query),
        ),
    )
    add_fast_read(
        app,
        FastRead(
            EXECUTIONS_PREFIX,
            lambda rest: not rest.endswith((EVENTS_SUFFIX, EXPLAIN_SUFFIX)),
            lambda exec_id, query: execution_status(node, exec_id, query),
        ),
    )


FLOW_ROUTES = (
    Route("POST", "/v1/flows", "deploy", (DEPLOY,), "flows", models.FlowDeployed),
    Route("GET", "/v1/flows", "listing", (READ,), "flows"),
    Route("POST", "/v1/flows/{name:path}/run", "run", (SEND,), "flows"),
    Route("GET", "/v1/executions/{exec_id:path}/events", "events", (READ,), "flows"),
    Route(
        "POST",
        "/v1/executions/{exec_id:path}/signal",
        "signal",
        (OPERATE,),
        "flows",
        models.SignalAnswer,
    ),
    Route(
        "POST",
        "/v1/executions/{exec_id:path}/cancel",
        "cancel",
        (OPERATE,),
        "flows",
        models.ExecutionAck,
    ),
    Route("POST", "/v1/executions/{exec_id:path}/retry", "retry", (SEND,), "flows"),
    Route(
        "GET",
        "/v1/executions/{exec_id:path}/explain",
        "explain_execution",
        (READ,),
        "flows",
        models.ExecutionExplanation,
    ),
    Route("POST", "/v1/flows/{name:path}/shadow", "shadow", (DEPLOY,), "flows"),
    Route("POST", "/v1/executions/{exec_id:path}/migrate", "migrate", (DEPLOY,), "flows"),
    Route("POST", "/v1/flows/{name:path}/migrate", "migrate_flow", (DEPLOY,), "flows"),
    Route("GET", "/v1/executions/{exec_id:path}", "status", (READ,), "flows"),
)
"""The flow operations' routes, tried in this order (an execution's id may hold slashes, so
its bare route comes last)."""


def _handlers(node: Node) -> Handlers:
    handler = Handlers()

    @handler
    async def deploy(request: DeployRequest) -> models.FlowDeployed:
        """Check a definition and journal it as its flow's next version."""
        definition = load_flow(request.text, source=request.source or "<request>")
        return await node.host.run(lambda world: ops.deploy(world, definition))

    @handler
    async def listing(
        request: Request,
        flow: str | None = Query(None, description="Only this flow's executions."),
        status: str | None = Query(None, description="Only executions in this status."),
        after: str | None = Query(None, description="The key hash the last page ended at."),
        limit: str | None = Query(None, description="At most this many executions."),
    ) -> dict[str, Any]:
        """Deployed flows with their versions; a page of executions with their status
        (`next_after` continues it)."""
        del flow, status, after, limit  # documented here; read strictly below
        wanted, page = listing_query(request.url.query)
        return await node.host.run(lambda world: cbor.to_json(ops.listing(world, wanted, page)))

    @handler
    async def run(name: str, request: RunRequest) -> dict[str, Any]:
        """Start an execution, pinned to the latest version (or `version`); with `wait_ms`,
        answer once it ended (or after that many ms) with its status then."""
        workload = _data(request.workload, "$.workload") if request.workload is not None else None
        within(WAIT_PARAMETER, request.wait_ms, node.limits.long_poll_ms_max, minimum=0)

        started: dict[str, Any] = {}

        def look(world: World) -> tuple[bool, dict[str, Any]]:
            state = state_answer(ops.status(world, started["exec"]))
            answer = {**started, "status": state["status"], "error": cbor.to_json(state["error"])}
            return state["status"] in ops.TERMINAL_STATUSES, answer

        def start(world: World) -> tuple[bool, dict[str, Any]]:
            run = ops.start(
                world,
                name,
                workload=workload,
                exec_id=request.exec,
                version=request.version,
                business_ref=request.business_ref,
            )
            started.update(
                exec=run.exec, flow=run.flow, version=run.version, definition=run.definition
            )
            return look(world)

        return await wait_for_execution(node, started, look, request.wait_ms, first=start)

    @handler
    async def events(
        exec_id: str,
        request: Request,
        after: str | None = Query(None, description="Only events of records after this seq."),
        limit: str | None = Query(None, description="At most this many events."),
        wait_ms: str | None = Query(None, description="Long-poll: answer at the next step."),
    ) -> dict[str, Any]:
        """The execution's history events, each with its step record's sequence, a page at a
        time (`last_seq`, `more`); with `wait_ms`, an empty page waits for the next step."""
        del after, limit, wait_ms  # documented here; read with the fast path's own checks
        return await execution_events(node, exec_id, request.url.query)

    @handler
    async def signal(exec_id: str, request: SignalRequest) -> models.SignalAnswer:
        """Send a signal: a wait takes it now or the execution keeps it for one (`outcome`
        `delivered` or `buffered`); one that could never be delivered is refused (409)."""
        payload = _data(request.payload, "$.payload")

        def send(world: World) -> models.SignalAnswer:
            expect_version = request.expect_version
            return ops.signal(world, exec_id, request.name, payload, expect_version=expect_version)

        return await node.host.run(send)

    @handler
    async def cancel(exec_id: str, request: CancelRequest) -> models.ExecutionAck:
        """Cancel a running execution."""
        return await node.host.run(lambda world: ops.cancel(world, exec_id, request.reason))

    @handler
    async def retry(exec_id: str, request: RetryRequest) -> dict[str, Any]:
        """Start a failed, partial or cancelled execution's flow version again, with the
        workload and business reference it started with, as a new execution."""

        def send(world: World) -> dict[str, Any]:
            run = retried(world, exec_id, new_id=request.exec)
            status = ops.status(world, run.exec)["status"]
            return {
                "exec": run.exec,
                "flow": run.flow,
                "version": run.version,
                "definition": run.definition,
                "status": status,
                "retry_of": exec_id,
            }

        return await node.host.run(send)

    @handler
    async def explain_execution(exec_id: str) -> dict[str, Any]:
        """Why the execution failed (its error, traceback, the step, task and policy rule),
        or what it waits on (each open wait: kind, since when, attempt, next retry)."""
        return await node.host.run(lambda world: cbor.to_json(explain(world, exec_id)))

    @handler
    async def shadow(name: str, request: ShadowRequest) -> dict[str, Any]:
        """Replay the world's history read-only with another definition of the flow beside
        each of its executions: which reproduce, and where the others first differ."""
        if request.text is not None and request.version is not None:
            raise ops.FlowRequestInvalidError("give a version or a text, not both", path="$")
        return await shadow_in_worker(
            _world_dir(node),
            name,
            request.version,
            request.exec,
            request.executions_max,
            text=request.text,
            source=request.source,
            timeout_ms=node.limits.shadow_ms_max,
        )

    @handler
    async def migrate(exec_id: str, request: MigrateRequest) -> dict[str, Any]:
        """Move a running execution to another deployed version of its flow, where a shadow
        shows that version reproduces its whole history."""
        full = await node.host.run(lambda world: ops.status(world, exec_id)["exec"])
        planned = await plan_in_worker(
            _world_dir(node), full, request.version, timeout_ms=node.limits.shadow_ms_max
        )
        return await node.host.run(lambda world: migration.apply(world, planned))

    @handler
    async def migrate_flow(name: str, request: MigrateFlowRequest) -> dict[str, Any]:
        """Move every running execution of the flow that a shadow shows the version
        reproduces; say why each other one stays."""
        planned = await plan_flow_in_worker(
            _world_dir(node),
            name,
            request.version,
            request.executions_max,
            timeout_ms=node.limits.shadow_ms_max,
        )
        return await node.host.run(lambda world: migration.apply_flow(world, planned))

    @handler
    async def status(
        exec_id: str,
        request: Request,
        wait_ms: str | None = Query(None, description="Long-poll: answer once it ended."),
    ) -> dict[str, Any]:
        """The execution's state: status, version, business and engine state; with `wait_ms`,
        once the execution has ended or after that many ms (long-poll)."""
        del wait_ms  # documented here; the query is read with the fast path's own checks
        return await execution_status(node, exec_id, request.url.query)

    return handler


def _world_dir(node: Node) -> Path:
    if node.world_path is None:
        raise ShadowUnavailableError("this node did not open its world from a folder")
    return Path(node.world_path)


def _data(value: Any, path: str) -> Any:
    """A request's JSON value as data (bytes as {'$bytes': hex}); refused as the CLI refuses
    it (`flow.request_invalid`)."""
    try:
        return cbor.from_json(value)
    except cbor.CborError as error:
        raise ops.FlowRequestInvalidError(f"not data: {error}", path=path) from None
