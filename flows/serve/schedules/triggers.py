"""Event triggers (spec/11-flows.md §12.7): a domain event of the world, or a call of a
node's webhook route, starts a flow, once per key the trigger names.

A trigger is a cell of `aos/FlowSchedule@1` with no slot: its spec names the flow, the event
schema it listens to (or `webhook`), an optional `when` (a JSONPath guard over the event's
value, true as spec/11 §1.3 says), the workload mapping (`{field: JSONPath}`; none: the value
itself) and `key`, the JSONPath of the value's idempotency key. The execution's id is
`trig~NAME~KEY`, so an event delivered twice (a resend, a replayed webhook) starts one
execution. A domain-event trigger reads the journal from its cursor (journaled with every
start it makes), so what it started and what it has read move together.

    create_trigger(world, "on-order", TriggerSpec(flow="ship", event="shop/Order@1",
                   key="$.order_id", when="$[?@.amount > 10]"))
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import jsonpath

from aos.flows.serve import flow_operations
from aos.flows.serve.flow_world import EXEC_WORKFLOW
from aos.flows.serve.schedules import operations as sched
from aos.flows.serve.schedules.errors import (
    ScheduleError,
    ScheduleExistsError,
    ScheduleLimitError,
    ScheduleUnknownError,
)
from aos.flows.serve.schedules.slots import SCHEDULE_NAME_PATTERN
from aos.kernel import cbor
from aos.kernel.hashing import hash_bytes
from aos.kernel.world import records
from aos.kernel.world.world import World

WEBHOOK = "webhook"
TRIGGER_SCAN_RECORDS_MAX = 10_000
"""Journal records one pass of a trigger reads: a pass holds the world's writer, bounded."""
TRIGGER_CURSOR_STEP_RECORDS = 1_000
"""A trigger that started nothing still journals its cursor once it has read this many."""
TRIGGER_STARTS_PER_PASS_MAX = 100
JSONPATH_BYTES_MAX = 512
WORKLOAD_FIELDS_MAX = 64
_PLAIN_KEY = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True)
class TriggerSpec:
    flow: str
    key: str
    event: str = WEBHOOK
    when: str | None = None
    workload: dict[str, str] | None = field(default=None)
    version: int | None = None

    def check(self) -> None:
        paths = [self.key, *([self.when] if self.when else []), *(self.workload or {}).values()]
        if len(self.workload or {}) > WORKLOAD_FIELDS_MAX:
            raise ScheduleError(f"over {WORKLOAD_FIELDS_MAX} workload fields", path="workload")
        for path in paths:
            if len(path.encode()) > JSONPATH_BYTES_MAX:
                raise ScheduleError("a JSONPath is too long", path="key")
            try:
                jsonpath.compile(path)
            except jsonpath.JSONPathError as error:
                raise ScheduleError(f"{path!r} is not JSONPath: {error}", path="key") from None

    def to_value(self) -> dict[str, Any]:
        return {"trigger": {**self.__dict__}}


def listing(world: World) -> list[dict[str, Any]]:
    """Every trigger with its spec, how many executions it started and the last ones."""
    found: list[dict[str, Any]] = []
    for cell in world.reader.cells(sched.SCHEDULE_WORKFLOW):
        state = world.reader.state(sched.SCHEDULE_WORKFLOW, cell.key)
        if isinstance(state, dict) and is_trigger(state):
            recent = [r for r in state["recent"] if r.get("exec")][-10:][::-1]
            spec = state["spec"]["trigger"]
            found.append({"name": state["name"], **spec, "fired": state["fired"], "recent": recent})
    return sorted(found, key=lambda t: str(t["name"]))


def is_trigger(state: dict[str, Any]) -> bool:
    return isinstance(state.get("spec"), dict) and "trigger" in state["spec"]


def create_trigger(
    world: World, name: str, spec: TriggerSpec, limits: sched.ScheduleLimits | None = None
) -> dict[str, Any]:
    limits = limits or sched.ScheduleLimits()
    if not SCHEDULE_NAME_PATTERN.fullmatch(name):
        raise ScheduleError(f"{name[:100]!r} is not a trigger name", path="name")
    spec.check()
    if world.reader.state(sched.SCHEDULE_WORKFLOW, name) is not None:
        raise ScheduleExistsError(f"a schedule or trigger {name} exists", schedule=name)
    if world.reader.cell_count(sched.SCHEDULE_WORKFLOW) >= limits.schedules_per_world_max:
        raise ScheduleLimitError("too many schedules and triggers", limit="schedules_per_world_max")
    flow_operations.resolve(world, spec.flow, spec.version)
    body = {"name": name, "spec": spec.to_value(), "next": None, "cursor": world.height}
    world.send(sched.COMMAND_EVENT, {"name": name, "op": "create", "body": body})
    return {"trigger": name, "event": spec.event, "cursor": body["cursor"]}


def delete_trigger(world: World, name: str) -> dict[str, Any]:
    """Delete a trigger (the executions it started stay)."""
    _trigger_state(world, name)
    world.send(sched.COMMAND_EVENT, {"name": name, "op": "delete", "body": {}})
    return {"trigger": name, "deleted": True}


def deliver_webhook(world: World, name: str, value: Any) -> dict[str, Any]:
    """Start the webhook trigger `name`'s flow for `value`, once per key: a repeat answers
    the execution the first delivery started, `duplicate`, and journals nothing."""
    spec = _trigger(world, name, WEBHOOK)
    if not _holds(spec.when, value):
        return {"trigger": name, "exec": None, "reason": "when"}
    exec_id = _exec_id(name, spec, value)
    if _exists(world, exec_id):
        return {"trigger": name, "exec": exec_id, "duplicate": True}
    decision = _start(world, spec, exec_id, value)
    world.send(sched.COMMAND_EVENT, {"name": name, "op": "run", "body": {"decisions": [decision]}})
    return {"trigger": name, "exec": exec_id, "duplicate": False}


def pump_triggers(world: World) -> list[str]:
    """Read the journal after each domain-event trigger's cursor and start what matches."""
    moved: list[str] = []
    for cell in world.reader.cells(sched.SCHEDULE_WORKFLOW):
        state = world.reader.state(sched.SCHEDULE_WORKFLOW, cell.key)
        live = isinstance(state, dict) and is_trigger(state) and not state["paused"]
        if live and _pass(world, str(cell.key), state):
            moved.append(str(cell.key))
    return moved


def _pass(world: World, name: str, state: dict[str, Any]) -> bool:
    spec = TriggerSpec(**state["spec"]["trigger"])
    if spec.event == WEBHOOK:
        return False
    cursor = int(state.get("cursor") or 0)
    last = min(world.height, cursor + TRIGGER_SCAN_RECORDS_MAX)
    decisions: list[dict[str, Any]] = []
    chosen: set[str] = set()
    read: Any = world.store.journal.read(cursor + 1, last) if cursor < last else ()
    for seq, record in read:
        if len(decisions) == TRIGGER_STARTS_PER_PASS_MAX:
            last = seq - 1
            break
        if record["kind"] != records.DOMAIN_EVENT or record["schema"] != spec.event:
            continue
        value = record["value"]
        if not _holds(spec.when, value):
            continue
        exec_id = _exec_id(name, spec, value)
        if exec_id not in chosen and not _exists(world, exec_id):
            chosen.add(exec_id)
            decisions.append(_start(world, spec, exec_id, value))
    if not decisions and last - cursor < TRIGGER_CURSOR_STEP_RECORDS:
        return False
    body = {"decisions": decisions, "cursor": last}
    world.send(sched.COMMAND_EVENT, {"name": name, "op": "run", "body": body})
    return True


def _trigger_state(world: World, name: str) -> dict[str, Any]:
    found = (
        world.reader.state(sched.SCHEDULE_WORKFLOW, name)
        if SCHEDULE_NAME_PATTERN.fullmatch(name)
        else None
    )
    if not isinstance(found, dict) or not is_trigger(found):
        raise ScheduleUnknownError(f"no trigger {name[:100]}", schedule=name[:100])
    return found


def _trigger(world: World, name: str, kind: str) -> TriggerSpec:
    found = _trigger_state(world, name)
    spec = TriggerSpec(**found["spec"]["trigger"])
    if (spec.event == WEBHOOK) != (kind == WEBHOOK) or found["paused"]:
        raise ScheduleError(f"trigger {name} takes no {kind} deliveries now", schedule=name)
    return spec


def _holds(when: str | None, value: Any) -> bool:
    if when is None:
        return True
    found = jsonpath.findall(when, cbor.to_json(value))
    return bool(found) and any(item is not False and item is not None for item in found)


def _exec_id(name: str, spec: TriggerSpec, value: Any) -> str:
    found = jsonpath.findall(spec.key, cbor.to_json(value))
    if len(found) != 1 or isinstance(found[0], (dict, list)) or found[0] is None:
        raise ScheduleError(f"the key {spec.key} names no single value", path="key")
    key = str(found[0])
    if not _PLAIN_KEY.fullmatch(key):
        key = hash_bytes(key.encode()).hex[:32]
    return f"trig~{name}~{key}"


def _exists(world: World, exec_id: str) -> bool:
    return (
        world.reader.cell_info(EXEC_WORKFLOW, world.reader.key_bytes(EXEC_WORKFLOW, exec_id))
        is not None
    )


def _start(world: World, spec: TriggerSpec, exec_id: str, value: Any) -> dict[str, Any]:
    version, definition = flow_operations.resolve(world, spec.flow, spec.version)
    plain = cbor.to_json(value)
    workload = (
        {"event": plain}
        if spec.workload is None
        else {k: _first(jsonpath.findall(p, plain)) for k, p in spec.workload.items()}
    )
    start = {
        "exec": exec_id,
        "flow": spec.flow,
        "version": version,
        "definition": definition,
        "workload": workload,
        "parent": None,
        "business_ref": None,
    }
    return {"action": "start", "slot": world.logical_ns, "source": "trigger", "start": start}


def _first(found: list[Any]) -> Any:
    return found[0] if found else None
