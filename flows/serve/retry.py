"""Retrying an execution that ended without completing (spec/11-flows.md §5): a new execution
of the same flow version, with the workload and business reference it started with, so a
failure that is fixed outside (a service back up, a file put in place) is run again from the
start. The ended execution and its history stay as they are; the new one is an ordinary
start, journaled, and replays as any start does."""

from __future__ import annotations

from typing import Any

from aos.flows.errors import FlowError
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import START_EVENT
from aos.kernel.world import records
from aos.kernel.world.world import World

RETRYABLE_STATUSES = ("failed", "partial", "cancelled")


class ExecutionNotRetryableError(FlowError):
    code = "flow.execution_not_retryable"
    hint = (
        "a failed, partial or cancelled execution is retried; a running one is cancelled first, "
        "a completed one run again (aos flow run), a child retried with its parent"
    )


def retry(world: World, exec_id: str, *, new_id: str | None = None) -> ops.Started:
    """Start the flow version `exec_id` ran, with its start's workload and business reference,
    as a new execution (`new_id`, or a fresh id). Refused, with nothing journaled, unless
    `exec_id` ended failed, partial or cancelled and was started from outside (a child is
    its parent's to start)."""
    state = ops.status(world, exec_id)  # raises flow.execution_unknown
    if state["status"] not in RETRYABLE_STATUSES:
        raise ExecutionNotRetryableError(
            f"execution {exec_id} is {state['status']}; only a failed, partial or cancelled "
            "one is retried",
            exec=exec_id,
            status=state["status"],
        )
    started = _start_value(world, int(state["started_seq"]))
    if started.get("parent") is not None:
        raise ExecutionNotRetryableError(
            f"execution {exec_id} is a child of {started['parent']}: retry that one",
            exec=exec_id,
        )
    return ops.start(
        world,
        str(state["flow"]),
        workload=started.get("workload"),
        exec_id=new_id,
        version=int(state["version"]),
        business_ref=started.get("business_ref"),
    )


def _start_value(world: World, seq: int) -> dict[str, Any]:
    for _, record in world.store.journal.read(seq, seq):
        event = records.parse(record)
        if (
            isinstance(event, records.IngressEvent | records.DerivedEvent)
            and event.schema == START_EVENT
        ):
            value = event.value
            if isinstance(value, dict):
                return {str(k): v for k, v in value.items()}
    raise ExecutionNotRetryableError(f"record {seq} is not the start of an execution")
