"""Schedules on a node's HTTP API (spec/11-flows.md §12.4), each run on the node's host
thread, and the node's firing loop: while it serves a world, every `schedule_fire_poll_ms`
it fires the slots the world's clock has reached (`operations.pump`), so a wall-clock world
needs no outside cron.

Scopes (spec/04 §9.8): creating a schedule installs work that starts by itself, so it needs
`deploy`; pausing, resuming and deleting need `operate`; a trigger or a backfill starts
executions now and needs `send`; reading needs `read`. A refused call changes nothing.

    POST   /v1/schedules                  {name, flow, cron | every, timezone?, ...}
    GET    /v1/schedules                  {schedules: [...]}
    GET    /v1/schedules/{name}           the schedule, its next slots, its recent runs
    POST   /v1/schedules/{name}/pause | /resume | /trigger
    POST   /v1/schedules/{name}/backfill  {from, to}
    DELETE /v1/schedules/{name}
    POST   /v1/triggers                   {name, flow, key, event?, when?, workload?, version?}
    POST   /v1/triggers/{name}/webhook    the JSON value  -> {trigger, exec, duplicate}
    DELETE /v1/triggers/{name}
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Body, FastAPI
from pydantic import BaseModel, ConfigDict, Field

from aos.flows.serve.schedules import operations as sched
from aos.flows.serve.schedules import triggers
from aos.flows.serve.schedules.errors import ScheduleError
from aos.flows.serve.schedules.slots import (
    CATCH_UP_POLICIES,
    CRON_EXPRESSION_BYTES_MAX,
    OVERLAP_POLICIES,
    ScheduleSpec,
    parse_duration,
    parse_time,
)
from aos.kernel import cbor
from aos.kernel.errors import AosError
from aos.kernel.node import routes
from aos.kernel.node.identities import DEPLOY, OPERATE, READ, SEND
from aos.kernel.node.node import Node
from aos.kernel.node.routes import Handlers, Route
from aos.kernel.world.world import World

log = logging.getLogger(__name__)

SCHEDULE_FIRE_POLL_MS_DEFAULT = 1_000
"""How often a node looks for due slots: a slot fires at most this late after its timer."""
TEXT_MAX = 100


class CreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=TEXT_MAX)
    flow: str = Field(max_length=128)
    version: int | None = Field(None, ge=1)
    cron: str | None = Field(None, max_length=CRON_EXPRESSION_BYTES_MAX)
    every: str | None = Field(None, max_length=40, description="A duration: 15m, 1h, 1d.")
    timezone: str = Field("UTC", max_length=64)
    start: str | None = Field(None, max_length=64, description="ISO 8601.")
    end: str | None = Field(None, max_length=64, description="ISO 8601.")
    jitter: str | None = Field(None, max_length=40)
    workload: Any = None
    overlap: str = Field("skip", description=" | ".join(OVERLAP_POLICIES))
    catch_up: str = Field("last", description=" | ".join(CATCH_UP_POLICIES))

    def spec(self) -> ScheduleSpec:
        zone = ScheduleSpec(flow="", cron="* * * * *", timezone=self.timezone).zone()
        value = {
            **self.model_dump(exclude={"name", "every", "start", "end", "jitter"}),
            "every_ns": None if self.every is None else parse_duration(self.every, "every"),
            "start_ns": None if self.start is None else parse_time(self.start, zone, "start"),
            "end_ns": None if self.end is None else parse_time(self.end, zone, "end"),
            "jitter_ns": 0 if self.jitter is None else parse_duration(self.jitter, "jitter"),
        }
        return ScheduleSpec.parse(value)


class TriggerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=TEXT_MAX)
    flow: str = Field(max_length=128)
    key: str = Field(max_length=512, description="JSONPath of the idempotency key.")
    event: str = Field("webhook", max_length=256, description="An event schema, or webhook.")
    when: str | None = Field(None, max_length=512, description="A JSONPath guard.")
    workload: dict[str, Annotated[str, Field(max_length=512)]] | None = Field(None, max_length=64)
    version: int | None = Field(None, ge=1)


class BackfillRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_at: str = Field(alias="from", max_length=64)
    to_at: str = Field(alias="to", max_length=64)


SCHEDULE_ROUTES = (
    Route("POST", "/v1/schedules", "create", (DEPLOY,), "schedules"),
    Route("GET", "/v1/schedules", "listing", (READ,), "schedules"),
    Route("GET", "/v1/schedules/{name}", "show", (READ,), "schedules"),
    Route("POST", "/v1/schedules/{name}/pause", "pause", (OPERATE,), "schedules"),
    Route("POST", "/v1/schedules/{name}/resume", "resume", (OPERATE,), "schedules"),
    Route("DELETE", "/v1/schedules/{name}", "delete", (OPERATE,), "schedules"),
    Route("POST", "/v1/schedules/{name}/trigger", "trigger", (SEND,), "schedules"),
    Route("POST", "/v1/schedules/{name}/backfill", "backfill", (SEND,), "schedules"),
    Route("POST", "/v1/triggers", "create_trigger", (DEPLOY,), "schedules"),
    Route("DELETE", "/v1/triggers/{name}", "delete_trigger", (OPERATE,), "schedules"),
    Route("POST", "/v1/triggers/{name}/webhook", "webhook", (SEND,), "schedules"),
)
"""The schedule and trigger routes, an extension of the node's route table
(kernel/node/routes.py): who may call each is declared here, in one place."""


def add_schedule_routes(app: FastAPI, node: Node) -> None:
    """Serve the schedule commands and start the node's firing loop with the app."""
    routes.mount(app, SCHEDULE_ROUTES, _handlers(node))
    _start_firing(app, node)


def _handlers(node: Node) -> Handlers:
    handler = Handlers()

    async def on_world(operation: Any) -> dict[str, Any]:
        found: Any = await node.host.run(operation)
        return dict(cbor.to_json(found))

    @handler
    async def create(request: CreateRequest) -> dict[str, Any]:
        """Create a schedule; its first slot is the first after now (or after `start`)."""
        spec = request.spec()
        return await on_world(lambda world: sched.create(world, request.name, spec))

    @handler
    async def listing() -> dict[str, Any]:
        return await on_world(lambda world: {"schedules": sched.listing(world)})

    @handler
    async def show(name: str) -> dict[str, Any]:
        return await on_world(lambda world: sched.show(world, name))

    def done(verb: str, name: str) -> dict[str, Any]:
        return {"schedule": name, "done": verb}

    @handler
    async def pause(name: str) -> dict[str, Any]:
        return await on_world(lambda world: (sched.pause(world, name), done("pause", name))[1])

    @handler
    async def resume(name: str) -> dict[str, Any]:
        return await on_world(lambda world: (sched.resume(world, name), done("resume", name))[1])

    @handler
    async def delete(name: str) -> dict[str, Any]:
        return await on_world(lambda world: (sched.delete(world, name), done("delete", name))[1])

    @handler
    async def trigger(name: str) -> dict[str, Any]:
        return await on_world(lambda world: {"schedule": name, "exec": sched.trigger(world, name)})

    @handler
    async def backfill(name: str, request: BackfillRequest) -> dict[str, Any]:
        def run(world: World) -> dict[str, Any]:
            zone = ScheduleSpec(flow="", cron="* * * * *", timezone=_zone(world, name)).zone()
            start, end = (
                parse_time(request.from_at, zone, "from"),
                parse_time(request.to_at, zone, "to"),
            )
            return {"schedule": name, "decisions": sched.backfill(world, name, start, end)}

        return await on_world(run)

    @handler
    async def create_trigger(request: TriggerRequest) -> dict[str, Any]:
        """Create an event or webhook trigger (spec/11 §12.7)."""
        spec = triggers.TriggerSpec(**request.model_dump(exclude={"name"}))
        return await on_world(lambda world: triggers.create_trigger(world, request.name, spec))

    @handler
    async def delete_trigger(name: str) -> dict[str, Any]:
        return await on_world(lambda world: triggers.delete_trigger(world, name))

    @handler
    async def webhook(name: str, posted: Annotated[Any, Body()]) -> dict[str, Any]:
        """Start the trigger's flow for the posted JSON value, once per the key it names (the
        node's `request_bytes_max` bounds the body)."""
        try:
            value = cbor.from_json(posted)
        except cbor.CborError as error:
            raise ScheduleError(f"not data: {error}", path="$") from None
        return await on_world(lambda world: triggers.deliver_webhook(world, name, value))

    return handler


def _zone(world: World, name: str) -> str:
    return str(sched.show(world, name, 1)["timezone"])


def _start_firing(app: FastAPI, node: Node) -> None:
    """Run the firing loop for as long as the app runs (wrapping its lifespan)."""
    served: Any = app.router.lifespan_context

    async def loop() -> None:
        while True:
            await asyncio.sleep(SCHEDULE_FIRE_POLL_MS_DEFAULT / 1000)
            try:
                await node.host.run(_fire_due)
            except AosError:
                log.exception("firing schedules failed")

    @contextlib.asynccontextmanager
    async def lifespan(running: FastAPI) -> AsyncIterator[Any]:
        task = asyncio.get_running_loop().create_task(loop())
        try:
            async with served(running) as state:
                yield state
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app.router.lifespan_context = lifespan


def _fire_due(world: World) -> list[str]:
    """Tick a wall clock (so its due timers settle first), then fire what is due."""
    if sched.SCHEDULE_WORKFLOW not in world.runtime.workflows:
        return []
    if world.clock == "wall":
        world.tick()
    return [*sched.pump(world), *triggers.pump_triggers(world)]
