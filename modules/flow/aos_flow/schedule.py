"""The schedule cell of `aos/FlowSchedule@1`, keyed by schedule name (spec/11 §12): it keeps
what the host decided and journaled, and arms the kernel timer of the next slot. A trigger
(§12.7) is a cell of the same kind with no slot, and a journal cursor.

The host computes every slot (cron and time zones are not deterministic across library
versions, so the guest never parses a cron expression) and every overlap and catch-up
decision, and sends them in a `Command`; the cell applies them: a `start` emits the
execution's `aos/FlowStart@1` in the same step, so a slot's firing and its execution's start
are one journaled input. A `fire` for a slot that is not the cell's next slot is stale (a
second node, a repeat after a crash) and changes nothing."""

from __future__ import annotations

from typing import Any

from aos_sdk import DELETE

START_EVENT = "aos/FlowStart@1"
CANCEL_EVENT = "aos/FlowCancel@1"
TIMER_EFFECT = "sys/timer.set@1"
TIMER_REF = "slot"
RECENT_MAX = 64
"""Recent fired and skipped slots a schedule's state keeps (the rest is in the journal)."""


def on_event(state: Any, event: Any, ctx: Any) -> Any:
    tag = event.get("$tag") if type(event) is dict else None
    value = event.get("$value") if type(event) is dict else None
    if tag != "Command" or type(value) is not dict:
        return state if state is not None else DELETE  # a timer's receipt: the host fires
    op = value.get("op")
    body = value.get("body") or {}
    if op == "create":
        return _create(state, body, ctx)
    if state is None:
        return DELETE
    if op == "delete":
        ctx.cancel(TIMER_REF)
        return DELETE
    return _update(state, op, body, ctx)


def _create(state: Any, body: dict[str, Any], ctx: Any) -> Any:
    if state is not None:
        return state
    fresh = {
        "name": body.get("name"),
        "spec": body.get("spec"),
        "paused": False,
        "next": body.get("next"),
        "last_exec": None,
        "buffered": None,
        "fired": 0,
        "skipped": 0,
        "recent": [],
        "created_ns": ctx.now_ns,
        "cursor": body.get("cursor"),
    }
    _arm(fresh, ctx)
    return fresh


def _update(state: dict[str, Any], op: Any, body: dict[str, Any], ctx: Any) -> Any:
    state = dict(state)
    if op == "pause":
        state["paused"] = True
        state["paused_ns"] = ctx.now_ns
        ctx.cancel(TIMER_REF)
        return state
    if op == "fire" and (state["paused"] or _slot(state.get("next")) != body.get("slot")):
        return state  # stale: that slot was fired already, or the schedule is paused
    if op == "resume":
        state["paused"] = False
    for decision in body.get("decisions") or []:
        _apply(state, decision, ctx)
    if "buffered" in body:
        state["buffered"] = body["buffered"]
    if "cursor" in body:  # a trigger: the journal it has read up to
        state["cursor"] = body["cursor"]
    if op in ("fire", "resume"):
        state["next"] = body.get("next")
        ctx.cancel(TIMER_REF)
        _arm(state, ctx)
    return state


def _apply(state: dict[str, Any], decision: dict[str, Any], ctx: Any) -> None:
    action = decision.get("action")
    entry = {"slot": decision.get("slot"), "at_ns": ctx.now_ns, "source": decision.get("source")}
    if action == "cancel":
        ctx.emit(CANCEL_EVENT, {"exec": decision.get("exec"), "reason": decision.get("reason")})
        return
    if action == "start":
        ctx.emit(START_EVENT, decision["start"])
        state["last_exec"] = decision["start"]["exec"]
        state["fired"] = state["fired"] + 1
        entry.update(event="schedule.fired", exec=decision["start"]["exec"])
    else:
        state["skipped"] = state["skipped"] + int(decision.get("count") or 1)
        entry.update(event="schedule.skipped", reason=decision.get("reason"))
        if decision.get("count"):
            entry["count"] = decision["count"]
    state["recent"] = [*state["recent"], entry][-RECENT_MAX:]


def _slot(next_slot: Any) -> Any:
    return next_slot.get("slot") if type(next_slot) is dict else None


def _arm(state: dict[str, Any], ctx: Any) -> None:
    """The kernel timer of the next slot (at its jittered time), unless paused or ended."""
    upcoming = state.get("next")
    if state["paused"] or type(upcoming) is not dict:
        return
    params = {"deliver_at_ns": upcoming["at_ns"], "key": f"slot-{upcoming['slot']}"}
    ctx.effect(TIMER_EFFECT, params, issuer_ref=TIMER_REF)
