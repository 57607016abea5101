"""The execution cell of `aos/FlowExec@1`: one handler for `aos/FlowExecEvent@1` (Start,
Signal, Cancel, Ended, Receipt, Migrate, and Faulted: the kernel's notice that it refused a
step of this execution, spec/03 §7.1).

Every input is first checked against the open waits without touching the state: a stale
one returns the state exactly as it came (version included) and records why. Any other
input increments `engine_version`, is applied, and the engine runs to wait. Nothing leaves
the handler as an exception but the SDK's read request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aos_flow import compact, definition, keychain, marking, signals, waits
from aos_flow.blobs import Blobs
from aos_flow.errors import DefinitionError, EngineFailure, Missing
from aos_flow.expressions import deep_merge
from aos_flow.history import History
from aos_flow.run import ITER_PARENT_KEY, TIMER_EFFECT, Run, iter_depth, journal_height
from aos_flow.tasks import copy_value
from aos_sdk import DELETE, cbor

ITERATION_KEY = "$iteration"


def on_event(state: Any, event: Any, ctx: Any) -> Any:
    tag = event.get("$tag") if type(event) is dict else None
    value = event.get("$value") if type(event) is dict else None
    value = value if type(value) is dict else {}
    if tag == "Start":
        return _start(state, value, ctx)
    if tag == "Faulted":
        return _faulted(state, value, ctx)
    if state is None:  # no such execution: nothing to change, nothing to create
        ctx.annotate({"events": [_stale_event(tag, value, "no execution")]})
        return DELETE
    working = compact.expanded(state)
    if tag == "Migrate":
        return _migrate(state, working, value, ctx)
    apply, stale = _resolve(working, tag, value, ctx)
    if apply is None:
        ctx.annotate({"events": [stale]})
        return state
    return _apply(working, ctx, apply)


def _resolve(
    state: dict[str, Any], tag: Any, value: dict[str, Any], ctx: Any
) -> tuple[Callable[[Run], None] | None, dict[str, Any]]:
    """What the input does to the execution, or the history event saying it is stale."""
    if tag == "Receipt":
        wait_id = waits.receipt_wait(state, value)
        if wait_id is not None and keychain.is_wait(state, wait_id):
            return (lambda run: _keychain_resolved(run, wait_id, value)), {}
        if wait_id is not None:
            return (lambda run: waits.on_receipt(run, wait_id, value)), {}
        return None, _stale_event(tag, value, "no open wait")
    if tag == "Signal":
        return _signal(state, value, ctx)
    if tag == "Ended":
        wait_id = waits.child_wait(state, value)
        if wait_id is not None:
            return (lambda run: waits.on_ended(run, wait_id, value)), {}
        return None, _stale_event(tag, value, "no open wait")
    if tag == "Cancel" and state["status"] == "running":
        return (lambda run: marking.cancel(run, value.get("reason"))), {}
    return None, _stale_event(tag, value, f"the execution is {state['status']}")


def _signal(
    state: dict[str, Any], value: dict[str, Any], ctx: Any
) -> tuple[Callable[[Run], None] | None, dict[str, Any]]:
    """An open wait of the signal's name takes it; else an execution that buffers keeps it
    (signals.py), unless it could never be delivered or the buffer is full."""
    wait_id, reason = waits.signal_wait(state, value)
    if wait_id is not None:
        return (lambda run: waits.on_signal(run, wait_id, value)), {}
    unversioned = value.get("expect_version") is None
    if reason != "no wait" or not unversioned or not signals.buffers(state):
        return None, _stale_event("Signal", value, reason)
    dropped = signals.refusal(state, _definition(state, ctx), value, journal_height(ctx))
    if dropped is not None:
        return None, dropped
    return (lambda run: signals.buffer(run, value)), {}


def _definition(state: dict[str, Any], ctx: Any) -> definition.Definition | None:
    """The execution's definition, before anything is applied (None: it cannot be read)."""
    try:
        return definition.load(Blobs(ctx), state["definition"])
    except Missing as missing:
        ctx.require([missing.blob_hash])  # the step runs again with it
        return None
    except DefinitionError:
        return None


def _stale_event(tag: Any, value: dict[str, Any], reason: str) -> dict[str, Any]:
    """As the history records events: absent (null) fields are left out."""
    event = _stale_fields(tag, value, reason)
    return {key: item for key, item in event.items() if item is not None}


def _stale_fields(tag: Any, value: dict[str, Any], reason: str) -> dict[str, Any]:
    if tag == "Receipt":
        name = "timer.stale" if value.get("effect") == TIMER_EFFECT else "receipt.stale"
        return {
            "event": name,
            "issuer_ref": value.get("issuer_ref"),
            "effect": value.get("effect"),
            "reason": reason,
        }
    if tag == "Signal":
        return {
            "event": "signal.stale",
            "name": value.get("name"),
            "expect_version": value.get("expect_version"),
            "reason": reason,
        }
    if tag == "Ended":
        return {
            "event": "child.stale",
            "child": value.get("child"),
            "token": value.get("token"),
            "reason": reason,
        }
    if tag == "Start":
        return {"event": "start.stale", "exec": value.get("exec"), "reason": reason}
    if tag == "Cancel":
        return {"event": "cancel.stale", "reason": reason}
    if tag == "Migrate":
        return {"event": "migrate.stale", "version": value.get("version"), "reason": reason}
    if tag == "Faulted":
        return {"event": "fault.stale", "code": value.get("code"), "reason": reason}
    return {"event": "input.unknown", "tag": tag if type(tag) is str else None, "reason": reason}


# -- starting ---------------------------------------------------------------------------------


def _start(state: Any, value: dict[str, Any], ctx: Any) -> Any:
    if state is not None:
        ctx.annotate({"events": [_stale_event("Start", value, "already started")]})
        return state
    state = _initial(value, ctx)
    return _apply(state, ctx, lambda run: _begin(run, value))


def _initial(value: dict[str, Any], ctx: Any) -> dict[str, Any]:
    version = value.get("version")
    business_ref = value.get("business_ref")
    parent = value.get("parent")
    return {
        "exec": value["exec"] if type(value.get("exec")) is str else str(ctx.key),
        "flow": value["flow"] if type(value.get("flow")) is str else "",
        "version": version if type(version) is int and version >= 0 else 0,
        "definition": value["definition"] if definition.is_hash(value.get("definition")) else None,
        "status": "running",
        "engine_version": 0,
        "started_seq": journal_height(ctx),
        "business": {
            "workload": {},
            "ctx": {},
            "steps": {},
            "business_ref": business_ref if type(business_ref) is str else None,
        },
        "engine": marking.new_engine(_parent(parent)),
    }


def _parent(parent: Any) -> dict[str, str] | None:
    if (
        type(parent) is dict
        and type(parent.get("exec")) is str
        and type(parent.get("token")) is str
    ):
        return {"exec": parent["exec"], "token": parent["token"]}
    return None


def _begin(run: Run, value: dict[str, Any]) -> None:
    """The run's workload deep-merged onto the definition's; one token for `entry`."""
    workload = _workload(run, value)
    marker = workload.pop(ITERATION_KEY, None)
    run.engine["outer"] = _outer(run, workload.pop(ITER_PARENT_KEY, None))
    run.business["workload"] = workload
    _started(run)
    if not keychain.request(run, marker):
        _enter(run, marker)


def _workload(run: Run, value: dict[str, Any]) -> dict[str, Any]:
    given = value.get("workload")
    if given is not None and type(given) is not dict:
        raise EngineFailure("workload.invalid", "a workload is a map")
    return deep_merge(copy_value(run.defn.workload), given or {})


def _started(run: Run) -> None:
    run.history.add(
        "playbook.started",
        exec=run.exec_id,
        flow=run.state["flow"],
        version=run.state["version"],
        definition=run.state["definition"],
    )


def _outer(run: Run, outer: Any) -> dict[str, Any] | None:
    """The iteration the parent started this execution in (its iterations' `iter.parent`)."""
    if outer is not None and type(outer) is not dict:
        raise EngineFailure("iteration.invalid", f"{ITER_PARENT_KEY} is not a map")
    if iter_depth(outer) > run.limits["iter_depth_max"]:
        message = f"{ITER_PARENT_KEY} is more than {run.limits['iter_depth_max']} levels deep"
        raise EngineFailure("limit.iter_depth_max", message)
    return outer


def _keychain_resolved(run: Run, wait_id: str, envelope: dict[str, Any]) -> None:
    """The start phase's receipt: the keychain's references are in; the flow starts."""
    go_on, marker = keychain.resolved(run, wait_id, envelope)
    if go_on:
        _enter(run, marker)


def _enter(run: Run, marker: Any) -> None:
    """One token for `entry`, or the distributed iteration the marker names."""
    if marker is not None:
        _begin_iteration(run, marker)
    else:
        marking.new_token(run, run.defn.entry, {})


def _begin_iteration(run: Run, marker: Any) -> None:
    """A distributed loop's iteration: run that step's pipeline once, with the parent's
    item, args and ctx; the iteration's result is this execution's result."""
    if type(marker) is not dict or type(marker.get("step")) is not str:
        raise EngineFailure("iteration.invalid", "the $iteration marker is malformed")
    step = marker["step"]
    if step not in run.defn.steps or run.defn.step(step)["loop"] is None:
        raise EngineFailure("iteration.invalid", f"{step!r} is not a loop step")
    index, total = marker.get("index"), marker.get("total")
    if type(index) is not int or type(total) is not int or not 0 <= index < total:
        raise EngineFailure("iteration.invalid", "the iteration's index is out of range")
    iterator = marker.get("iterator") if type(marker.get("iterator")) is str else "item"
    run.engine["iteration"] = {"step": step, "index": index, "total": total}
    run.business["ctx"] = marker["ctx"] if type(marker.get("ctx")) is dict else {}
    token = marking.new_token(
        run, step, marker.get("args") if marker.get("args") is not None else {}
    )
    token["single"] = {
        "index": index,
        "iter": {
            iterator: marker.get("item"),
            "index": index,
            "first": index == 0,
            "last": index == total - 1,
            "parent": run.engine["outer"],
        },
    }


# -- a step the kernel refused -----------------------------------------------------------------


def _faulted(state: Any, notice: dict[str, Any], ctx: Any) -> Any:
    """The kernel refused a step of this execution (output too large, fuel, memory, a trap):
    the execution fails with that refusal as its error (kind `engine`, the fault's code and
    message), from its last good state; its waits end, its parent is told. A refused start
    has no state: the execution is made from the start event the notice carries, and fails."""
    if state is None:
        start = _refused_start(notice)
        if start is None:
            ctx.annotate({"events": [_stale_event("Faulted", notice, "no execution")]})
            return DELETE
        working = _initial(start, ctx)
        if type(notice.get("input")) is int:
            working["started_seq"] = notice["input"]  # the start event's record
        return _apply(working, ctx, lambda run: _start_refused(run, start, notice))
    working = compact.expanded(state)
    if working["status"] != "running":
        reason = f"the execution is {working['status']}"
        ctx.annotate({"events": [_stale_event("Faulted", notice, reason)]})
        return state
    return _apply(working, ctx, lambda run: _fail_refused(run, notice))


def _refused_start(notice: dict[str, Any]) -> dict[str, Any] | None:
    """The start event the refused delivery was, or None."""
    try:
        event = cbor.decode(notice["event"]) if type(notice.get("event")) is bytes else None
    except cbor.CborError:
        return None
    if type(event) is dict and event.get("$tag") == "Start" and type(event.get("$value")) is dict:
        return event["$value"]
    return None


def _start_refused(run: Run, start: dict[str, Any], notice: dict[str, Any]) -> None:
    given = start.get("workload")
    run.business["workload"] = _workload(run, start) if type(given) in (dict, type(None)) else {}
    _started(run)
    _fail_refused(run, notice)


def _fail_refused(run: Run, notice: dict[str, Any]) -> None:
    code = notice.get("code") if type(notice.get("code")) is str else "step.fault"
    message = notice.get("message") if type(notice.get("message")) is str else ""
    marking.fail_execution(run, code, message)


# -- migrating to another version --------------------------------------------------------------


def _migrate(state: Any, working: dict[str, Any], value: dict[str, Any], ctx: Any) -> Any:
    """The execution goes on under another definition of its flow. The host sends this only
    where a shadow showed that definition reproduces the execution's whole recorded history,
    state included (spec/11 §10), so the state is the one the new definition would have
    reached: only the definition it names changes. Anything else is stale, state untouched."""
    reason = _migrate_refusal(working, value)
    if reason is not None:
        ctx.annotate({"events": [_stale_event("Migrate", value, reason)]})
        return state
    before = {"version": working["version"], "definition": working["definition"]}
    working["version"] = value["version"]
    working["definition"] = value["definition"]
    return _apply(working, ctx, lambda run: _migrated(run, before))


def _migrate_refusal(state: dict[str, Any], value: dict[str, Any]) -> str | None:
    if state["status"] != "running":
        return f"the execution is {state['status']}"
    if value.get("flow") != state["flow"]:
        return "the definition is another flow's"
    if value.get("from_definition") != state["definition"]:
        return "the execution runs another definition"
    if value.get("expect_version") != state["engine_version"]:
        return f"the execution moved on to version {state['engine_version']}"
    version = value.get("version")
    if not definition.is_hash(value.get("definition")) or type(version) is not int or version < 0:
        return "the migration names no definition"
    return None


def _migrated(run: Run, before: dict[str, Any]) -> None:
    run.history.add(
        "execution.migrated",
        from_version=before["version"],
        to_version=run.state["version"],
        from_definition=before["definition"],
        to_definition=run.state["definition"],
    )


# -- applying an input ------------------------------------------------------------------------


def _apply(state: dict[str, Any], ctx: Any, apply: Callable[[Run], None]) -> Any:
    history = History()
    blobs = Blobs(ctx)
    state["engine_version"] += 1
    try:
        try:
            defn = definition.load(blobs, state["definition"])
        except DefinitionError as error:
            run = Run(state, ctx, None, history, blobs)
            marking.fail_execution(run, "definition.invalid", error.message)
        else:
            history.limit = max(1, defn.limits["history_events_per_step_max"])
            _run(Run(state, ctx, defn, history, blobs), apply)
    except Missing as missing:
        # The definition alone when it is the one missing (a fresh instance's first read);
        # a missing result also brings the state's other references along.
        others = state["business"] if missing.blob_hash != state["definition"] else None
        ctx.require(blobs.request(missing.blob_hash, others))
    ctx.annotate(history.value())
    return compact.compacted(state)


def _run(run: Run, apply: Callable[[Run], None]) -> None:
    try:
        apply(run)
        marking.run_to_wait(run)
        marking.keep_loops_small(run)
    except EngineFailure as failure:
        marking.fail_execution(run, failure.code, failure.message)
    except Exception as error:  # a bug must fail the execution, not trap every later step
        marking.fail_execution(run, "engine.exception", f"{type(error).__name__}: {error}")
