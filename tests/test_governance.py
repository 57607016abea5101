"""Governance: propose, shadow against the live history, decide, apply with strict quiescence.

Proposals change the C counter (`manifests/counter-c`) by text replacement in a copy of its
source: a behaviour-preserving refactor, a variant that differs only for counts above 20, and
one that doubles every increment. They build in a fraction of a second (and hit the build
cache after the first run). Open intents come from the scripted fixture world.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from aos.kernel import cbor
from aos.kernel.air.loader import load_manifest_dir
from aos.kernel.air.model import canonical_form
from aos.kernel.audit import gc, replay
from aos.kernel.errors import AosError
from aos.kernel.governance import proposals, shadow
from aos.kernel.governance.proposals import PROPOSALS_OPEN_MAX_DEFAULT, ShadowReport
from aos.kernel.hashing import Hash, hash_bytes, hash_value
from aos.kernel.signing.signatures import signed_receipt
from aos.kernel.world import records
from aos.kernel.world.errors import StepBudgetExceededError
from aos.kernel.world.modules import building_resolver
from aos.kernel.world.world import World
from tests.test_world import COUNTER, COUNTER_C, EVENT, SCRIPTED, create, engine, inc, reopen

REPO = Path(__file__).resolve().parent.parent
COUNTER_SOURCE = REPO / "modules" / "examples" / "counter_c" / "counter.c"
ARTIFACT = "../../../modules/examples/counter_c/counter.c"
ADAPTER_SEED = bytes(range(32))  # demo/adapter@1 in the scripted fixture
KEYED = "demo/keyed@1"
PING = "demo/Ping@1"

# A larger scratch buffer for the state: other code, the same bytes out.
REFACTOR = {"arena_take(48);": "arena_take(64);"}
# Counts past 20 gain one more: a cell diverges exactly at the step that takes it past 20.
ABOVE_20 = {"    s.count = count;\n": "    s.count = count > 20 ? count + 1 : count;\n"}
# Every increment counts twice: every cell diverges at its first increment.
DOUBLE = {"u64 count = s.count + e.by;": "u64 count = s.count + 2 * e.by;"}


def variant(tmp_path: Path, name: str, changes: dict[str, str]) -> Path:
    """A copy of the counter-c manifest folder whose module is the C counter with `changes`."""
    folder = tmp_path / name
    shutil.copytree(COUNTER_C, folder)
    text = COUNTER_SOURCE.read_text()
    for old, new in changes.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (folder / "counter.c").write_text(text)
    defs = folder / "defs" / "counter.yaml"
    defs.write_text(defs.read_text().replace(ARTIFACT, "../counter.c"))
    return folder


def folder_patch(world: World, folder: Path) -> tuple[Any, dict[Hash, bytes]]:
    """The patch from the world's manifest to `folder`'s, and the module bytes it needs."""
    built: dict[Hash, Path] = {}
    loaded = load_manifest_dir(folder, artifact_resolver=building_resolver(built))
    patch, _ = proposals.diff(world.runtime.loaded, loaded)
    return patch, {h: path.read_bytes() for h, path in built.items()}


def propose_folder(world: World, folder: Path) -> str:
    patch, blobs = folder_patch(world, folder)
    return proposals.propose(world, patch, blobs=blobs)


def run_shadow(path: Path, proposal: str) -> ShadowReport:
    """Shadow with the world closed (the shadow reads the store), then journal the report."""
    report = shadow.shadow(path, proposal, engine=engine())
    with reopen(path) as world:
        proposals.record_shadow(world, proposal, report)
    return report


def approve(world: World, proposal: str) -> None:
    proposals.decide(world, proposal, approve=True, approver="ann", reason="looks right")


def counter_world(path: Path, counts: dict[str, list[int]]) -> dict[str, list[int]]:
    """A counter world; each key is incremented by each of its amounts in turn (round robin
    over the keys). Returns each increment's input seq per key."""
    seqs: dict[str, list[int]] = {key: [] for key in counts}
    with create(path) as world:
        for index in range(max(len(v) for v in counts.values())):
            for key, amounts in counts.items():
                if index < len(amounts):
                    admitted, _ = world.send(EVENT, inc(key, amounts[index]))
                    seqs[key].append(admitted.seq)
    return seqs


def journal_of(path: Path) -> list[tuple[int, dict[str, Any]]]:
    with reopen(path) as world:
        return list(world.store.journal.read(1))  # type: ignore[arg-type]


def governance_records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    return [(s, r) for s, r in journal_of(path) if r["kind"] == records.GOVERNANCE]


class refused:  # noqa: N801 (used like pytest.raises)
    """`with _Refused(code):` the block raises an AosError with that code."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, _: Any) -> bool:
        assert isinstance(error, AosError), f"expected {self.code}, got {error!r}"
        assert error.code == self.code, f"expected {self.code}, got {error.code}: {error}"
        return True


# --------------------------------------------------------------------------------------------
# Compatible and incompatible upgrades


def test_a_refactor_shadows_clean_on_every_cell_applies_and_the_world_keeps_working(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w"
    counter_world(path, {"a": [7, 7], "b": [15], "c": [1, 2, 3]})
    with reopen(path) as world:
        old_module = world.runtime.module_hash(COUNTER)
        proposal = propose_folder(world, variant(tmp_path, "refactor", REFACTOR))
        assert world.proposals[proposal]["status"] == "proposed"
    report = run_shadow(path, proposal)
    assert report.summary() == {
        "cells": 3,
        "reproduce": 3,
        "diverge": 0,
        "new_effects": 0,
        "intents_affected": 0,
        "routes_changed": 0,
        "allowlist_changes": 0,
    }
    assert {(c.key, c.steps, c.outcome) for c in report.cells} == {
        ("a", 2, "reproduces"),
        ("b", 1, "reproduces"),
        ("c", 3, "reproduces"),
    }
    with reopen(path) as world:
        approve(world, proposal)
        manifest = proposals.apply(world, proposal)
        assert str(world.manifest_hash) == manifest == world.proposals[proposal]["manifest"]
        new_module = world.runtime.module_hash(COUNTER)
        assert new_module != old_module
        # State continuity: the cells carry on where they were, stepped by the new module.
        world.send(EVENT, inc("a", 6))
        world.send(EVENT, inc("d", 1))
        assert world.reader.state(COUNTER, "a") == {"count": 20, "resets": 0}
        assert world.reader.state(COUNTER, "d") == {"count": 1, "resets": 0}
    with reopen(path) as world:
        assert str(world.manifest_hash) == manifest
        assert world.runtime.module_hash(COUNTER) == new_module
        assert world.proposals[proposal]["status"] == "applied"
        assert world.reader.state(COUNTER, "b") == {"count": 15, "resets": 0}
    assert replay.verify_replay(path).ok


def test_an_incompatible_upgrade_reports_exactly_the_divergent_cells(tmp_path: Path) -> None:
    path = tmp_path / "w"
    seqs = counter_world(
        path,
        {"a": [5, 5], "b": [15, 10], "c": [30], "d": [20], "e": [10, 10, 1, 1], "f": [2]},
    )
    with reopen(path) as world:
        proposal = propose_folder(world, variant(tmp_path, "above-20", ABOVE_20))
    report = run_shadow(path, proposal)
    diverged = {c.key: c.diverged_at for c in report.cells if c.outcome == "diverges"}
    # b crosses 20 at its 2nd increment, c at its 1st, e at its 3rd; a, d and f never do.
    assert diverged == {"b": seqs["b"][1], "c": seqs["c"][0], "e": seqs["e"][2]}
    for cell in report.cells:
        assert cell.difference == ("the state differs" if cell.key in diverged else None)
        assert cell.new_effects == []
    assert report.summary()["reproduce"] == 3 and report.summary()["diverge"] == 3
    # The stored report is the one returned, and the journal names it.
    [(_, record)] = [r for r in governance_records(path) if r[1]["action"] == "shadowed"]
    with reopen(path) as world:
        stored = world.store.cas.get_value(Hash(record["report"]))
    assert stored == report.to_value()
    assert record["summary"] == report.summary() and record["state_height"] == seqs["e"][3] + 1

    # Divergence does not block apply (a person decides); the new behaviour then takes effect.
    with reopen(path) as world:
        approve(world, proposal)
        proposals.apply(world, proposal)
        world.send(EVENT, inc("c", 1))
        world.send(EVENT, inc("a", 1))
        assert world.reader.state(COUNTER, "c") == {"count": 32, "resets": 0}
        assert world.reader.state(COUNTER, "a") == {"count": 11, "resets": 0}
    assert replay.verify_replay(path).ok


def test_a_doubling_upgrade_diverges_on_every_cell(tmp_path: Path) -> None:
    path = tmp_path / "w"
    seqs = counter_world(path, {"a": [1, 1], "b": [3]})
    with reopen(path) as world:
        proposal = propose_folder(world, variant(tmp_path, "double", DOUBLE))
    report = run_shadow(path, proposal)
    assert {c.key: c.diverged_at for c in report.cells} == {"a": seqs["a"][0], "b": seqs["b"][0]}
    # Where each cell diverged, the report keeps the live and the proposed state side by side.
    by_key = {c.key: c for c in report.cells}
    assert by_key["b"].live_state is not None and by_key["b"].proposed_state is not None
    assert by_key["b"].live_state["value"] == {"count": 3, "resets": 0}
    assert by_key["b"].proposed_state["value"] == {"count": 6, "resets": 0}
    assert by_key["a"].proposed_state["hash"] != by_key["a"].live_state["hash"]


def test_a_diverged_state_past_its_limit_is_kept_by_size_and_hash() -> None:
    cell = proposals.CellShadow("demo/counter@1", "a")
    state = cbor.encode({"count": 1, "note": "x" * 40})
    cell.diverged_states(state, None, bytes_max=len(state) - 1)
    assert cell.live_state == {"bytes": len(state), "hash": str(hash_bytes(state)), "value": None}
    assert cell.proposed_state == {"bytes": 0, "hash": None, "value": None}
    cell.diverged_states(state, state, bytes_max=len(state))
    assert (
        cell.live_state["value"] == {"count": 1, "note": "x" * 40} == cell.proposed_state["value"]
    )


def test_the_shadow_is_read_only(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path, {"a": [1]})
    with reopen(path) as world:
        proposal = propose_folder(world, variant(tmp_path, "double", DOUBLE))
    before = journal_of(path)
    shadow.shadow(path, proposal, engine=engine())
    assert journal_of(path) == before


# --------------------------------------------------------------------------------------------
# Open intents and quiescence


@pytest.fixture
def scripted(tmp_path: Path) -> Path:
    """A scripted world (manual clock) with one open demo/noop@1 intent from cell x."""
    path = tmp_path / "s"
    with create(path, SCRIPTED, clock="manual") as world:
        world.send(PING, {"id": "x", "n": 1, "action": "effect"})
        world.send(PING, {"id": "y", "n": 0, "action": "none"})
        assert len(world.reader.open_intents()) == 1
    return path


def drop_noop_patch(world: World) -> dict[str, Any]:
    """The keyed workflow no longer declares demo/noop@1."""
    keyed = world.runtime.loaded.definitions[KEYED]
    changed = keyed.model_copy(update={"effects_emitted": ["sys/timer.set@1"]})
    return {
        "$kind": "patch",
        "base_manifest": str(world.manifest_hash),
        "ops": [{"replace_def": {"def": canonical_form(changed)}}],
    }


def settle_all(world: World) -> None:
    for intent in world.reader.open_intents():
        body = {
            "world": world.world_id,
            "intent": intent["intent"],
            "status": "ok",
            "payload": {"ok": True},
            "adapter": "demo/adapter@1",
            "started_ns": 10,
            "finished_ns": 20,
        }
        world.settle(signed_receipt(ADAPTER_SEED, body))
    world.run_to_idle()


def test_dropping_an_effect_with_open_intents_is_reported_and_apply_waits_for_them(
    scripted: Path,
) -> None:
    with reopen(scripted) as world:
        [intent] = world.reader.open_intents()
        proposal = proposals.propose(world, drop_noop_patch(world))
    report = run_shadow(scripted, proposal)
    [affected] = report.intents_affected
    assert affected["intent"] == intent["intent"]
    assert (affected["effect"], affected["workflow"]) == ("demo/noop@1", KEYED)
    assert affected["reason"] == "the workflow no longer declares its effect"
    assert report.allowlists == [
        {"workflow": KEYED, "effects_added": [], "effects_removed": ["demo/noop@1"]}
    ]
    # The cell whose history emitted the effect diverges (the new manifest refuses it).
    outcomes = {(c.workflow, c.key): c for c in report.cells}
    assert outcomes[(KEYED, "x")].outcome == "diverges"
    assert "effect.undeclared" in str(outcomes[(KEYED, "x")].difference)
    assert outcomes[(KEYED, "y")].outcome == "reproduces"

    with reopen(scripted) as world:
        approve(world, proposal)
        height = world.height
        with pytest.raises(proposals.GovNotQuiescentError) as caught:
            proposals.apply(world, proposal)
        assert caught.value.code == "gov.not_quiescent"
        [blocker] = caught.value.detail["blockers"]
        assert intent["intent"] in blocker and "demo/noop@1" in blocker
        assert world.height == height and world.proposals[proposal]["status"] == "approved"
        settle_all(world)
        assert world.reader.open_intents() == []
        # Settling moved the state: the shadow no longer describes the world.
        with refused("gov.shadow_stale"):
            proposals.apply(world, proposal)
    again = run_shadow(scripted, proposal)
    assert again.intents_affected == []
    with reopen(scripted) as world:
        proposals.apply(world, proposal)
        assert world.runtime.workflow(KEYED).effects_emitted == ["sys/timer.set@1"]
        assert world.proposals[proposal]["shadow"]["state_height"] == again.state_height
        world.send(PING, {"id": "y", "n": 0, "action": "none"})
        assert world.reader.state(KEYED, "y")["count"] == 2
    assert replay.verify_replay(scripted).ok


def queued_world(path: Path) -> None:
    """A counter world whose head has one delivery journaled and queued, not stepped."""
    counter_world(path, {"a": [1]})
    with reopen(path) as world:
        world.ingress(EVENT, inc("a", 1))
        with pytest.raises(StepBudgetExceededError):
            world.run_to_idle(steps_max=0)


def test_queued_work_blocks_apply(tmp_path: Path) -> None:
    path = tmp_path / "w"
    queued_world(path)
    with reopen(path) as world:
        assert proposals.blockers(world.reader) == ["1 queued deliveries"]
        world.run_to_idle()
        assert proposals.blockers(world.reader) == []


def test_a_world_with_queued_work_shadows_and_apply_names_the_queue(tmp_path: Path) -> None:
    path = tmp_path / "w"
    queued_world(path)
    with reopen(path) as world:
        proposal = propose_folder(world, variant(tmp_path, "refactor", REFACTOR))
    run_shadow(path, proposal)
    with reopen(path) as world:
        approve(world, proposal)
        with pytest.raises(proposals.GovNotQuiescentError) as caught:
            proposals.apply(world, proposal)
        assert caught.value.detail["blockers"] == ["1 queued deliveries"]


def test_routing_changes_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with create(path, SCRIPTED, clock="manual") as world:
        world.send(PING, {"id": "y", "n": 0, "action": "none"})
        route = {"event": PING, "workflow": "demo/global@1"}
        patch = {
            "$kind": "patch",
            "base_manifest": str(world.manifest_hash),
            "ops": [{"remove_subscription": route}],
        }
        proposal = proposals.propose(world, patch)
    report = shadow.shadow(path, proposal, engine=engine())
    assert report.routing == {"added": [], "removed": [route]}
    assert report.summary()["routes_changed"] == 1


# --------------------------------------------------------------------------------------------
# Refusals, each with its own code


@pytest.fixture
def counter(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    counter_world(path, {"a": [3], "b": [4]})
    return path


@pytest.fixture
def refactor(tmp_path: Path) -> Path:
    return variant(tmp_path, "refactor", REFACTOR)


def test_a_patch_against_another_manifest_is_a_stale_base(counter: Path, refactor: Path) -> None:
    with reopen(counter) as world:
        patch, blobs = folder_patch(world, refactor)
        patch["base_manifest"] = str(hash_value("another manifest"))
        height = world.height
        with refused("gov.stale_base"):
            proposals.propose(world, patch, blobs=blobs)
        assert world.height == height and world.proposals == {}


def test_applying_after_another_proposal_was_applied_is_a_stale_base(
    tmp_path: Path, counter: Path, refactor: Path
) -> None:
    with reopen(counter) as world:
        first = propose_folder(world, refactor)
        second = propose_folder(world, variant(tmp_path, "double", DOUBLE))
    run_shadow(counter, first)
    run_shadow(counter, second)
    with reopen(counter) as world:
        approve(world, first)
        approve(world, second)
        proposals.apply(world, first)
        with refused("gov.stale_base"):
            proposals.apply(world, second)
        assert world.proposals[second]["status"] == "approved"


def test_a_tampered_patch_is_refused(counter: Path, refactor: Path) -> None:
    with reopen(counter) as world:
        patch, blobs = folder_patch(world, refactor)
        expected = str(hash_value(patch))
        tampered = copy.deepcopy(patch)
        del tampered["ops"][0]["replace_def"]["pre_hash"]  # changed in transit
        with refused("gov.patch_tampered"):
            proposals.propose(world, tampered, blobs=blobs, expected_hash=expected)
        assert world.proposals == {}
        assert proposals.propose(world, patch, blobs=blobs, expected_hash=expected) == expected


def test_approving_twice_is_refused(counter: Path, refactor: Path) -> None:
    with reopen(counter) as world:
        proposal = propose_folder(world, refactor)
        approve(world, proposal)
        with refused("gov.already_decided"):
            approve(world, proposal)
        with refused("gov.already_decided"):
            proposals.decide(world, proposal, approve=False, approver="bob", reason="no")
        assert world.proposals[proposal]["decision"]["approver"] == "ann"


def test_applying_a_rejected_proposal_is_refused(counter: Path, refactor: Path) -> None:
    with reopen(counter) as world:
        proposal = propose_folder(world, refactor)
    run_shadow(counter, proposal)
    with reopen(counter) as world:
        proposals.decide(world, proposal, approve=False, approver="bob", reason="not now")
        with refused("gov.rejected"):
            proposals.apply(world, proposal)
    with refused("gov.already_decided"):
        run_shadow(counter, proposal)  # a closed proposal takes no more shadows


def test_applying_an_unshadowed_or_unapproved_proposal_is_refused(
    counter: Path, refactor: Path
) -> None:
    with reopen(counter) as world:
        proposal = propose_folder(world, refactor)
        approve(world, proposal)
        with refused("gov.not_shadowed"):
            proposals.apply(world, proposal)
    with reopen(counter) as world:
        other = proposals.propose(world, _add_schema_patch(world, "demo/Extra@1"))
    run_shadow(counter, other)
    with reopen(counter) as world, refused("gov.not_approved"):
        proposals.apply(world, other)
    run_shadow(counter, proposal)
    with reopen(counter) as world:
        proposals.apply(world, proposal)
        with refused("gov.already_decided"):
            proposals.apply(world, proposal)


def test_an_unknown_proposal_is_refused(counter: Path) -> None:
    unknown = str(hash_value("no such proposal"))
    with reopen(counter) as world:
        for action in (
            lambda: proposals.apply(world, unknown),
            lambda: approve(world, unknown),
        ):
            with refused("gov.unknown_proposal"):
                action()
    with refused("gov.unknown_proposal"):
        shadow.shadow(counter, unknown, engine=engine())


def _add_schema_patch(world: World, name: str) -> dict[str, Any]:
    return {
        "$kind": "patch",
        "base_manifest": str(world.manifest_hash),
        "ops": [{"add_def": {"def": {"$kind": "defschema", "name": name, "type": {"nat": {}}}}}],
    }


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda w: {"not": "a patch"}, id="not-a-patch"),
        pytest.param(
            lambda w: {"$kind": "patch", "base_manifest": str(w.manifest_hash), "ops": []},
            id="no-ops",
        ),
        pytest.param(
            lambda w: {
                "$kind": "patch",
                "base_manifest": str(w.manifest_hash),
                "ops": [{"remove_def": {"name": "demo/Nothing@1"}}],
            },
            id="remove-missing",
        ),
        pytest.param(
            lambda w: {
                "$kind": "patch",
                "base_manifest": str(w.manifest_hash),
                "ops": [{"remove_def": {"name": "demo/CounterState@1"}}],
            },
            id="result-does-not-check",
        ),
        pytest.param(
            lambda w: {
                "$kind": "patch",
                "base_manifest": str(w.manifest_hash),
                "ops": [
                    {
                        "remove_def": {
                            "name": "demo/CounterThreshold@1",
                            "pre_hash": str(hash_value("another version")),
                        }
                    }
                ],
            },
            id="pre-hash-moved",
        ),
        pytest.param(lambda w: _add_schema_patch(w, "demo/CounterEvent@1"), id="add-existing"),
    ],
)
def test_an_invalid_patch_is_refused(counter: Path, make: Any) -> None:
    with reopen(counter) as world:
        height = world.height
        with refused("gov.patch_invalid"):
            proposals.propose(world, make(world))
        assert world.height == height and world.proposals == {}


def test_a_module_whose_binary_is_not_stored_is_refused(counter: Path, refactor: Path) -> None:
    with reopen(counter) as world:
        patch, _ = folder_patch(world, refactor)
        with refused("gov.patch_invalid"):
            proposals.propose(world, patch)


def test_the_same_patch_twice_is_a_duplicate(counter: Path) -> None:
    with reopen(counter) as world:
        patch = _add_schema_patch(world, "demo/Extra@1")
        proposals.propose(world, patch)
        with refused("gov.duplicate_proposal"):
            proposals.propose(world, patch)


def test_open_proposals_are_bounded(counter: Path) -> None:
    with reopen(counter) as world:
        for n in range(PROPOSALS_OPEN_MAX_DEFAULT):
            proposals.propose(world, _add_schema_patch(world, f"demo/Extra{n}@1"))
        with refused("gov.too_many_proposals"):
            proposals.propose(world, _add_schema_patch(world, "demo/OneTooMany@1"))
        # A decided proposal is no longer open.
        first = sorted(world.proposals)[0]
        proposals.decide(world, first, approve=False, approver="bob", reason="full")
        proposals.propose(world, _add_schema_patch(world, "demo/OneTooMany@1"))


def test_the_open_proposals_bound_is_overridable(counter: Path) -> None:
    with reopen(counter) as world:
        proposals.propose(world, _add_schema_patch(world, "demo/A@1"), proposals_open_max=2)
        proposals.propose(world, _add_schema_patch(world, "demo/B@1"), proposals_open_max=2)
        height = world.height
        with refused("gov.too_many_proposals"):
            proposals.propose(world, _add_schema_patch(world, "demo/C@1"), proposals_open_max=2)
        assert world.height == height
        proposals.propose(world, _add_schema_patch(world, "demo/C@1"), proposals_open_max=3)


# --------------------------------------------------------------------------------------------
# Governance history replays


@pytest.fixture
def history(tmp_path: Path) -> Iterator[Path]:
    """A counter world with every governance action in its journal, and work after apply."""
    path = tmp_path / "w"
    counter_world(path, {"a": [3, 9], "b": [4]})
    with reopen(path) as world:
        good = propose_folder(world, variant(tmp_path, "refactor", REFACTOR))
        bad = propose_folder(world, variant(tmp_path, "double", DOUBLE))
    run_shadow(path, good)
    run_shadow(path, bad)
    with reopen(path) as world:
        proposals.decide(world, bad, approve=False, approver="bob", reason="diverges")
        approve(world, good)
        proposals.apply(world, good)
        world.send(EVENT, inc("a", 1))
        world.send(EVENT, inc("c", 2))
    yield path


def test_a_world_with_governance_history_replays(history: Path) -> None:
    actions = [r["action"] for _, r in governance_records(history)]
    assert actions == [
        "proposed",
        "proposed",
        "shadowed",
        "shadowed",
        "rejected",
        "approved",
        "applied",
    ]
    report = replay.verify_replay(history)
    assert report.ok, report.divergence and report.divergence.to_value()


def _rewrite_record(path: Path, seq: int, change: Any) -> None:
    env = lmdb.open(str(path / "store"), max_dbs=8)
    db = env.open_db(b"journal")
    with env.begin(write=True, db=db) as txn:
        record = cbor.decode(txn.get(seq.to_bytes(8, "big")))
        change(record)
        txn.put(seq.to_bytes(8, "big"), cbor.encode(record))
    env.close()


def _nth(path: Path, action: str) -> int:
    return next(s for s, r in governance_records(path) if r["action"] == action)


def test_a_tampered_apply_record_is_found(history: Path) -> None:
    seq = _nth(history, "applied")
    _rewrite_record(history, seq, lambda r: r.update(manifest=str(hash_value("elsewhere"))))
    d = replay.verify_replay(history).divergence
    assert d is not None and (d.seq, d.what, d.fields) == (seq, "record_differs", ["manifest"])


def test_an_approval_turned_rejection_is_found(history: Path) -> None:
    approved = _nth(history, "approved")
    _rewrite_record(history, approved, lambda r: r.update(action="rejected"))
    d = replay.verify_replay(history).divergence
    # The forged rejection replays as given; the apply after it is then refused.
    assert d is not None and (d.seq, d.what) == (_nth(history, "applied"), "input_refused")
    assert "gov.rejected" in d.message


def test_a_tampered_approver_is_found(history: Path) -> None:
    approved = _nth(history, "approved")
    _rewrite_record(history, approved, lambda r: r.update(approver="mallory"))
    d = replay.verify_replay(history).divergence
    # The forged approver replays as given; the journal chain names the changed record.
    assert d is not None and (d.seq, d.what) == (approved, "chain_broken")


def test_gc_keeps_what_governance_history_needs(history: Path) -> None:
    gc.collect(history, apply=True)
    report = replay.verify_replay(history)
    assert report.ok, report.divergence and report.divergence.to_value()
