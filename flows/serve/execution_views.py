"""The read model of flow executions (spec/11-flows.md §9.2): what the node's reads and the web
inspector show of executions beyond their state, written once, for anyone to call.

- `register`: every read of a node counts an execution's failed end as a failure (its cell's
  status they say from flows/serve/cell_status.py, the kernel's reads too).
- `is_failure`: whether a journal record ended an execution failed ("failed only").
- `executions`: executions in the order they started, searched by id, business reference and
  flow, filtered by status, paged by journal sequence.
- `history`: an execution's history a page at a time, newest or oldest first, back to its
  start, each event with its time and the time since the one before.
- `failed_at`: the step and task where an execution failed.
- `pending`: an execution's open waits, each with its attempt, the last error of its task,
  when it is due (a retry's next run, a timeout) and, for a person's task, its title and
  assignee.

Each is a read on the host thread, bounded: a page holds at most `limit` rows and reads at
most `scan_max` journal records; the cursor it answers goes on from there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import EXEC_WORKFLOW, START_EVENT
from aos.kernel import cbor
from aos.kernel.node.read_model import Derived, task_shown
from aos.kernel.node.times import At, RecordTimes, time_json
from aos.kernel.store.views import READ_BACK_CHUNK_RECORDS
from aos.kernel.world import records
from aos.kernel.world.world import World

START_EVENT_NAME = "playbook.started"
"""The history's first event: a page that holds it has nothing older to page to."""
FINISHED_EVENT = "playbook.finished"
FAILED_ENDS = frozenset({"failed", "partial"})
FAILURE_EVENTS = ("task.failed", "task.attempt.failed", "step.failed", ops.FAULTED_EVENT)
"""History events that carry an error (the last of a task's is its `last error`)."""
SEARCH_CHARS_MAX = 200
PENDING_EVENTS_MAX = 1_000
"""Newest history events `pending` reads for the waits' last errors."""
_START_MARK = cbor.encode(START_EVENT, self_describe=False)
"""The bytes of a start event's schema: a record without them is no start (not decoded)."""


def register(derived: Derived) -> None:
    """Make a node's reads count an execution's failed end as a failure (kernel/node/read_model.py
    `Derived`). Its cell's status they say from flows/serve/cell_status.py, as the kernel does."""
    derived.failures.append(is_failure)


def is_failure(record: dict[str, Any]) -> bool:
    """A step record of an execution whose history says it finished failed or partial."""
    step = records.parse(record)
    if not isinstance(step, records.StepRecord) or step.workflow != EXEC_WORKFLOW:
        return False
    ann = step.ann
    events = ann.get("events") if isinstance(ann, dict) else None
    return isinstance(events, list) and any(
        isinstance(event, dict)
        and event.get("event") == FINISHED_EVENT
        and event.get("status") in FAILED_ENDS
        for event in events
    )


def _wall_between(later: At | None, earlier: At | None) -> int | None:
    return None if later is None or earlier is None else later.wall_ns - earlier.wall_ns


# --------------------------------------------------------------------------------------------
# Executions in the order they started


@dataclass(frozen=True)
class ExecutionSearch:
    """Which executions a page lists: those whose id, business reference or flow holds `text`
    (any case), of `where`'s flow and status, newest or oldest first."""

    text: str = ""
    where: ops.ExecutionFilter = field(default_factory=ops.ExecutionFilter)
    oldest_first: bool = False

    def __post_init__(self) -> None:
        if len(self.text) > SEARCH_CHARS_MAX:
            raise ops.FlowRequestInvalidError(
                f"a search is at most {SEARCH_CHARS_MAX} characters", path="$query.q"
            )

    def keeps(self, row: dict[str, Any]) -> bool:
        wanted = self.text.casefold()
        found = any(
            wanted in str(row[name] or "").casefold() for name in ("exec", "business_ref", "flow")
        )
        return found and self.where.keeps(row)


def executions(
    world: World,
    search: ExecutionSearch,
    *,
    cursor: int | None,
    limit: int,
    scan_max: int,
    times: RecordTimes,
) -> dict[str, Any]:
    """A page of executions by their start records: newest first below the journal sequence
    `cursor` (from the head when None), or oldest first above it (from the start). Reads at
    most `scan_max` records, decoding only those that can be a start. `next` continues from
    the last record looked at (null: the journal's end was reached)."""
    head = world.store.journal.head()
    rows: list[dict[str, Any]] = []
    scanned, last = 0, cursor
    for seq, raw in _scan(world, search.oldest_first, cursor, scan_max):
        scanned, last = scanned + 1, seq
        if _START_MARK not in raw:
            continue
        row = _started(world, seq, raw, times)
        if row is not None and search.keeps(row):
            rows.append(row)
            if len(rows) == limit:
                break
    ended = last is None or (last >= head if search.oldest_first else last <= 1)
    return {"executions": rows, "next": None if ended else last, "scanned": scanned, "head": head}


def _scan(
    world: World, forward: bool, cursor: int | None, scan_max: int
) -> Iterator[tuple[int, bytes]]:
    """Records as stored, after `cursor` oldest first or below it newest first."""
    journal = world.store.journal
    if forward:
        yield from journal.read_encoded((cursor or 0) + 1, limit=scan_max)
        return
    top = journal.head() if cursor is None else min(cursor - 1, journal.head())
    left = scan_max
    while top >= 1 and left > 0:
        low = max(1, top - min(READ_BACK_CHUNK_RECORDS, left) + 1)
        chunk = list(journal.read_encoded(low, top))
        yield from reversed(chunk)
        left -= len(chunk)
        top = low - 1


def _started(world: World, seq: int, raw: bytes, times: RecordTimes) -> dict[str, Any] | None:
    """The listing row of the execution a record started (None: not a start, or of no
    execution this world knows)."""
    record = cbor.decode(raw)
    event = records.parse(record)
    if not isinstance(event, records.IngressEvent | records.DerivedEvent):
        return None
    value = event.value
    if event.schema != START_EVENT or not isinstance(value, dict):
        return None
    try:
        state = ops.status(world, str(value.get("exec")))
    except ops.ExecutionUnknownError:
        return None
    cell = world.reader.cell_info(
        EXEC_WORKFLOW, world.reader.key_bytes(EXEC_WORKFLOW, state["exec"])
    )
    last_seq = cell.last_active_seq if cell is not None else seq
    started, last = times.at(seq, event.to_value()), times.at(last_seq)
    business = state.get("business") if isinstance(state.get("business"), dict) else {}
    return {
        "exec": state["exec"],
        "flow": state["flow"],
        "version": state["version"],
        "status": state["status"],
        "business_ref": (business or {}).get("business_ref"),
        "parent": value.get("parent"),
        "started_seq": seq,
        "started": time_json(started),
        "last_seq": last_seq,
        "last": time_json(last),
        "duration_ns": _wall_between(last, started),
    }


# --------------------------------------------------------------------------------------------
# History, a page at a time


def history(
    world: World,
    exec_id: str,
    *,
    before: int | None,
    after: int | None,
    limit: int,
    scan_max: int,
    times: RecordTimes,
) -> dict[str, Any]:
    """A page of the execution's history events, whole step records: newest first below the
    journal sequence `before` (from the head when neither is given), or oldest first after
    `after`. `next_before` / `next_after` continue (null: the execution's start, or the
    journal's head, was reached). Each event has its record's `time`, the wall time `since`
    the execution started and `delta` since the event before it on the page."""
    if before is not None and after is not None:
        raise ops.FlowRequestInvalidError("give before or after, not both", path="$query.before")
    state = ops.status(world, exec_id)
    first = int(state["started_seq"])
    if after is not None:
        page = ops.history_page(
            world, exec_id, after=after, events_max=limit, scan_records_max=scan_max
        )
        found = [(e.seq, e.event) for e in page.events]
        cursors = {"next_after": page.last_seq if page.more else None, "next_before": None}
    else:
        found, lowest = _newest(world, exec_id, first, before, limit, scan_max)
        at_start = any(event.get("event") == START_EVENT_NAME for _, event in found)
        below = lowest if lowest > first and not at_start else None
        cursors = {"next_after": None, "next_before": below}
    started = times.at(first)
    rows = [_event_row(seq, event, times, started) for seq, event in found]
    # The event before each one in time: the next row newest first, the row above oldest
    # first; the page's oldest event's is on the next page.
    earlier = [*rows[1:], None] if after is None else [None, *rows[:-1]]
    earlier = earlier[: len(rows)]  # no rows: no event before any
    for row, before_it in zip(rows, earlier, strict=True):
        row["delta_ns"] = _wall_between_rows(row, before_it)
    return {"exec": exec_id, "first_seq": first, "events": rows, **cursors}


def _wall_between_rows(row: dict[str, Any], earlier: dict[str, Any] | None) -> int | None:
    if earlier is None or row["time"] is None or earlier["time"] is None:
        return None
    return int(row["time"]["wall_ns"]) - int(earlier["time"]["wall_ns"])


def _newest(
    world: World, exec_id: str, first: int, before: int | None, limit: int, scan_max: int
) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """Events newest first from the records below `before` down to `first`, whole records,
    until `limit` events or `scan_max` records; and the lowest record looked at."""
    key = world.reader.key_bytes(EXEC_WORKFLOW, exec_id)
    mark = cbor.encode(key, self_describe=False)
    found: list[tuple[int, dict[str, Any]]] = []
    lowest = first
    for seq, raw in _scan(world, False, before, scan_max):
        if seq < first:
            break
        lowest = seq
        if mark in raw:  # else the record is of another cell: not decoded
            events = ops.record_events(seq, cbor.decode(raw), key)
            found += [(seq, e.event) for e in reversed(list(events))]
        if len(found) >= limit:
            break
    return found, lowest


def _event_row(
    seq: int, event: dict[str, Any], times: RecordTimes, started: At | None
) -> dict[str, Any]:
    at = times.at(seq)
    return {
        "seq": seq,
        "event": cbor.to_json(event),
        "line": ops.describe_event(event),
        "time": time_json(at),
        "since_ns": _wall_between(at, started),
    }


# --------------------------------------------------------------------------------------------
# Pending work


def pending(
    world: World, exec_id: str, state: dict[str, Any], *, scan_max: int
) -> list[dict[str, Any]]:
    """The execution's open waits in the order they opened, each with its attempt, the last
    error of its task (from its newest `PENDING_EVENTS_MAX` history events, found within
    `scan_max` records), the intent it waits on and when that is due (a timer's, a retry's
    next run), and, for a person's task, the task's title, assignee and roles (its params)."""
    engine = state.get("engine") if isinstance(state.get("engine"), dict) else {}
    waits = (engine or {}).get("waits") or {}
    if not waits:
        return []
    intents = _open_intents(world, exec_id)
    errors = _last_errors(world, exec_id, scan_max)
    rows = []
    for wait_id in sorted(waits, key=lambda w: int(str(w)[1:]) if str(w)[1:].isdigit() else 0):
        wait = waits[wait_id]
        intent = intents.get(str(wait_id))
        rows.append(
            {
                "wait": wait_id,
                "kind": wait.get("kind"),
                "step": wait.get("step"),
                "task": wait.get("task"),
                "token": wait.get("token"),
                "attempt": wait.get("attempt", 1),
                "since_ns": wait.get("started_ns", 0),
                "timeout_ms": wait.get("timeout_ms"),
                "signal": wait.get("signal"),
                "child": wait.get("child"),
                "intent": intent["intent"] if intent else None,
                "effect": intent["effect"] if intent else wait.get("effect"),
                "due_ns": intent["due_ns"] if intent else None,
                "last_error": errors.get((wait.get("step"), wait.get("task"))),
                "human": _human_task(world, intent) if wait.get("kind") == "human" else None,
            }
        )
    return rows


def failed_at(
    world: World, exec_id: str, state: dict[str, Any], *, scan_max: int
) -> dict[str, Any] | None:
    """Where an execution failed: the step of the first failure its engine's summary names,
    and the task in that step whose error was the last one (from its newest
    `PENDING_EVENTS_MAX` history events, within `scan_max` records)."""
    engine = state.get("engine") if isinstance(state.get("engine"), dict) else {}
    failures = ((engine or {}).get("summary") or {}).get("failures") or []
    first = failures[0] if failures and isinstance(failures[0], dict) else None
    if first is None:
        return None
    step = first.get("step")
    errors = _last_errors(world, exec_id, scan_max)
    tasks = [task for (at, task) in errors if at == step and task is not None]
    return {"step": step, "task": tasks[-1] if tasks else None}


def _open_intents(world: World, exec_id: str) -> dict[str, dict[str, Any]]:
    """The execution's open intents by issuer ref (its waits' ids)."""
    key = world.reader.key_bytes(EXEC_WORKFLOW, exec_id)
    return {
        str(i["issuer_ref"]): i
        for i in world.reader.open_intents()
        if i["workflow"] == EXEC_WORKFLOW and i["key"] == key
    }


def _last_errors(world: World, exec_id: str, scan_max: int) -> dict[tuple[Any, Any], Any]:
    tail = ops.history_tail(
        world, exec_id, events_max=PENDING_EVENTS_MAX, scan_records_max=scan_max
    )
    found: dict[tuple[Any, Any], Any] = {}
    for item in tail.events:  # oldest first: a later error replaces an earlier one
        event = item.event
        if event.get("event") in FAILURE_EVENTS and isinstance(event.get("error"), dict):
            found[(event.get("step"), event.get("task"))] = cbor.to_json(event["error"])
    return found


def _human_task(world: World, intent: dict[str, Any] | None) -> dict[str, Any] | None:
    if intent is None:
        return None
    record = world.reader.open_intent(str(intent["intent"])) or {}
    return task_shown(str(intent["intent"]), str(intent["effect"]), record.get("params"))
