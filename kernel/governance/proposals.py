"""Governance: propose a manifest change, shadow it against the live history, decide, apply.

    propose (a patch against the current manifest hash)
      -> shadow (replay the live journal; run the proposed workflows beside the live ones)
      -> approve | reject (with an approver and a reason)
      -> apply (approved, shadowed at the current state, strict quiescence)

Every action is a journaled input (`governance` records), so a replay reproduces governance
history, and apply switches the manifest atomically in one flush (spec/06-governance.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aos.kernel import cbor, prefixes
from aos.kernel.air.check import AnyDefinition
from aos.kernel.air.errors import AirError
from aos.kernel.air.loader import LoadedManifest, assemble_manifest
from aos.kernel.air.model import (
    REF_LISTS,
    AddDefOp,
    AddSubscriptionOp,
    DefModule,
    Manifest,
    NamedRef,
    Patch,
    RemoveDefOp,
    RemoveSubscriptionOp,
    ReplaceDefOp,
    SetRefsOp,
    SetRoutingOp,
    canonical_form,
    def_hash,
)
from aos.kernel.errors import AosError
from aos.kernel.hashing import Hash, hash_bytes, hash_value
from aos.kernel.prefixes import IdAmbiguousError
from aos.kernel.store.interface import Store
from aos.kernel.world import governance_records, records
from aos.kernel.world.reader import WorldReader
from aos.kernel.world.world import World

PROPOSALS_OPEN_MAX_DEFAULT = 64
SHADOW_STATE_BYTES_MAX_DEFAULT = 16 * 1024
"""Largest state (encoded) a shadow report keeps, live and proposed, where a cell first
diverges; a larger one is kept by its size and hash."""


class GovError(AosError):
    code = "gov.error"


class GovPatchInvalidError(GovError):
    code = "gov.patch_invalid"
    hint = "the patch does not apply to the current manifest, or its result does not check"


class GovPatchTamperedError(GovError):
    code = "gov.patch_tampered"
    hint = "the patch's content does not hash to the hash it was given with"


class GovStaleBaseError(GovError):
    code = "gov.stale_base"
    hint = "the patch was written against another manifest; rebase it on the current one"


class GovUnknownProposalError(GovError):
    code = "gov.unknown_proposal"
    hint = "list proposals with `aos gov ls`"


class ProposalAmbiguousError(IdAmbiguousError):
    code = "gov.proposal_ambiguous"
    hint = "give more digits of the proposal hash (`aos gov ls` lists them)"


def resolve_proposal(world: World, text: str) -> str:
    """The proposal named by its full id or a unique prefix of its hash (with or without
    `blake3:`), as every governance command and route takes it."""
    if text in world.proposals:
        return text
    return prefixes.resolve(
        text,
        sorted(world.proposals),
        what="proposal",
        unknown=GovUnknownProposalError,
        ambiguous=ProposalAmbiguousError,
        hashes=True,
    )


class GovDuplicateProposalError(GovError):
    code = "gov.duplicate_proposal"
    hint = "this exact patch is already proposed"


class GovAlreadyDecidedError(GovError):
    code = "gov.already_decided"
    hint = "a proposal is approved or rejected once"


class GovRejectedError(GovError):
    code = "gov.rejected"
    hint = "a rejected proposal cannot be applied; propose again"


class GovNotApprovedError(GovError):
    code = "gov.not_approved"
    hint = "approve the proposal first"


class GovNotShadowedError(GovError):
    code = "gov.not_shadowed"
    hint = "shadow the proposal first: `aos gov shadow ID`"


class GovShadowStaleError(GovError):
    code = "gov.shadow_stale"
    hint = "the world moved since the shadow ran: shadow it again"


class GovNotQuiescentError(GovError):
    code = "gov.not_quiescent"
    hint = "apply needs no open intents and no queued work; settle them first"


class GovShadowFailedError(GovError):
    code = "gov.shadow_failed"
    hint = "the live journal does not replay; run `aos world replay --verify` to see where"


class GovApproverRequiredError(GovError):
    code = "gov.approver_required"
    hint = "name who decides: --approver NAME"


class GovTooManyProposalsError(GovError):
    code = "gov.too_many_proposals"
    hint = "decide or apply open proposals first (proposals_open_max)"


# --------------------------------------------------------------------------------------------
# Patches


def apply_patch(
    manifest: Manifest,
    definitions: Mapping[str, AnyDefinition],
    patch: Patch,
    load_definition: Callable[[str, Hash], AnyDefinition],
) -> LoadedManifest:
    """The checked result of applying `patch` to a manifest and its definitions."""
    defs: dict[str, AnyDefinition] = dict(definitions)
    refs: dict[str, list[NamedRef]] = {k: list(v) for k, v in manifest.ref_lists().items()}
    subscriptions = list(manifest.routing.subscriptions)
    for index, op in enumerate(patch.ops):
        path = f"ops[{index}]"
        if isinstance(op, AddDefOp):
            new = op.add_def.def_
            if new.name in defs:
                raise GovPatchInvalidError(f"{new.name} already exists", path=path)
            defs[new.name] = new
            refs[new.kind].append(NamedRef(name=new.name))
        elif isinstance(op, ReplaceDefOp):
            new = op.replace_def.def_
            _expect(defs, new.name, op.replace_def.pre_hash, path, kind=new.kind)
            defs[new.name] = new
            refs[new.kind] = [
                r if r.name != new.name else NamedRef(name=new.name) for r in refs[new.kind]
            ]
        elif isinstance(op, RemoveDefOp):
            old = _expect(defs, op.remove_def.name, op.remove_def.pre_hash, path)
            del defs[old.name]
            refs[old.kind] = [r for r in refs[old.kind] if r.name != old.name]
        elif isinstance(op, SetRoutingOp):
            subscriptions = list(op.set_routing.subscriptions)
        elif isinstance(op, AddSubscriptionOp):
            subscriptions.append(op.add_subscription)
        elif isinstance(op, RemoveSubscriptionOp):
            if op.remove_subscription not in subscriptions:
                raise GovPatchInvalidError("no such subscription to remove", path=path)
            subscriptions.remove(op.remove_subscription)
        elif isinstance(op, SetRefsOp):
            for change in op.set_refs.remove:
                refs[change.kind] = [r for r in refs[change.kind] if r.name != change.name]
                defs.pop(change.name, None)
            for change in op.set_refs.add:
                if change.hash_ is None:
                    raise GovPatchInvalidError(
                        f"set_refs.add {change.name} needs a hash", path=path
                    )
                defs[change.name] = load_definition(change.name, Hash(change.hash_))
                refs[change.kind].append(NamedRef(name=change.name, hash=change.hash_))
    fields: dict[str, Any] = {REF_LISTS[kind]: value for kind, value in refs.items()}
    fields["routing"] = manifest.routing.model_copy(update={"subscriptions": subscriptions})
    new_manifest = manifest.model_copy(update=fields)
    try:
        return assemble_manifest(new_manifest, defs)
    except AirError as error:
        raise GovPatchInvalidError(f"the patched manifest does not check: {error}") from None


def _expect(
    defs: Mapping[str, AnyDefinition],
    name: str,
    pre_hash: str | None,
    path: str,
    *,
    kind: str | None = None,
) -> AnyDefinition:
    old = defs.get(name)
    if old is None:
        raise GovPatchInvalidError(f"{name} does not exist", path=path)
    if kind is not None and old.kind != kind:
        raise GovPatchInvalidError(f"{name} is a {old.kind}, not a {kind}", path=path)
    if pre_hash is not None and str(def_hash(old)) != pre_hash:
        raise GovPatchInvalidError(f"{name} is not at {pre_hash} any more", path=path)
    return old


def diff(old: LoadedManifest, new: LoadedManifest) -> tuple[dict[str, Any], list[str]]:
    """The patch (as a value) that turns `old` into `new`, and a readable diff."""
    ops: list[dict[str, Any]] = []
    lines: list[str] = []
    for name in sorted(set(old.definitions) | set(new.definitions)):
        before, after = old.definitions.get(name), new.definitions.get(name)
        if before is None and after is not None:
            ops.append({"add_def": {"def": canonical_form(after)}})
            lines.append(f"+ {after.kind} {name}")
        elif after is None and before is not None:
            ops.append({"remove_def": {"name": name, "pre_hash": str(def_hash(before))}})
            lines.append(f"- {before.kind} {name}")
        elif before is not None and after is not None and def_hash(before) != def_hash(after):
            ops.append(
                {"replace_def": {"def": canonical_form(after), "pre_hash": str(def_hash(before))}}
            )
            lines.append(
                f"~ {after.kind} {name}  {def_hash(before).short()} -> {def_hash(after).short()}"
            )
    old_routes = [
        s.model_dump(by_alias=True, exclude_none=True) for s in old.manifest.routing.subscriptions
    ]
    new_routes = [
        s.model_dump(by_alias=True, exclude_none=True) for s in new.manifest.routing.subscriptions
    ]
    if old_routes != new_routes:
        ops.append({"set_routing": {"subscriptions": new_routes}})
        for route in new_routes:
            if route not in old_routes:
                lines.append(f"+ route {route['event']} -> {route['workflow']}")
        for route in old_routes:
            if route not in new_routes:
                lines.append(f"- route {route['event']} -> {route['workflow']}")
    patch = {"$kind": "patch", "base_manifest": str(old.manifest_hash), "ops": ops}
    return patch, lines


# --------------------------------------------------------------------------------------------
# The actions (each a journaled input)


@dataclass(frozen=True)
class PreparedPatch:
    """A patch value read without the world: its id (its hash) and its model."""

    proposal: str
    patch: Patch


def prepare_patch(patch_value: Any, expected_hash: str | None = None) -> PreparedPatch:
    """Hash and validate a patch, which needs no world: the node does it beside the writer
    thread, so a large patch holds up no other operation."""
    proposal = str(hash_value(patch_value))
    if expected_hash is not None and proposal != expected_hash:
        raise GovPatchTamperedError(f"the patch hashes to {proposal}, not {expected_hash}")
    try:
        patch = Patch.model_validate(patch_value)
    except ValueError as error:
        raise GovPatchInvalidError(f"not a patch document: {error}") from None
    return PreparedPatch(proposal, patch)


def propose(
    world: World,
    patch_value: Any,
    *,
    blobs: Mapping[Hash, bytes] | None = None,
    expected_hash: str | None = None,
    proposals_open_max: int = PROPOSALS_OPEN_MAX_DEFAULT,
    prepared: PreparedPatch | None = None,
) -> str:
    """Journal a proposal; returns its id (the hash of the patch). `blobs` carries the WASM
    bytes of modules the patch adds, stored with the proposal; `prepared` is what
    `prepare_patch(patch_value, expected_hash)` answered, when the caller already has it."""
    world.require_open()
    prepared = prepared or prepare_patch(patch_value, expected_hash)
    proposal, patch = prepared.proposal, prepared.patch
    current = str(world.manifest_hash)
    if patch.base_manifest != current:
        raise GovStaleBaseError(
            f"the patch is against {patch.base_manifest}; the world is at {current}"
        )
    if proposal in world.proposals:
        raise GovDuplicateProposalError(f"{proposal} is already proposed")
    if (
        sum(1 for p in world.proposals.values() if p["status"] not in ("applied", "rejected"))
        >= proposals_open_max
    ):
        raise GovTooManyProposalsError(f"{proposals_open_max} proposals are open")
    for data in (blobs or {}).values():
        world.blobs.put(data)
    loaded = apply_patch(
        world.runtime.loaded.manifest,
        world.runtime.loaded.definitions,
        patch,
        lambda name, hash_: _stored_definition(world, name, hash_),
    )
    for module in (d for d in loaded.definitions.values() if isinstance(d, DefModule)):
        assert module.artifact.hash_ is not None
        if not world.blobs.has(Hash(module.artifact.hash_)):
            raise GovPatchInvalidError(
                f"module {module.name}'s binary {module.artifact.hash_} is not stored"
            )
    for definition in loaded.definitions.values():
        world.blobs.put_value(canonical_form(definition))
    world.blobs.put_value(canonical_form(loaded.manifest))
    world.blobs.put_value(patch_value)
    stamp = world.next_stamp()
    governance_records.record(
        world,
        records.GovernanceRecord(
            records.PROPOSED,
            proposal,
            stamp.to_value(),
            base=current,
            manifest=str(loaded.manifest_hash),
            patch=proposal,
        ),
    )
    world.commit()
    return proposal


def record_shadow(world: World, proposal: str, report: ShadowReport) -> None:
    """Journal a shadow run's report (the report itself goes to the CAS)."""
    entry = _proposal(world, proposal)
    if entry["status"] in ("applied", "rejected"):
        raise GovAlreadyDecidedError(f"{proposal} is {entry['status']}")
    report_hash = str(world.blobs.put_value(report.to_value()))
    record_shadow_raw(world, proposal, report.state_height, report_hash, report.summary())


def record_shadow_raw(
    world: World, proposal: str, state_height: int, report_hash: str, summary: dict[str, int]
) -> None:
    """Journal a shadow whose report is already in the CAS (also how a replay re-records it)."""
    entry = _proposal(world, proposal)
    if entry["status"] in ("applied", "rejected"):
        raise GovAlreadyDecidedError(f"{proposal} is {entry['status']}")
    stamp = world.next_stamp()
    governance_records.record(
        world,
        records.GovernanceRecord(
            records.SHADOWED,
            proposal,
            stamp.to_value(),
            state_height=state_height,
            report=report_hash,
            summary=summary,
        ),
    )
    world.commit()


def decide(world: World, proposal: str, *, approve: bool, approver: str, reason: str) -> None:
    entry = _proposal(world, proposal)
    if entry["decision"] is not None or entry["status"] == "applied":
        raise GovAlreadyDecidedError(f"{proposal} is already {entry['status']}")
    if not approver.strip():
        raise GovApproverRequiredError("an approver name is required")
    action = "approved" if approve else "rejected"
    stamp = world.next_stamp()
    governance_records.record(
        world,
        records.GovernanceRecord(
            action, proposal, stamp.to_value(), approver=approver, reason=reason
        ),
    )
    world.commit()


def blockers(reader: WorldReader) -> list[str]:
    """What keeps the world from strict quiescence."""
    found = [
        f"open intent {i['intent']} ({i['effect']}, {i['workflow']})" for i in reader.open_intents()
    ]
    queued = reader.status()["queued"]
    if queued:
        found.append(f"{queued} queued deliveries")
    return found


def apply(world: World, proposal: str) -> str:
    """Switch the world to the proposal's manifest; returns the new manifest hash."""
    entry = _proposal(world, proposal)
    if entry["status"] == "rejected":
        raise GovRejectedError(f"{proposal} was rejected")
    if entry["status"] == "applied":
        raise GovAlreadyDecidedError(f"{proposal} is already applied")
    if entry["shadow"] is None:
        raise GovNotShadowedError(f"{proposal} has no shadow run")
    if entry["decision"] is None:
        raise GovNotApprovedError(f"{proposal} is not approved")
    if entry["base"] != str(world.manifest_hash):
        raise GovStaleBaseError(f"the world's manifest is now {world.manifest_hash}")
    if entry["shadow"]["state_height"] != world.state_height:
        raise GovShadowStaleError(
            f"shadowed at {entry['shadow']['state_height']}, the world is at {world.state_height}"
        )
    blocking = blockers(world.reader)
    if blocking:
        raise GovNotQuiescentError(f"{len(blocking)} things block apply", blockers=blocking)
    stamp = world.next_stamp()
    governance_records.record(
        world,
        records.GovernanceRecord(
            records.APPLIED, proposal, stamp.to_value(), manifest=entry["manifest"]
        ),
    )
    world.commit()
    return str(entry["manifest"])


def replay_action(world: World, recorded: records.GovernanceRecord, source: Store) -> None:
    """Take a recorded governance action again, checked as when it was taken (a replay
    audit and a shadow feed the journal's governance records through here): the patch is
    read from the audited store `source`."""
    action, proposal = recorded.action, recorded.proposal
    if action == records.PROPOSED:
        propose(world, source.cas.get_value(Hash(str(recorded.patch))))
    elif action == records.SHADOWED:
        assert recorded.state_height is not None and recorded.summary is not None
        record_shadow_raw(
            world, proposal, recorded.state_height, str(recorded.report), recorded.summary
        )
    elif action in (records.APPROVED, records.REJECTED):
        decide(
            world,
            proposal,
            approve=action == records.APPROVED,
            approver=str(recorded.approver),
            reason=str(recorded.reason),
        )
    elif action == records.APPLIED:
        apply(world, proposal)


def _proposal(world: World, proposal: str) -> dict[str, Any]:
    world.require_open()
    entry = world.proposals.get(proposal)
    if entry is None:
        raise GovUnknownProposalError(f"no proposal {proposal}")
    return entry


def _stored_definition(world: World, name: str, hash_: Hash) -> AnyDefinition:
    from aos.kernel.air.model import DEF_MODELS

    value: Any = world.blobs.get_value(hash_)
    definition: Any = DEF_MODELS[value["$kind"]].model_validate(value)
    if definition.name != name:
        raise GovPatchInvalidError(f"{hash_} is {definition.name}, not {name}")
    return definition  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------------
# Shadow reports


@dataclass
class CellShadow:
    workflow: str
    key: Any
    steps: int = 0
    diverged_at: int | None = None
    difference: str | None = None
    new_effects: list[dict[str, Any]] = field(default_factory=list)
    # Where the cell first diverged: the state the live step left and the one the proposed
    # step left (`diverged_states`), so a reader sees them side by side.
    live_state: dict[str, Any] | None = None
    proposed_state: dict[str, Any] | None = None

    @property
    def outcome(self) -> str:
        return "reproduces" if self.diverged_at is None else "diverges"

    def to_value(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "key": cbor.to_json(self.key),
            "steps": self.steps,
            "outcome": self.outcome,
            "diverged_at": self.diverged_at,
            "difference": self.difference,
            "new_effects": self.new_effects,
            "live_state": self.live_state,
            "proposed_state": self.proposed_state,
        }

    def diverged_states(
        self,
        live: bytes | None,
        proposed: bytes | None,
        *,
        bytes_max: int = SHADOW_STATE_BYTES_MAX_DEFAULT,
    ) -> None:
        """Keep both states (canonical CBOR, None for a deleted cell) as JSON, or by size and
        hash past `bytes_max`."""
        self.live_state = _state_shown(live, bytes_max)
        self.proposed_state = _state_shown(proposed, bytes_max)


def _state_shown(data: bytes | None, bytes_max: int) -> dict[str, Any]:
    if data is None:
        return {"bytes": 0, "hash": None, "value": None}
    shown = cbor.to_json(cbor.decode(data)) if len(data) <= bytes_max else None
    return {"bytes": len(data), "hash": str(hash_bytes(data)), "value": shown}


@dataclass
class ShadowReport:
    proposal: str
    state_height: int
    cells: list[CellShadow] = field(default_factory=list)
    removed_workflows: list[str] = field(default_factory=list)
    intents_affected: list[dict[str, Any]] = field(default_factory=list)
    routing: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    allowlists: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, int]:
        return {
            "cells": len(self.cells),
            "reproduce": sum(1 for c in self.cells if c.diverged_at is None),
            "diverge": sum(1 for c in self.cells if c.diverged_at is not None),
            "new_effects": sum(len(c.new_effects) for c in self.cells),
            "intents_affected": len(self.intents_affected),
            "routes_changed": sum(len(v) for v in self.routing.values()),
            "allowlist_changes": len(self.allowlists),
        }

    def to_value(self) -> dict[str, Any]:
        return {
            "proposal": self.proposal,
            "state_height": self.state_height,
            "summary": self.summary(),
            "cells": [c.to_value() for c in self.cells],
            "removed_workflows": self.removed_workflows,
            "intents_affected": self.intents_affected,
            "routing": self.routing,
            "allowlists": self.allowlists,
        }
