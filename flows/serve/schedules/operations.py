"""Schedule operations on an open flow world (spec/11-flows.md §12): create, pause, resume,
delete, trigger and backfill are journaled inputs to the `aos/FlowSchedule@1` cell of the
schedule; `pump` fires the slots the world's clock has reached.

Each operation computes on the host what the guest must not (the next slot with `croniter`,
which executions overlap, which missed slots catch up) and journals the result in one
`aos/FlowScheduleCommand@1`; the cell applies it and starts each execution in the same step.
A slot's execution id is `sched~NAME~SLOT` (the slot in UTC), so a slot fired twice names one
execution, and the cell refuses a fire for a slot it has passed: exactly once per slot.

    create(world, "nightly", ScheduleSpec.parse({"flow": "report", "cron": "0 2 * * *"}))
    pump(world)            # after the clock moved: fire what is due
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aos.flows.serve import flow_operations
from aos.flows.serve.flow_operations import STATUS_RUNNING, ExecutionUnknownError
from aos.flows.serve.flow_world import EXEC_WORKFLOW
from aos.flows.serve.schedules.errors import (
    ScheduleError,
    ScheduleExistsError,
    ScheduleLimitError,
    ScheduleUnknownError,
)
from aos.flows.serve.schedules.slots import SCHEDULE_NAME_PATTERN, ScheduleSpec, utc_text
from aos.kernel.world.world import RunReport, World

SCHEDULE_WORKFLOW = "aos/FlowSchedule@1"
COMMAND_EVENT = "aos/FlowScheduleCommand@1"
SCHEDULES_PER_WORLD_MAX_DEFAULT = 1_000
SCHEDULE_CATCH_UP_SLOTS_MAX_DEFAULT = 100
SCHEDULE_BACKFILL_SLOTS_MAX_DEFAULT = 1_000
SHOWN_SLOTS_DEFAULT = 5
SHOWN_SLOTS_MAX = 100


@dataclass(frozen=True)
class ScheduleLimits:
    """How many schedules a world keeps, and how many slots one catch-up or backfill starts."""

    schedules_per_world_max: int = SCHEDULES_PER_WORLD_MAX_DEFAULT
    schedule_catch_up_slots_max: int = SCHEDULE_CATCH_UP_SLOTS_MAX_DEFAULT
    schedule_backfill_slots_max: int = SCHEDULE_BACKFILL_SLOTS_MAX_DEFAULT


@dataclass
class _Plan:
    """The decisions one command journals, and whether an execution is running meanwhile."""

    name: str
    spec: ScheduleSpec
    running: str | None
    buffered: Any
    decisions: list[dict[str, Any]] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Writes


def create(
    world: World, name: str, spec: ScheduleSpec, limits: ScheduleLimits | None = None
) -> dict[str, Any]:
    """A new schedule; its first slot is the first after now (or after `start`)."""
    limits = limits or ScheduleLimits()
    if not SCHEDULE_NAME_PATTERN.fullmatch(name):
        raise ScheduleError(f"{name[:100]!r} is not a schedule name", path="name")
    if _state(world, name) is not None:
        raise ScheduleExistsError(f"a schedule {name} exists", schedule=name)
    if world.reader.cell_count(SCHEDULE_WORKFLOW) >= limits.schedules_per_world_max:
        raise ScheduleLimitError(
            f"the world has {limits.schedules_per_world_max} schedules",
            limit="schedules_per_world_max",
        )
    flow_operations.resolve(world, spec.flow, spec.version)
    upcoming = _next(name, spec, world.logical_ns)
    body = {"name": name, "spec": spec.to_value(), "next": upcoming}
    _send(world, name, "create", body)
    return show(world, name)


def pause(world: World, name: str) -> RunReport:
    state = _existing(world, name)
    if state["paused"]:
        raise ScheduleError(f"schedule {name} is paused already", schedule=name)
    return _send(world, name, "pause", {})


def resume(world: World, name: str, limits: ScheduleLimits | None = None) -> RunReport:
    """Go on; the slots missed while paused catch up as the schedule's `catch_up` says."""
    state = _existing(world, name)
    if not state["paused"]:
        raise ScheduleError(f"schedule {name} is not paused", schedule=name)
    plan = _plan(world, name, state)
    _catch_up(world, plan, state, limits or ScheduleLimits())
    upcoming = _next(name, plan.spec, world.logical_ns)
    body = {"decisions": plan.decisions, "next": upcoming, "buffered": plan.buffered}
    return _send(world, name, "resume", body)


def delete(world: World, name: str) -> RunReport:
    _existing(world, name)
    return _send(world, name, "delete", {})


def trigger(world: World, name: str) -> str:
    """One run now, beside the slots (overlap does not apply: it was asked for)."""
    state = _existing(world, name)
    plan = _plan(world, name, state)
    exec_id = f"sched~{name}~trigger-{world.height}"
    _start(world, plan, world.logical_ns, exec_id, "trigger")
    _send(world, name, "run", {"decisions": plan.decisions})
    return exec_id


def backfill(
    world: World, name: str, from_ns: int, to_ns: int, limits: ScheduleLimits | None = None
) -> list[dict[str, Any]]:
    """Start the slots in [from, to] that have no execution yet (a slot that ran is not run
    again: its execution id exists). More than `schedule_backfill_slots_max` is refused."""
    limits = limits or ScheduleLimits()
    state = _existing(world, name)
    plan = _plan(world, name, state)
    slots, more = plan.spec.slots_between(from_ns - 1, to_ns, limits.schedule_backfill_slots_max)
    if more:
        raise ScheduleLimitError(
            f"over {limits.schedule_backfill_slots_max} slots in that range",
            limit="schedule_backfill_slots_max",
        )
    for slot in slots:
        exec_id = slot_exec_id(name, slot)
        if _exec_exists(world, exec_id):
            plan.decisions.append(_skipped(slot, "exists", "backfill"))
        else:
            _start(world, plan, slot, exec_id, "backfill")
    if plan.decisions:
        _send(world, name, "run", {"decisions": plan.decisions})
    return plan.decisions


def pump(world: World, limits: ScheduleLimits | None = None) -> list[str]:
    """Fire every schedule whose next slot the world's clock has reached, and start the
    buffered slot of each whose running execution ended. Returns the schedules it moved."""
    limits = limits or ScheduleLimits()
    moved: list[str] = []
    for cell in world.reader.cells(SCHEDULE_WORKFLOW):
        name = str(cell.key)
        state = _state(world, name)
        if state is None or state["paused"] or _is_trigger(state):
            continue
        upcoming = state.get("next")
        if isinstance(upcoming, dict) and upcoming["at_ns"] <= world.logical_ns:
            _fire(world, name, state, limits)
            moved.append(name)
        elif state.get("buffered") and not _running(world, state.get("last_exec")):
            plan = _plan(world, name, state)
            plan.decisions.append(state["buffered"])
            _send(world, name, "run", {"decisions": plan.decisions, "buffered": None})
            moved.append(name)
    return moved


def advance(world: World, until_ns: int, limits: ScheduleLimits | None = None) -> int:
    """For a `manual` clock world: move time to `until_ns` timer by timer, firing the slots
    on the way (what a node does on a wall clock as time passes). Returns the timers hit."""
    pump(world, limits)  # a slot whose timer fired before a kill, and not yet fired itself
    hits = 0
    while (deadline := world.reader.next_timer_ns()) is not None and deadline <= until_ns:
        world.jump_next_timer()
        pump(world, limits)
        hits += 1
    if until_ns > world.logical_ns:
        world.advance_time(until_ns - world.logical_ns)
        pump(world, limits)
    return hits


def slot_exec_id(name: str, slot_ns: int) -> str:
    stamp = utc_text(slot_ns).replace("-", "").replace(":", "")
    return f"sched~{name}~{stamp}"


# --------------------------------------------------------------------------------------------
# Reads


def listing(world: World) -> list[dict[str, Any]]:
    found = (_state(world, str(cell.key)) for cell in world.reader.cells(SCHEDULE_WORKFLOW))
    shown = (_summary(s) for s in found if s is not None and not _is_trigger(s))
    return sorted(shown, key=lambda s: str(s["name"]))


def show(world: World, name: str, slots: int = SHOWN_SLOTS_DEFAULT) -> dict[str, Any]:
    """A schedule, its next `slots` slots (computed now, not journaled) and recent runs."""
    state = _existing(world, name)
    spec = ScheduleSpec(**state["spec"])
    upcoming = state.get("next")
    coming: list[int] = []
    if isinstance(upcoming, dict):
        wanted = min(max(1, slots), SHOWN_SLOTS_MAX)
        coming = [upcoming["slot"], *spec.slots_after(upcoming["slot"], wanted - 1)]
    return {
        **_summary(state),
        "next_slots": [utc_text(s) for s in coming],
        "recent": state["recent"],
    }


# --------------------------------------------------------------------------------------------
# Deciding


def _fire(world: World, name: str, state: dict[str, Any], limits: ScheduleLimits) -> None:
    plan = _plan(world, name, state)
    due, more = plan.spec.slots_between(
        state["next"]["slot"] - 1, world.logical_ns, limits.schedule_catch_up_slots_max
    )
    if len(due) == 1 and not more:
        _overlap(world, plan, due[0])
    else:
        _apply_catch_up(world, plan, due, more)
    upcoming = _next(name, plan.spec, world.logical_ns)
    body = {
        "slot": state["next"]["slot"],
        "decisions": plan.decisions,
        "next": upcoming,
        "buffered": plan.buffered,
    }
    _send(world, name, "fire", body)


def _catch_up(world: World, plan: _Plan, state: dict[str, Any], limits: ScheduleLimits) -> None:
    upcoming = state.get("next")
    if not isinstance(upcoming, dict):
        return
    due, more = plan.spec.slots_between(
        upcoming["slot"] - 1, world.logical_ns, limits.schedule_catch_up_slots_max
    )
    if due:
        _apply_catch_up(world, plan, due, more)


def _apply_catch_up(world: World, plan: _Plan, due: list[int], more: int) -> None:
    """Slots missed (paused, or the world was not running at their time): `none` starts
    none, `last` the latest, `all` each; the rest are skipped and say why."""
    if more:
        plan.decisions.append({**_skipped(due[0], "catch_up_limit", "slot"), "count": more})
    policy = plan.spec.catch_up
    started = {"none": [], "last": due[-1:], "all": due}[policy]
    missed = [slot for slot in due if slot not in started]
    if missed:
        plan.decisions.append({**_skipped(missed[0], "missed", "slot"), "count": len(missed)})
    before = plan.running
    for slot in started:
        # Each caught-up slot is judged against what ran before the catch-up, not against
        # the ones it starts itself (they have not run yet); a cancelled one is cancelled once.
        _overlap(world, plan, slot)
        plan.running = None if plan.spec.overlap == "cancel-previous" else before


def _overlap(world: World, plan: _Plan, slot: int) -> None:
    exec_id = slot_exec_id(plan.name, slot)
    policy = plan.spec.overlap
    if plan.running is None or policy == "allow":
        _start(world, plan, slot, exec_id, "slot")
    elif policy == "skip":
        plan.decisions.append(_skipped(slot, "overlap", "slot"))
    elif policy == "cancel-previous":
        reason = f"cancelled by schedule {plan.name}: slot {utc_text(slot)}"
        plan.decisions.append({"action": "cancel", "exec": plan.running, "reason": reason})
        _start(world, plan, slot, exec_id, "slot")
    else:  # buffer-one: the newest waiting slot replaces an older one
        if plan.buffered is not None:
            plan.decisions.append(_skipped(plan.buffered["slot"], "buffer_full", "slot"))
        probe = _Plan(plan.name, plan.spec, None, None)
        _start(world, probe, slot, exec_id, "slot")
        plan.buffered = probe.decisions[0]


def _start(world: World, plan: _Plan, slot: int, exec_id: str, source: str) -> None:
    version, definition = flow_operations.resolve(world, plan.spec.flow, plan.spec.version)
    start = {
        "exec": exec_id,
        "flow": plan.spec.flow,
        "version": version,
        "definition": definition,
        "workload": {} if plan.spec.workload is None else plan.spec.workload,
        "parent": None,
        "business_ref": None,
    }
    plan.decisions.append({"action": "start", "slot": slot, "source": source, "start": start})
    plan.running = exec_id


def _skipped(slot: int, reason: str, source: str) -> dict[str, Any]:
    return {"action": "skip", "slot": slot, "reason": reason, "source": source}


def _plan(world: World, name: str, state: dict[str, Any]) -> _Plan:
    last = state.get("last_exec")
    running = last if _running(world, last) else None
    return _Plan(name, ScheduleSpec(**state["spec"]), running, state.get("buffered"))


def _next(name: str, spec: ScheduleSpec, after_ns: int) -> dict[str, int] | None:
    found = spec.slots_after(after_ns, 1)
    return {"slot": found[0], "at_ns": spec.jittered(name, found[0])} if found else None


# --------------------------------------------------------------------------------------------
# The world


def _send(world: World, name: str, op: str, body: dict[str, Any]) -> RunReport:
    return world.send(COMMAND_EVENT, {"name": name, "op": op, "body": body})[1]


def _state(world: World, name: str) -> dict[str, Any] | None:
    found = world.reader.state(SCHEDULE_WORKFLOW, name)
    return found if isinstance(found, dict) else None


def _existing(world: World, name: str) -> dict[str, Any]:
    found = _state(world, name) if SCHEDULE_NAME_PATTERN.fullmatch(name) else None
    if found is None or _is_trigger(found):
        raise ScheduleUnknownError(f"no schedule {name[:100]}", schedule=name[:100])
    return found


def _is_trigger(state: dict[str, Any]) -> bool:
    """A trigger's cell (triggers.py) is of the same workflow, with no slots."""
    return "trigger" in state["spec"]


def _running(world: World, exec_id: Any) -> bool:
    if not isinstance(exec_id, str):
        return False
    try:
        return bool(flow_operations.status(world, exec_id)["status"] == STATUS_RUNNING)
    except ExecutionUnknownError:
        return False


def _exec_exists(world: World, exec_id: str) -> bool:
    return (
        world.reader.cell_info(EXEC_WORKFLOW, world.reader.key_bytes(EXEC_WORKFLOW, exec_id))
        is not None
    )


def _summary(state: dict[str, Any]) -> dict[str, Any]:
    spec = state["spec"]
    upcoming = state.get("next")
    return {
        "name": state["name"],
        "flow": spec["flow"],
        "cron": spec["cron"],
        "every_ns": spec["every_ns"],
        "timezone": spec["timezone"],
        "overlap": spec["overlap"],
        "catch_up": spec["catch_up"],
        "paused": state["paused"],
        "next_slot": utc_text(upcoming["slot"]) if isinstance(upcoming, dict) else None,
        "fired": state["fired"],
        "skipped": state["skipped"],
        "last_exec": state.get("last_exec"),
    }
