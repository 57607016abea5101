"""The flow operations on a node's HTTP API (spec/11-flows.md §9.1): the same as `aos flow`,
each run on the node's host thread, the world's one writer.

    POST /v1/flows                        {text, source?}  deploy  -> {name, version, definition, changed}
    GET  /v1/flows                        flows and executions
    POST /v1/flows/{name}/run             {workload, exec?, version?, business_ref?}
    GET  /v1/executions/{exec}            the execution's state
    GET  /v1/executions/{exec}/events     {events: [{seq, event, ...}]}
    POST /v1/executions/{exec}/signal     {name, payload, expect_version?}
    POST /v1/executions/{exec}/cancel     {reason?}
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from aos.flows import operations as ops
from aos.flows.document import load_flow
from aos.kernel import cbor
from aos.kernel.node.adapter_api import FastRead, add_fast_read
from aos.kernel.node.node import Node
from aos.kernel.world.world import World


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


class SignalRequest(_Request):
    name: str = Field(max_length=128)
    payload: Any = None
    expect_version: int | None = Field(None, ge=0)


class CancelRequest(_Request):
    reason: str | None = Field(None, max_length=1000)


EXECUTIONS_PREFIX = "/v1/executions/"
EVENTS_SUFFIX = "/events"


async def execution_status(node: Node, exec_id: str) -> dict[str, Any]:
    """`GET /v1/executions/{exec}`: the execution's state (ops.status) as JSON."""
    return await node.host.run(lambda world: cbor.to_json(ops.status(world, exec_id)))


def add_flow_routes(app: FastAPI, node: Node) -> None:
    """Serve the flow operations (a world without the flow workflows answers
    `world.workflow_unknown`). A client polls an execution's status while it runs, so that
    route is also served ahead of FastAPI (kernel/node/adapter_api.py), by the same function;
    `/v1/executions/{exec}/events` is left to its FastAPI route."""
    add_fast_read(
        app,
        FastRead(
            EXECUTIONS_PREFIX,
            lambda rest: not rest.endswith(EVENTS_SUFFIX),
            lambda exec_id: execution_status(node, exec_id),
        ),
    )

    @app.post("/v1/flows", tags=["flows"])
    async def deploy(request: DeployRequest) -> dict[str, Any]:
        """Check a definition and journal it as its flow's next version."""
        definition = load_flow(request.text, source=request.source or "<request>")
        return await node.host.run(lambda world: ops.deploy(world, definition).to_json())

    @app.get("/v1/flows", tags=["flows"])
    async def listing() -> dict[str, Any]:
        """Deployed flows with their versions; executions with their status."""
        return await node.host.run(lambda world: cbor.to_json(ops.listing(world)))

    @app.post("/v1/flows/{name:path}/run", tags=["flows"])
    async def run(name: str, request: RunRequest) -> dict[str, Any]:
        """Start an execution, pinned to the latest version (or `version`)."""
        workload = _data(request.workload, "$.workload") if request.workload is not None else None

        def start(world: World) -> dict[str, Any]:
            started = ops.start(
                world,
                name,
                workload=workload,
                exec_id=request.exec,
                version=request.version,
                business_ref=request.business_ref,
            )
            state = ops.status(world, started.exec)
            return {
                "exec": started.exec,
                "flow": started.flow,
                "version": started.version,
                "definition": started.definition,
                "status": state["status"],
            }

        return await node.host.run(start)

    @app.get("/v1/executions/{exec_id:path}/events", tags=["flows"])
    async def events(exec_id: str) -> dict[str, Any]:
        """The execution's history events, each with its step record's sequence."""

        def read(world: World) -> dict[str, Any]:
            found = ops.history(world, exec_id)
            return {"events": [{"seq": e.seq, **cbor.to_json(e.event)} for e in found]}

        return await node.host.run(read)

    @app.post("/v1/executions/{exec_id:path}/signal", tags=["flows"])
    async def signal(exec_id: str, request: SignalRequest) -> dict[str, Any]:
        """Send a signal; a stale one is recorded in the history, not applied."""
        payload = _data(request.payload, "$.payload")

        def send(world: World) -> dict[str, Any]:
            ops.signal(world, exec_id, request.name, payload, expect_version=request.expect_version)
            return {"exec": exec_id, "status": ops.status(world, exec_id)["status"]}

        return await node.host.run(send)

    @app.post("/v1/executions/{exec_id:path}/cancel", tags=["flows"])
    async def cancel(exec_id: str, request: CancelRequest) -> dict[str, Any]:
        """Cancel a running execution."""

        def send(world: World) -> dict[str, Any]:
            ops.cancel(world, exec_id, request.reason)
            return {"exec": exec_id, "status": ops.status(world, exec_id)["status"]}

        return await node.host.run(send)

    @app.get("/v1/executions/{exec_id:path}", tags=["flows"])
    async def status(exec_id: str) -> dict[str, Any]:
        """The execution's state: status, version, business and engine state."""
        return await execution_status(node, exec_id)


def _data(value: Any, path: str) -> Any:
    """A request's JSON value as data (bytes as {'$bytes': hex}); refused as the CLI refuses
    it (`flow.request_invalid`)."""
    try:
        return cbor.from_json(value)
    except cbor.CborError as error:
        raise ops.FlowRequestInvalidError(f"not data: {error}", path=path) from None
