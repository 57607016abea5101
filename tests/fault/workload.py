"""The child process of the fault-injection harness: a random workload against one world.

    python -m tests.fault.workload --world DIR --ack FILE --seed N [--ops-max M]
    AOS_FAULT_POINT=flush.before AOS_FAULT_AT=3 python -m tests.fault.workload ...

It creates the scripted world (`sync=True`, wall clock) or opens it, steps whatever the last
checkpoint left queued, then runs up to `--ops-max` operations chosen by `random.Random(seed)`:
pings (plain, emitting, asking for effects or a kernel timer), batches of ingress with one
`run_to_idle` (sometimes with an unroutable event in the middle, which flushes at once),
settling open intents with signed receipts, duplicate and bad receipts, snapshots and ticks.

After each operation returns, everything it journaled is durable. Only then the child appends
one JSON line to the ack file and fsyncs it: the operation, and the sequence and record hash
of every record the operation appended (seen through `Journaler.on_append`). The harness checks
that each of them is in the journal after the kill, with that hash.

With `--store URL` (a `postgresql://...?world=ID` store URL) the world is created on that
PostgreSQL server instead of LMDB (`create_world`), and opened through its `store/url`
afterwards. The server may be restarted under the child (the harness's `restart` rounds): an
operation cut off by it fails with `store.unavailable` and is not acknowledged (its commit may
or may not have landed); the child then drops the world (memory may be ahead of the store),
reopens it (the store's connect retries wait for the server, up to `REOPEN_ATTEMPTS_MAX`
opens), acknowledges a `recover` and goes on.

`AOS_FAULT_POINT` names a kill point (see `POINTS`); the child sends itself SIGKILL the
`AOS_FAULT_AT`-th time it reaches it. The hooks live only here: the world's `flush`,
`snapshot` and `step_next` are wrapped on the instance (internal calls go through the instance
attribute too, so an automatic snapshot inside `run_to_idle` is hooked as well).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aos.kernel.hashing import hash_bytes
from aos.kernel.signing.signatures import signed_receipt
from aos.kernel.store.errors import StoreError, StoreUnavailableError
from aos.kernel.wasm import WasmEngine
from aos.kernel.world.receipts import ReceiptError
from aos.kernel.world.router import RouteError
from aos.kernel.world.world import World, WorldLimits
from aos.kernel.world_store import create_world

REPO = Path(__file__).resolve().parents[2]
SCRIPTED = REPO / "tests" / "fixtures" / "worlds" / "scripted"
ADAPTER_SEED = bytes(range(32))  # demo/adapter@1 in the scripted fixture
STRANGER_SEED = bytes(range(1, 33))  # demo/stranger@1: allowed to settle nothing
PING = "demo/Ping@1"
UNROUTED = "demo/Unrouted@1"
NOOP = "demo/noop@1"

ENV_POINT = "AOS_FAULT_POINT"
ENV_AT = "AOS_FAULT_AT"
OPS_MAX_DEFAULT = 2000  # a bound; a child normally dies long before
KEYS_MAX = 32  # the key pool: cells are revisited, so states and intents pile up per cell
BATCH_EVENTS_MAX = 6
EFFECTS_PER_PING_MAX = 3
TIMER_NS_MAX = 20_000_000  # kernel timers fall due within 20 ms of wall time
RACE_S_MAX = 0.004  # `flush.race` fires within this long after a flush starts
SNAPSHOT_EVERY_RECORDS = 300  # automatic snapshots too, inside run_to_idle
# Head checkpoints on a short cadence, so kills land in flushes of both kinds: checkpoints,
# and flushes between them whose records the reopened world folds (spec/05 §1.1).
CHECKPOINT_EVERY_RECORDS = 40
# Opens tried after a server restart cut an operation off, each waiting out the store's own
# connect retries (`pg_store.CONNECT_WAIT_MS_MAX_DEFAULT`): a server still gone is a failure.
REOPEN_ATTEMPTS_MAX = 3
# The exit status of a child whose creation of the world the server cut off: nothing was
# acknowledged, and the id may be taken; the harness creates under a new id next round.
EXIT_CREATE_CUT_OFF = 75

# Kill points and what they hit. `delay` is the harness's own: a SIGKILL after a random delay.
POINTS: dict[str, str] = {
    "flush.before": "entering a flush: nothing of it is durable",
    "flush.race": "a thread kills 0-4 ms after a flush starts: inside the commit or its fsync",
    "flush.after": "the flush committed, the operation has not returned",
    "step.mid": "between two steps of a run: records appended, not flushed",
    "receipt.after": "settle() accepted a receipt, run_to_idle has not flushed it",
    "receipt.flush": "entering the flush that makes accepted receipts durable",
    "reject.flush": "entering the flush of a refused receipt or unroutable event",
    "snapshot.flush": "entering the flush inside snapshot() (manual or automatic)",
    "snapshot.after": "snapshot() returned, not acknowledged",
    "tick.flush": "entering the flush after a time input settled timers",
    "ack.before": "the operation is durable, its ack is not written",
    "ack.torn": "half an ack line written and fsynced",
}
# The flush an operation context maps to, for the `<context>.flush` points.
_FLUSH_POINTS = {
    "settle": "receipt.flush",
    "reject": "reject.flush",
    "snapshot": "snapshot.flush",
    "tick": "tick.flush",
}


class Killer:
    """SIGKILLs this process the `at`-th time `point` is reached (never, without a point)."""

    def __init__(self, point: str | None, at: int, rng: random.Random) -> None:
        self.point = point
        self.at = at
        self.count = 0
        self._rng = rng

    @staticmethod
    def from_env(rng: random.Random) -> Killer:
        point = os.environ.get(ENV_POINT) or None
        if point is not None and point not in POINTS:
            raise SystemExit(f"unknown kill point {point!r}; one of {', '.join(POINTS)}")
        return Killer(point, int(os.environ.get(ENV_AT, "1")), rng)

    def due(self, point: str) -> bool:
        """Count a visit to `point`; True on the visit that must kill."""
        if point != self.point:
            return False
        self.count += 1
        return self.count == self.at

    def hit(self, point: str) -> None:
        if not self.due(point):
            return
        if point == "flush.race":
            delay_s = self._rng.uniform(0, RACE_S_MAX)
            threading.Thread(target=_kill_after, args=(delay_s,), daemon=True).start()
            return
        _kill_after(0)


def _kill_after(delay_s: float) -> None:
    if delay_s:
        time.sleep(delay_s)
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class KillContext:
    op: str = ""
    # Each appended record's sequence and canonical bytes (what the journal stores).
    appended: list[tuple[int, bytes]] = field(default_factory=list)


def install_hooks(world: World, killer: Killer, context: KillContext) -> None:
    """Wrap the world's commit (the `flush.*` points), snapshot and step on the instance so
    kill points fire there."""
    commit: Callable[..., None] = world.commit
    snapshot = world.snapshot
    step_next = world.step_next

    def hooked_commit(*, checkpoint: bool = False) -> None:
        killer.hit("flush.race")
        killer.hit("flush.before")
        named = _FLUSH_POINTS.get(context.op)
        if named is not None:
            killer.hit(named)
        commit(checkpoint=checkpoint)
        killer.hit("flush.after")

    def hooked_snapshot() -> Any:
        outer, context.op = context.op, "snapshot"
        try:
            result = snapshot()
        finally:
            context.op = outer
        killer.hit("snapshot.after")
        return result

    def hooked_step_next(report: Any = None) -> bool:
        killer.hit("step.mid")
        return step_next(report)

    world.commit = hooked_commit  # type: ignore[method-assign]
    world.snapshot = hooked_snapshot  # type: ignore[method-assign]
    world.step_next = hooked_step_next  # type: ignore[method-assign]
    world.journaler.on_append = lambda seq, _, raw: context.appended.append((seq, raw))


class Workload:
    def __init__(
        self, world: World, rng: random.Random, killer: Killer, context: KillContext, ack_fd: int
    ) -> None:
        self.world = world
        self.rng = rng
        self.killer = killer
        self.context = context
        self.ack_fd = ack_fd
        self.settled: list[str] = []  # intents this child settled (for duplicate receipts)
        # How to open the world again after the store's server went away (None: never).
        self.reopen: Callable[[], World] | None = None
        self.reopened = 0

    # -- acknowledgements -----------------------------------------------------------------

    def ack(self, op: str, **extra: Any) -> None:
        """Acknowledge an operation that returned: everything it appended is durable."""
        world = self.world
        if world.height != world.store.journal.head():
            raise AssertionError(
                f"{op} returned with records not flushed: world at {world.height}, "
                f"journal at {world.store.journal.head()}"
            )
        appended = [[seq, str(hash_bytes(raw))] for seq, raw in self.context.appended]
        self.context.appended.clear()
        line = json.dumps({"op": op, "records": appended, **extra}, sort_keys=True) + "\n"
        self.killer.hit("ack.before")
        data = line.encode()
        if self.killer.due("ack.torn"):
            os.write(self.ack_fd, data[: len(data) // 2])
            os.fsync(self.ack_fd)
            _kill_after(0)
        os.write(self.ack_fd, data)
        os.fsync(self.ack_fd)

    def begin(self, op: str) -> None:
        self.context.op = op
        self.context.appended.clear()

    # -- operations -----------------------------------------------------------------------

    def run(self, ops_max: int) -> None:
        self.guarded(self.drain)
        choices = [
            (self.send, 35),
            (self.batch, 10),
            (self.settle, 28),
            (self.duplicate, 3),
            (self.reject, 4),
            (self.snapshot, 5),
            (self.tick, 15),
        ]
        operations = [operation for operation, _ in choices]
        weights = [weight for _, weight in choices]
        for _ in range(ops_max):
            self.guarded(self.rng.choices(operations, weights)[0])

    def drain(self) -> None:
        self.begin("recover")
        self.world.run_to_idle()  # whatever the last checkpoint left queued
        self.ack("recover")

    def guarded(self, operation: Callable[[], None]) -> None:
        """Run `operation`; if the store's server went away under it, recover."""
        try:
            operation()
        except StoreUnavailableError as error:
            if self.reopen is None:
                raise
            print(f"{error.code} during {self.context.op}: {error}", file=sys.stderr)
            self.recover()

    def recover(self) -> None:
        """The server went away during an operation: nothing of it is acknowledged. Drop the
        world without flushing what memory holds beyond the store, open it again (waiting for
        the server) and run what its last checkpoint left queued; a restart cutting that off
        too is tried again, up to `REOPEN_ATTEMPTS_MAX` times."""
        assert self.reopen is not None
        for attempt in range(1, REOPEN_ATTEMPTS_MAX + 1):
            # Closing checkpoints a clean world; the server may still be away.
            with contextlib.suppress(StoreError):
                self.world.close()
            try:
                self.world = self.reopen()
                install_hooks(self.world, self.killer, self.context)
                self.drain()
            except StoreUnavailableError:
                if attempt == REOPEN_ATTEMPTS_MAX:
                    raise
                continue
            self.reopened += 1
            return

    def ping(self) -> dict[str, Any]:
        rng = self.rng
        key = f"k{rng.randrange(KEYS_MAX)}"
        # A trap fails the cell for good (later deliveries are dropped); rare, because the
        # pool is small, but it marks cells failed that were loaded lazily after a reopen.
        actions = ["none", "effect", "emit", "timer", "trap"]
        action = rng.choices(actions, [40, 35, 10, 14, 1])[0]
        n = 0
        if action == "effect":
            n = rng.randint(1, EFFECTS_PER_PING_MAX)
        elif action == "timer":
            n = rng.randrange(TIMER_NS_MAX)
        return {"id": key, "n": n, "action": action}

    def send(self) -> None:
        self.begin("send")
        self.world.send(PING, self.ping())
        self.ack("send")

    def batch(self) -> None:
        self.begin("batch")
        count = self.rng.randint(2, BATCH_EVENTS_MAX)
        unroutable_at = self.rng.randrange(count) if self.rng.random() < 0.3 else -1
        for index in range(count):
            if index == unroutable_at:
                # Refused at once and flushed, with the earlier events still queued.
                self.context.op = "reject"
                try:
                    self.world.ingress(UNROUTED, {"id": f"u{index}"})
                except RouteError:
                    pass
                else:
                    raise AssertionError("an unroutable event was admitted")
                self.context.op = "batch"
            else:
                self.world.ingress(PING, self.ping())
        self.world.run_to_idle()
        self.ack("batch")

    def _open_noop_intents(self) -> list[str]:
        return [i["intent"] for i in self.world.reader.open_intents() if i["effect"] == NOOP]

    def _receipt(self, intent: str, seed: bytes = ADAPTER_SEED, **changes: Any) -> Any:
        status = self.rng.choices(["ok", "error", "timeout"], [85, 10, 5])[0]
        payload: Any = {"ok": True} if status == "ok" else {"message": "failed"}
        if status == "ok" and self.rng.random() < 0.05:
            payload = {"ok": "not a bool"}  # delivered as a rejected receipt
        body = {
            "world": self.world.world_id,
            "intent": intent,
            "status": status,
            "payload": payload,
            "adapter": "demo/adapter@1",
            "started_ns": 10,
            "finished_ns": 20,
        }
        body.update(changes)
        return signed_receipt(seed, body)

    def settle(self) -> None:
        intents = self._open_noop_intents()
        if not intents:
            self.send()
            return
        self.begin("settle")
        chosen = self.rng.sample(intents, min(len(intents), self.rng.randint(1, 3)))
        for intent in chosen:
            settlement = self.world.settle(self._receipt(intent))
            if settlement.duplicate or settlement.seq is None:
                raise AssertionError(f"an open intent settled as a duplicate: {intent}")
            self.killer.hit("receipt.after")
        self.world.run_to_idle()
        self.settled.extend(chosen)
        self.ack("settle", intents=chosen)

    def duplicate(self) -> None:
        if not self.settled:
            self.settle()
            return
        self.begin("duplicate")
        intent = self.rng.choice(self.settled)
        height = self.world.height
        settlement = self.world.settle(self._receipt(intent))
        if not settlement.duplicate or self.world.height != height:
            raise AssertionError(f"a settled intent was settled again: {intent}")
        self.ack("duplicate", intent=intent)

    def reject(self) -> None:
        self.begin("reject")
        intents = self._open_noop_intents()
        if intents and self.rng.random() < 0.5:
            receipt = self._receipt(self.rng.choice(intents), seed=STRANGER_SEED)  # forged
        else:
            receipt = self._receipt("blake3:" + "0" * 64)  # no such intent
        try:
            self.world.settle(receipt)
        except ReceiptError as error:
            self.ack("reject", code=error.code)
        else:
            raise AssertionError("a bad receipt was accepted")

    def snapshot(self) -> None:
        self.begin("snapshot")
        seq, snapshot_hash = self.world.snapshot()
        self.ack("snapshot", seq=seq, hash=str(snapshot_hash))

    def tick(self) -> None:
        self.begin("tick")
        self.world.tick()
        self.ack("tick")


def open_world(
    world_dir: Path, engine: WasmEngine, ack_fd: int, store_url: str | None = None
) -> World:
    """Open the world, or create it (on the server `store_url` names, if given)."""
    limits = WorldLimits(
        snapshot_every_records=SNAPSHOT_EVERY_RECORDS,
        checkpoint_every_records=CHECKPOINT_EVERY_RECORDS,
    )
    return open_or_create(
        world_dir,
        engine,
        ack_fd,
        limits,
        lambda: create_world(
            world_dir, SCRIPTED, store_url=store_url, sync=True, engine=engine, limits=limits
        ),
    )


def open_or_create(
    world_dir: Path,
    engine: WasmEngine,
    ack_fd: int,
    limits: WorldLimits,
    create: Callable[[], World],
) -> World:
    """Open the lane's world, or create it and ack the creation (durable before the ack)."""
    if world_dir.exists():
        return World.open(world_dir, sync=True, engine=engine, limits=limits)
    world = create()
    line = json.dumps({"op": "create", "records": [], "world_id": world.world_id}) + "\n"
    os.write(ack_fd, line.encode())
    os.fsync(ack_fd)
    return world


def first_open(
    world_dir: Path, engine: WasmEngine, ack_fd: int, store_url: str | None
) -> World | None:
    """`open_world`, tried again when the server goes away while opening; None when it cut
    off the creation (not acknowledged)."""
    for attempt in range(1, REOPEN_ATTEMPTS_MAX + 1):
        creating = not world_dir.exists()
        try:
            return open_world(world_dir, engine, ack_fd, store_url)
        except StoreUnavailableError as error:
            print(f"{error.code} while opening: {error}", file=sys.stderr)
            if creating:
                return None
            if attempt == REOPEN_ATTEMPTS_MAX:
                raise
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--world", type=Path, required=True)
    parser.add_argument("--ack", type=Path, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--ops-max", type=int, default=OPS_MAX_DEFAULT)
    parser.add_argument("--store", default=None, help="create the world on this server store")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    killer = Killer.from_env(random.Random(args.seed ^ 0x5EED))
    ack_fd = os.open(args.ack, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    engine = WasmEngine()
    world = first_open(args.world, engine, ack_fd, args.store)
    if world is None:
        return EXIT_CREATE_CUT_OFF
    context = KillContext()
    install_hooks(world, killer, context)
    print("ready", flush=True)
    workload = Workload(world, rng, killer, context, ack_fd)
    workload.reopen = lambda: open_world(args.world, engine, ack_fd)
    try:
        workload.run(args.ops_max)
    finally:
        workload.world.close()
    os.close(ack_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
