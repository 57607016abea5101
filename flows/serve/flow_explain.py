"""Why an execution failed, or what it waits on, in one answer (`aos flow explain EXEC`,
`GET /v1/executions/{exec}/explain`; spec/11 §9).

A failed execution: its error (kind, code, message, and a python traceback when the tool
sent one, bounded), and where it failed: the step and task, the attempt, the history event,
and the policy rule that decided it (the task's `policy.task.evaluated` just before: a rule's
index, or none when the default applied). A running one: each open wait with its kind, the
logical time it opened at, its attempt, the intent it waits on and, for a timer (a retry's
backoff), when it is due; a retry's wait carries the error of the attempt that failed.

The history is read back from the journal's head at most `EXPLAIN_SCAN_RECORDS_MAX` records
for the newest `EXPLAIN_EVENTS_MAX` events (`history_complete` says whether that reached the
execution's start), so an explanation holds the world's one writer for a bounded time.
"""

from __future__ import annotations

from typing import Any

from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import EXEC_WORKFLOW
from aos.kernel.node.models import TRACEBACK_CHARS_MAX
from aos.kernel.world.world import World

EXPLAIN_EVENTS_MAX = 2_000
EXPLAIN_SCAN_RECORDS_MAX = 100_000
FAILURE_EVENTS = (
    "task.failed",
    "step.failed",
    "execution.faulted",
    "keychain.failed",
    "template.failed",
    "loop.iteration.failed",
)
"""History events that say something failed, the most precise first."""


def bounded_error(error: Any) -> dict[str, Any] | None:
    """An error envelope as an answer shows it: its traceback cut to its last
    `TRACEBACK_CHARS_MAX` characters (where it raised), everything else as the tool gave it."""
    if not isinstance(error, dict):
        return None
    shown = dict(error)
    traceback = shown.get("traceback")
    if isinstance(traceback, str) and len(traceback) > TRACEBACK_CHARS_MAX:
        shown["traceback"] = "...\n" + traceback[-(TRACEBACK_CHARS_MAX - 4) :]
    return shown


def state_answer(state: dict[str, Any]) -> dict[str, Any]:
    """An execution's state as `aos flow status` and `GET /v1/executions/{exec}` answer it:
    with `error`, why it failed, when it has (ops.failure)."""
    return {**state, "error": bounded_error(ops.failure(state))}


def explain(world: World, exec_id: str) -> dict[str, Any]:
    """The explanation of the execution `exec_id` names (an id or a unique prefix)."""
    state = ops.status(world, exec_id)
    tail = ops.history_tail(
        world,
        str(state["exec"]),
        events_max=EXPLAIN_EVENTS_MAX,
        scan_records_max=EXPLAIN_SCAN_RECORDS_MAX,
    )
    events = [{"seq": e.seq, **e.event} for e in tail.events]
    answer: dict[str, Any] = {
        "exec": state["exec"],
        "flow": state.get("flow"),
        "version": state.get("version"),
        "status": state["status"],
        "logical_ns": world.logical_ns,
        "error": bounded_error(ops.failure(state)),
        "failed_at": _failed_at(events) if ops.failure(state) is not None else None,
        "waits": _waits(world, state, events),
        "history_complete": tail.complete,
    }
    return answer


def _failed_at(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The most precise failure event of the history's tail (the last of its kind), with the
    policy decision that preceded it for the same task."""
    for name in FAILURE_EVENTS:
        for index in range(len(events) - 1, -1, -1):
            event = events[index]
            if event.get("event") == name:
                return _point(event, _decision(events[:index], event))
    return None


def _decision(before: list[dict[str, Any]], failed: dict[str, Any]) -> dict[str, Any] | None:
    """The `policy.task.evaluated` of the failed task's last attempt (same token and task)."""
    for event in reversed(before):
        same = all(event.get(k) == failed.get(k) for k in ("token", "step", "task"))
        if event.get("event") == "policy.task.evaluated" and same:
            return dict(event)
        if event.get("event") == "task.started" and same:
            return None
    return None


def _point(event: dict[str, Any], decision: dict[str, Any] | None) -> dict[str, Any]:
    rule = decision.get("rule") if decision is not None else None
    action = decision.get("do") if decision is not None else None
    return {
        "step": event.get("step"),
        "task": event.get("task"),
        "attempt": event.get("attempt"),
        "seq": event["seq"],
        "event": event["event"],
        "rule": rule if isinstance(rule, int) else None,
        "action": action if isinstance(action, str) else ("fail" if decision else None),
    }


def _waits(
    world: World, state: dict[str, Any], events: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    engine = state.get("engine") if isinstance(state.get("engine"), dict) else {}
    waits = (engine or {}).get("waits") or {}
    if not isinstance(waits, dict) or state.get("status") != ops.STATUS_RUNNING:
        return []
    key = world.reader.key_bytes(EXEC_WORKFLOW, state["exec"])
    intents = {
        str(i["issuer_ref"]): i
        for i in world.reader.open_intents()
        if i["workflow"] == EXEC_WORKFLOW and i["key"] == key and i.get("issuer_ref")
    }
    return [
        _wait(str(wait_id), wait, intents.get(str(wait_id)), events)
        for wait_id, wait in sorted(waits.items())
        if isinstance(wait, dict)
    ]


def _wait(
    wait_id: str, wait: dict[str, Any], intent: dict[str, Any] | None, events: list[dict[str, Any]]
) -> dict[str, Any]:
    kind = str(wait.get("kind"))
    body: dict[str, Any] = {
        "wait": wait_id,
        "kind": kind,
        "step": wait.get("step"),
        "task": wait.get("task"),
        "attempt": int(wait.get("attempt", 1)),  # a stored wait leaves out its defaults
        "since_ns": int(wait.get("started_ns", 0)),
        "signal": wait.get("signal"),
        "child": wait.get("child"),
        "effect": wait.get("effect"),
        "intent": None if intent is None else intent["intent"],
        "due_ns": None if intent is None else intent.get("due_ns"),
        "last_error": None,
    }
    if kind == "retry":
        body["last_error"] = _last_attempt_error(events, wait)
    return body


def _last_attempt_error(events: list[dict[str, Any]], wait: dict[str, Any]) -> Any:
    for event in reversed(events):
        same = event.get("step") == wait.get("step") and event.get("task") == wait.get("task")
        if event.get("event") == "task.attempt.failed" and same:
            return bounded_error(event.get("error"))
    return None
