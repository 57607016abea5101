"""Fault injection: SIGKILL a workload at random and at the worst moments, reopen, check.

    python -m tests.fault.harness --kills 1000                 # make fault
    python -m tests.fault.harness --kills 200 --jobs 2         # make fault-ci
    python -m tests.fault.harness --kills 50 --seed 1234 --keep /tmp/fault

Each round starts `tests/fault/workload.py` in a child process against the lane's current
world, with a seed and a kill point drawn from the run's seed: either `delay` (the harness
sends SIGKILL after a random delay, counted from the child's `ready` line or, now and then,
from its start so that creating and opening are hit too) or a named point where the child
kills itself (entering or racing a flush, mid-run, after a receipt, inside a snapshot, between
the operation and its ack, with a torn ack line; see `workload.POINTS`).

After the child is gone the harness checks the world:

* every acknowledged record is in the journal at its sequence with its hash;
* `replay.verify` passes: the tail since the last check, from the latest snapshot before it
  (a chain of verified snapshots, so the whole journal is covered), and from genesis when the
  world is retired; each includes the head checkpoint == replayed head;
* no intent is lost or doubled: every `effect_intent` hash appears once, every settled intent
  has exactly one `effect_receipt` (and its `settled/` marker names it), no receipt names an
  unknown intent, and the reopened world's open intents are exactly journaled - settled;
* acknowledged snapshots are journaled, and the world's snapshot list is the newest
  `snapshots_kept_max` of the journaled ones (retention drops the older ones).

Then the next child continues the same world, so it grows across kills; a lane starts a fresh
world every `--fresh-every` kills to bound the time a check takes. A failing round keeps its
world and ack file under `<work>/failures/` and is reported with its seeds and point. The
exit status is non-zero on any failure.
"""

from __future__ import annotations

import argparse
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
from typing import Any

from aos.kernel.hashing import hash_value
from aos.kernel.replay import ReplayReport, verify
from aos.kernel.wasm import WasmEngine
from aos.kernel.world import records
from aos.kernel.world.world import SNAPSHOTS_KEPT_MAX_DEFAULT, World
from tests.fault import workload

REPO = Path(__file__).resolve().parents[2]
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

    def describe(self) -> str:
        env = f"{workload.ENV_POINT}={self.point} {workload.ENV_AT}={self.at} "
        if self.point == "delay":
            env = ""
        lines = [
            f"lane {self.lane} round {self.round} world {self.world} point {self.point} "
            f"at {self.at} child seed {self.child_seed}; kept in {self.kept}",
            f"  rerun the child on the kept world: {env}python -m tests.fault.workload "
            f"--world {self.kept}/world --ack {self.kept}/ack.jsonl --seed {self.child_seed}",
        ]
        lines += [f"  - {problem}" for problem in self.problems[:20]]
        return "\n".join(lines)


@dataclass
class Summary:
    seed: int
    jobs: int = 1
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

    def merge(self, other: Summary) -> None:
        self.kills += other.kills
        self.rounds += other.rounds
        self.unreached += other.unreached
        self.worlds += other.worlds
        self.acked_ops += other.acked_ops
        self.acked_records += other.acked_records
        self.records_checked += other.records_checked
        self.points.update(other.points)
        self.unreached_points.update(other.unreached_points)
        self.failures.extend(other.failures)

    def render(self) -> str:
        lines = [
            f"fault injection: seed {self.seed}: {self.kills} kills in {self.rounds} rounds "
            f"({self.unreached} ended before their point), {self.worlds} worlds, "
            f"{self.acked_ops} acked operations ({self.acked_records} records), "
            f"{self.records_checked} journal records checked, {self.elapsed_s:.0f} s",
            "kills per point (and rounds that ended before reaching it):",
        ]
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
                f"--kills {self.kills} --jobs {self.jobs} (delays are wall-clock: close, not exact)"
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
    world_dir: Path, acks: list[dict[str, Any]], engine: WasmEngine, *, from_seq: int | None
) -> _Check:
    """Everything a killed world must satisfy; `from_seq` None replays from genesis."""
    problems: list[str] = []
    _replay(problems, verify(world_dir, engine=engine, from_seq=from_seq), "replay")
    with World.open(world_dir, sync=True, engine=engine) as world:
        journal: dict[int, dict[str, Any]] = dict(world.store.journal.read(1))  # type: ignore[arg-type]
        head = world.store.journal.head()
        if sorted(journal) != list(range(1, head + 1)):
            problems.append(f"the journal is not contiguous 1..{head}")
        _check_acks(problems, acks, journal, world)
        _check_intents(problems, journal, world)
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
    for ack in acks:
        for seq, expected in ack["records"]:
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
    problems += [f"intent {i} journaled {n} times" for i, n in opened.items() if n > 1]
    for intent, seqs in receipt_seqs.items():
        if len(seqs) > 1:
            problems.append(f"intent {intent} settled {len(seqs)} times: {seqs}")
        if intent not in opened:
            problems.append(f"a receipt settles an intent never journaled: {intent}")
        marker = world.store.meta.get(f"settled/{intent}", None)
        if marker != seqs[-1]:
            problems.append(f"settled/{intent} is {marker}, its receipt is at {seqs[-1]}")
    expected_open = set(opened) - set(receipt_seqs)
    found_open = {i["intent"] for i in world.open_intents()}
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


def _draw(rng: random.Random) -> _Round:
    child_seed = rng.getrandbits(32)
    if rng.random() < DELAY_SHARE:
        from_start = rng.random() < DELAY_FROM_START_SHARE
        delay_s = rng.uniform(0, DELAY_FROM_START_S_MAX if from_start else DELAY_S_MAX)
        return _Round(child_seed, "delay", 0, delay_s, from_start)
    point = rng.choice(sorted(workload.POINTS))
    return _Round(child_seed, point, rng.randint(1, POINT_AT_MAX[point]), 0.0, False)


def _run_child(world_dir: Path, ack: Path, stderr: Path, chosen: _Round) -> _Outcome:
    env = dict(os.environ)
    env.pop(workload.ENV_POINT, None)
    if chosen.point != "delay":
        env[workload.ENV_POINT] = chosen.point
        env[workload.ENV_AT] = str(chosen.at)
    command = [sys.executable, "-m", "tests.fault.workload"]
    command += ["--world", str(world_dir), "--ack", str(ack), "--seed", str(chosen.child_seed)]
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
    ) -> None:
        self.lane = lane
        self.verbose = verbose
        self.rng = random.Random(seed)
        self.work = work
        self.fresh_every = fresh_every
        self.log = log
        self.engine = WasmEngine()
        self.summary = Summary(seed)
        self.world_number = 0
        self.kills_in_world = 0
        self.checked_head = 0
        self.failed = False
        self.acked: tuple[int, int] = (0, 0)  # the current world's acked operations, records

    @property
    def folder(self) -> Path:
        return self.work / f"lane{self.lane}-world{self.world_number}"

    def run(self, kills: int) -> Summary:
        start = time.monotonic()
        self._fresh()
        while self.summary.kills < kills and self.summary.rounds < kills * ROUNDS_PER_KILL_MAX:
            if self.failed or self.kills_in_world >= self.fresh_every:
                self._retire()
                self._fresh()
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
        self.summary.worlds += 1

    def _retire(self) -> None:
        """A full replay from genesis (unless the world already failed); the folder goes."""
        folder = self.folder
        if not self.failed and (folder / "world" / "store").is_dir() and self._created():
            problems: list[str] = []
            _replay(problems, verify(folder / "world", engine=self.engine), "full replay")
            if problems:
                self._fail(_Round(0, "retire", 0, 0.0, False), problems)
        self.summary.acked_ops += self.acked[0]
        self.summary.acked_records += self.acked[1]
        shutil.rmtree(folder, ignore_errors=True)

    def _created(self) -> bool:
        return any(ack["op"] == "create" for ack in read_acks(self.folder / "ack.jsonl"))

    def _round(self) -> None:
        chosen = _draw(self.rng)
        folder = self.folder
        world_dir, ack = folder / "world", folder / "ack.jsonl"
        self.summary.rounds += 1
        outcome = _run_child(world_dir, ack, folder / "stderr.log", chosen)
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
        else:
            tail = (folder / "stderr.log").read_text(errors="replace")[-2000:]
            self._fail(chosen, [f"the child exited with {outcome.returncode}: {tail}"])
            return
        acks = read_acks(ack)
        if not self._created():
            # Killed before genesis was durable and acknowledged: nothing was promised.
            shutil.rmtree(world_dir, ignore_errors=True)
            return
        try:
            checked = check_world(world_dir, acks, self.engine, from_seq=self.checked_head + 1)
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
        )
        self.summary.failures.append(failure)
        self.log("FAILURE " + failure.describe())
        self.failed = True  # the world is suspect from here on: the next round starts afresh


def _stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_lane(lane: int, seed: int, kills: int, work: str, fresh_every: int, quiet: bool) -> Summary:
    lane_runner = _Lane(lane, seed, Path(work), fresh_every, _stderr_log, verbose=not quiet)
    return lane_runner.run(kills)


def run(
    kills: int,
    *,
    seed: int,
    work: Path,
    jobs: int = 1,
    fresh_every: int = FRESH_EVERY_DEFAULT,
    quiet: bool = False,
) -> Summary:
    """`kills` kills over `jobs` lanes (processes), each with its own seed from `seed`."""
    start = time.monotonic()
    seeds = random.Random(seed)
    shares = [kills // jobs + (1 if lane < kills % jobs else 0) for lane in range(jobs)]
    lanes = [(lane, seeds.getrandbits(32), share) for lane, share in enumerate(shares)]
    summary = Summary(seed, jobs)
    if jobs == 1:
        summary.merge(run_lane(0, lanes[0][1], kills, str(work), fresh_every, quiet))
    else:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
            futures = [
                pool.submit(run_lane, lane, lane_seed, share, str(work), fresh_every, quiet)
                for lane, lane_seed, share in lanes
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
    parser.add_argument("--fresh-every", type=int, default=FRESH_EVERY_DEFAULT)
    parser.add_argument("--keep", type=Path, default=None, help="work folder (default: temp)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().getrandbits(32)
    print(f"fault injection: seed {seed}, {args.kills} kills, {args.jobs} jobs", flush=True)
    options: dict[str, Any] = {
        "jobs": args.jobs,
        "fresh_every": args.fresh_every,
        "quiet": args.quiet,
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
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
