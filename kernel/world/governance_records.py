"""The world's proposals: what each governance action journaled does to the world
(spec/06-governance.md §2).

Governance (governance.py) decides whether an action is allowed: the patch applies, the
proposal is approved, shadowed at the current state, the world quiescent. Once allowed, the
action is a `governance` record, and what that record does to the world is here, in one
place: the proposal's entry in the head (`World.proposals`) and, for `applied`, the switch to
the proposal's manifest. A recovery rebuilding a head from the journal applies recorded
actions the same way (recovery.py).
"""

from __future__ import annotations

from aos.kernel.hashing import Hash
from aos.kernel.world import records
from aos.kernel.world.world import World

PROPOSALS_CLOSED_KEPT = 100
"""Closed (applied or rejected) proposals the head keeps, the newest by sequence; an older one
leaves the head (and `aos gov ls`) but stays in the journal. A constant, not a per-open limit:
the head checkpoint's contents depend on it, and a replay must rebuild the same head."""

PROPOSED, SHADOWED, APPROVED, REJECTED, APPLIED = (
    records.PROPOSED,
    records.SHADOWED,
    records.APPROVED,
    records.REJECTED,
    records.APPLIED,
)
CLOSED = (APPLIED, REJECTED)


def record(world: World, action: records.GovernanceRecord) -> int:
    """Journal a governance action and apply it to the world (not committed: the caller
    commits); its sequence number."""
    seq = world.append(action)
    take(world, action, seq)
    return seq


def take(world: World, action: records.GovernanceRecord, seq: int) -> None:
    """What the governance record `action`, journaled at `seq`, does to the world (its fields
    were checked for its action when it was built or parsed: records.GovernanceRecord)."""
    kind, proposal = action.action, action.proposal
    if kind == PROPOSED:
        world.proposals[proposal] = {
            "seq": seq,
            "status": PROPOSED,
            "base": action.base,
            "manifest": action.manifest,
            "shadow": None,
            "decision": None,
        }
        return
    entry = world.proposals[proposal]
    if kind == SHADOWED:
        entry["shadow"] = {"state_height": action.state_height, "report": action.report}
        if entry["status"] == PROPOSED:
            entry["status"] = SHADOWED
    elif kind in (APPROVED, REJECTED):
        entry["decision"] = {"action": kind, "approver": action.approver, "reason": action.reason}
        entry["status"] = kind
        _forget_oldest_closed(world)
    elif kind == APPLIED:
        entry["status"] = APPLIED
        _forget_oldest_closed(world)
        world.switch_manifest(Hash(entry["manifest"]))


def _forget_oldest_closed(world: World) -> None:
    """Keep the head's proposals bounded: only the newest PROPOSALS_CLOSED_KEPT closed ones."""
    closed = sorted(
        (entry["seq"], proposal)
        for proposal, entry in world.proposals.items()
        if entry["status"] in CLOSED
    )
    for _, proposal in closed[: max(0, len(closed) - PROPOSALS_CLOSED_KEPT)]:
        del world.proposals[proposal]
