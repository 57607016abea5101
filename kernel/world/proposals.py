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

from typing import Any

from aos.kernel.hashing import Hash
from aos.kernel.world import records
from aos.kernel.world.world import World

PROPOSALS_CLOSED_KEPT = 100
"""Closed (applied or rejected) proposals the head keeps, the newest by sequence; an older one
leaves the head (and `aos gov ls`) but stays in the journal. A constant, not a per-open limit:
the head checkpoint's contents depend on it, and a replay must rebuild the same head."""

PROPOSED = "proposed"
SHADOWED = "shadowed"
APPROVED = "approved"
REJECTED = "rejected"
APPLIED = "applied"
CLOSED = (APPLIED, REJECTED)


def record(world: World, action: dict[str, Any]) -> int:
    """Journal a governance action and apply it to the world (not committed: the caller
    commits); its sequence number."""
    seq = world.append(action)
    take(world, action, seq)
    return seq


def take(world: World, action: dict[str, Any], seq: int) -> None:
    """What the governance record `action`, journaled at `seq`, does to the world."""
    kind, proposal = action["action"], str(action["proposal"])
    if kind == PROPOSED:
        world.proposals[proposal] = {
            "seq": seq,
            "status": PROPOSED,
            "base": action["base"],
            "manifest": action["manifest"],
            "shadow": None,
            "decision": None,
        }
        return
    entry = world.proposals[proposal]
    if kind == SHADOWED:
        entry["shadow"] = {"state_height": action["state_height"], "report": action["report"]}
        if entry["status"] == PROPOSED:
            entry["status"] = SHADOWED
    elif kind in (APPROVED, REJECTED):
        entry["decision"] = {
            "action": kind,
            "approver": action["approver"],
            "reason": action["reason"],
        }
        entry["status"] = kind
        _forget_oldest_closed(world)
    elif kind == APPLIED:
        entry["status"] = APPLIED
        _forget_oldest_closed(world)
        world.switch_manifest(Hash(entry["manifest"]))


def is_recorded_action(value: Any) -> bool:
    """Whether a recorded governance record has the fields `take` reads for its action."""
    if not isinstance(value, dict) or value.get("kind") != records.GOVERNANCE:
        return False
    needed = _FIELDS.get(str(value.get("action")))
    return (
        needed is not None
        and isinstance(value.get("proposal"), str)
        and all(name in value for name in needed)
    )


# The fields `take` reads, per action.
_FIELDS: dict[str, tuple[str, ...]] = {
    PROPOSED: ("base", "manifest"),
    SHADOWED: ("state_height", "report"),
    APPROVED: ("approver", "reason"),
    REJECTED: ("approver", "reason"),
    APPLIED: (),
}


def _forget_oldest_closed(world: World) -> None:
    """Keep the head's proposals bounded: only the newest PROPOSALS_CLOSED_KEPT closed ones."""
    closed = sorted(
        (entry["seq"], proposal)
        for proposal, entry in world.proposals.items()
        if entry["status"] in CLOSED
    )
    for _, proposal in closed[: max(0, len(closed) - PROPOSALS_CLOSED_KEPT)]:
        del world.proposals[proposal]
