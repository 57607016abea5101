"""The handle `aos.open`, `aos.create` and `aos.connect` give (spec/11 §13): a flow world,
in this process or through the node that serves it, behind one set of calls.

Both backends are the flows client of the operations issue (flows/serve/flow_client.py):
through a node, `NodeFlows`; in process, `LocalFlows` on a world this handle holds open for
its life, with the tool adapters, the keychain and the human adapter's signing run here
(`LocalAdapters`, as `aos flow run --local` does), so that every write is followed by the
work it makes: tool calls performed and settled, and on a `manual`-clock world time skipped
to the next due timer while nothing waits for a person or a signal. A node does that work
itself (its adapters are processes of their own); waiting there is a long-poll.

Every answer is a typed model of kernel/node/models.py, the same from either backend, and a
refusal is the same `AosError` code either way.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

from aos.flows.define.cfd import FlowDefinition
from aos.flows.define.document import load_flow
from aos.flows.errors import FlowError
from aos.flows.limits import DefinitionLimits
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_client import FlowClient, LocalFlows, NodeFlows
from aos.flows.serve.flow_world import HUMAN_ADAPTER, HUMAN_EFFECT
from aos.flows.serve.local import LocalAdapters
from aos.kernel import cbor
from aos.kernel.node import models
from aos.kernel.world.errors import CellMissingError
from aos.kernel.world.world import CLOCK_MANUAL, World

WAIT_S_DEFAULT = 60.0
"""How long `Execution.wait` waits for an end unless told (wall time; a `manual`-clock world
in process skips its timers and takes none)."""
WAIT_S_MAX = 24 * 3600.0
WAIT_POLL_S_MAX = 1.0
"""Longest an in-process wait sleeps before it looks again (a wall-clock timer due later)."""

STATUS_COMPLETED = "completed"
TIME_LOOKBACK_RECORDS_MAX = 10_000
"""How far back an execution's first event looks for the logical time it ran at."""
TIME_LOOKBACK_PAGE_RECORDS = 64

FLOW_SUFFIXES = (".yaml", ".yml", ".json", ".flow")
"""A `str` ending so names a definition file; any other `str` names a deployed flow."""

EXIT_BY_STATUS = {"completed": 0, "failed": 3, "partial": 3, "cancelled": 4, "running": 5}
"""An outcome's exit status, as `aos flow run` and `status --wait` exit (cli/common.py)."""

FlowSource = FlowDefinition | str | os.PathLike[str]


@dataclass(frozen=True)
class Outcome:
    """How an execution stands when a wait ended: its status, result and error, and the exit
    status `aos flow run --wait` would give (0 completed, 3 failed, 4 cancelled, 5 running)."""

    exec: str
    status: str
    result: Any
    error: models.TaskError | None

    @property
    def ok(self) -> bool:
        return self.status == STATUS_COMPLETED

    @property
    def exit_code(self) -> int:
        return EXIT_BY_STATUS.get(self.status, 1)


@dataclass(frozen=True)
class Task:
    """An open human task: its intent (what completes it), title and parameters."""

    intent: str
    title: str | None
    params: Any


class Execution:
    """One execution of a flow: wait for it, read it, signal or cancel it."""

    def __init__(self, flows: Flows, exec_id: str) -> None:
        self.flows = flows
        self.id = exec_id

    def __repr__(self) -> str:
        return f"Execution({self.id!r})"

    def status(self) -> models.ExecutionState:
        return self.flows.client.status(self.id)

    def wait(self, timeout_s: float = WAIT_S_DEFAULT) -> Outcome:
        """Its outcome once it ended, or when `timeout_s` of wall time passed (status
        `running`), or in process as soon as it waits for a person or a signal."""
        if not 0 <= timeout_s <= WAIT_S_MAX:
            raise ops.FlowRequestInvalidError(
                f"wait timeout_s is {timeout_s!r}; it is 0 to {WAIT_S_MAX:.0f} seconds"
            )
        state = self.flows.wait_state(self.id, timeout_s)
        engine = state.engine if isinstance(state.engine, dict) else {}
        return Outcome(self.id, state.status, engine.get("result"), state.error)

    def events(self, kind: str | None = None) -> list[models.HistoryEvent]:
        """Its history (spec/11 §6), only the events named `kind` when given."""
        found = self.flows.client.events(self.id)
        return [e for e in found if kind is None or e.event == kind]

    def signal(
        self, name: str, payload: Any = None, *, expect_version: int | None = None
    ) -> models.SignalAnswer:
        answer = self.flows.client.signal(self.id, name, payload, expect_version)
        self.flows.drain()
        return answer

    def cancel(self, reason: str | None = None) -> models.ExecutionAck:
        answer = self.flows.client.cancel(self.id, reason)
        self.flows.drain()
        return answer

    def explain(self) -> models.ExecutionExplanation:
        return self.flows.client.explain(self.id)


class Flows:
    """A flow world: deploy and run flows, wait for them, send events, complete human tasks,
    read executions, cells and history. Close it (or use it in a `with` block) when done."""

    def __init__(
        self,
        client: FlowClient,
        *,
        adapters: LocalAdapters | None = None,
        resources: ExitStack | None = None,
    ) -> None:
        self.client = client
        self.adapters = adapters
        self.resources = resources or ExitStack()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()
        self.resources.close()

    @property
    def world(self) -> World | None:
        """The world this process holds open (None through a node)."""
        return None if self.adapters is None else self.adapters.world

    # -- flows and executions --------------------------------------------------------------

    def deploy(self, source: FlowSource) -> models.FlowDeployed:
        """Deploy a definition (a playbook, a `.flow` file, a CFD, or a FlowDefinition) as its
        flow's next version (unchanged: the latest)."""
        definition = definition_of(source)
        return self.client.deploy(definition, source=definition.name)

    def run(
        self,
        flow: FlowSource,
        workload: Any = None,
        *,
        exec_id: str | None = None,
        version: int | None = None,
    ) -> Execution:
        """Start an execution of `flow`: a deployed flow's name, or a definition (deployed
        first). In process the adapters then do the work it makes."""
        name = flow if isinstance(flow, str) and not names_file(flow) else None
        if name is None:
            name = self.deploy(flow).name
        started = self.client.run(name, workload, exec_id=exec_id, version=version)
        self.drain()
        return Execution(self, started.exec)

    def execution(self, exec_id: str) -> Execution:
        """An execution by its id or a unique prefix of one."""
        return Execution(self, self.client.status(exec_id).exec)

    def executions(
        self, *, flow: str | None = None, status: str | None = None
    ) -> models.FlowListing:
        """The deployed flows and the executions, newest first (one page)."""
        return self.client.listing(ops.ExecutionFilter(flow=flow, status=status), ops.Page())

    def wait_state(self, exec_id: str, timeout_s: float) -> models.ExecutionState:
        if self.adapters is None:
            return self.client.status(exec_id, wait_s=timeout_s)
        world = self.adapters.world
        deadline = time.monotonic() + timeout_s
        while True:
            self.drain()
            state = self.client.status(exec_id)
            left_s = deadline - time.monotonic()
            if state.status in ops.TERMINAL_STATUSES or left_s <= 0:
                return state
            due = world.reader.next_timer_ns()
            if due is None or world.clock == CLOCK_MANUAL or self.adapters.awaiting_outside():
                return state
            time.sleep(min(left_s, max(0.0, (due - time.time_ns()) / 1e9), WAIT_POLL_S_MAX))

    # -- events, tasks, cells --------------------------------------------------------------

    def send(
        self, schema: str, value: Any, *, idempotency_key: str | None = None
    ) -> models.SendResponse:
        """Ingress one event (its schema's value) and run the world to idle."""
        sent = self.client.send(schema, value, idempotency_key=idempotency_key)
        self.drain()
        return sent

    def tasks(self) -> list[Task]:
        """The open human tasks, oldest first."""
        if self.adapters is None:
            found = self.node().node.call("GET", "/v1/tasks")
            listed = models.TasksResponse.model_validate(found).tasks
            return [Task(t.intent, t.title, t.params) for t in listed]
        world = self.adapters.world
        opened = []
        for intent in world.reader.open_intents():
            record = world.reader.open_intent(str(intent["intent"]))
            if intent["effect"] == HUMAN_EFFECT and record is not None:
                params = cbor.to_json(record["params"])
                opened.append(Task(str(intent["intent"]), _title(params), params))
        return opened

    def complete_task(self, intent: str, payload: Any = None, *, status: str = "ok") -> None:
        """Complete a human task (`status` ok or error) with `payload` as its result."""
        if self.adapters is None:
            body = {"status": status, "payload": cbor.to_json(payload)}
            path = f"/v1/tasks/{quote(intent, safe='')}/complete"
            self.node().node.call("POST", path, body)
            return
        self.adapters.settle(intent, HUMAN_ADAPTER, status, payload)
        self.drain()

    def state(self, workflow: str, key: Any = None) -> models.StateResponse:
        """One cell's state and status (leave `key` out for an unkeyed workflow)."""
        if self.adapters is None:
            params = {"key": None if key is None else json.dumps(cbor.to_json(key))}
            path = f"/v1/state/{workflow}"
            return models.StateResponse.model_validate(
                self.node().node.call("GET", path, params=params)
            )
        world = self.adapters.world
        state = world.reader.state(workflow, key)
        status = world.reader.status_of(workflow, world.reader.key_bytes(workflow, key))
        if state is None and status != ops.STATUS_FAILED:
            raise CellMissingError(f"{workflow} has no cell for that key")
        body = {"workflow": workflow, "key": key, "status": status, "state": state}
        return models.StateResponse.model_validate(cbor.to_json(body))

    # -- helpers ---------------------------------------------------------------------------

    def node(self) -> NodeFlows:
        assert isinstance(self.client, NodeFlows)
        return self.client

    def drain(self) -> None:
        """In process: perform the open tool calls, and fire due timers (on the manual clock:
        skip to them) until only people, signals, later timers or nothing are left to wait
        for. Through a node: nothing (it does that)."""
        if self.adapters is None:
            return
        if self.adapters.world.clock != CLOCK_MANUAL:
            self.adapters.world.tick()  # the timers due by now fire
        self.adapters.drain(wait_wall=False)


class HeldFlows(LocalFlows):
    """`LocalFlows` on a world this process holds open for writing: every read and write is
    on it (a world has one writer, and this handle is it)."""

    def __init__(self, world: World, path: Path) -> None:
        super().__init__(path)
        self.world = world

    @contextmanager
    def reading(self) -> Iterator[World]:
        yield self.world

    @contextmanager
    def writing(self) -> Iterator[World]:
        yield self.world

    def served(self) -> None:
        return None

    def events(self, exec_id: str) -> list[models.HistoryEvent]:
        """Each event with `logical_ns` too: the world's logical time when its step ran (the
        stamp of the input that caused it), so a test sees when a timer fired."""
        found = super().events(exec_id)
        if not found:
            return found
        times = logical_times(self.world, found[0].seq, found[-1].seq)
        return [
            models.HistoryEvent.model_validate({**e.model_dump(), "logical_ns": times.get(e.seq)})
            for e in found
        ]


def logical_times(world: World, first: int, last: int) -> dict[int, int]:
    """The logical time at each journal sequence from `first` to `last`: that of the latest
    stamped record (an input from outside, a clock advance) at or before it."""
    times: dict[int, int] = {}
    now = _time_before(world, first)
    for seq, record in world.store.journal.read(first, last):
        now = _stamped_time(record, now)
        if now is not None:
            times[seq] = now
    return times


def _time_before(world: World, seq: int) -> int | None:
    """The logical time just before `seq`: the latest stamped record before it, looked for
    backwards a page at a time, at most `TIME_LOOKBACK_RECORDS_MAX` records."""
    last = seq - 1
    while last >= max(1, seq - TIME_LOOKBACK_RECORDS_MAX):
        first = max(1, last - TIME_LOOKBACK_PAGE_RECORDS + 1)
        found = None
        for _, record in world.store.journal.read(first, last):
            found = _stamped_time(record, found)
        if found is not None:
            return found
        last = first - 1
    return None


def _stamped_time(record: Any, now: int | None) -> int | None:
    stamp = record.get("stamp") if isinstance(record, dict) else None
    if isinstance(stamp, dict) and type(stamp.get("logical_ns")) is int:
        return int(stamp["logical_ns"])
    return now


def names_file(text: str) -> bool:
    return text.endswith(FLOW_SUFFIXES)


def definition_of(source: FlowSource, limits: DefinitionLimits | None = None) -> FlowDefinition:
    """A checked definition from a FlowDefinition or a file's path (read up to the
    definition's byte bound, so a huge file is refused before it is read whole)."""
    if isinstance(source, FlowDefinition):
        return source
    if isinstance(source, str) and not names_file(source):
        raise ops.FlowRequestInvalidError(
            f"{source!r} is not the path of a definition file ({', '.join(FLOW_SUFFIXES)}); "
            "a deployed flow is run by its name"
        )
    path = Path(source)
    bound = (limits or DefinitionLimits()).definition_bytes_max
    try:
        with path.open("rb") as file:
            data = file.read(bound + 1)
    except OSError as error:
        raise FlowError(f"cannot read {path}: {error.strerror}", path=str(path)) from None
    return load_flow(data, source=str(path), limits=limits)


def _title(params: Any) -> str | None:
    title = params.get("title") if isinstance(params, dict) else None
    return title if isinstance(title, str) else None
