"""The actions a client asks of an open world, each answering its typed model
(kernel/node/models.py): the node's routes run them on its host thread, the in-process
client (kernel/client.py, `LocalWorld`) on the world it opens, so the two answer alike.

Each takes ids as users give them: a proposal or an open intent by a unique prefix of its
hash (kernel/prefixes.py), a cell's key as typed (`key_text`, read as `aos world state get`
reads KEY) or as a value.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aos.kernel import cbor
from aos.kernel.node import models

if TYPE_CHECKING:
    from aos.kernel.world.results import RunReport
    from aos.kernel.world.world import World


def report_body(report: RunReport) -> models.RunReportBody:
    return models.RunReportBody(
        steps=report.steps,
        faults=report.faults,
        fault_codes=list(report.fault_codes),
        dropped=report.dropped,
        events=report.events,
        intents=report.intents,
        first_seq=report.first_seq,
        last_seq=report.last_seq,
    )


def problems(world: World, seq: int, report: models.RunReportBody) -> list[models.RunProblem]:
    """The faults and drops of the run an input at `seq` made (none read when it had none)."""
    if not (report.faults or report.dropped):
        return []
    from aos.kernel.world.explain import run_problems

    last = max(seq, report.last_seq)
    found = run_problems(world.store.journal, seq, last)
    return [models.RunProblem.model_validate(problem) for problem in found]


def send(world: World, schema: str, value: Any, key: str | None) -> models.SendResponse:
    from aos.kernel.world.results import RunReport
    from aos.kernel.world.router import RouteError

    try:
        admitted, report = world.send(schema, value, idempotency_key=key)
    except RouteError as error:
        error.detail["rejected_seq"] = world.height  # journaled as ingress_rejected
        raise
    body = report_body(RunReport() if admitted.duplicate else report)
    return models.SendResponse(
        seq=admitted.seq,
        event_hash=str(admitted.event_hash),
        deliveries=admitted.deliveries,
        duplicate=admitted.duplicate,
        report=body,
        problems=problems(world, admitted.seq, body),
    )


def operate(world: World, request: models.OperationRequest) -> models.OperationResponse:
    """An operation as a user names its target: an intent by a unique prefix, a cell's key
    as typed (`key_text`) or as a value (`key`)."""
    from aos.kernel.world.intent_view import resolve_intent
    from aos.kernel.world.operations import Operation

    fields: dict[str, Any] = {"action": request.action, "reason": request.reason}
    if request.intent is not None:
        fields["intent"] = resolve_intent(world.reader, request.intent)
    if request.workflow is not None:
        fields["workflow"] = request.workflow
        if request.key_text is not None:
            fields["key"] = world.reader.key_from_text(request.workflow, request.key_text)[1]
        else:
            fields["key"] = world.reader.key_bytes(
                request.workflow, cbor.from_json(request.key, "$.key")
            )
    seq = world.operate(Operation.parse(fields))
    return models.OperationResponse(
        seq=seq,
        action=request.action,
        report=report_body(world.run_to_idle()),
        target=fields.get("intent") or _cell_name(world, request.workflow, fields["key"]),
    )


def _cell_name(world: World, workflow: str | None, key: bytes | None) -> str:
    if key is None:
        return str(workflow)
    value = cbor.decode(key)
    text = (
        value
        if isinstance(value, str)
        else json.dumps(
            cbor.to_json(value), sort_keys=True, ensure_ascii=False, separators=(",", ":")
        )
    )
    return f"{workflow}[{text}]"


def time_answer(world: World, report: RunReport | None) -> models.TimeResponse:
    return models.TimeResponse(
        logical_ns=world.logical_ns, report=None if report is None else report_body(report)
    )


def propose(
    world: World, patch: Any, modules: list[bytes], expected_hash: str | None
) -> models.ProposalResponse:
    from aos.kernel.governance import proposals
    from aos.kernel.hashing import hash_bytes

    blobs = {hash_bytes(data): data for data in modules}
    proposal = proposals.propose(world, patch, blobs=blobs, expected_hash=expected_hash)
    return proposal_body(world, proposal)


def proposal_body(world: World, proposal: str) -> models.ProposalResponse:
    entry = cbor.to_json(world.proposals[proposal])
    return models.ProposalResponse.model_validate(
        {**entry, "proposal": proposal, "seq": world.height}
    )


def decide(
    world: World, proposal: str, *, approve: bool, approver: str, reason: str
) -> models.ProposalResponse:
    from aos.kernel.governance import proposals

    proposal = proposals.resolve_proposal(world, proposal)
    proposals.decide(world, proposal, approve=approve, approver=approver, reason=reason)
    return proposal_body(world, proposal)


def apply(world: World, proposal: str) -> models.ApplyResponse:
    from aos.kernel.governance import proposals

    proposal = proposals.resolve_proposal(world, proposal)
    manifest = proposals.apply(world, proposal)
    return models.ApplyResponse(proposal=proposal, manifest=str(manifest), seq=world.height)
