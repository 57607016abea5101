"""The flow operations through one client (spec/11 §9): the kernel's `WorldClient`
(kernel/client.py) with deploy, run, status, history, signal, cancel, explain, shadow and
migrate, in process (`LocalFlows`) or over a node's HTTP API (`NodeFlows`, `/v1/flows`,
`/v1/executions`). Both answer the typed models of kernel/node/models.py, and a refusal is
the same error code either way; `aos flow` picks one and renders.

`LocalFlows(path)` reads the world read-only (so `aos flow status|events|ls|explain --world
DIR` work while a node serves it) and writes it opened for writing, or through the node that
serves it when one does (deploy, run, signal, cancel, migrate): then a run's `wait_s` waits
for the execution's end there. A world opened here moves only while the command holds it, so
in process a run answers the status its start left it in.

`NodeFlows(url)` keeps one connection pool for its life; waiting for an end, and following a
history, are long-polls of at most `WAIT_MS_PER_REQUEST` each, answered as soon as the
execution's step is durable."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from aos.flows.define.cfd import FlowDefinition, canonical_value
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.numbers import execution_number
from aos.kernel import cbor
from aos.kernel.client import SHADOW_TIMEOUT_S, LocalWorld, NodeWorld, Progress, WorldClient
from aos.kernel.node import models
from aos.kernel.world.world import World

T = TypeVar("T")

WAIT_MS_PER_REQUEST = 20_000
"""Longest one long-poll asks the node to wait (below its default `long_poll_ms_max`, 30 s,
and the request timeout); a longer wait is several requests."""


class FlowClient(WorldClient, Protocol):
    """What `aos flow` asks of a world, in process or through its node. An execution is
    named by its id or a unique prefix of one (`flow.execution_ambiguous` lists several)."""

    def deploy(self, definition: FlowDefinition, *, source: str = "") -> models.FlowDeployed:
        """Journal a checked definition as its flow's next version (unchanged: the latest)."""
        ...

    def listing(self, wanted: ops.ExecutionFilter, page: ops.Page) -> models.FlowListing: ...

    def run(
        self,
        name: str,
        workload: Any,
        *,
        exec_id: str | None = None,
        version: int | None = None,
        wait_s: float = 0.0,
    ) -> models.ExecutionStarted:
        """Start an execution of the deployed flow `name`; with `wait_s`, answer once it
        ended or that many seconds passed, with its status then."""
        ...

    def status(self, exec_id: str, *, wait_s: float = 0.0) -> models.ExecutionState: ...

    def events(self, exec_id: str) -> list[models.HistoryEvent]:
        """The execution's whole history as journaled so far."""
        ...

    def follow(self, exec_id: str) -> Iterator[models.HistoryEvent]:
        """Its events, each once, as they are journaled, until it has ended."""
        ...

    def signal(
        self, exec_id: str, name: str, payload: Any, expect_version: int | None
    ) -> models.SignalAnswer: ...

    def cancel(self, exec_id: str, reason: str | None) -> models.ExecutionAck: ...

    def explain(self, exec_id: str) -> models.ExecutionExplanation: ...

    def shadow_flow(
        self,
        name: str,
        *,
        version: int | None = None,
        definition: FlowDefinition | None = None,
        execs: tuple[str, ...] = (),
        executions_max: int,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """The shadow report (spec/11 §10.1) of a deployed version of `name`, or of
        `definition`, not deployed."""
        ...

    def migrate(
        self, exec_id: str, version: int | None, progress: Progress | None = None
    ) -> dict[str, Any]: ...

    def migrate_flow(
        self,
        name: str,
        version: int | None,
        *,
        executions_max: int,
        progress: Progress | None = None,
    ) -> dict[str, Any]: ...


# --------------------------------------------------------------------------------------------
# Through a node


class NodeFlows(NodeWorld):
    """The flow operations over a node's HTTP API (spec/11 §9.1)."""

    def deploy(self, definition: FlowDefinition, *, source: str = "") -> models.FlowDeployed:
        """Sent as its canonical definition (JSON): the node compiles what it is sent and
        knows no workbook, and what was checked here is what it deploys."""
        text = json.dumps(cbor.to_json(canonical_value(definition)))
        return self.deploy_text(text, source=f"{source or definition.name}.json")

    def deploy_text(self, text: str, *, source: str = "") -> models.FlowDeployed:
        """Deploy a definition's text (YAML or JSON); `source` names it in errors."""
        found = self.node.call("POST", "/v1/flows", {"text": text, "source": source})
        return models.FlowDeployed.model_validate(found)

    def listing(
        self, wanted: ops.ExecutionFilter | None = None, page: ops.Page | None = None
    ) -> models.FlowListing:
        wanted, page = wanted or ops.ExecutionFilter(), page or ops.Page()
        params: dict[str, Any] = {"flow": wanted.flow, "status": wanted.status}
        params["after"] = page.after
        params["limit"] = page.limit if page.limit != ops.EXECUTIONS_PER_PAGE_DEFAULT else None
        return models.FlowListing.model_validate(self.node.call("GET", "/v1/flows", params=params))

    def run(
        self,
        name: str,
        workload: Any,
        *,
        exec_id: str | None = None,
        version: int | None = None,
        wait_s: float = 0.0,
    ) -> models.ExecutionStarted:
        wait_ms = min(int(wait_s * 1000), WAIT_MS_PER_REQUEST)
        body = {"workload": cbor.to_json(workload), "exec": exec_id, "version": version}
        if wait_ms:
            body["wait_ms"] = wait_ms
        found = self.node.call("POST", f"/v1/flows/{quote(name, safe='')}/run", body)
        started = models.ExecutionStarted.model_validate(found)
        if started.status == ops.STATUS_RUNNING and wait_s > wait_ms / 1000:
            state = self.status(started.exec, wait_s=wait_s - wait_ms / 1000)
            started = started.model_copy(update={"status": state.status, "error": state.error})
        return started

    def status(self, exec_id: str, *, wait_s: float = 0.0) -> models.ExecutionState:
        """The execution's state; with `wait_s`, once it ended or when that time passed
        (long-polls, so the answer comes as soon as its last step is durable)."""
        deadline = time.monotonic() + wait_s
        while True:
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            wait_ms = min(left_ms, WAIT_MS_PER_REQUEST)
            params = {"wait_ms": wait_ms or None}
            found = self.node.call("GET", _execution(exec_id), params=params)
            state = models.ExecutionState.model_validate(found)
            if state.status in ops.TERMINAL_STATUSES or left_ms <= wait_ms:
                return state

    def events_page(
        self, exec_id: str, *, after: int = 0, wait_ms: int = 0
    ) -> models.ExecutionEvents:
        """The events of the execution's step records after journal sequence `after` (a page:
        `last_seq` is where the next starts); with `wait_ms`, an empty page of a running
        execution is answered after its next step or after that many ms."""
        params = {"after": after, "wait_ms": wait_ms or None}
        found = self.node.call("GET", _execution(exec_id) + "/events", params=params)
        return models.ExecutionEvents.model_validate(found)

    def events(self, exec_id: str) -> list[models.HistoryEvent]:
        found: list[models.HistoryEvent] = []
        after = 0
        while True:
            page = self.events_page(exec_id, after=after)
            found.extend(page.events)
            if not page.more:
                return found
            after = page.last_seq

    def follow(self, exec_id: str) -> Iterator[models.HistoryEvent]:
        after = 0
        while True:
            page = self.events_page(exec_id, after=after, wait_ms=WAIT_MS_PER_REQUEST)
            yield from page.events
            after = page.last_seq
            if page.status in ops.TERMINAL_STATUSES and not page.more:
                return

    def signal(
        self, exec_id: str, name: str, payload: Any, expect_version: int | None
    ) -> models.SignalAnswer:
        body = {"name": name, "payload": cbor.to_json(payload), "expect_version": expect_version}
        found = self.node.call("POST", _execution(exec_id) + "/signal", body)
        return models.SignalAnswer.model_validate(found)

    def cancel(self, exec_id: str, reason: str | None) -> models.ExecutionAck:
        found = self.node.call("POST", _execution(exec_id) + "/cancel", {"reason": reason})
        return models.ExecutionAck.model_validate(found)

    def explain(self, exec_id: str) -> models.ExecutionExplanation:
        found = self.node.call("GET", _execution(exec_id) + "/explain")
        return models.ExecutionExplanation.model_validate(found)

    def shadow_flow(
        self,
        name: str,
        *,
        version: int | None = None,
        definition: FlowDefinition | None = None,
        execs: tuple[str, ...] = (),
        executions_max: int,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """The shadow report of a deployed version of `name`, or of `definition` (spec/11
        §10.1): it replays the world's history, as long as the node's `shadow_ms_max`."""
        del progress  # the node shadows in a worker process of its own
        text = None if definition is None else json.dumps(cbor.to_json(canonical_value(definition)))
        body = {
            "version": version,
            "text": text,
            "source": "" if definition is None else f"{definition.name}.json",
            "exec": list(execs),
            "executions_max": executions_max,
        }
        path = f"/v1/flows/{quote(name, safe='')}/shadow"
        return dict(self.node.call("POST", path, body, timeout_s=SHADOW_TIMEOUT_S))

    def migrate(
        self, exec_id: str, version: int | None, progress: Progress | None = None
    ) -> dict[str, Any]:
        del progress
        path = _execution(exec_id) + "/migrate"
        return dict(self.node.call("POST", path, {"version": version}, timeout_s=SHADOW_TIMEOUT_S))

    def migrate_flow(
        self,
        name: str,
        version: int | None,
        *,
        executions_max: int,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        del progress
        path = f"/v1/flows/{quote(name, safe='')}/migrate"
        body = {"version": version, "executions_max": executions_max}
        return dict(self.node.call("POST", path, body, timeout_s=SHADOW_TIMEOUT_S))


def _execution(exec_id: str) -> str:
    return "/v1/executions/" + quote(exec_id, safe="")


# --------------------------------------------------------------------------------------------
# In process


class LocalFlows(LocalWorld):
    """The flow operations on a world directory opened here (reads read-only), writes going
    through the node that serves it when one does."""

    def node_for(self, url: str) -> NodeFlows:
        return NodeFlows(url, token=self.token)

    def flows_node(self) -> NodeFlows | None:
        node = self.served()
        assert node is None or isinstance(node, NodeFlows)
        return node

    def write_flows(self, through: Callable[[NodeFlows], T], here: Callable[[World], T]) -> T:
        node = self.flows_node()
        if node is not None:
            return through(node)
        with self.writing() as world:
            return here(world)

    def deploy(self, definition: FlowDefinition, *, source: str = "") -> models.FlowDeployed:
        return self.write_flows(
            lambda node: node.deploy(definition, source=source),
            lambda world: ops.deploy(world, definition),
        )

    def listing(
        self, wanted: ops.ExecutionFilter | None = None, page: ops.Page | None = None
    ) -> models.FlowListing:
        with self.reading() as world:
            found = cbor.to_json(ops.listing(world, wanted, page))
        return models.FlowListing.model_validate(found)

    def run(
        self,
        name: str,
        workload: Any,
        *,
        exec_id: str | None = None,
        version: int | None = None,
        wait_s: float = 0.0,
    ) -> models.ExecutionStarted:
        def here(world: World) -> models.ExecutionStarted:
            run = ops.start(world, name, workload=workload, exec_id=exec_id, version=version)
            return started(run, ops.status(world, run.exec))

        return self.write_flows(
            lambda node: node.run(name, workload, exec_id=exec_id, version=version, wait_s=wait_s),
            here,
        )

    def status(self, exec_id: str, *, wait_s: float = 0.0) -> models.ExecutionState:
        node = self.flows_node()
        if wait_s and node is not None:
            return node.status(exec_id, wait_s=wait_s)
        with self.reading() as world:
            return execution_state(ops.shown_status(world, exec_id))

    def events(self, exec_id: str) -> list[models.HistoryEvent]:
        with self.reading() as world:
            return [history_event(e) for e in ops.history(world, exec_id)]

    def follow(self, exec_id: str) -> Iterator[models.HistoryEvent]:
        node = self.flows_node()
        if node is None:
            raise ops.FlowRequestInvalidError(
                "--follow needs a node that serves the world: nothing moves it otherwise"
            )
        return node.follow(exec_id)

    def signal(
        self, exec_id: str, name: str, payload: Any, expect_version: int | None
    ) -> models.SignalAnswer:
        def here(world: World) -> models.SignalAnswer:
            return ops.signal(world, exec_id, name, payload, expect_version=expect_version)

        return self.write_flows(
            lambda node: node.signal(exec_id, name, payload, expect_version), here
        )

    def cancel(self, exec_id: str, reason: str | None) -> models.ExecutionAck:
        return self.write_flows(
            lambda node: node.cancel(exec_id, reason),
            lambda world: ops.cancel(world, exec_id, reason),
        )

    def explain(self, exec_id: str) -> models.ExecutionExplanation:
        from aos.flows.serve.flow_explain import explain

        with self.reading() as world:
            found = cbor.to_json(explain(world, exec_id))
        return models.ExecutionExplanation.model_validate(found)

    def shadow_flow(
        self,
        name: str,
        *,
        version: int | None = None,
        definition: FlowDefinition | None = None,
        execs: tuple[str, ...] = (),
        executions_max: int,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Replayed here, read-only: beside a node that serves the world too."""
        from aos.flows.serve import flow_shadow as shadow

        with self.reading() as world:
            if definition is not None:
                target = shadow.file_target(world, definition)
            else:
                target = shadow.deployed_target(world, name, version)
            shadow.check_execs(world, target.flow, execs)
        report = shadow.shadow_flow(
            self.path, target, execs=execs, executions_max=executions_max, progress=progress
        )
        return dict(cbor.to_json(report.to_value()))

    def migrate(
        self, exec_id: str, version: int | None, progress: Progress | None = None
    ) -> dict[str, Any]:
        """Shadowed here read-only, then journaled; through the node that serves the world
        when one does (it shadows in a worker)."""
        from aos.flows.serve import migration

        node = self.flows_node()
        if node is not None:
            return node.migrate(exec_id, version)
        planned = migration.plan(self.path, exec_id, version, progress=progress)
        with self.writing() as world:
            return migration.apply(world, planned)

    def migrate_flow(
        self,
        name: str,
        version: int | None,
        *,
        executions_max: int,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        from aos.flows.serve import migration

        node = self.flows_node()
        if node is not None:
            return node.migrate_flow(name, version, executions_max=executions_max)
        planned = migration.plan_flow(
            self.path, name, version, executions_max=executions_max, progress=progress
        )
        with self.writing() as world:
            return migration.apply_flow(world, planned)


# --------------------------------------------------------------------------------------------
# Answers, as the node's routes give them too


def execution_state(state: dict[str, Any]) -> models.ExecutionState:
    from aos.flows.serve.flow_explain import state_answer

    return models.ExecutionState.model_validate(cbor.to_json(state_answer(state)))


def started(run: ops.Started, state: dict[str, Any]) -> models.ExecutionStarted:
    from aos.flows.serve.flow_explain import bounded_error

    error = bounded_error(cbor.to_json(ops.failure(state)))
    return models.ExecutionStarted(
        exec=run.exec,
        number=execution_number(run.exec),
        flow=run.flow,
        version=run.version,
        definition=run.definition,
        status=state["status"],
        error=None if error is None else models.TaskError.model_validate(error),
    )


def history_event(event: ops.HistoryEvent) -> models.HistoryEvent:
    return models.HistoryEvent.model_validate({"seq": event.seq, **cbor.to_json(event.event)})
