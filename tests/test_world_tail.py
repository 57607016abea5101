"""The journal is the durable truth between checkpoints (spec/05 §1.1).

A world whose flushes write only records and states between checkpoints, reopened without a
checkpoint at close (as after a kill), must have the same head as a world that checkpointed
at every flush, with the same open intents, timers, failed cells (and the deliveries a retry
steps again), and go on to write the same journal; and it must replay."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from typing import Any

import pytest

from aos.kernel import cbor
from aos.kernel.audit import replay
from aos.kernel.hashing import hash_value
from aos.kernel.store.errors import StoreCorruptRecordError
from aos.kernel.store.memory_store import MemoryStore
from aos.kernel.world import records
from aos.kernel.world.errors import CellBusyError, WorldCorruptError
from aos.kernel.world.operations import CELL_RESET, CELL_RETRY, INTENT_CANCEL, Operation
from aos.kernel.world.receipts import ReceiptError
from aos.kernel.world.tail import fold, records_after
from aos.kernel.world.world import World, WorldLimits
from tests.test_governance import KEYED, PING
from tests.test_receipts import receipt
from tests.test_world import SCRIPTED, create, journal, ping, reopen

EVERY_FLUSH = WorldLimits(snapshot_every_records=None, checkpoint_every_records=1)
NEVER = WorldLimits(snapshot_every_records=None, checkpoint_every_records=None)
ACTIONS = ["none", "none", "effect", "timer", "trap", "delete", "emit", "cancel"]
KEYS = [f"k{n}" for n in range(6)]


def _round(world: World, rng: random.Random, n: int) -> None:
    """One round of the scripted workload: pings, then maybe a receipt, a timer, an operator
    action. Every choice comes from `rng`, so two worlds given the same seed do the same."""
    for _ in range(rng.randint(1, 4)):
        world.ingress(PING, ping(rng.choice(KEYS), rng.choice(ACTIONS), n))
    world.run_to_idle()
    intents = [value["intent"] for value in world.reader.open_intents() if value["due_ns"] is None]
    choice = rng.random()
    if intents and choice < 0.3:
        # A refused receipt (a deleted cell's intent) is journaled as rejected: both alike.
        with contextlib.suppress(ReceiptError):
            world.settle(receipt(world, rng.choice(sorted(intents))))
        world.run_to_idle()
    elif choice < 0.45:
        world.advance_time(rng.randint(1, 3_000_000_000))
    elif intents and choice < 0.55:
        world.operate(Operation(INTENT_CANCEL, intent=rng.choice(sorted(intents))))
        world.run_to_idle()
    elif choice < 0.7:
        _operate_on_a_cell(world, rng)


def _operate_on_a_cell(world: World, rng: random.Random) -> None:
    cells = world.reader.cells(KEYED)
    failed = [cell for cell in cells if cell.status == "failed"]
    if failed:
        world.operate(Operation(CELL_RETRY, workflow=KEYED, key=rng.choice(failed).key_bytes))
    else:
        idle = [cell for cell in cells if cell.status == "completed"]
        if not idle:
            return
        try:
            world.operate(Operation(CELL_RESET, workflow=KEYED, key=rng.choice(idle).key_bytes))
        except CellBusyError:
            return  # refused, nothing journaled
    world.run_to_idle()


def _run(path: Path, limits: WorldLimits, seed: int, rounds: int) -> World:
    world = create(path, SCRIPTED, clock="manual", limits=limits)
    rng = random.Random(seed)
    for n in range(rounds):
        _round(world, rng, n)
    return world


def _kill(world: World) -> None:
    """Drop the world as a kill would: the store closes, nothing is checkpointed."""
    world.store.close()


@pytest.mark.parametrize("seed", range(6))
def test_reopening_mid_cadence_gives_the_head_of_a_world_that_checkpointed_every_flush(
    tmp_path: Path, seed: int
) -> None:
    every = _run(tmp_path / "every", EVERY_FLUSH, seed, 25)
    tail = _run(tmp_path / "tail", NEVER, seed, 25)
    for world in (every, tail):  # end on records a tail holds, whatever the last round did
        world.send(PING, ping("k0", "none", 99))
    assert journal(tail) == journal(every)
    stored: Any = tail.store.cas.get_value(tail.store.meta.get("world.head"))  # type: ignore[arg-type]
    assert stored["height"] < tail.height  # there is a tail to fold
    _kill(tail)
    every.close()
    with (
        reopen(tmp_path / "tail", limits=NEVER) as folded,
        reopen(tmp_path / "every", limits=EVERY_FLUSH) as again,
    ):
        assert hash_value(folded.current_head()) == hash_value(again.current_head())
        assert folded.reader.open_intents() == again.reader.open_intents()
        assert folded.reader.next_timer_ns() == again.reader.next_timer_ns()
        assert folded.reader.cells(KEYED) == again.reader.cells(KEYED)
        # Going on from there (both with the same fresh stamps) writes the same journal:
        # parked faulted deliveries, timers, intents.
        rng_a, rng_b = random.Random(seed + 100), random.Random(seed + 100)
        first = folded.height + 1
        for n in range(25, 40):
            _round(folded, rng_a, n)
            _round(again, rng_b, n)
        assert journal(folded, first) == journal(again, first)
        assert hash_value(folded.current_head()) == hash_value(again.current_head())
    assert replay.verify_replay(tmp_path / "tail").ok


def test_replay_of_a_world_with_a_tail_verifies_and_matches_its_folded_head(
    tmp_path: Path,
) -> None:
    world = _run(tmp_path / "w", NEVER, 7, 30)
    height = world.height
    _kill(world)
    report = replay.verify_replay(tmp_path / "w")
    assert report.ok and report.end_seq == height


def test_a_default_world_checkpoints_on_the_cadence_and_at_close(tmp_path: Path) -> None:
    limits = WorldLimits(snapshot_every_records=None, checkpoint_every_records=50)
    world = _run(tmp_path / "w", limits, 3, 40)
    stored: Any = world.store.cas.get_value(world.store.meta.get("world.head"))  # type: ignore[arg-type]
    assert world.height - stored["height"] < 50 + 2 * 4 * 5  # bounded by the cadence (+ a run)
    world.close()
    with reopen(tmp_path / "w", limits=limits) as again:
        stored = again.store.cas.get_value(again.store.meta.get("world.head"))  # type: ignore[arg-type]
        assert stored["height"] == again.height


def test_tail_states_a_later_step_replaced_are_reclaimed_and_gc_keeps_the_tail(
    tmp_path: Path,
) -> None:
    from aos.kernel.audit import gc

    world = _run(tmp_path / "w", NEVER, 5, 30)
    assert world.reclaimed_objects > 0
    _kill(world)
    assert gc.collect(tmp_path / "w", apply=True).deleted
    with reopen(tmp_path / "w", limits=NEVER) as again:  # the fold reads every tail state
        again.current_head()
    assert replay.verify_replay(tmp_path / "w").ok


def test_the_fold_refuses_a_record_no_tail_may_hold() -> None:
    tail = [(5, {"kind": records.OPERATION, "action": CELL_RESET})]
    with pytest.raises(WorldCorruptError):
        fold(4, 0, 4, tail)


def test_checkpoint_every_records_is_at_least_one() -> None:
    with pytest.raises(ValueError):
        WorldLimits(checkpoint_every_records=0)
    assert WorldLimits(checkpoint_every_records=1).checkpoint_every_records == 1


def test_the_tail_is_decoded_strictly_past_what_the_chain_checked() -> None:
    """The open decodes the records its chain check hashed without the canonical checks (the
    chain vouches for their bytes); records after them, which a reader's writer may have
    appended since, are decoded strictly."""
    store = MemoryStore()
    two_byte_one = b"\xd9\xd9\xf7\x18\x01"  # 1, not in its shortest form
    store.journal.append_encoded([cbor.encode({"n": 1}), two_byte_one, two_byte_one])
    tail = records_after(store.journal, 0, 3, chained_through=2)
    assert next(tail) == (1, {"n": 1})
    assert next(tail) == (2, 1)
    with pytest.raises(StoreCorruptRecordError) as raised:
        next(tail)
    assert raised.value.detail == {"seq": 3, "cause": "cbor.non_canonical"}
