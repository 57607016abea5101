"""`aos world explain | cell retry|reset | intent cancel`: operating a world.

    aos world explain SEQ                       why a step faulted, a delivery was dropped,
                                                or what went wrong with an input's deliveries
    aos world cell retry WORKFLOW [KEY]         step a failed cell's failed delivery again
    aos world cell reset WORKFLOW [KEY]         delete a cell (its next event starts it afresh)
    aos world intent cancel INTENT              close an open intent; its cell is told

The three actions are journaled inputs (kernel/world/operations.py); each runs the world to
idle and prints what the run did.
"""

from __future__ import annotations

import json
from typing import Any

import click

from aos.cli.common import emit_json, handles_errors, json_option, world_option
from aos.cli.remote import node_option, world_client
from aos.cli.world_cmd import read_world, record_json, record_line, run_json, run_lines
from aos.cli.world_group import world_group
from aos.cli.world_text import cell_text, clip, key_value
from aos.kernel.cbor import from_json
from aos.kernel.world import records
from aos.kernel.world.explain import EXPLAIN_RECORDS_MAX, Explanation, explain
from aos.kernel.world.operations import (
    CELL_RESET,
    CELL_RETRY,
    INTENT_CANCEL,
    OPERATION_REASON_CHARS_MAX,
)

_reason_option = click.option(
    "--reason",
    default="",
    help=f"Why (journaled with the action; at most {OPERATION_REASON_CHARS_MAX} characters).",
)


# --------------------------------------------------------------------------------------------
# explain


@world_group.command("explain")
@click.argument("seq", type=click.IntRange(min=1))
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=EXPLAIN_RECORDS_MAX,
    show_default=True,
    help="Most journal records to read looking for the fault or the deliveries.",
)
@world_option
@json_option
@handles_errors
def explain_command(seq: int, limit: int, world_path: str, as_json: bool) -> None:
    """Why the record at SEQ went wrong: a step fault (with the exception a workflow
    raised), a dropped delivery (and the fault that failed its cell), or, for an input,
    which of its deliveries faulted or were dropped."""
    with read_world(world_path) as world:
        found = explain(world.store.journal, seq, limit=limit)
    if as_json:
        emit_json(_explanation_json(found))
        return
    for line in _explanation_lines(found):
        click.echo(line)


def _explanation_json(found: Explanation) -> dict[str, Any]:
    def optional(pair: tuple[int, dict[str, Any]] | None) -> Any:
        return None if pair is None else record_json(*pair)

    return {
        **record_json(found.seq, found.record),
        "cause": optional(found.cause),
        "fault": optional(found.fault),
        "problems": [record_json(seq, record) for seq, record in found.problems],
    }


def _explanation_lines(found: Explanation) -> list[str]:
    lines = [record_line(found.seq, found.record)]
    record = records.parse(found.record)
    if isinstance(record, records.StepFaultRecord):
        lines += _fault_lines(record)
    if found.cause is not None:
        lines.append(f"  input   {record_line(*found.cause).strip()}")
    if isinstance(record, records.DeliveryDropped):
        if found.fault is None:
            lines.append("  the fault that failed the cell is not within the records read")
        else:
            lines.append(f"  the cell failed at seq {found.fault[0]}:")
            lines += _fault_lines(records.StepFaultRecord.from_value(found.fault[1]))
    if isinstance(record, records.StepFaultRecord | records.DeliveryDropped):
        cell = cell_text(record.workflow, key_value(record.key))
        target = cell.replace("[", " ").rstrip("]")
        lines.append(
            f"next: fix the workflow (aos gov propose ...), then `aos world cell retry {target}`; "
            f"or `aos world cell reset {target}`"
        )
    elif not isinstance(record, records.StepRecord):
        lines += _problem_lines(found)
    return lines


def _fault_lines(fault: records.StepFaultRecord) -> list[str]:
    guest = fault.guest
    if guest is None:
        return [f"  fault   {fault.code}: {fault.message}", f"  module  {fault.module}"]
    return [
        f"  raised  {guest['type']}: {guest['message']}",
        f"  at      {guest['where'] or '-'}",
        f"  module  {fault.module}",
    ]


def _problem_lines(found: Explanation) -> list[str]:
    refused = records.parse(found.record)
    if isinstance(refused, records.IngressRejected | records.ReceiptRejected):
        return [f"  refused {refused.code}: {refused.message}"]
    if not found.problems:
        return ["  no delivery of it faulted or was dropped"]
    return ["  its deliveries that went wrong:"] + [
        "  " + record_line(seq, record) for seq, record in found.problems
    ]


# --------------------------------------------------------------------------------------------
# cell retry | reset, intent cancel


@world_group.group("cell")
def cell_group() -> None:
    """A cell: retry a failed one, or reset (delete) one."""


@cell_group.command("retry")
@click.argument("workflow")
@click.argument("key", required=False)
@_reason_option
@node_option
@world_option
@json_option
@handles_errors
def cell_retry_command(
    workflow: str,
    key: str | None,
    reason: str,
    node_url: str | None,
    world_path: str,
    as_json: bool,
) -> None:
    """Clear a failed cell's failure and step the delivery that failed it again (with the
    module the world runs now). KEY is read as by `aos world state get`."""
    _cell_operation(CELL_RETRY, workflow, key, reason, node_url, world_path, as_json)


@cell_group.command("reset")
@click.argument("workflow")
@click.argument("key", required=False)
@_reason_option
@node_option
@world_option
@json_option
@handles_errors
def cell_reset_command(
    workflow: str,
    key: str | None,
    reason: str,
    node_url: str | None,
    world_path: str,
    as_json: bool,
) -> None:
    """Delete a cell (failed or not, with no open intents): its next event starts it
    afresh."""
    _cell_operation(CELL_RESET, workflow, key, reason, node_url, world_path, as_json)


def _cell_operation(
    action: str,
    workflow: str,
    key: str | None,
    reason: str,
    node_url: str | None,
    world_path: str,
    as_json: bool,
) -> None:
    request = {"action": action, "workflow": workflow, "key_text": key, "reason": reason}
    _operate(request, node_url, world_path, as_json)


@world_group.group("intent")
def intent_group() -> None:
    """An open intent: cancel it."""


@intent_group.command("cancel")
@click.argument("intent")
@_reason_option
@node_option
@world_option
@json_option
@handles_errors
def intent_cancel_command(
    intent: str, reason: str, node_url: str | None, world_path: str, as_json: bool
) -> None:
    """Close an open INTENT (its hash, or a unique prefix as `aos world status` shows it);
    its cell gets a receipt envelope with status `cancelled`, and a later receipt for it is
    refused."""
    request = {"action": INTENT_CANCEL, "intent": intent, "reason": reason}
    _operate(request, node_url, world_path, as_json)


@intent_group.command("show")
@click.argument("intent")
@node_option
@world_option
@json_option
@handles_errors
def intent_show_command(intent: str, node_url: str | None, world_path: str, as_json: bool) -> None:
    """An intent: open (with its effect, origin and params) or settled or cancelled, and the
    newest progress frames its adapter posted (kept by the node that serves the world)."""
    with world_client(world_path, node_url) as client:
        view = client.intent(intent).model_dump()
    if as_json:
        emit_json(view)
        return
    for line in _intent_lines(view, served=bool(view["served"])):
        click.echo(line)


def _intent_lines(view: dict[str, Any], *, served: bool) -> list[str]:
    lines = [f"intent    {view['intent']}", f"status    {view['status']}"]
    record = view.get("record")
    if isinstance(record, dict):
        origin = record["origin"]
        cell = cell_text(str(origin["workflow"]), key_value(from_json(origin["key"])))
        lines.append(f"effect    {record['effect']}  by {cell}  (step {record['cause']})")
        lines.append(f"params    {clip(json.dumps(record['params'], sort_keys=True))}")
    else:
        lines.append(f"closed    at seq {view.get('closed_seq')}")
    frames = view["progress"]
    if not served:
        lines.append("progress  (kept by the node that serves the world; none serves it now)")
    elif not frames:
        lines.append("progress  none reported")
    else:
        lines.append("progress")
        for frame in frames:
            body = frame["body"]
            done = "-" if body["fraction"] is None else f"{100 * body['fraction']:.0f}%"
            lines.append(
                f"  {done:>5}  {body['message']}  ({body['adapter']}, at_ns {body['at_ns']})"
            )
    return lines


def _operate(request: dict[str, Any], node_url: str | None, world_path: str, as_json: bool) -> None:
    """An operation, here or through the node that serves the world; what its run did."""
    from aos.kernel.node.models import OperationRequest  # pydantic: only when one runs

    with world_client(world_path, node_url) as client:
        answer = client.operate(OperationRequest.model_validate(request))
    _report(answer.action, answer.target, answer.seq, run_json(answer.report), as_json)


def _report(action: str, target: str, seq: int, run: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json({"action": action, "target": target, "seq": seq, "run": run})
        return
    verb = {CELL_RETRY: "retried", CELL_RESET: "reset", INTENT_CANCEL: "cancelled"}[action]
    click.echo(f"{verb:<9} {target}  seq {seq}")
    for line in run_lines(run):
        click.echo(line)
