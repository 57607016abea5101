"""Peers: aos against DBOS Transact (SQLite system database) on the same workloads, in the same
run, rounds interleaved (aos round i, then DBOS round i), with plain Python as a floor.

The aos side is the effect-chain world of `bench_effects` (a cell started with n does n
`bench/noop@1` effects one after another) with its in-process noop adapter, which signs each
receipt and settles it; the DBOS side is `bench/peers/dbos_workload.py`, a workflow doing n
`@DBOS.step` noops one after another, run by the interpreter of `.venv-bench` (made by
`make bench`, DBOS pinned in `bench/peers/requirements.txt`). Each step returns a small dict.

* `peers.sequential`: one workflow of N steps / one cell of N effects. Rows per step.
* `peers.fanout`: M workflows of K steps started together / M cells of K effects.
* `peers.recovery`: W workflows / cells, each with its last step in flight, the process
  SIGKILLed; then, in a fresh process, the time from opening (`World.open`; `DBOS(config)` +
  `DBOS.launch()`) until every one of the W has completed. `peers.recovery.open` is the
  opening alone.

The baseline of each group is aos durable (sync on: one fsync'd LMDB commit per flush), so a
ratio is "how long the row takes next to aos durable"; each peer row also has its ratio per
round in `extra.ratio_per_round` (the runner prints them). Plain Python calls the chain
module's own handler natively, no journal, no sandbox. bench/README.md ("peers") says what
each side makes durable when.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from aos.kernel.world.world import World
from bench.bench_effects import CHAIN, chain_world, run_chains
from bench.harness import Contender, Row, interleaved, quit_child, sampled, with_ratios

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / "bench" / "peers"
DBOS_WORKLOAD = PEERS / "dbos_workload.py"
DBOS_PYTHON = Path(os.environ.get("AOS_BENCH_DBOS_PYTHON", REPO / ".venv-bench" / "bin" / "python"))
SEQUENTIAL_STEPS = {True: 50, False: 200}  # by quick
SEQUENTIAL_ROUNDS = {True: 5, False: 9}
FANOUT_WORKFLOWS = {True: 100, False: 200}
FANOUT_STEPS = {True: 3, False: 5}
FANOUT_ROUNDS = {True: 5, False: 5}
RECOVERY_WORKFLOWS = {True: 50, False: 200}
RECOVERY_STEPS = 3  # the first two done before the kill, the third in flight
RECOVERY_ROUNDS = {True: 3, False: 5}
WARM_STEPS = 5
PLAIN_REPEAT = 100  # plain Python runs its workload this many times per sample (µs scale)
CHILD_S_MAX = 120.0
KILL_WAIT_S = 10.0

SEQUENTIAL = "peers.sequential"
FANOUT = "peers.fanout"
RECOVERY = "peers.recovery"
RECOVERY_OPEN = "peers.recovery.open"

_environment: dict[str, Any] = {}


def environment() -> dict[str, Any]:
    """What the runner records about the peer (its process has its own interpreter)."""
    return dict(_environment)


# --------------------------------------------------------------------------------------------
# Plain Python: the chain module's handler called natively


class _Ctx:
    """Just what the chain handler uses of `aos_sdk.Context`."""

    def __init__(self) -> None:
        self.effects: list[tuple[str, Any]] = []

    def effect(self, name: str, params: Any) -> None:
        self.effects.append((name, params))


def _chain_module() -> ModuleType:
    path = CHAIN / "module" / "chain.py"
    spec = importlib.util.spec_from_file_location("_bench_peers_chain", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plain_noop(params: Any) -> dict[str, Any]:
    return {"ok": True}


def _plain_chains(handler: Callable[..., Any], keys: list[str], steps: int) -> None:
    """Run a chain per key, the cells served round-robin like the world's scheduler: each
    effect is a call of `_plain_noop`, its result the receipt that steps the cell again."""
    states: dict[str, Any] = {}
    pending: list[tuple[str, Any]] = []
    for key in keys:
        ctx = _Ctx()
        start = {"$tag": "Start", "$value": {"id": key, "n": steps}}
        states[key] = handler(None, start, ctx)
        pending.extend((key, params) for _, params in ctx.effects)
    while pending:
        wave, pending = pending, []
        for key, params in wave:
            ctx = _Ctx()
            receipt = {
                "$tag": "Receipt",
                "$value": {"status": "ok", "payload": _plain_noop(params)},
            }
            states[key] = handler(states[key], receipt, ctx)
            pending.extend((key, p) for _, p in ctx.effects)
    assert all(state["done"] == steps for state in states.values())


def _plain_timed(handler: Callable[..., Any], keys: list[str], steps: int) -> float:
    started = time.perf_counter()
    for _ in range(PLAIN_REPEAT):
        _plain_chains(handler, keys, steps)
    return (time.perf_counter() - started) / PLAIN_REPEAT


# --------------------------------------------------------------------------------------------
# DBOS: a long-lived workload process for sequential and fan-out


class DbosWorkload:
    """`dbos_workload.py serve` on a fresh SQLite file (or a PostgreSQL database, given its
    URL: bench_postgres); one JSON command and answer a line."""

    def __init__(self, db: Path | str, synchronous: str) -> None:
        self.synchronous = synchronous
        args = [str(DBOS_PYTHON), str(DBOS_WORKLOAD), "serve", "--db", str(db)]
        self.popen = subprocess.Popen(
            [*args, "--synchronous", synchronous],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.ready = self._answer()
        self.commits = 0
        self.steps = 0

    def __enter__(self) -> DbosWorkload:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _answer(self) -> dict[str, Any]:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        if not line:
            raise RuntimeError(f"the DBOS workload exited ({self.popen.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(self, command: dict[str, Any], steps: int) -> float:
        """Run one command; the seconds it took inside the DBOS process."""
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps(command) + "\n")
        answer = self._answer()
        self.commits += answer["commits"]
        self.steps += steps
        return float(answer["seconds"])

    def close(self) -> None:
        quit_child(self.popen, CHILD_S_MAX)


def dbos_available() -> bool:
    if DBOS_PYTHON.is_file():
        return True
    print(
        f"# bench_peers: no {DBOS_PYTHON} (make bench builds it): DBOS rows left out",
        file=sys.stderr,
        flush=True,
    )
    return False


# --------------------------------------------------------------------------------------------
# Contenders, measured in interleaved rounds


def _aos(
    name: str, world: World, keys: Callable[[int], list[str]], steps: int, *, flush_each: bool
) -> Contender:
    def run(r: int) -> float:
        chains = keys(r)
        return run_chains(world, chains, steps, flush_each=flush_each) / (len(chains) * steps)

    return Contender(name, run)


def _dbos(dbos: DbosWorkload, command: dict[str, Any], steps: int, what: str) -> Contender:
    ready = dbos.ready
    how = "as shipped" if dbos.synchronous == "default" else "no-sync"
    name = f"DBOS {how} (SQLite journal_mode={ready['journal_mode']}, "
    name += f"synchronous={ready['synchronous']}"
    name += "), " if dbos.synchronous == "default" else " set by the bench), "
    name += what

    def extra() -> dict[str, Any]:
        settings = {k: ready[k] for k in ("journal_mode", "synchronous", "sqlite", "dbos")}
        # Read-only transactions count too: a step is one write and one read-only commit.
        return {**settings, "sqlite_commits_per_step": round(dbos.commits / dbos.steps, 2)}

    return Contender(name, lambda r: dbos.run(command, steps) / steps, extra)


def _plain(name: str, keys: Callable[[int], list[str]], steps: int) -> Contender:
    handler = _chain_module().on_event

    def run(r: int) -> float:
        chains = keys(r)
        return _plain_timed(handler, chains, steps) / (len(chains) * steps)

    return Contender(name, run, lambda: {"repeat": PLAIN_REPEAT})


def warm(contenders: list[Contender]) -> list[Contender]:
    for contender in contenders:
        contender.run(-1)  # one round each, not measured
    return contenders


def _sequential_rows(quick: bool, tmp: Path, with_dbos: bool) -> list[Row]:
    steps, rounds = SEQUENTIAL_STEPS[quick], SEQUENTIAL_ROUNDS[quick]
    command = {"op": "sequential", "steps": steps}
    size = f"1 x {steps} steps"

    def keys(r: int) -> list[str]:
        return [f"seq-{r}"]

    with ExitStack() as stack:
        durable = stack.enter_context(chain_world(sync=True))
        nosync = stack.enter_context(chain_world(sync=False))
        contenders = [
            _aos(
                f"aos durable (fsync per flush), 1 flush per effect, {size}",
                durable,
                keys,
                steps,
                flush_each=True,
            ),
            _aos(
                f"aos no-sync (no fsync), 1 flush per effect, {size}",
                nosync,
                keys,
                steps,
                flush_each=True,
            ),
        ]
        if with_dbos:
            for synchronous, at in (("default", 1), ("off", 3)):
                dbos = stack.enter_context(
                    DbosWorkload(tmp / f"seq-{synchronous}.sqlite", synchronous)
                )
                contenders.insert(at, _dbos(dbos, command, steps, size))
        contenders.append(
            _plain(f"plain Python (chain handler called natively), {size}", keys, steps)
        )
        return interleaved(SEQUENTIAL, "step", warm(contenders), rounds)


def _fanout_rows(quick: bool, tmp: Path, with_dbos: bool) -> list[Row]:
    workflows, steps, rounds = FANOUT_WORKFLOWS[quick], FANOUT_STEPS[quick], FANOUT_ROUNDS[quick]
    command = {"op": "fanout", "workflows": workflows, "steps": steps}
    size = f"{workflows} x {steps} steps"
    group = "receipts of all open intents then 1 flush"

    def keys(r: int) -> list[str]:
        return [f"fan-{r}-{n}" for n in range(workflows)]

    with ExitStack() as stack:
        durable = stack.enter_context(chain_world(sync=True))
        nosync = stack.enter_context(chain_world(sync=False))
        each = stack.enter_context(chain_world(sync=True))
        contenders = [
            _aos(f"aos durable, {group}, {size}", durable, keys, steps, flush_each=False),
            _aos(f"aos no-sync, {group}, {size}", nosync, keys, steps, flush_each=False),
            _aos(f"aos durable, 1 flush per receipt, {size}", each, keys, steps, flush_each=True),
        ]
        if with_dbos:
            what = f"DBOS.start_workflow x {workflows}, {steps} steps each"
            for synchronous, at in (("default", 1), ("off", 3)):
                dbos = stack.enter_context(
                    DbosWorkload(tmp / f"fan-{synchronous}.sqlite", synchronous)
                )
                contenders.insert(at, _dbos(dbos, command, workflows * steps, what))
        name = f"plain Python (chain handler called natively, cells round-robin), {size}"
        contenders.append(_plain(name, keys, steps))
        rows = interleaved(FANOUT, "step", warm(contenders), rounds)
    for r in rows:
        r.extra.update(workflows=workflows, steps=steps)
    return rows


# --------------------------------------------------------------------------------------------
# Recovery


def _killed_then_recovered(start: list[str], recover: list[str]) -> dict[str, Any]:
    """Run `start` until it reports every workflow blocked, SIGKILL it, then run `recover`
    in a fresh process and return its answer."""
    child = subprocess.Popen(start, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line or "blocked" not in json.loads(line):
            raise RuntimeError(f"{start[:4]} did not block its workflows ({child.poll()})")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(KILL_WAIT_S)
    done = subprocess.run(
        recover, capture_output=True, text=True, timeout=CHILD_S_MAX, check=False, cwd=REPO
    )
    if done.returncode != 0:
        raise RuntimeError(f"{recover[:4]} failed: {done.stderr[-2000:]}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@dataclass
class Recovery:
    """A contender whose every round kills and recovers a fresh world / system database;
    `opening` names what its `open_s` times, for the `peers.recovery.open` row."""

    name: str
    opening: str
    commands: Callable[[Path], tuple[list[str], list[str]]]  # path -> start, recover
    tmp: Path
    answers: list[dict[str, Any]] = field(default_factory=list)

    def contender(self) -> Contender:
        return Contender(self.name, self._run, self._extra)

    def _run(self, r: int) -> float:
        start, recover = self.commands(self.tmp / f"{self.name.split()[0]}-{r}")
        self.answers.append(_killed_then_recovered(start, recover))
        return float(self.answers[-1]["done_s"])

    def _extra(self) -> dict[str, Any]:
        fields = sorted(set(self.answers[0]) - {"done_s", "open_s"})
        return {k: [a[k] for a in self.answers] for k in fields}


def aos_recovery(
    workflows: int, store_url: Callable[[Path], str] | None = None
) -> Callable[[Path], tuple[list[str], list[str]]]:
    """The start and recover commands of aos; `store_url` gives a round's PostgreSQL world
    (LMDB in the round's directory without it)."""

    def commands(path: Path) -> tuple[list[str], list[str]]:
        base = [sys.executable, "-m", "bench.peers.aos_recovery"]
        size = ["--world", str(path), "--chains", str(workflows), "--effects", str(RECOVERY_STEPS)]
        store = ["--store", store_url(path)] if store_url is not None else []
        return [*base, "start", *size, *store], [*base, "recover", *size]

    return commands


def dbos_recovery(
    workflows: int, database: Callable[[Path], str] | None = None
) -> Callable[[Path], tuple[list[str], list[str]]]:
    """The start and recover commands of DBOS; `database` gives a round's fresh system
    database URL (a SQLite file beside the round's path without it)."""

    def commands(path: Path) -> tuple[list[str], list[str]]:
        base = [str(DBOS_PYTHON), str(DBOS_WORKLOAD)]
        db = database(path) if database is not None else f"{path}.sqlite"
        size = ["--db", db, "--workflows", str(workflows), "--steps", str(RECOVERY_STEPS)]
        return [*base, "recover-start", *size], [*base, "recover", *size]

    return commands


def recovery_rows(sides: list[Recovery], rounds: int, groups: tuple[str, str]) -> list[Row]:
    """The recovery group (time until every workflow is done) and the open group (time to
    open), interleaved, the first side the baseline."""
    recovery, opening = groups
    rows = interleaved(recovery, "recovery", [side.contender() for side in sides], rounds)
    opened = [
        sampled(opening, side.opening, [a["open_s"] for a in side.answers], "open", baseline=i == 0)
        for i, side in enumerate(sides)
    ]
    return rows + with_ratios(opened)


def _recovery_rows(quick: bool, tmp: Path, with_dbos: bool) -> list[Row]:
    workflows, rounds = RECOVERY_WORKFLOWS[quick], RECOVERY_ROUNDS[quick]
    what = f"{workflows} in flight at step {RECOVERY_STEPS} of {RECOVERY_STEPS}"
    sides = [
        Recovery(
            f"aos durable: World.open, then settle the open intents (1 flush), {what}",
            f"aos: World.open, {what}",
            aos_recovery(workflows),
            tmp,
        )
    ]
    if with_dbos:
        sides.append(
            Recovery(
                f"DBOS as shipped: DBOS(config), DBOS.launch(), its recovery, {what}",
                f"DBOS: DBOS(config), DBOS.launch(), {what}",
                dbos_recovery(workflows),
                tmp,
            )
        )
    rows = recovery_rows(sides, rounds, (RECOVERY, RECOVERY_OPEN))
    for r in rows:
        r.extra.update(workflows=workflows, steps=RECOVERY_STEPS)
    return rows


def run(quick: bool) -> list[Row]:
    with_dbos = dbos_available()
    with tempfile.TemporaryDirectory(prefix="aos-bench-peers-") as name:
        tmp = Path(name)
        rows = _sequential_rows(quick, tmp, with_dbos)
        rows += _fanout_rows(quick, tmp, with_dbos)
        rows += _recovery_rows(quick, tmp, with_dbos)
    dbos_rows = [r for r in rows if "dbos" in r.extra]
    if dbos_rows:
        _environment.update(
            dbos=dbos_rows[0].extra["dbos"],
            sqlite=dbos_rows[0].extra["sqlite"],
            dbos_python=str(DBOS_PYTHON),
        )
    return rows
