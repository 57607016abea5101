"""Fault injection: SIGKILL a workload at random and at the worst moments, reopen, check.

    python -m tests.fault.harness --kills 1000                 # make fault
    python -m tests.fault.harness --kills 200 --jobs 2         # make fault-ci
    python -m tests.fault.harness --kills 50 --seed 1234 --keep /tmp/fault
    python -m tests.fault.harness --workload flows --kills 50 --jobs 2   # the flow slice
    python -m tests.fault.harness --store pg --kills 40 --restarts 5 --jobs 2   # PostgreSQL

Each round starts `tests/fault/workload.py` in a child process against the lane's current
world, with a seed and a kill point drawn from the run's seed: either `delay` (the harness
sends SIGKILL after a random delay, counted from the child's `ready` line or, now and then,
from its start so that creating and opening are hit too) or a named point where the child
kills itself (entering or racing a flush, mid-run, after a receipt, inside a snapshot, between
the operation and its ack, with a torn ack line; see `workload.POINTS`).

After the child is gone the harness checks the world:

* every acknowledged record is in the journal at its sequence with its hash;
* `replay.verify_replay` passes: the tail since the last check, from the latest snapshot before it
  (a chain of verified snapshots, so the whole journal is covered), and from genesis when the
  world is retired; each includes the head checkpoint == replayed head;
* no intent is lost or doubled: every `effect_intent` hash appears once, every settled intent
  has exactly one `effect_receipt` (and its `settled/` marker names it), no receipt names an
  unknown intent, an intent a step cancelled was neither settled nor cancelled twice (and its
  `cancelled/` marker names the step), and the reopened world's open intents are exactly
  journaled - settled - cancelled;
* acknowledged snapshots are journaled, and the world's snapshot list is the newest
  `snapshots_kept_max` of the journaled ones (retention drops the older ones).

Then the next child continues the same world, so it grows across kills; a lane starts a fresh
world every `--fresh-every` kills to bound the time a check takes.

`--workload flows` runs the flow slice instead (`tests/fault/flows.py`): the child drives flow
executions (parallel branches, a join, parallel loops, retries, timeouts, signals, cancels) on
a flow world, and the harness adds the flow checks after each kill (every execution ends at
most once and is terminal iff it ended; no tool call is issued twice for one decision; every
acknowledged start, signal and cancel is there). When a lane retires a flow world it drains
every execution to its end in the harness, checks that each ended exactly once, and replays
the whole journal.

`--store pg` runs the kernel workload with its worlds on PostgreSQL: one throwaway cluster
for the run (`tests/pg_cluster.py`: loopback, a free port, a non-root owner when run as root,
`synchronous_commit` on so that a crashed server keeps every commit that returned, stopped
at the end), one database, and one world id per trial
(`store/url` in the lane's world folder; a creation that was not acknowledged leaves its id
behind and the next round creates under a new one). Besides the same SIGKILLs, `--restarts N`
rounds restart the server under a running child (`pg_ctl restart -m fast` or `-m
immediate`, one at a time across lanes): the child must fail the cut-off operation with
`store.unavailable` without acknowledging it, reopen the world and keep acknowledging
(`RECOVERED_ACKS_MIN` more acks within `RECOVER_S_MAX`); then it is killed and the world
checked as after any kill. A restart cuts the other lane's child too, and its checks, which
are read-only and tried again (`CHECK_ATTEMPTS_MAX`). A world retired on PostgreSQL also
passes `aos world verify` (the chain from genesis and every blob read back).

A failing round keeps its world and ack file under `<work>/failures/` and is reported with its
seeds and point. The exit status is non-zero on any failure.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TypeVar

from aos.flows.serve.flow_world import load_or_make_keys
from aos.kernel.audit.integrity import verify_integrity
from aos.kernel.audit.replay import ReplayReport, verify_replay
from aos.kernel.hashing import hash_value
from aos.kernel.store.errors import StoreUnavailableError
from aos.kernel.wasm import WasmEngine
from aos.kernel.world import records
from aos.kernel.world.world import SNAPSHOTS_KEPT_MAX_DEFAULT, World
from tests.fault import flows, workload
from tests.pg_cluster import RESTART_MODES, PgCluster

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")
FRESH_EVERY_DEFAULT = 25
DELAY_S_MAX = 0.6
DELAY_FROM_START_S_MAX = 1.5  # covers imports, create/open and the recovery run
DELAY_FROM_START_SHARE = 0.15
CHILD_TIMEOUT_S = 120
PROGRESS_EVERY_ROUNDS = 25  # a progress line per lane, even when quiet
ROUNDS_PER_KILL_MAX = 3  # a child that ends without reaching its point is a round, not a kill
DELAY_SHARE = 0.3
# How many visits to a point the child waits for: frequent points later, rare ones soon.
POINT_AT_MAX = {
    "flush.before": 30,
    "flush.race": 30,
    "flush.after": 30,
    "step.mid": 60,
    "receipt.after": 8,
    "receipt.flush": 8,
    "reject.flush": 3,
    "snapshot.flush": 2,
    "snapshot.after": 2,
    "tick.flush": 3,
    "ack.before": 30,
    "ack.torn": 30,
}
assert set(POINT_AT_MAX) == set(workload.POINTS)
# The flow child does fewer, heavier operations (each a few interpreter steps).
FLOW_POINT_AT_MAX = {
    "flush.before": 25,
    "flush.race": 25,
    "flush.after": 25,
    "step.mid": 50,
    "receipt.after": 12,
    "receipt.flush": 10,
    "reject.flush": 2,
    "snapshot.flush": 2,
    "snapshot.after": 2,
    "tick.flush": 4,
    "ack.before": 25,
    "ack.torn": 25,
}
assert set(FLOW_POINT_AT_MAX) == set(workload.POINTS)
FLOW_FRESH_EVERY_DEFAULT = 10
STORES = ("lmdb", "pg")
PG_DATABASE = "aos_fault"
RESTART_DELAY_S_MAX = 0.6  # from the child's `ready` to the restart
RECOVERED_ACKS_MIN = 3  # acks the child must write after the server is back
RECOVER_S_MAX = 60.0  # for those acks: above the child's reopen attempts' connect waits
RECOVER_POLL_S = 0.05
CHECK_ATTEMPTS_MAX = 3  # a check cut off by another lane's restart is run again


@dataclass(frozen=True)
class Mode:
    """What a lane runs: the child's module, how often its points are visited, and whether
    the flow checks apply."""

    name: str
    module: str
    point_at_max: dict[str, int]
    delay_s_max: float
    delay_from_start_s_max: float
    fresh_every: int

    @property
    def flows(self) -> bool:
        return self.name == "flows"


MODES = {
    "kernel": Mode(
        "kernel",
        "tests.fault.workload",
        POINT_AT_MAX,
        DELAY_S_MAX,
        DELAY_FROM_START_S_MAX,
        FRESH_EVERY_DEFAULT,
    ),
    "flows": Mode(
        "flows", "tests.fault.flows", FLOW_POINT_AT_MAX, 1.0, 2.5, FLOW_FRESH_EVERY_DEFAULT
    ),
}


@dataclass
class Failure:
    lane: int
    round: int
    world: str
    child_seed: int
    point: str
    at: int
    problems: list[str]
    kept: str
    module: str = "tests.fault.workload"

    def describe(self) -> str:
        env = f"{workload.ENV_POINT}={self.point} {workload.ENV_AT}={self.at} "
        if self.point == "delay" or self.point.startswith("restart-"):
            env = ""  # the harness's own faults: a SIGKILL after a delay, a server restart
        keys = f" --keys {self.kept}/keys" if self.module == "tests.fault.flows" else ""
        lines = [
            f"lane {self.lane} round {self.round} world {self.world} point {self.point} "
            f"at {self.at} child seed {self.child_seed}; kept in {self.kept}",
            f"  rerun the child on the kept world: {env}python -m {self.module} "
            f"--world {self.kept}/world{keys} --ack {self.kept}/ack.jsonl --seed {self.child_seed}",
        ]
        lines += [f"  - {problem}" for problem in self.problems[:20]]
        return "\n".join(lines)


@dataclass
class Summary:
    seed: int
    jobs: int = 1
    workload: str = "kernel"
    executions: int = 0  # flow executions drained to their end and checked when retired
    kills: int = 0
    rounds: int = 0
    unreached: int = 0  # children that finished their operations before reaching the point
    worlds: int = 0
    acked_ops: int = 0
    acked_records: int = 0
    records_checked: int = 0
    points: Counter[str] = field(default_factory=Counter)
    unreached_points: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)
    elapsed_s: float = 0.0
    store: str = "lmdb"
    restarts: Counter[str] = field(default_factory=Counter)  # per `pg_ctl restart -m` mode
    recovered_acks: int = 0  # acks children wrote after a restart they lived through
    reopens: int = 0  # `recover` acks after a restart: the child reopened its world
    verified_worlds: int = 0  # retired worlds that passed `aos world verify`
    creates_cut_off: int = 0  # children whose creation a restart cut off (nothing acked)

    def merge(self, other: Summary) -> None:
        self.kills += other.kills
        self.rounds += other.rounds
        self.unreached += other.unreached
        self.worlds += other.worlds
        self.acked_ops += other.acked_ops
        self.acked_records += other.acked_records
        self.records_checked += other.records_checked
        self.executions += other.executions
        self.points.update(other.points)
        self.unreached_points.update(other.unreached_points)
        self.failures.extend(other.failures)
        self.restarts.update(other.restarts)
        self.recovered_acks += other.recovered_acks
        self.reopens += other.reopens
        self.verified_worlds += other.verified_worlds
        self.creates_cut_off += other.creates_cut_off

    def render(self) -> str:
        flows_note = ""
        if self.workload == "flows":
            flows_note = f", {self.executions} flow executions drained and ended once"
        lines = [
            f"fault injection ({self.workload}, {self.store}): seed {self.seed}: {self.kills} "
            f"kills and {sum(self.restarts.values())} server restarts in "
            f"{self.rounds} rounds "
            f"({self.unreached} ended before their point), {self.worlds} worlds, "
            f"{self.acked_ops} acked operations ({self.acked_records} records), "
            f"{self.records_checked} journal records checked{flows_note}, "
            f"{self.elapsed_s:.0f} s",
            "kills per point (and rounds that ended before reaching it):",
        ]
        if self.store == "pg":
            modes = ", ".join(f"{n} -m {mode}" for mode, n in sorted(self.restarts.items()))
            lines.insert(
                1,
                f"server restarts: {modes or 'none'}; children reopened their world "
                f"{self.reopens} times and acked {self.recovered_acks} operations after "
                f"restarts ({self.creates_cut_off} creations cut off, not acked); "
                f"{self.verified_worlds} retired worlds passed `aos world verify`",
            )
        for point in ["delay", *workload.POINTS]:
            unreached = self.unreached_points.get(point, 0)
            lines.append(
                f"  {point:<15} {self.points.get(point, 0)}"
                + (f" ({unreached})" if unreached else "")
            )
        lines.append(f"failures: {len(self.failures)}")
        if self.failures:
            lines.append(
                f"rerun the whole schedule: python -m tests.fault.harness --seed {self.seed} "
                f"--workload {self.workload} --store {self.store} --kills {self.kills} "
                f"--restarts {sum(self.restarts.values())} --jobs {self.jobs} "
                "(delays are wall-clock: close, not exact)"
            )
        lines += [failure.describe() for failure in self.failures]
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Acks


def read_acks(path: Path) -> list[dict[str, Any]]:
    """The complete ack lines; a torn last line (the child died writing it) is cut off, so the
    next child appends after the last complete line."""
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        with open(path, "r+b") as file:
            file.truncate(end)
            os.fsync(file.fileno())
    return [json.loads(line) for line in data[:end].splitlines()]


# --------------------------------------------------------------------------------------------
# Checks


@dataclass
class _Check:
    problems: list[str]
    head: int
    records: int


def check_world(
    world_dir: Path,
    acks: list[dict[str, Any]],
    engine: WasmEngine,
    *,
    from_seq: int | None,
    flow_checks: bool = False,
) -> _Check:
    """Everything a killed world must satisfy; `from_seq` None replays from genesis;
    `flow_checks` adds the flow world's (`flows.check`)."""
    problems: list[str] = []
    _replay(problems, verify_replay(world_dir, engine=engine, from_seq=from_seq), "replay")
    with World.open(world_dir, sync=True, engine=engine) as world:
        journal: dict[int, dict[str, Any]] = dict(world.store.journal.read(1))  # type: ignore[arg-type]
        head = world.store.journal.head()
        if sorted(journal) != list(range(1, head + 1)):
            problems.append(f"the journal is not contiguous 1..{head}")
        _check_acks(problems, acks, journal, world)
        _check_intents(problems, journal, world)
        if flow_checks:
            flows.check(problems, journal, world, acks)
    return _Check(problems, head, len(journal))


def _replay(problems: list[str], report: ReplayReport, what: str) -> None:
    if report.ok:
        return
    divergence = report.divergence
    detail = divergence.to_value() if divergence is not None else {}
    detail.pop("expected", None)
    detail.pop("found", None)
    problems.append(f"{what} from {report.start_seq} diverged: {json.dumps(detail)}")


def _check_acks(
    problems: list[str],
    acks: list[dict[str, Any]],
    journal: dict[int, dict[str, Any]],
    world: World,
) -> None:
    hashes: dict[int, str] = {}
    acked_by: dict[int, str] = {}
    for ack in acks:
        for seq, expected in ack["records"]:
            if seq in acked_by:
                problems.append(f"record {seq} acked by {acked_by[seq]} and again by {ack['op']}")
            acked_by[seq] = ack["op"]
            record = journal.get(seq)
            if record is None:
                problems.append(f"acked record {seq} ({ack['op']}) is missing")
                continue
            found = hashes.get(seq) or str(hash_value(record))
            hashes[seq] = found
            if found != expected:
                problems.append(f"acked record {seq} ({ack['op']}) differs: {record['kind']}")
    receipted = {_receipt_intent(r) for r in journal.values() if r["kind"] == "effect_receipt"}
    kept = [(seq, str(hash_)) for seq, hash_ in world.snapshots]
    journaled = [
        (s, str(r["snapshot"])) for s, r in sorted(journal.items()) if r["kind"] == "snapshot"
    ]
    newest = journaled[-SNAPSHOTS_KEPT_MAX_DEFAULT:]
    if kept != newest:
        problems.append(f"the snapshot list {kept} is not the newest journaled ones {newest}")
    for ack in acks:
        for intent in ack.get("intents", []) + ([ack["intent"]] if "intent" in ack else []):
            if intent not in receipted:
                problems.append(f"acked settlement of {intent} ({ack['op']}) is not journaled")
        if ack["op"] == "snapshot" and (ack["seq"], ack["hash"]) not in journaled:
            problems.append(f"acked snapshot {ack['seq']} is not journaled")


def _receipt_intent(record: dict[str, Any]) -> str:
    return str(record["body"]["intent"])


def _check_intents(problems: list[str], journal: dict[int, dict[str, Any]], world: World) -> None:
    opened = Counter(str(r["intent"]) for r in journal.values() if r["kind"] == "effect_intent")
    receipt_seqs: dict[str, list[int]] = {}
    for seq, record in journal.items():
        if record["kind"] == records.EFFECT_RECEIPT:
            receipt_seqs.setdefault(_receipt_intent(record), []).append(seq)
    # A step may cancel open intents of its own cell (spec/04 §1.1): closed without a receipt.
    cancelled: dict[str, list[int]] = {}
    for seq, record in journal.items():
        if record["kind"] == records.STEP:
            for intent in record.get("cancelled") or []:
                cancelled.setdefault(str(intent), []).append(seq)
    problems += [f"intent {i} journaled {n} times" for i, n in opened.items() if n > 1]
    for intent, seqs in receipt_seqs.items():
        if len(seqs) > 1:
            problems.append(f"intent {intent} settled {len(seqs)} times: {seqs}")
        if intent not in opened:
            problems.append(f"a receipt settles an intent never journaled: {intent}")
        marker = world.store.meta.get(f"settled/{intent}", None)
        if marker != seqs[-1]:
            problems.append(f"settled/{intent} is {marker}, its receipt is at {seqs[-1]}")
    for intent, seqs in cancelled.items():
        if len(seqs) > 1 or intent in receipt_seqs or intent not in opened:
            problems.append(
                f"intent {intent} cancelled at {seqs}, settled at {receipt_seqs.get(intent)}, "
                f"journaled {opened.get(intent, 0)} times"
            )
        marker = world.store.meta.get(f"cancelled/{intent}", None)
        if marker != seqs[-1]:
            problems.append(f"cancelled/{intent} is {marker!r}, its step is at {seqs[-1]}")
    expected_open = set(opened) - set(receipt_seqs) - set(cancelled)
    found_open = {i["intent"] for i in world.reader.open_intents()}
    if found_open != expected_open:
        lost = sorted(expected_open - found_open)
        extra = sorted(found_open - expected_open)
        problems.append(f"open intents differ from journaled - settled: lost {lost}, extra {extra}")


# --------------------------------------------------------------------------------------------
# Rounds


@dataclass
class _Round:
    child_seed: int
    point: str
    at: int
    delay_s: float
    from_start: bool


@dataclass
class _Outcome:
    killed: bool
    returncode: int
    hung: bool = False
    acks_after: int = 0  # restart rounds: acks written once the server was back
    reopens: int = 0  # restart rounds: `recover` acks among them


@dataclass(frozen=True)
class _Restart:
    """A restart round: the restart `mode`, `delay_s` after the child's `ready` line."""

    child_seed: int
    mode: str
    delay_s: float


def _draw(rng: random.Random, mode: Mode) -> _Round:
    child_seed = rng.getrandbits(32)
    if rng.random() < DELAY_SHARE:
        from_start = rng.random() < DELAY_FROM_START_SHARE
        delay_s = rng.uniform(0, mode.delay_from_start_s_max if from_start else mode.delay_s_max)
        return _Round(child_seed, "delay", 0, delay_s, from_start)
    point = rng.choice(sorted(workload.POINTS))
    return _Round(child_seed, point, rng.randint(1, mode.point_at_max[point]), 0.0, False)


def _child_command(
    world_dir: Path, ack: Path, child_seed: int, mode: Mode, extra: list[str]
) -> list[str]:
    command = [sys.executable, "-m", mode.module]
    command += ["--world", str(world_dir), "--ack", str(ack), "--seed", str(child_seed)]
    if mode.flows:
        command += ["--keys", str(world_dir.parent / "keys")]
    return command + extra


def _run_child(
    world_dir: Path,
    ack: Path,
    stderr: Path,
    chosen: _Round,
    mode: Mode = MODES["kernel"],
    extra: list[str] | None = None,
) -> _Outcome:
    env = dict(os.environ)
    env.pop(workload.ENV_POINT, None)
    if chosen.point != "delay":
        env[workload.ENV_POINT] = chosen.point
        env[workload.ENV_AT] = str(chosen.at)
    command = _child_command(world_dir, ack, chosen.child_seed, mode, extra or [])
    with open(stderr, "ab") as errors:
        child = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=errors)
        hung = threading.Event()
        watchdog = threading.Timer(CHILD_TIMEOUT_S, lambda: (hung.set(), _kill(child)))
        watchdog.start()
        try:
            assert child.stdout is not None
            if chosen.point == "delay":
                if not chosen.from_start:
                    child.stdout.readline()  # "ready", or EOF if it died first
                time.sleep(chosen.delay_s)
                _kill(child)
            child.stdout.read()
            returncode = child.wait()
        finally:
            watchdog.cancel()
            child.stdout.close()  # type: ignore[union-attr]
    return _Outcome(returncode == -signal.SIGKILL and not hung.is_set(), returncode, hung.is_set())


def _run_restart(
    world_dir: Path,
    ack: Path,
    stderr: Path,
    chosen: _Restart,
    server: PgCluster,
    lock: Path,
    extra: list[str],
) -> _Outcome:
    """Start a child, restart the server under it, wait for it to acknowledge operations
    again (or die, or run out of time), then SIGKILL it."""
    env = {key: value for key, value in os.environ.items() if key != workload.ENV_POINT}
    command = _child_command(world_dir, ack, chosen.child_seed, MODES["kernel"], extra)
    with open(stderr, "ab") as errors:
        child = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=errors)
        try:
            assert child.stdout is not None
            child.stdout.readline()  # "ready", or EOF if it died first
            time.sleep(chosen.delay_s)
            with open(lock, "w") as held:
                fcntl.flock(held, fcntl.LOCK_EX)  # one restart at a time across lanes
                server.restart(chosen.mode)
            back = _ack_lines(ack)
            deadline = time.monotonic() + RECOVER_S_MAX
            while child.poll() is None and time.monotonic() < deadline:
                if len(_ack_lines(ack)) - len(back) >= RECOVERED_ACKS_MIN:
                    break
                time.sleep(RECOVER_POLL_S)
            _kill(child)
            child.stdout.read()
            returncode = child.wait()
        finally:
            _kill(child)
            child.stdout.close()  # type: ignore[union-attr]
    after = _ack_lines(ack)[len(back) :]
    reopens = sum(1 for line in after if b'"op": "recover"' in line)
    killed = returncode == -signal.SIGKILL
    return _Outcome(killed, returncode, acks_after=len(after), reopens=reopens)


def _ack_lines(ack: Path) -> list[bytes]:
    """The complete ack lines, read without cutting a torn one (the child may be writing)."""
    data = ack.read_bytes() if ack.exists() else b""
    return data[: data.rfind(b"\n") + 1].splitlines()


def _kill(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGKILL)  # a no-op if it has just been reaped


class _Lane:
    """One sequence of worlds and kills, in one process."""

    def __init__(
        self,
        lane: int,
        seed: int,
        work: Path,
        fresh_every: int,
        log: Callable[[str], None],
        *,
        verbose: bool,
        mode: Mode = MODES["kernel"],
        server: PgCluster | None = None,
    ) -> None:
        self.lane = lane
        self.mode = mode
        self.server = server  # the run's PostgreSQL cluster (--store pg), else None
        self.verbose = verbose
        self.rng = random.Random(seed)
        self.work = work
        self.fresh_every = fresh_every
        self.log = log
        self.engine = WasmEngine()
        self.summary = Summary(seed, workload=mode.name, store="lmdb" if server is None else "pg")
        self.world_number = 0
        self.kills_in_world = 0
        self.checked_head = 0
        self.failed = False
        self.acked: tuple[int, int] = (0, 0)  # the current world's acked operations, records

    @property
    def folder(self) -> Path:
        return self.work / f"lane{self.lane}-world{self.world_number}"

    def run(self, kills: int, restarts: int = 0) -> Summary:
        start = time.monotonic()
        self._fresh()
        rounds_max = (kills + restarts) * ROUNDS_PER_KILL_MAX
        while self.summary.rounds < rounds_max:
            kills_left = kills - self.summary.kills
            restarts_left = restarts - sum(self.summary.restarts.values())
            if kills_left <= 0 and restarts_left <= 0:
                break
            if self.failed or self.kills_in_world >= self.fresh_every:
                self._retire()
                self._fresh()
            if self.rng.random() * (max(kills_left, 0) + max(restarts_left, 0)) < restarts_left:
                self._restart_round()
            else:
                self._round()
        self._retire()
        self.summary.elapsed_s = time.monotonic() - start
        return self.summary

    def _fresh(self) -> None:
        self.world_number += 1
        self.kills_in_world = 0
        self.checked_head = 0
        self.failed = False
        self.acked = (0, 0)
        self.folder.mkdir(parents=True)
        if self.mode.flows:
            # The adapter keys the lane's flow world is created with and reopened with. Made
            # here, not in a child: a key file is written in place, so a child killed while
            # writing one would leave a key folder the next child cannot read.
            load_or_make_keys(self.folder / "keys")
        self.summary.worlds += 1

    def _retire(self) -> None:
        """A full replay from genesis (unless the world already failed); the folder goes.
        A flow world first has every execution drained to its end, and checked."""
        folder = self.folder
        if not self.failed and (folder / "world" / "store").is_dir() and self._created():
            problems: list[str] = []
            if self.mode.flows:
                problems = self._retire_flows()
            else:
                problems = _checked(lambda: self._retire_kernel(folder / "world"))
            if problems:
                self._fail(_Round(0, "retire", 0, 0.0, False), problems)
        self.summary.acked_ops += self.acked[0]
        self.summary.acked_records += self.acked[1]
        shutil.rmtree(folder, ignore_errors=True)

    def _retire_kernel(self, world_dir: Path) -> list[str]:
        """A replay from genesis; on PostgreSQL `aos world verify` too."""
        problems: list[str] = []
        _replay(problems, verify_replay(world_dir, engine=self.engine), "full replay")
        if self.server is not None:
            verify_integrity(world_dir)  # raises world.chain_broken / world.cas_broken
            self.summary.verified_worlds += 1
        return problems

    def _retire_flows(self) -> list[str]:
        """Drain every execution of the flow world to its end (no kills), check each ended
        exactly once, then every check on the whole journal, with a replay from genesis."""
        world_dir, acks = self.folder / "world", read_acks(self.folder / "ack.jsonl")
        problems: list[str] = []
        keys = load_or_make_keys(self.folder / "keys")
        try:
            with World.open(world_dir, sync=True, engine=self.engine, limits=flows.limits()) as w:
                self.summary.executions += flows.check_final(problems, w, acks, keys)
            checked = check_world(world_dir, acks, self.engine, from_seq=None, flow_checks=True)
            problems += checked.problems
        except Exception as error:
            problems.append(f"retiring raised {type(error).__name__}: {error}")
        return problems

    def _created(self) -> bool:
        return any(ack["op"] == "create" for ack in read_acks(self.folder / "ack.jsonl"))

    def _round(self) -> None:
        chosen = _draw(self.rng, self.mode)
        folder = self.folder
        world_dir, ack = folder / "world", folder / "ack.jsonl"
        self.summary.rounds += 1
        outcome = _run_child(
            world_dir, ack, folder / "stderr.log", chosen, self.mode, self._store_args()
        )
        if outcome.killed:
            self.summary.kills += 1
            self.summary.points[chosen.point] += 1
            self.kills_in_world += 1
        elif outcome.returncode == 0:
            self.summary.unreached += 1
            self.summary.unreached_points[chosen.point] += 1
        elif outcome.hung:
            self._fail(chosen, [f"the child hung for {CHILD_TIMEOUT_S} s and was killed"])
            return
        elif self._create_cut_off(outcome):
            return
        else:
            tail = (folder / "stderr.log").read_text(errors="replace")[-2000:]
            self._fail(chosen, [f"the child exited with {outcome.returncode}: {tail}"])
            return
        self._check(chosen, outcome)

    def _store_args(self) -> list[str]:
        """The child's `--store`: a world id new to the database each round, used only by a
        child that creates (a creation killed after its server commit leaves that id taken)."""
        if self.server is None:
            return []
        world = f"{self.folder.name}-r{self.summary.rounds}"
        return ["--store", f"{self.server.dsn(PG_DATABASE)}?world={world}"]

    def _restart_round(self) -> None:
        """Restart the server under a running child; it must recover, then it is killed."""
        assert self.server is not None
        folder = self.folder
        chosen = _Restart(
            self.rng.getrandbits(32),
            self.rng.choice(RESTART_MODES),
            self.rng.uniform(0, RESTART_DELAY_S_MAX),
        )
        self.summary.rounds += 1
        outcome = _run_restart(
            folder / "world",
            folder / "ack.jsonl",
            folder / "stderr.log",
            chosen,
            self.server,
            self.work / "pg-restart.lock",
            self._store_args(),
        )
        self.summary.restarts[chosen.mode] += 1
        self.summary.recovered_acks += outcome.acks_after
        self.summary.reopens += outcome.reopens
        as_round = _Round(chosen.child_seed, f"restart-{chosen.mode}", 0, chosen.delay_s, False)
        if self._create_cut_off(outcome):
            return
        if not outcome.killed:
            tail = (folder / "stderr.log").read_text(errors="replace")[-2000:]
            self._fail(as_round, [f"the child exited with {outcome.returncode}: {tail}"])
            return
        if outcome.acks_after < RECOVERED_ACKS_MIN:
            problem = (
                f"the child acked {outcome.acks_after} operations in {RECOVER_S_MAX:.0f} s "
                f"after the server restarted (-m {chosen.mode}); {RECOVERED_ACKS_MIN} expected"
            )
            self._fail(as_round, [problem])
            return
        self.kills_in_world += 1
        self._check(as_round, _Outcome(True, outcome.returncode))

    def _create_cut_off(self, outcome: _Outcome) -> bool:
        """Whether the child exited because a server restart cut off its creation of the
        world (it acknowledged nothing; the next round creates under a new world id)."""
        if outcome.returncode != workload.EXIT_CREATE_CUT_OFF or self._created():
            return False
        self.summary.creates_cut_off += 1
        shutil.rmtree(self.folder / "world", ignore_errors=True)
        return True

    def _check(self, chosen: _Round, outcome: _Outcome) -> None:
        """Every check on the world the round's child left."""
        folder = self.folder
        world_dir, ack = folder / "world", folder / "ack.jsonl"
        acks = read_acks(ack)
        if not self._created():
            # Killed before genesis was durable and acknowledged: nothing was promised.
            shutil.rmtree(world_dir, ignore_errors=True)
            return
        try:
            checked = _retrying(
                lambda: check_world(
                    world_dir,
                    acks,
                    self.engine,
                    from_seq=self.checked_head + 1,
                    flow_checks=self.mode.flows,
                )
            )
        except Exception as error:  # a world that cannot even be checked is a failure
            checked = _Check([f"checking raised {type(error).__name__}: {error}"], 0, 0)
        self.acked = (len(acks), sum(len(ack["records"]) for ack in acks))
        self.summary.records_checked += checked.records
        if checked.problems:
            self._fail(chosen, checked.problems)
            return
        self.checked_head = checked.head
        where = "" if chosen.point == "delay" else f"@{chosen.at}"
        if self.verbose or self.summary.rounds % PROGRESS_EVERY_ROUNDS == 0:
            self.log(
                f"lane {self.lane} round {self.summary.rounds}: {chosen.point}{where} "
                f"{'killed' if outcome.killed else 'ended'}; world {self.world_number} "
                f"at {checked.head} records, {len(acks)} acks: ok "
                f"({self.summary.kills} kills, {len(self.summary.failures)} failures)"
            )

    def _fail(self, chosen: _Round, problems: list[str]) -> None:
        kept = self.work / "failures" / f"lane{self.lane}-round{self.summary.rounds}"
        shutil.copytree(self.folder, kept, dirs_exist_ok=True)
        failure = Failure(
            self.lane,
            self.summary.rounds,
            self.folder.name,
            chosen.child_seed,
            chosen.point,
            chosen.at,
            problems,
            str(kept),
            self.mode.module,
        )
        self.summary.failures.append(failure)
        self.log("FAILURE " + failure.describe())
        self.failed = True  # the world is suspect from here on: the next round starts afresh


def _retrying(check: Callable[[], T]) -> T:
    """Run a read-only check again when a server restart (another lane's) cut it off."""
    for attempt in range(1, CHECK_ATTEMPTS_MAX + 1):
        try:
            return check()
        except StoreUnavailableError:
            if attempt == CHECK_ATTEMPTS_MAX:
                raise
    raise AssertionError("unreachable")


def _checked(check: Callable[[], list[str]]) -> list[str]:
    """The problems `check` found, or the error it raised as one."""
    try:
        return _retrying(check)
    except Exception as error:
        return [f"checking raised {type(error).__name__}: {error}"]


def _stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_lane(
    lane: int,
    seed: int,
    kills: int,
    work: str,
    fresh_every: int,
    quiet: bool,
    mode: str = "kernel",
    server: PgCluster | None = None,
    restarts: int = 0,
) -> Summary:
    lane_runner = _Lane(
        lane,
        seed,
        Path(work),
        fresh_every,
        _stderr_log,
        verbose=not quiet,
        mode=MODES[mode],
        server=server,
    )
    return lane_runner.run(kills, restarts)


def _shares(total: int, jobs: int) -> list[int]:
    return [total // jobs + (1 if lane < total % jobs else 0) for lane in range(jobs)]


def run(
    kills: int,
    *,
    seed: int,
    work: Path,
    jobs: int = 1,
    fresh_every: int | None = None,
    quiet: bool = False,
    mode: str = "kernel",
    store: str = "lmdb",
    restarts: int = 0,
) -> Summary:
    """`kills` kills over `jobs` lanes (processes), each with its own seed from `seed`;
    `mode` is `kernel` (tests/fault/workload.py) or `flows` (tests/fault/flows.py). With
    `store` "pg" the worlds live on a throwaway PostgreSQL cluster started (and stopped) here,
    which `restarts` rounds restart under a running child."""
    if store == "pg" and mode != "kernel":
        raise ValueError("the PostgreSQL slice runs the kernel workload")
    if restarts and store != "pg":
        raise ValueError("server restarts need --store pg")
    options: dict[str, Any] = {
        "seed": seed,
        "work": work,
        "jobs": jobs,
        "fresh_every": fresh_every,
        "quiet": quiet,
        "mode": mode,
    }
    if store != "pg":
        return _run_lanes(kills, 0, server=None, **options)
    with PgCluster.start(crash_safe=True) as cluster:
        cluster.psql(f"CREATE DATABASE {PG_DATABASE}")
        return _run_lanes(kills, restarts, server=cluster.detached(), **options)


def _run_lanes(
    kills: int,
    restarts: int,
    *,
    seed: int,
    work: Path,
    jobs: int,
    fresh_every: int | None,
    quiet: bool,
    mode: str,
    server: PgCluster | None,
) -> Summary:
    start = time.monotonic()
    if fresh_every is None:
        fresh_every = MODES[mode].fresh_every
    seeds = random.Random(seed)
    lanes = [
        (lane, seeds.getrandbits(32), share, restart_share)
        for lane, (share, restart_share) in enumerate(
            zip(_shares(kills, jobs), _shares(restarts, jobs), strict=True)
        )
    ]
    summary = Summary(seed, jobs, workload=mode, store="lmdb" if server is None else "pg")
    common = (str(work), fresh_every, quiet, mode, server)
    if jobs == 1:
        summary.merge(run_lane(0, lanes[0][1], kills, *common, restarts))
    else:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
            futures = [
                pool.submit(run_lane, lane, lane_seed, share, *common, restart_share)
                for lane, lane_seed, share, restart_share in lanes
            ]
            for future in futures:
                summary.merge(future.result())
    summary.elapsed_s = time.monotonic() - start
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=None, help="default: random, printed")
    parser.add_argument("--jobs", type=int, default=1, help="lanes run in parallel")
    parser.add_argument(
        "--workload",
        choices=sorted(MODES),
        default="kernel",
        help="kernel: the scripted world (default); flows: flow executions on a flow world",
    )
    parser.add_argument(
        "--fresh-every",
        type=int,
        default=None,
        help=f"kills per world (default {FRESH_EVERY_DEFAULT}; flows {FLOW_FRESH_EVERY_DEFAULT})",
    )
    parser.add_argument(
        "--store",
        choices=STORES,
        default="lmdb",
        help="lmdb (default), or pg: worlds on a throwaway PostgreSQL cluster (kernel workload)",
    )
    parser.add_argument(
        "--restarts",
        type=int,
        default=0,
        help="with --store pg: rounds that restart the server under a running child",
    )
    parser.add_argument("--keep", type=Path, default=None, help="work folder (default: temp)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.store == "pg" and args.workload != "kernel":
        parser.error("--store pg runs the kernel workload")
    if args.restarts and args.store != "pg":
        parser.error("--restarts needs --store pg")
    seed = args.seed if args.seed is not None else random.SystemRandom().getrandbits(32)
    print(
        f"fault injection ({args.workload}, {args.store}): seed {seed}, {args.kills} kills, "
        f"{args.restarts} server restarts, {args.jobs} jobs",
        flush=True,
    )
    options: dict[str, Any] = {
        "jobs": args.jobs,
        "fresh_every": args.fresh_every,
        "quiet": args.quiet,
        "mode": args.workload,
        "store": args.store,
        "restarts": args.restarts,
    }
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        summary = run(args.kills, seed=seed, work=args.keep, **options)
    else:
        with tempfile.TemporaryDirectory(prefix="aos-fault-") as tmp:
            summary = run(args.kills, seed=seed, work=Path(tmp), **options)
            if summary.failures:
                kept = Path(tempfile.mkdtemp(prefix="aos-fault-failures-"))
                shutil.copytree(Path(tmp) / "failures", kept, dirs_exist_ok=True)
                for failure in summary.failures:
                    failure.kept = failure.kept.replace(str(Path(tmp) / "failures"), str(kept))
    print(summary.render(), flush=True)
    if summary.kills < args.kills:
        print(f"only {summary.kills} of {args.kills} kills landed", flush=True)
        return 1
    if sum(summary.restarts.values()) < args.restarts:
        print(f"only {sum(summary.restarts.values())} of {args.restarts} restarts ran", flush=True)
        return 1
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
