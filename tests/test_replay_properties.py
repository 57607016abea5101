"""Replay properties: after every step of a random life of a world, a full replay from genesis,
a replay from the latest snapshot plus the tail, and the live world agree.

A hypothesis state machine drives the scripted world (manual clock): pings that ask for
effects, timers or emitted events, or trap (the cell fails for good); an unroutable event
refused mid-batch, which flushes with earlier events still queued at the head; receipts that
settle open intents (ok, error, a payload that does not fit), bad and duplicate receipts;
snapshots; close and reopen; advancing time. After each step:

* the live world has flushed everything (`height == journal head`) and matches a simple model
  (how many events each keyed cell took, which intents are open);
* `replay.verify_replay` from genesis is ok, and so is `verify_replay(from_snapshot=latest)` when there is a
  snapshot. Each compares every replayed record with the journal byte for byte and then the
  replayed head (roots, open intents, queue, logical time) with the head the live world wrote,
  so full replay == snapshot + tail replay == live state.

The audits run in a helper process while the live world stays open: a store can be opened
once per process (`store.locked`), but a read-only open from another process may sit beside
the writer. Closing the world, verifying in this process and reopening works too, but then
every step would also be a reopen and a long-lived world's memory would never be tested.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aos.kernel import cbor
from aos.kernel.audit.replay import verify_replay
from aos.kernel.signing.signatures import signed_receipt
from aos.kernel.wasm import WasmEngine
from aos.kernel.world.errors import WorldNotQuiescentError
from aos.kernel.world.receipts import ReceiptError
from aos.kernel.world.router import RouteError
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World
from tests.test_world import SCRIPTED

ADAPTER_SEED = bytes(range(32))  # demo/adapter@1 in the scripted fixture
STRANGER_SEED = bytes(range(1, 33))  # demo/stranger@1: allowed to settle nothing
KEYED = "demo/keyed@1"
GLOBAL = "demo/global@1"
PING = "demo/Ping@1"
NOOP = "demo/noop@1"
KEYS = ["a", "b", "c"]
# Kept small so `make test` stays fast; raise them for a longer hunt, e.g.
# AOS_REPLAY_EXAMPLES=200 AOS_REPLAY_STEPS=40 pytest tests/test_replay_properties.py
EXAMPLES_MAX = int(os.environ.get("AOS_REPLAY_EXAMPLES", "10"))
STEPS_MAX = int(os.environ.get("AOS_REPLAY_STEPS", "15"))
TIMER_NS_MAX = 5_000
AUDIT_TIMEOUT_S = 120


@cache
def _engine() -> WasmEngine:
    return WasmEngine()


def _audit(path: str, from_snapshot: str | None) -> dict[str, Any]:
    """Runs in the helper process."""
    return verify_replay(path, from_snapshot=from_snapshot, engine=_engine()).to_value()


@pytest.fixture(scope="module")
def auditor() -> Iterator[ProcessPoolExecutor]:
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        _Machine.auditor = pool
        yield pool
        _Machine.auditor = None


class _Machine(RuleBasedStateMachine):
    auditor: ProcessPoolExecutor | None = None

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="aos-replay-props-"))
        self.path = self.root / "w"
        self.opens = 0
        self.world = World.create(
            self.path, SCRIPTED, sync=False, stamps=self._stamps(), clock="manual", engine=_engine()
        )
        # The model: events taken per keyed cell, open intents (intent -> key, due or None).
        self.counts: dict[str, int] = {}
        self.open: dict[str, tuple[str, int | None]] = {}
        self.settled: list[str] = []
        self.failed_keys: set[str] = set()
        self.global_failed = False
        self.queued_keys: list[str] = []  # pings admitted, not stepped (the next run steps them)

    def _stamps(self) -> PinnedStampSource:
        self.opens += 1
        return PinnedStampSource(seed=b"open-%d" % self.opens, start_ns=self.opens * 10**12)

    def teardown(self) -> None:
        self.world.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- rules ----------------------------------------------------------------------------

    @rule(
        key=st.sampled_from(KEYS),
        action=st.sampled_from(["none", "effect", "timer", "emit", "none", "effect", "trap"]),
        n=st.integers(0, TIMER_NS_MAX),
    )
    def send(self, key: str, action: str, n: int) -> None:
        if action == "effect":
            n = n % 3 + 1
        before = {i["intent"] for i in self.world.reader.open_intents()}
        now = self.world.logical_ns
        self.world.send(PING, {"id": key, "n": n, "action": action})
        self._drain()  # queued pings were ahead of this one in every mailbox
        dropped = key in self.failed_keys
        if action == "emit":
            # The keyed cell emits a child ping, and so does the global cell, unless failed.
            for _ in range(int(not dropped) + int(not self.global_failed)):
                self._took(key + "-child")
        if action == "trap":
            self.failed_keys.add(key)
        else:
            self._took(key)
        # The global cell takes every ping and declares no effects: it fails on these.
        self.global_failed |= action in ("effect", "timer", "trap")
        new = [i for i in self.world.reader.open_intents() if i["intent"] not in before]
        expected = 0 if dropped else {"effect": n, "timer": 1}.get(action, 0)
        assert len(new) == expected, new
        for intent in new:
            assert cbor.decode(intent["key"]) == key
            due = now + n if action == "timer" else None
            assert intent["due_ns"] == due
            self.open[intent["intent"]] = (key, due)

    @precondition(lambda self: any(due is None for _, due in self.open.values()))
    @rule(
        data=st.data(),
        status=st.sampled_from(["ok", "ok", "error", "timeout"]),
        fits=st.booleans(),
    )
    def settle(self, data: st.DataObject, status: str, fits: bool) -> None:
        noop = sorted(i for i, (_, due) in self.open.items() if due is None)
        intent = data.draw(st.sampled_from(noop))
        payload: Any = {"ok": True} if fits else {"ok": "not a bool"}
        settlement = self.world.settle(self._receipt(intent, status=status, payload=payload))
        assert settlement.seq is not None and not settlement.duplicate
        self.world.run_to_idle()
        self._drain()
        key, _ = self.open.pop(intent)
        self._took(key)
        self.settled.append(intent)

    @precondition(lambda self: bool(self.settled))
    @rule(data=st.data())
    def duplicate_receipt(self, data: st.DataObject) -> None:
        intent = data.draw(st.sampled_from(self.settled))
        height = self.world.height
        assert self.world.settle(self._receipt(intent)).duplicate
        assert self.world.height == height

    @rule(kind=st.sampled_from(["unknown", "forged", "timer"]))
    def bad_receipt(self, kind: str) -> None:
        timers = sorted(i for i, (_, due) in self.open.items() if due is not None)
        noop = sorted(i for i, (_, due) in self.open.items() if due is None)
        if kind == "timer" and timers:
            receipt = self._receipt(timers[0])  # demo/adapter@1 may not settle a timer
        elif kind == "forged" and noop:
            receipt = self._receipt(noop[0], seed=STRANGER_SEED)
        else:
            receipt = self._receipt("blake3:" + "0" * 64)
        height = self.world.height
        with pytest.raises(ReceiptError):
            self.world.settle(receipt)
        assert self.world.height == height + 1  # the refusal is journaled, nothing else

    @rule(key=st.sampled_from(KEYS))
    def refused_mid_batch(self, key: str) -> None:
        self.world.ingress(PING, {"id": key, "n": 0, "action": "none"})
        with pytest.raises(RouteError):
            self.world.ingress("demo/Unrouted@1", {"id": key})
        self.queued_keys.append(key)

    @rule()
    def snapshot(self) -> None:
        if self.queued_keys:
            with pytest.raises(WorldNotQuiescentError):
                self.world.snapshot()
            return
        seq, _ = self.world.snapshot()
        assert seq == self.world.height

    @rule()
    def reopen(self) -> None:
        before = self._live()
        self.world.close()
        self.world = World.open(self.path, sync=False, stamps=self._stamps(), engine=_engine())
        assert self._live() == before

    @rule(by_ns=st.integers(0, TIMER_NS_MAX))
    def advance_time(self, by_ns: int) -> None:
        now = self.world.logical_ns + by_ns
        self.world.advance_time(by_ns)
        self._drain()
        self._fire(now)

    @rule()
    def jump_next_timer(self) -> None:
        before = self.world.logical_ns
        report = self.world.jump_next_timer()
        dues = [due for _, due in self.open.values() if due is not None]
        assert (report is None) == (not dues)
        if dues:
            assert self.world.logical_ns == max(before, min(dues))
            self._drain()
            self._fire(self.world.logical_ns)

    # -- the property -----------------------------------------------------------------------

    @invariant()
    def replays_agree_with_the_live_world(self) -> None:
        world = self.world
        assert world.height == world.store.journal.head(), "a step left records unflushed"
        self._check_model()
        audits = [None]
        if world.snapshots:
            audits.append(str(world.snapshots[-1][0]))
        assert self.auditor is not None, "the auditor fixture is not active"
        for from_snapshot in audits:
            future = self.auditor.submit(_audit, str(self.path), from_snapshot)
            report = future.result(timeout=AUDIT_TIMEOUT_S)
            assert report["ok"], json.dumps(report["divergence"], indent=1, default=str)
            assert report["end_seq"] == world.height
            assert report["snapshot"] == (
                None if from_snapshot is None else str(world.snapshots[-1][1])
            )

    # -- helpers ----------------------------------------------------------------------------

    def _took(self, key: str) -> None:
        if key not in self.failed_keys:  # a failed cell's deliveries are dropped
            self.counts[key] = self.counts.get(key, 0) + 1

    def _drain(self) -> None:
        for key in self.queued_keys:
            self._took(key)
        self.queued_keys.clear()

    def _fire(self, now: int) -> None:
        for intent, (key, due) in sorted(self.open.items()):
            if due is not None and due <= now:
                del self.open[intent]
                self._took(key)

    def _receipt(self, intent: str, seed: bytes = ADAPTER_SEED, **changes: Any) -> Any:
        body = {
            "world": self.world.world_id,
            "intent": intent,
            "status": "ok",
            "payload": {"ok": True},
            "adapter": "demo/adapter@1",
            "started_ns": 10,
            "finished_ns": 20,
        }
        body.update(changes)
        return signed_receipt(seed, body)

    def _live(self) -> dict[str, Any]:
        world = self.world
        cells = {}
        for workflow in (KEYED, GLOBAL):
            cells[workflow] = [
                (cell.key, cell.state_hash, cell.status, cell.last_active_seq)
                for cell in world.reader.cells(workflow)
            ]
        return {
            "status": world.reader.status(),
            "open_intents": world.reader.open_intents(),
            "cells": cells,
            "snapshots": list(world.snapshots),
        }

    def _check_model(self) -> None:
        world = self.world
        statuses = {cell.key: cell.status for cell in world.reader.cells(KEYED)}
        for key in self.failed_keys:
            assert statuses[key] == "failed", key
        for key, count in self.counts.items():
            if key not in self.failed_keys:
                assert world.reader.state(KEYED, key)["count"] == count, key
        open_now = {i["intent"]: i for i in world.reader.open_intents()}
        assert set(open_now) == set(self.open)
        for intent, (key, _) in self.open.items():
            assert cbor.decode(open_now[intent]["key"]) == key
        [global_cell] = world.reader.cells(GLOBAL) or [None]
        if global_cell is not None:
            assert (global_cell.status == "failed") == self.global_failed
        # Each queued ping has two deliveries: its keyed cell and the global cell.
        assert world.reader.status()["queued"] == 2 * len(self.queued_keys)


# Costly (a world per walk, three replays after each step): few walks, sized by the variables
# above; the rules' preconditions reject many draws, which is their job, not a bad strategy.
_Machine.TestCase.settings = settings(
    max_examples=EXAMPLES_MAX,
    stateful_step_count=STEPS_MAX,
    suppress_health_check=[HealthCheck.filter_too_much],
)


# ~20 s alone: every walk replays its world three ways after each step.
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("auditor")
class TestReplayProperties(_Machine.TestCase):  # type: ignore[name-defined,misc]
    """Full replay == snapshot + tail replay == live state, after every step."""
