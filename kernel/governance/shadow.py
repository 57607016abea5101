"""Shadow runs: replay the live history against a proposed manifest, cell by cell.

The live journal is replayed with the manifest in force (record-driven, every record checked,
as in a replay audit), so every cell receives exactly the deliveries it received live. At
each step the proposed manifest's workflow of the same name is run beside it on the cell's
*shadow state* — the state the proposed module has produced for that cell so far — with the
same event and context, and its output is checked against the proposed manifest's schemas and
admission rules. Per cell the report says whether the proposed module reproduces the recorded
history or where it first diverges (and how), and which effects it would emit that were not
emitted. It also lists open intents the proposed manifest would leave without a declaring
workflow or with a changed receipt schema, and the routing and allowlist differences.

A shadow promises nothing about branches the history never took (seed §3.8).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aos.kernel import cbor
from aos.kernel.air.loader import LoadedManifest
from aos.kernel.governance.proposals import (
    CellShadow,
    GovShadowFailedError,
    GovUnknownProposalError,
    ShadowReport,
    replay_action,
)
from aos.kernel.store import Store, open_store
from aos.kernel.store.memory_store import MemoryStore
from aos.kernel.wasm import StepFault, WasmEngine
from aos.kernel.world.errors import WorldMissingError
from aos.kernel.world.replayer import DivergedError, Replayer, ReplayReport
from aos.kernel.world.scheduler import Message
from aos.kernel.world.world import StepOutcome, World, head_at_end


def shadow(
    world_dir: str | Path,
    proposal: str,
    *,
    engine: WasmEngine | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ShadowReport:
    """Shadow `proposal` against the history of the world at `world_dir` (read-only)."""
    engine = engine or WasmEngine()
    with recorded_history(world_dir, engine, progress) as (source, replayer):
        head: Any = head_at_end(source, engine)
        entry = head.get("proposals", {}).get(proposal)
        if entry is None:
            raise GovUnknownProposalError(f"no proposal {proposal}")
        old = replayer.loaded(str(head["manifest"]))
        new = replayer.loaded(str(entry["manifest"]))
        live = replayer.from_genesis()
        beside = World.scratch(
            MemoryStore(fallback_cas=source.cas),
            new,
            engine=engine,
            clock=live.clock,
            limits=live.limits,
        )
        report = ShadowReport(proposal=proposal, state_height=int(head["state_height"]))
        runner = _Beside(beside, report)
        live.on_step = runner.on_step
        try:
            replayer.replay(
                live, ReplayReport(ok=True, start_seq=2, end_seq=replayer.end), compare_head=False
            )
        except DivergedError as diverged:
            # The live history itself does not replay: no shadow can be trusted.
            raise GovShadowFailedError(
                f"the live journal does not replay: {diverged.divergence.message}",
                seq=diverged.divergence.seq,
            ) from None
        report.cells = sorted(runner.cells.values(), key=lambda c: (c.workflow, repr(c.key)))
        report.removed_workflows = sorted(set(old.workflows) - set(new.workflows))
        report.intents_affected = _intents_affected(head["open_intents"], old, new)
        report.routing = _routing_diff(old, new)
        report.allowlists = _allowlist_diff(old, new)
        return report


@contextmanager
def recorded_history(
    world_dir: str | Path,
    engine: WasmEngine,
    progress: Callable[[int, int], None] | None,
) -> Iterator[tuple[Store, Replayer]]:
    """The world's store, read-only as of one commit (beside a serving writer), and a
    replayer of its journal whose scratch CAS spills to a temporary folder: what every shadow
    replays (governance here, flow versions in flows/serve/flow_shadow.py)."""
    root = Path(world_dir)
    if not (root / "store").is_dir():
        raise WorldMissingError(f"no world at {root}")
    with (
        open_store(root, readonly=True) as source,
        source.consistent(),
        tempfile.TemporaryDirectory() as scratch,
    ):
        replayer = Replayer(
            source, engine, progress, spill_dir=Path(scratch), governance=replay_action
        )
        try:
            yield source, replayer
        finally:
            replayer.close()


class _Beside:
    """Runs the proposed workflow beside each live step."""

    def __init__(self, beside: World, report: ShadowReport) -> None:
        self.beside = beside
        self.report = report
        self.cells: dict[tuple[str, bytes | None], CellShadow] = {}
        self.states: dict[tuple[str, bytes | None], bytes | None] = {}

    def on_step(self, message: Message, step_input: bytes, live: Any) -> None:
        cell_id = (message.workflow, message.key)
        cell = self.cells.get(cell_id)
        if cell is None:
            key = cbor.decode(message.key) if message.key else None
            cell = self.cells[cell_id] = CellShadow(message.workflow, key)
        cell.steps += 1
        if message.workflow not in self.beside.runtime.workflows:
            if cell.diverged_at is None:
                cell.diverged_at = message.seq
                cell.difference = "the proposed manifest has no such workflow"
            return
        proposed = self._run(message, step_input, cell_id)
        difference = _difference(live, proposed)
        if difference is not None and cell.diverged_at is None:
            cell.diverged_at = message.seq
            cell.difference = difference
            cell.diverged_states(_state_of(live), _state_of(proposed))
        if isinstance(proposed, StepOutcome) and cell.diverged_at is not None:
            # Only a diverged cell needs its own shadow state: for every other cell it is the
            # live state, which the live step's input already carries. Memory grows with the
            # divergent cells, not with the world.
            self.states[cell_id] = proposed.state
            live_effects = set() if isinstance(live, StepFault) else _effects(live)
            for effect, params in sorted(_effects(proposed) - live_effects):
                cell.new_effects.append(
                    {
                        "seq": message.seq,
                        "effect": effect,
                        "params": cbor.to_json(cbor.decode(params)),
                    }
                )

    def _run(self, message: Message, step_input: bytes, cell_id: tuple[str, bytes | None]) -> Any:
        envelope: Any = cbor.decode(step_input)
        if cell_id in self.states:
            envelope["state"] = self.states[cell_id]
        try:
            runner = self.beside.runtime.runner(message.workflow)
            result = runner.step(
                cbor.encode(envelope), seq=message.seq, read_blob=self.beside.read_blob
            )
            return self.beside.check_output(message, result, runner.module_hash)
        except StepFault as fault:
            return fault


def _state_of(outcome: Any) -> bytes | None:
    """The state a step left (None: it faulted, or deleted the cell)."""
    return outcome.state if isinstance(outcome, StepOutcome) else None


def _effects(outcome: StepOutcome) -> set[tuple[str, bytes]]:
    return {(e.effect, cbor.encode(e.params)) for e in outcome.effects}


def _difference(live: Any, proposed: Any) -> str | None:
    if isinstance(live, StepFault) or isinstance(proposed, StepFault):
        live_code = live.code if isinstance(live, StepFault) else None
        proposed_code = proposed.code if isinstance(proposed, StepFault) else None
        if live_code == proposed_code:
            return None
        if proposed_code is None:
            return f"the live step faulted ({live_code}); the proposed one does not"
        return f"the proposed step faults: {proposed_code}: {proposed}"
    assert isinstance(live, StepOutcome) and isinstance(proposed, StepOutcome)
    if live.state != proposed.state:
        return "the state differs"
    live_events = [(event.schema, event.encoded) for event in live.events]
    proposed_events = [(event.schema, event.encoded) for event in proposed.events]
    if live_events != proposed_events:
        return f"emitted events differ ({len(live_events)} live, {len(proposed_events)} proposed)"
    if [(e.effect, cbor.encode(e.params)) for e in live.effects] != [
        (e.effect, cbor.encode(e.params)) for e in proposed.effects
    ]:
        return "emitted effects differ"
    return None


def _intents_affected(
    open_intents: Any, old: LoadedManifest, new: LoadedManifest
) -> list[dict[str, Any]]:
    affected = []
    for intent in open_intents:
        workflow = new.workflows.get(intent["workflow"])
        effect_old = old.definitions.get(intent["effect"])
        effect_new = new.definitions.get(intent["effect"])
        reason = None
        if workflow is None:
            reason = "its workflow is removed"
        elif intent["effect"] not in workflow.effects_emitted:
            reason = "the workflow no longer declares its effect"
        elif effect_old is not None and effect_new is None:
            reason = "its effect is removed"
        elif (
            effect_old is not None
            and effect_new is not None
            and getattr(effect_old, "receipt", None) != getattr(effect_new, "receipt", None)
        ):
            reason = "its effect's receipt schema changed"
        elif getattr(effect_old, "receipt", None) is not None and old.hashes.get(
            effect_old.receipt  # type: ignore[union-attr]
        ) != new.hashes.get(effect_old.receipt):  # type: ignore[union-attr]
            reason = "its receipt schema's definition changed"
        if reason is not None:
            affected.append(
                {
                    "intent": intent["intent"],
                    "effect": intent["effect"],
                    "workflow": intent["workflow"],
                    "key": cbor.to_json(cbor.decode(intent["key"]) if intent["key"] else None),
                    "reason": reason,
                }
            )
    return affected


def _routing_diff(old: LoadedManifest, new: LoadedManifest) -> dict[str, list[dict[str, Any]]]:
    before = [
        s.model_dump(by_alias=True, exclude_none=True) for s in old.manifest.routing.subscriptions
    ]
    after = [
        s.model_dump(by_alias=True, exclude_none=True) for s in new.manifest.routing.subscriptions
    ]
    return {
        "added": [s for s in after if s not in before],
        "removed": [s for s in before if s not in after],
    }


def _allowlist_diff(old: LoadedManifest, new: LoadedManifest) -> list[dict[str, Any]]:
    changes: list[dict[str, Any]] = []
    for name in sorted(set(old.workflows) | set(new.workflows)):
        before = set(old.workflows[name].effects_emitted) if name in old.workflows else set()
        after = set(new.workflows[name].effects_emitted) if name in new.workflows else set()
        if before != after:
            changes.append(
                {
                    "workflow": name,
                    "effects_added": sorted(after - before),
                    "effects_removed": sorted(before - after),
                }
            )
    for name in sorted(set(old.definitions) | set(new.definitions)):
        old_def, new_def = old.definitions.get(name), new.definitions.get(name)
        before_adapters = set(getattr(old_def, "adapters", []) or [])
        after_adapters = set(getattr(new_def, "adapters", []) or [])
        if before_adapters != after_adapters:
            changes.append(
                {
                    "effect": name,
                    "adapters_added": sorted(after_adapters - before_adapters),
                    "adapters_removed": sorted(before_adapters - after_adapters),
                }
            )
    return changes
