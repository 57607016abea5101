"""Flow operations on an open world: deploy, start, signal, cancel, and the reads (status,
history, listing) — what `aos flow` and the node's `/v1/flows` API do (spec/11-flows.md §5).

Every write is one journaled input through `World.send`, checked before anything is sent, so
a refused request changes nothing: the world's height, state and journal are as before.
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aos.flows.define.cfd import FlowDefinition, canonical_value
from aos.flows.errors import FlowError
from aos.flows.limits import NAME_LENGTH_MAX
from aos.flows.serve import signals
from aos.flows.serve.flow_world import (
    CANCEL_EVENT,
    DEPLOY_EVENT,
    EXEC_WORKFLOW,
    REGISTRY_WORKFLOW,
    SIGNAL_EVENT,
    START_EVENT,
)
from aos.flows.serve.numbers import execution_number
from aos.kernel import cbor, prefixes
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.node.models import ExecutionAck, FlowDeployed, SignalAnswer
from aos.kernel.prefixes import IdAmbiguousError
from aos.kernel.store.views import read_back
from aos.kernel.world import records
from aos.kernel.world.cellindex import key_hash
from aos.kernel.world.world import RunReport, World

EXEC_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")
EVENTS_SUFFIX = "/events"
EXPLAIN_SUFFIX = "/explain"
EXEC_ID_RESERVED_SUFFIXES = (EVENTS_SUFFIX, EXPLAIN_SUFFIX)
"""The node's routes under an execution (spec/11 §9.1): no execution id ends in them."""
"""Execution ids given by users; `:` and `~` are kept for derived ids (children,
continue-with), so a user id never collides with one."""
HISTORY_SCAN_RECORDS_MAX_DEFAULT = 1_000_000
SIGNAL_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}")
EXEC_ID_RANDOM_BYTES = 6
RESERVED_WORKLOAD_KEYS = ("$iteration", "$iter_parent")
"""What the interpreter tells a child execution through its workload (a distributed loop's
iteration, the iteration a child was started in): never a caller's to set."""

STATUS_RUNNING = "running"
STATUS_FAILED = "failed"
TERMINAL_STATUSES = frozenset({"completed", STATUS_FAILED, "partial", "cancelled"})
LISTED_STATUSES = (STATUS_RUNNING, *sorted(TERMINAL_STATUSES))
FAULTED_EVENT = "execution.faulted"
"""The history event a `step_fault` record of an execution's cell stands for (spec/11 §6)."""

EXECUTIONS_PER_PAGE_DEFAULT = 100
EXECUTIONS_PER_PAGE_MAX = 1000
EXECUTIONS_SCAN_MAX_DEFAULT = 2_000
"""Executions one listing page looks at, each one's state read and decoded (~42 µs each,
measured on 300 warm executions), so a page holds the world's writer for ~0.1 s at most, as a
journal page does (`journal_scan_records_per_turn`)."""
EXECUTIONS_SCAN_MAX = 100_000
KEY_HASH_PATTERN = re.compile(r"[0-9a-f]{64}")
EXEC_PREFIX_SCAN_MAX = 100_000
"""Executions an id prefix is looked for among (keys only, ~2 µs each)."""


class FlowUnknownError(FlowError):
    code = "flow.unknown"
    hint = "deploy it first: aos flow deploy FILE"


class FlowVersionUnknownError(FlowError):
    code = "flow.version_unknown"
    hint = "aos flow ls lists the deployed versions"


class ExecutionUnknownError(FlowError):
    code = "flow.execution_unknown"
    hint = "aos flow ls lists executions"


class ExecutionAmbiguousError(IdAmbiguousError):
    code = "flow.execution_ambiguous"
    hint = "give more of the execution id (`aos flow ls` lists them)"


class ExecutionExistsError(FlowError):
    code = "flow.execution_exists"
    hint = "execution ids are unique: choose another --id, or leave it out"


class ExecutionEndedError(FlowError):
    code = "flow.execution_ended"
    hint = "the execution has ended; signals and cancels are for running executions"


class FlowRequestInvalidError(FlowError):
    code = "flow.request_invalid"


@dataclass(frozen=True)
class Started:
    exec: str
    flow: str
    version: int
    definition: str
    report: RunReport


@dataclass(frozen=True)
class HistoryEvent:
    seq: int  # the journaled step record that carries it
    event: dict[str, Any]


# --------------------------------------------------------------------------------------------
# Writes


def deploy(world: World, definition: FlowDefinition) -> FlowDeployed:
    """Resolve the definition's subflows against the flows deployed in this world, store the
    canonical definition in the CAS and journal a new version of it."""
    value = resolve_subflows(world, canonical_value(definition))
    data = cbor.encode(value)
    definition_hash = str(hash_bytes(data))
    before = versions(world, definition.name)
    if before and before[-1]["definition"] == definition_hash:
        latest = int(before[-1]["version"])
        return FlowDeployed(
            name=definition.name, version=latest, definition=definition_hash, changed=False
        )
    world.put_blob(data)
    world.send(DEPLOY_EVENT, {"name": definition.name, "definition": definition_hash})
    after = versions(world, definition.name)
    latest = int(after[-1]["version"])
    return FlowDeployed(
        name=definition.name, version=latest, definition=definition_hash, changed=True
    )


def resolve_subflows(world: World, value: dict[str, Any]) -> dict[str, Any]:
    """Pin every subflow alias to a deployed definition hash (the latest version unless the
    alias names `flow@N`)."""
    subflows: dict[str, Any] = value.get("subflows") or {}
    for alias, entry in subflows.items():
        if entry.get("definition"):
            continue
        name, _, wanted = str(entry["flow"]).partition("@")
        _, found = resolve(world, name, int(wanted) if wanted.isdigit() else None)
        subflows[alias] = {**entry, "flow": name, "definition": found}
    return value


def start(
    world: World,
    name: str,
    *,
    workload: Any = None,
    exec_id: str | None = None,
    version: int | None = None,
    business_ref: str | None = None,
) -> Started:
    """Start an execution of the deployed flow `name`, pinned to its latest version's
    definition (or `version`'s)."""
    picked, definition_hash = resolve(world, name, version)
    exec_id = exec_id if exec_id is not None else new_exec_id(name)
    _check_exec_id(exec_id)
    if (
        world.reader.cell_info(EXEC_WORKFLOW, world.reader.key_bytes(EXEC_WORKFLOW, exec_id))
        is not None
    ):
        raise ExecutionExistsError(f"an execution {exec_id} exists", exec=exec_id)
    _check_data(workload, "$.workload")
    _check_reserved(workload)
    value = {
        "exec": exec_id,
        "flow": name,
        "version": picked,
        "definition": definition_hash,
        "workload": {} if workload is None else workload,
        "parent": None,
        "business_ref": business_ref,
    }
    _, report = world.send(START_EVENT, value)
    return Started(exec_id, name, picked, definition_hash, report)


def signal(
    world: World,
    exec_id: str,
    name: str,
    payload: Any = None,
    *,
    expect_version: int | None = None,
) -> SignalAnswer:
    """Send a signal to a running execution: an open wait takes it, or the execution keeps it
    until one opens. One that could never be delivered is refused, journaling nothing
    (`flows/serve/signals.py`, spec/11 §3.2). Answers what became of it: `delivered` (a wait took
    it), `buffered`, or, for one sent around the check, `stale`, `dropped` or `faulted`."""
    state = _running_state(world, exec_id)
    exec_id = state["exec"]  # a prefix names the full id
    if not SIGNAL_NAME_PATTERN.fullmatch(name):
        raise FlowRequestInvalidError(f"signal name {name!r} is not a name", path="$.name")
    if expect_version is not None and expect_version < 0:
        raise FlowRequestInvalidError("expect_version is a natural number", path="$.expect_version")
    _check_data(payload, "$.payload")
    signals.check(world, state, name, expect_version)
    value = {"exec": exec_id, "name": name, "payload": payload, "expect_version": expect_version}
    admitted, _ = world.send(SIGNAL_EVENT, value)
    after = _records(world, admitted.seq + 1, world.height)
    found = signals.outcome(after, world.reader.key_bytes(EXEC_WORKFLOW, exec_id), admitted.seq)
    after_status = status(world, exec_id)["status"]
    return SignalAnswer(
        exec=exec_id, name=name, seq=admitted.seq, outcome=found, status=after_status
    )


def cancel(world: World, exec_id: str, reason: str | None = None) -> ExecutionAck:
    """Cancel a running execution (its id or a unique prefix): its open intents, waits and
    children. Answers its full id and its status after it."""
    exec_id = _running_state(world, exec_id)["exec"]
    world.send(CANCEL_EVENT, {"exec": exec_id, "reason": reason})
    return ExecutionAck(exec=exec_id, status=status(world, exec_id)["status"])


def new_exec_id(name: str) -> str:
    """A fresh execution id: the flow's name and random hex. It is chosen outside the world
    and journaled in the start event, so replays see the same id."""
    base = re.sub(r"[^A-Za-z0-9._-]", "-", name)[:100]
    return f"{base}-{secrets.token_hex(EXEC_ID_RANDOM_BYTES)}"


# --------------------------------------------------------------------------------------------
# Reads


def versions(world: World, name: str) -> list[dict[str, Any]]:
    """The deployed versions of `name`, oldest first (empty when never deployed)."""
    state = world.reader.state(REGISTRY_WORKFLOW, name)
    return list(state["versions"]) if isinstance(state, dict) else []


def resolve(world: World, name: str, version: int | None) -> tuple[int, str]:
    found = versions(world, name)
    if not found:
        raise FlowUnknownError(f"no flow {name} is deployed", flow=name)
    if version is None:
        latest = found[-1]
        return int(latest["version"]), str(latest["definition"])
    for entry in found:
        if int(entry["version"]) == version:
            return version, str(entry["definition"])
    raise FlowVersionUnknownError(f"{name} has no version {version}", flow=name)


def status(world: World, exec_id: str) -> dict[str, Any]:
    """An execution's state, decoded: status, version, business state, waits. `exec_id` is
    an execution's id or a unique prefix of one (`resolve_exec`). An execution whose cell the
    kernel failed (a fault its interpreter did not handle: a world whose manifest predates
    fault notices, or a notice that faulted too) is `failed`, with the fault under `fault`;
    one whose start was refused is made from its start event."""
    state = _exec_state(world, exec_id)
    cell = world.reader.cell_info(EXEC_WORKFLOW, world.reader.key_bytes(EXEC_WORKFLOW, exec_id))
    if state is None and cell is None:
        exec_id = resolve_exec(world, exec_id)
        state = _exec_state(world, exec_id)
        cell = world.reader.cell_info(EXEC_WORKFLOW, world.reader.key_bytes(EXEC_WORKFLOW, exec_id))
    if cell is not None and cell.faulted:
        return _kernel_failed(world, exec_id, state, cell.last_active_seq)
    if state is None:
        raise ExecutionUnknownError(f"no execution {exec_id}", exec=exec_id)
    return state


def shown_status(world: World, exec_id: str) -> dict[str, Any]:
    """`status`, and the execution's `number` beside its id (NoETL's numeric execution id,
    `flows/serve/numbers.py`): what `aos flow status`, the HTTP API and the inspector show."""
    return {**status(world, exec_id), "number": execution_number(exec_id)}


def resolve_exec(world: World, text: str) -> str:
    """The execution whose id starts with `text`, looked for among the first
    `EXEC_PREFIX_SCAN_MAX` executions in key-hash order (their keys only: no state is read);
    `flow.execution_unknown` when none does, `flow.execution_ambiguous` when several do."""
    keys = itertools.islice(world.reader.cell_keys_after(EXEC_WORKFLOW, None), EXEC_PREFIX_SCAN_MAX)
    return prefixes.resolve(
        text,
        (str(key) for key in keys),
        what="execution",
        unknown=lambda message: ExecutionUnknownError(message, exec=text),
        ambiguous=ExecutionAmbiguousError,
    )


def failure(state: dict[str, Any]) -> dict[str, Any] | None:
    """Why an ended execution failed, for a person: the engine's error (a refused step, a
    broken invariant), else the kernel's fault, else its first unhandled branch failure."""
    if state.get("status") not in (STATUS_FAILED, "partial"):
        return None
    engine = state.get("engine") if isinstance(state.get("engine"), dict) else {}
    found = (engine or {}).get("error") or state.get("fault")
    if isinstance(found, dict):
        return found
    failures = ((engine or {}).get("summary") or {}).get("failures") or []
    first = failures[0] if failures and isinstance(failures[0], dict) else {}
    error = first.get("error")
    return error if isinstance(error, dict) else None


def _kernel_failed(
    world: World, exec_id: str, state: dict[str, Any] | None, fault_seq: int
) -> dict[str, Any]:
    fault = _record(world, fault_seq)
    if fault is None or fault.get("kind") != records.STEP_FAULT:
        raise ExecutionUnknownError(f"no execution {exec_id}", exec=exec_id)
    if state is None:
        state = _refused_start(world, exec_id, fault)
    return {
        **state,
        "status": STATUS_FAILED,
        "fault": {
            "kind": "engine",
            "code": fault["code"],
            "message": fault["message"],
            "retryable": False,
            "seq": fault_seq,
            "module": fault["module"],
        },
    }


def _refused_start(world: World, exec_id: str, fault: dict[str, Any]) -> dict[str, Any]:
    """The state of an execution whose start step the kernel refused: what its start event
    says, nothing run."""
    started = _record(world, int(fault["input"]))
    value = started.get("value") if started is not None else None
    if not isinstance(value, dict) or started is None or started.get("schema") != START_EVENT:
        raise ExecutionUnknownError(f"no execution {exec_id}", exec=exec_id)
    workload = value.get("workload")
    return {
        "exec": exec_id,
        "flow": value.get("flow"),
        "version": value.get("version"),
        "definition": value.get("definition"),
        "status": STATUS_FAILED,
        "engine_version": 0,
        "started_seq": int(fault["input"]),
        "business": {
            "workload": workload if isinstance(workload, dict) else {},
            "ctx": {},
            "steps": {},
            "business_ref": value.get("business_ref"),
        },
        "engine": {"tokens": {}, "waits": {}},
    }


def _record(world: World, seq: int) -> dict[str, Any] | None:
    for _, record in _records(world, seq, seq):
        return record if isinstance(record, dict) else None
    return None


def history(
    world: World,
    exec_id: str,
    *,
    scan_records_max: int = HISTORY_SCAN_RECORDS_MAX_DEFAULT,
) -> list[HistoryEvent]:
    """The execution's history events in journal order, read from the annotations of its
    step records (spec/11 §6), from the record that started it."""
    state = status(world, exec_id)
    first = int(state["started_seq"])
    last = min(world.store.journal.head(), first + scan_records_max - 1)
    key = world.reader.key_bytes(EXEC_WORKFLOW, state["exec"])
    return [
        e for seq, record in _records(world, first, last) for e in record_events(seq, record, key)
    ]


@dataclass(frozen=True)
class HistoryPage:
    """A part of an execution's history: the events of the step records after some journal
    sequence, up to `last_seq`, the last record it looked at (the next page starts after it)."""

    events: list[HistoryEvent]
    last_seq: int
    more: bool  # stopped at a bound before the journal's head: ask again after last_seq
    status: str  # the execution's status when the page was read


def history_page(
    world: World, exec_id: str, *, after: int, events_max: int, scan_records_max: int
) -> HistoryPage:
    """The history events of the step records after journal sequence `after`: whole records,
    stopping after the record that brings them to `events_max` or after `scan_records_max`
    records looked at (so one page holds the world's one writer for a bounded time)."""
    state = status(world, exec_id)
    first = max(int(state["started_seq"]), after + 1)
    head = world.store.journal.head()
    last = min(head, first + scan_records_max - 1)
    key = world.reader.key_bytes(EXEC_WORKFLOW, state["exec"])
    events: list[HistoryEvent] = []
    last_seq = max(after, first - 1)
    for seq, record in _records(world, first, last):
        events.extend(record_events(seq, record, key))
        last_seq = seq
        if len(events) >= events_max:
            break
    return HistoryPage(events, last_seq, last_seq < head, str(state["status"]))


@dataclass(frozen=True)
class HistoryTail:
    """An execution's newest history events, in journal order."""

    events: list[HistoryEvent]
    complete: bool  # the scan reached the execution's start and nothing older was cut


def history_tail(
    world: World, exec_id: str, *, events_max: int, scan_records_max: int
) -> HistoryTail:
    """The newest `events_max` history events, found by reading the journal back from its
    head at most `scan_records_max` records (so a page that shows them holds the world's one
    writer for a bounded time, however long ago the execution started)."""
    state = status(world, exec_id)
    first = int(state["started_seq"])
    key = world.reader.key_bytes(EXEC_WORKFLOW, state["exec"])
    newest: list[HistoryEvent] = []  # newest first
    head = world.store.journal.head()
    back = read_back(world.store.journal, head, records_max=scan_records_max, bottom=first)
    for seq, record in back:
        newest.extend(reversed(list(record_events(seq, record, key))))
        if len(newest) > events_max:
            break
    reached = head - first + 1 <= scan_records_max  # the scan could read the first record
    complete = reached and len(newest) <= events_max
    return HistoryTail(newest[:events_max][::-1], complete)


def _records(world: World, first: int, last: int) -> Iterator[tuple[int, Any]]:
    first = max(first, 1)
    if first <= last:
        yield from world.store.journal.read(first, last)


def record_events(seq: int, record: Any, key: bytes | None) -> Iterator[HistoryEvent]:
    """The history events a journal record carries for the execution whose cell key is `key`:
    those in its annotation if it is one of that execution's step records, and for a
    `step_fault` of its cell (a step the kernel refused) `execution.faulted`."""
    if not isinstance(record, dict) or record.get("kind") not in (records.STEP, records.STEP_FAULT):
        return
    if record["workflow"] != EXEC_WORKFLOW or record["key"] != key:
        return
    if record["kind"] == records.STEP_FAULT:
        yield HistoryEvent(seq, _faulted_event(record))
        return
    ann: Any = record.get("ann")
    events = ann.get("events", []) if isinstance(ann, dict) else []
    for event in events if isinstance(events, list) else []:
        if isinstance(event, dict):
            yield HistoryEvent(seq, event)


def _faulted_event(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "event": FAULTED_EVENT,
        "code": record["code"],
        "message": record["message"],
        "module": record["module"],
    }


_EVENT_DETAIL_KEYS = (
    "code",
    "status",
    "attempt",
    "index",
    "to",
    "wait",
    "signal",
    "child",
    "total",
    "from_version",
    "to_version",
)


def describe_event(event: dict[str, Any]) -> str:
    """One history event as a line: its name, where (step.task) and the few fields that say
    what happened (an error by its code)."""
    where = ".".join(str(event[k]) for k in ("step", "task") if event.get(k))
    detail = {k: event[k] for k in _EVENT_DETAIL_KEYS if k in event and event[k] is not None}
    error = event.get("error")
    if isinstance(error, dict):
        detail["error"] = f"{error.get('kind')}/{error.get('code')}"
    text = " ".join(f"{k}={json.dumps(cbor.to_json(v), sort_keys=True)}" for k, v in detail.items())
    return f"{event.get('event', '?'):<24} {where:<28} {text}".rstrip()


@dataclass(frozen=True)
class ExecutionFilter:
    """Which executions a listing shows: of one flow, in one status (None: any)."""

    flow: str | None = None
    status: str | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in LISTED_STATUSES:
            raise FlowRequestInvalidError(
                f"status is one of {', '.join(LISTED_STATUSES)}", path="$query.status"
            )
        if self.flow is not None and not 0 < len(self.flow) <= NAME_LENGTH_MAX:
            raise FlowRequestInvalidError("flow is a flow's name", path="$query.flow")

    def keeps(self, summary: dict[str, Any]) -> bool:
        return (self.flow is None or summary["flow"] == self.flow) and (
            self.status is None or summary["status"] == self.status
        )


@dataclass(frozen=True)
class Page:
    """Where a listing's page starts and how much it may hold and read."""

    after: str | None = None  # a cell's key hash (64 hex digits): start after that execution
    limit: int = EXECUTIONS_PER_PAGE_DEFAULT
    scan_max: int = EXECUTIONS_SCAN_MAX_DEFAULT

    def __post_init__(self) -> None:
        if self.after is not None and not KEY_HASH_PATTERN.fullmatch(self.after):
            raise FlowRequestInvalidError(
                "after is an execution's key hash (64 hex digits)", path="$query.after"
            )
        for name, value, most in (
            ("limit", self.limit, EXECUTIONS_PER_PAGE_MAX),
            ("scan_max", self.scan_max, EXECUTIONS_SCAN_MAX),
        ):
            if not 1 <= value <= most:
                raise FlowRequestInvalidError(f"{name} is 1 to {most}", path=f"$query.{name}")


def listing(
    world: World, wanted: ExecutionFilter | None = None, page: Page | None = None
) -> dict[str, Any]:
    """Deployed flows with their versions, and one page of executions with their status:
    `count` executions in all (the index's count, no walk), the page's `executions` in key-hash
    order, and `next_after`, where the next page starts (null: this was the last). A page
    decodes only the executions it looks at: at most `limit` shown and `scan_max` looked at,
    so it holds the world's writer for a bounded time however many executions there are."""
    flows = [
        {"name": cell.key, "versions": versions(world, str(cell.key))}
        for cell in world.reader.cells(REGISTRY_WORKFLOW)
    ]
    return {
        "flows": sorted(flows, key=lambda f: str(f["name"])),
        **executions_page(world, wanted or ExecutionFilter(), page or Page()),
    }


def executions_page(world: World, wanted: ExecutionFilter, page: Page) -> dict[str, Any]:
    """One page of `listing`'s executions."""
    shown: list[dict[str, Any]] = []
    next_after: str | None = None
    looked_at = page.after
    cells = world.reader.cells_after(
        EXEC_WORKFLOW, bytes.fromhex(page.after) if page.after else None
    )
    for scanned, cell in enumerate(cells):
        if len(shown) == page.limit or scanned == page.scan_max:
            next_after = looked_at  # there is more: go on after the last one looked at
            break
        looked_at = key_hash(cell.key_bytes or b"").hex()
        state = _listed_state(world, str(cell.key), cell.faulted)
        if state is not None and wanted.keeps(summary := _summary(state)):
            shown.append({**summary, "key_hash": looked_at})
    return {
        "count": world.reader.cell_count(EXEC_WORKFLOW),
        "executions": shown,
        "next_after": next_after,
    }


def _listed_state(world: World, exec_id: str, faulted: bool) -> dict[str, Any] | None:
    """A listed execution's state: as `status` derives it for a cell the kernel failed."""
    if not faulted:
        return _exec_state(world, exec_id)
    try:
        return status(world, exec_id)
    except ExecutionUnknownError:
        return None


def _summary(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "exec": state["exec"],
        "number": execution_number(state["exec"]),
        "flow": state["flow"],
        "version": state["version"],
        "status": state["status"],
        "engine_version": state["engine_version"],
    }


def _exec_state(world: World, exec_id: str) -> dict[str, Any] | None:
    value = world.reader.state(EXEC_WORKFLOW, exec_id)
    return value if isinstance(value, dict) else None


def _running_state(world: World, exec_id: str) -> dict[str, Any]:
    state = status(world, exec_id)
    if state["status"] in TERMINAL_STATUSES:
        raise ExecutionEndedError(
            f"execution {exec_id} has ended ({state['status']})", exec=exec_id
        )
    return state


def _check_exec_id(exec_id: str) -> None:
    if not EXEC_ID_PATTERN.fullmatch(exec_id):
        raise FlowRequestInvalidError(
            f"execution id {exec_id!r}: 1-128 of letters, digits, '.', '_', '-', '/'",
            path="$.exec",
        )
    if exec_id.endswith(EXEC_ID_RESERVED_SUFFIXES):
        # GET /v1/executions/{exec}/events is the history of {exec} (and /explain its
        # explanation): an execution named so could not have its own status read over HTTP.
        raise FlowRequestInvalidError(
            f"execution id {exec_id!r}: it may not end in "
            f"{' or '.join(map(repr, EXEC_ID_RESERVED_SUFFIXES))}",
            path="$.exec",
        )


def _check_data(value: Any, path: str) -> None:
    try:
        cbor.encode(value)
    except cbor.CborError as error:
        raise FlowRequestInvalidError(f"not data: {error}", path=path) from None


def _check_reserved(workload: Any) -> None:
    for key in RESERVED_WORKLOAD_KEYS:
        if isinstance(workload, dict) and key in workload:
            raise FlowRequestInvalidError(
                f"{key} is reserved for executions a flow starts", path=f"$.workload.{key}"
            )


def definition_blob(world: World, definition_hash: str) -> bytes | None:
    """A deployed definition's canonical bytes."""
    return world.read_blob(str(Hash(definition_hash)))
