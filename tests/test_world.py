"""The world: genesis, ingress, routing, keyed cells, scheduling, admission, flushing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aos.kernel import cbor
from aos.kernel.air.errors import ValueInvalidError
from aos.kernel.errors import AosError
from aos.kernel.hashing import hash_value
from aos.kernel.store import StoreLockedError
from aos.kernel.wasm import WasmEngine
from aos.kernel.world import records
from aos.kernel.world.errors import (
    EventTooLargeError,
    SchemaReservedError,
    SchemaUnknownError,
    StepBudgetExceededError,
    WorldClosedError,
    WorldExistsError,
    WorldMissingError,
)
from aos.kernel.world.router import RouteKeyTooLargeError, RouteNoSubscriberError
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World, WorldLimits

REPO = Path(__file__).resolve().parent.parent
COUNTER_C = REPO / "manifests" / "counter-c"
SCRIPTED = REPO / "tests" / "fixtures" / "worlds" / "scripted"
COUNTER = "demo/counter@1"
EVENT = "demo/CounterEvent@1"


@cache
def engine() -> WasmEngine:
    return WasmEngine()


def create(path: Path, manifest: Path = COUNTER_C, **options: Any) -> World:
    options.setdefault("sync", False)
    options.setdefault("stamps", PinnedStampSource())
    return World.create(path, manifest, engine=engine(), **options)


def reopen(path: Path, **options: Any) -> World:
    options.setdefault("sync", False)
    options.setdefault("stamps", PinnedStampSource(seed=b"reopened", start_ns=10**9))
    return World.open(path, engine=engine(), **options)


def inc(key: str, by: int = 1) -> dict[str, Any]:
    return {"$tag": "Increment", "$value": {"id": key, "by": by}}


def reset(key: str) -> dict[str, Any]:
    return {"$tag": "Reset", "$value": {"id": key}}


def ping(key: str, action: str = "none", n: int = 0) -> dict[str, Any]:
    return {"id": key, "n": n, "action": action}


def journal(world: World, from_seq: int = 1) -> list[dict[str, Any]]:
    return [record for _, record in world.store.journal.read(from_seq)]  # type: ignore[misc]


def journal_bytes(world: World) -> list[bytes]:
    return [cbor.encode(record) for record in journal(world)]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with create(tmp_path / "w") as opened:
        yield opened


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[World]:
    with create(tmp_path / "s", SCRIPTED) as opened:
        yield opened


# --------------------------------------------------------------------------------------------
# Genesis and opening


def test_genesis_journals_the_manifest_and_stores_its_definitions(world: World) -> None:
    assert world.height == 1
    [record] = journal(world)
    assert record["kind"] == records.MANIFEST
    assert record["manifest"] == str(world.manifest_hash)
    assert world.store.cas.has(world.manifest_hash)
    for name, definition_hash in world.runtime.loaded.hashes.items():
        if not name.startswith("sys/"):
            assert world.store.cas.has(definition_hash), name
    module_hash = world.runtime.module_hash(COUNTER)
    assert world.store.cas.has(module_hash)
    assert world.reader.status()["workflows"] == {COUNTER: {"cells": 0, "failed": 0}}


def test_create_refuses_an_existing_world_and_open_a_missing_one(tmp_path: Path) -> None:
    create(tmp_path / "w").close()
    with pytest.raises(WorldExistsError):
        create(tmp_path / "w")
    with pytest.raises(WorldMissingError):
        World.open(tmp_path / "nowhere")


def test_one_writer_per_world(tmp_path: Path) -> None:
    path = tmp_path / "w"
    create(path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from aos.kernel.world.world import World\n"
            f"w = World.open({str(path)!r}, sync=False)\n"
            "print('open', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with pytest.raises(StoreLockedError) as caught:
            reopen(path)
        assert str(holder.pid) in str(caught.value)
    finally:
        holder.communicate("", timeout=30)


# --------------------------------------------------------------------------------------------
# Ingress, cells, states


def test_send_steps_the_keyed_cell_and_journals_what_happened(world: World) -> None:
    admitted, report = world.send(EVENT, inc("a", 7))
    assert admitted.seq == 2 and admitted.deliveries == 1
    assert report.steps == 1 and report.faults == 0
    assert world.reader.state(COUNTER, "a") == {"count": 7, "resets": 0}
    assert world.reader.state(COUNTER, "b") is None
    _, report = world.send(EVENT, inc("a", 5))
    assert report.events == 1
    kinds = [record["kind"] for record in journal(world)]
    assert kinds == ["manifest", "domain_event", "step", "domain_event", "step", "domain_event"]
    threshold = journal(world)[-1]
    assert threshold["schema"] == "demo/CounterThreshold@1"
    assert threshold["value"] == {"id": "a", "count": 12, "threshold": 10}
    assert threshold["cause"] == 5 and "stamp" not in threshold
    step = journal(world)[4]
    assert step["state"] == str(hash_value({"count": 12, "resets": 0}))
    assert step["key"] == cbor.encode("a")


def test_admitted_event_hash_is_the_record_hash(world: World) -> None:
    admitted, _ = world.send(EVENT, inc("a"))
    assert admitted.event_hash == hash_value(journal(world)[admitted.seq - 1])


def test_values_are_normalized_before_they_are_journaled(world: World) -> None:
    world.send(EVENT, {"$value": {"by": 2, "id": "z"}, "$tag": "Increment"})
    assert journal(world)[1]["value"] == inc("z", 2)


def test_cells_and_statuses(world: World) -> None:
    for key in ("a", "b", "c"):
        world.send(EVENT, inc(key))
    cells = world.reader.cells(COUNTER)
    assert sorted(cell.key for cell in cells) == ["a", "b", "c"]
    assert {cell.status for cell in cells} == {"completed"}
    assert world.reader.status()["workflows"][COUNTER]["cells"] == 3


def test_reopen_continues_exactly_where_the_world_was(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path) as first:
        for n in range(12):
            first.send(EVENT, inc(f"k{n % 4}", n))
        states = {f"k{n}": first.reader.state(COUNTER, f"k{n}") for n in range(4)}
        height = first.height
    with reopen(path) as again:
        assert again.height == height
        assert {f"k{n}": again.reader.state(COUNTER, f"k{n}") for n in range(4)} == states
        again.send(EVENT, inc("k0", 100))
        assert again.reader.state(COUNTER, "k0")["count"] == states["k0"]["count"] + 100  # type: ignore[index]


def test_unflushed_input_is_lost_and_nothing_else(tmp_path: Path) -> None:
    """A crash between ingress and the flush loses only the input that was never
    acknowledged (`send` acknowledges by returning after the flush)."""
    path = tmp_path / "w"
    with create(path) as first:
        first.send(EVENT, inc("a", 1))
        acknowledged = journal_bytes(first)
        first.ingress(EVENT, inc("a", 1000))  # no run_to_idle: never flushed
    with reopen(path) as again:
        assert journal_bytes(again) == acknowledged
        assert again.reader.state(COUNTER, "a") == {"count": 1, "resets": 0}


def test_a_failed_flush_closes_the_world_and_reopening_restores_the_last_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w"
    world = create(path)
    world.send(EVENT, inc("a", 1))
    durable = journal_bytes(world)

    def broken_write(expected_first_seq: int) -> tuple[int, int]:
        raise OSError("disk on fire")

    monkeypatch.setattr(world.journaler.staged, "write", broken_write)
    with pytest.raises(OSError):
        world.send(EVENT, inc("a", 1))
    with pytest.raises(WorldClosedError):
        world.send(EVENT, inc("a", 1))
    monkeypatch.undo()
    with reopen(path) as again:
        assert journal_bytes(again) == durable
        assert again.reader.state(COUNTER, "a") == {"count": 1, "resets": 0}


# --------------------------------------------------------------------------------------------
# Bad input: a typed error, nothing half-applied


def test_unknown_and_reserved_schemas_are_refused_and_not_journaled(world: World) -> None:
    with pytest.raises(SchemaUnknownError):
        world.send("demo/Nope@1", {})
    with pytest.raises(SchemaReservedError):
        world.send("sys/EffectReceiptEnvelope@1", {})
    assert world.height == 1


def test_invalid_values_are_refused_with_their_path(world: World) -> None:
    with pytest.raises(ValueInvalidError) as caught:
        world.send(EVENT, {"$tag": "Increment", "$value": {"id": "a", "by": -1}})
    assert caught.value.path == "$.$value.by"
    with pytest.raises(AosError) as caught_tag:
        world.send(EVENT, {"$tag": "Decrement", "$value": {"id": "a"}})
    assert caught_tag.value.code.startswith("air.value")
    assert world.height == 1
    assert world.reader.cells(COUNTER) == []


def test_an_event_nobody_subscribes_to_is_journaled_as_rejected(world: World) -> None:
    with pytest.raises(RouteNoSubscriberError):
        world.send("demo/CounterThreshold@1", {"id": "a", "count": 1, "threshold": 0})
    [rejected] = journal(world, 2)
    assert rejected["kind"] == records.INGRESS_REJECTED
    assert rejected["code"] == "route.no_subscriber"
    assert world.reader.cells(COUNTER) == []


def test_a_key_over_the_limit_is_rejected_and_journaled(world: World) -> None:
    with pytest.raises(RouteKeyTooLargeError):
        world.send(EVENT, inc("k" * 2000))
    assert journal(world, 2)[0]["code"] == "route.key_too_large"
    assert world.reader.cells(COUNTER) == []


def test_event_size_limit_edge(tmp_path: Path) -> None:
    value = inc("a")
    size = len(cbor.encode(value))
    with create(tmp_path / "w", limits=WorldLimits(event_bytes_max=size)) as world:
        world.send(EVENT, value)
        with pytest.raises(EventTooLargeError):
            world.send(EVENT, inc("ab"))
        assert world.height == 3


# --------------------------------------------------------------------------------------------
# Determinism


def test_same_inputs_give_identical_journals_and_roots(tmp_path: Path) -> None:
    events = [inc(f"k{n % 5}", n) for n in range(30)] + [reset("k1"), inc("k1", 3)]
    worlds = [create(tmp_path / name) for name in ("one", "two")]
    for world in worlds:
        for event in events:
            world.send(EVENT, event)
    one, two = worlds
    assert journal_bytes(one) == journal_bytes(two)
    assert one.current_head()["roots"] == two.current_head()["roots"]
    assert one.store.meta.get("world.head") == two.store.meta.get("world.head")
    for world in worlds:
        world.close()


def test_batched_and_one_by_one_ingress_give_the_same_cells(tmp_path: Path) -> None:
    events = [inc(f"k{n % 3}", n) for n in range(20)]
    with create(tmp_path / "one") as one, create(tmp_path / "batch") as batch:
        for event in events:
            one.send(EVENT, event)
            batch.ingress(EVENT, event)
        batch.run_to_idle()
        # Roots differ (cells record the journal sequence of their last step); states not.
        for key in ("k0", "k1", "k2"):
            assert one.reader.state(COUNTER, key) == batch.reader.state(COUNTER, key)


keys = st.sampled_from(["a", "b", "c", "d", "e", "f"])
counter_events = st.lists(
    st.one_of(st.builds(inc, keys, st.integers(0, 25)), st.builds(reset, keys)),
    max_size=30,
)


# Costly (worlds created per example: 15 examples); every example works in a scratch folder
# of its own under the one tmp_path, so the fixture being shared is intended.
@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counter_events, st.integers(1, 10))
def test_keyed_isolation(tmp_path: Path, events: list[dict[str, Any]], batch: int) -> None:
    """Any interleaving over many keys, delivered in batches, gives each cell the state of
    feeding that key's events alone."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
        root = Path(scratch)
        with create(root / "mixed") as mixed:
            for start in range(0, len(events), batch):
                for event in events[start : start + batch]:
                    mixed.ingress(EVENT, event)
                mixed.run_to_idle()
            for key in sorted({event["$value"]["id"] for event in events}):
                with create(root / f"alone-{key}") as alone:
                    for event in events:
                        if event["$value"]["id"] == key:
                            alone.send(EVENT, event)
                    assert mixed.reader.state(COUNTER, key) == alone.reader.state(COUNTER, key)


# --------------------------------------------------------------------------------------------
# Scheduling


def test_round_robin_is_fair_across_cells(world: World) -> None:
    for _ in range(3):
        world.ingress(EVENT, inc("a"))
    world.ingress(EVENT, inc("b"))
    world.run_to_idle()
    steps = [r for r in journal(world) if r["kind"] == records.STEP]
    order = [cbor.decode(step["key"]) for step in steps]
    assert order == ["a", "b", "a", "a"]


def test_step_budget_flushes_the_work_done_and_keeps_the_rest_queued(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path) as world:
        for n in range(5):
            world.ingress(EVENT, inc(f"k{n}"))
        with pytest.raises(StepBudgetExceededError) as caught:
            world.run_to_idle(steps_max=3)
        assert caught.value.detail == {"steps": 3, "queued": 2}
        assert world.reader.status()["queued"] == 2
    with reopen(path) as again:
        assert again.reader.status()["queued"] == 2
        report = again.run_to_idle()
        assert report.steps == 2
        assert [again.reader.state(COUNTER, f"k{n}") for n in range(5)] == [
            {"count": 1, "resets": 0}
        ] * 5


# --------------------------------------------------------------------------------------------
# Routing, fan-out, variant arms, effects and faults (the scripted Python workflow)


def test_fan_out_in_manifest_order_with_variant_arm_wrapping(scripted: World) -> None:
    admitted, report = scripted.send("demo/Ping@1", ping("x"))
    assert admitted.deliveries == 2 and report.steps == 2
    keyed = scripted.reader.state("demo/keyed@1", "x")
    unkeyed = scripted.reader.state("demo/global@1")
    assert cbor.decode(keyed["last_value"]) == ping("x")
    assert keyed["count"] == 1 and unkeyed["count"] == 1
    steps = [r for r in journal(scripted) if r["kind"] == records.STEP]
    assert [s["workflow"] for s in steps] == ["demo/keyed@1", "demo/global@1"]
    assert steps[1]["key"] is None


def test_context_carries_logical_time(tmp_path: Path) -> None:
    stamps = PinnedStampSource(start_ns=5_000, step_ns=1_000)
    with create(tmp_path / "s", SCRIPTED, stamps=stamps) as world:
        world.send("demo/Ping@1", ping("x"))
        record = journal(world)[1]
        assert world.reader.state("demo/global@1")["last_now_ns"] == record["stamp"]["logical_ns"]


def test_emitted_events_are_journaled_and_routed(scripted: World) -> None:
    _, report = scripted.send("demo/Ping@1", ping("x", "emit"))
    # Both workflows act on the ping and emit a child; each child fans out to both again.
    assert report.events == 2
    assert scripted.reader.state("demo/keyed@1", "x-child")["count"] == 2
    assert scripted.reader.state("demo/global@1")["count"] == 3
    children = [r for r in journal(scripted) if r["kind"] == records.DOMAIN_EVENT and "cause" in r]
    assert [c["value"]["id"] for c in children] == ["x-child", "x-child"]


def test_effects_open_intents_with_deterministic_identities(scripted: World) -> None:
    _, report = scripted.send("demo/Ping@1", ping("x", "effect", 3))
    assert report.intents == 3
    intents = [r for r in journal(scripted) if r["kind"] == records.EFFECT_INTENT]
    assert [i["params"] for i in intents] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert [i["issuer_ref"] for i in intents] == ["ref-0", "ref-1", "ref-2"]
    assert {i["origin"]["workflow"] for i in intents} == {"demo/keyed@1"}
    assert len({i["intent"] for i in intents}) == 3
    assert scripted.reader.status()["open_intents"] == 3
    [cell] = scripted.reader.cells("demo/keyed@1")
    assert cell.status == "waiting"


def test_an_idempotency_key_opens_an_intent_once(scripted: World) -> None:
    scripted.send("demo/Ping@1", ping("x", "effect_idem", 1))
    scripted.send("demo/Ping@1", ping("x", "effect_idem", 1))
    assert len([r for r in journal(scripted) if r["kind"] == records.EFFECT_INTENT]) == 1
    scripted.send("demo/Ping@1", ping("x", "effect_idem", 2))  # other params: another intent
    assert scripted.reader.status()["open_intents"] == 2


@pytest.mark.parametrize(
    ("action", "code"),
    [
        ("undeclared", "effect.undeclared"),
        ("bad_params", "effect.params_invalid"),
        ("bad_event", "step.event_invalid"),
        ("sys_event", "step.event_invalid"),
        ("unroutable", "step.route_failed"),
        ("bad_state", "step.state_invalid"),
        ("trap", "step.guest_exception"),
    ],
)
def test_step_faults_apply_nothing_and_fail_only_their_cell(
    scripted: World, action: str, code: str
) -> None:
    scripted.send("demo/Ping@1", ping("bad"))
    before = scripted.reader.state("demo/keyed@1", "bad")
    _, report = scripted.send("demo/Ping@1", ping("bad", action))
    assert report.fault_codes[0] == code
    faults = [r for r in journal(scripted) if r["kind"] == records.STEP_FAULT]
    assert faults[0]["code"] == code and faults[0]["workflow"] == "demo/keyed@1"
    assert faults[0]["module"] == str(scripted.runtime.module_hash("demo/keyed@1"))
    assert scripted.reader.state("demo/keyed@1", "bad") == before
    assert scripted.reader.status()["open_intents"] == 0
    assert not [r for r in journal(scripted) if r["kind"] == records.EFFECT_INTENT]
    [cell] = scripted.reader.cells("demo/keyed@1")
    assert cell.status == "failed"
    # The unkeyed workflow got the same ping and faulted too (its own code may differ).
    assert [f["workflow"] for f in faults] == ["demo/keyed@1", "demo/global@1"]
    assert [c.status for c in scripted.reader.cells("demo/global@1")] == ["failed"]
    # A failed cell takes no more events; other cells go on.
    _, later = scripted.send("demo/Ping@1", ping("bad"))
    assert later.dropped == 2 and later.steps == 0
    _, good = scripted.send("demo/Ping@1", ping("good"))
    assert good.steps == 1 and good.dropped == 1
    assert scripted.reader.state("demo/keyed@1", "good")["count"] == 1


def test_deleting_a_cell(scripted: World) -> None:
    scripted.send("demo/Ping@1", ping("x"))
    scripted.send("demo/Ping@1", ping("x", "delete"))
    assert scripted.reader.state("demo/keyed@1", "x") is None
    assert scripted.reader.cells("demo/keyed@1") == []


def test_a_workflow_storm_stops_at_the_budget(tmp_path: Path) -> None:
    with create(tmp_path / "s", SCRIPTED, limits=WorldLimits(steps_per_run_max=50)) as world:
        with pytest.raises(StepBudgetExceededError):
            world.send("demo/Ping@1", ping("x", "storm"))
        assert world.reader.status()["queued"] > 0
        assert world.height == len(journal(world))


def test_unknown_workflows_are_refused_and_never_checkpointed(world: World) -> None:
    from aos.kernel.world.errors import WorkflowUnknownError

    for query in (
        lambda: world.reader.status_of("x/nope@1", None),
        lambda: world.reader.cells("x/nope@1"),
        lambda: world.reader.state("x/nope@1"),
    ):
        with pytest.raises(WorkflowUnknownError):
            query()
    world.send(EVENT, inc("a"))
    world.commit(checkpoint=True)
    head = world.store.cas.get_value(world.store.meta.get("world.head"))  # type: ignore[arg-type]
    assert list(head["roots"]) == [COUNTER]  # type: ignore[index,call-overload]


def test_long_runs_flush_at_safe_points_within_the_store_batch_limit(tmp_path: Path) -> None:
    from aos.kernel.audit import replay

    path = tmp_path / "w"
    with create(path, limits=WorldLimits(flush_records_max=7)) as world:
        for n in range(40):
            world.ingress(EVENT, inc(f"k{n % 9}", n))
        assert world.store.journal.head() > 1  # flushed during ingress, before any run
        world.run_to_idle()
        assert world.height == world.store.journal.head()
        states = {f"k{n}": world.reader.state(COUNTER, f"k{n}") for n in range(9)}
    with reopen(path) as again:
        assert {f"k{n}": again.reader.state(COUNTER, f"k{n}") for n in range(9)} == states
    assert replay.verify_replay(path).ok


def test_a_kill_during_create_leaves_no_world_and_create_can_run_again(tmp_path: Path) -> None:
    path = tmp_path / "w"
    script = (
        "import os, signal\n"
        "from aos.kernel.world import staged\n"
        "def die(self, expected_first_seq):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "staged.StagedWrites.write = die\n"
        "from aos.kernel.world.world import World\n"
        f"World.create({str(path)!r}, {str(COUNTER_C)!r}, sync=False)\n"
    )
    killed = subprocess.run([sys.executable, "-c", script], check=False)
    assert killed.returncode == -9
    assert not path.exists()
    with pytest.raises(WorldMissingError):
        World.open(path)
    with create(path) as world:
        world.send(EVENT, inc("a"))
        assert world.reader.state(COUNTER, "a") == {"count": 1, "resets": 0}
