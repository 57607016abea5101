"""Replay audits: rebuild a world from its journal and check every record byte for byte
(spec/05-snapshots-replay.md §2).

`verify` (`aos world replay --verify`) replays the journal into a replaying world
(kernel/world/replayer.py drives it, record by record), checks the journal chain along the
bytes it compared, and reports the first difference; with workers, the steps are re-run on
fresh instances in other processes (replay_parallel.py). `state_after` rebuilds the state a
past step left; `recover` rebuilds a lost head (recovery.py) taking recorded governance
actions as governance checks them. Governance records are taken again through
`governance.replay_action`: the audit depends on the world and on governance, and neither on
it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos.kernel import cbor
from aos.kernel.audit.integrity import stored_heads, verify_chain, world_id
from aos.kernel.audit.replay_parallel import FreshChecks, audit_runner
from aos.kernel.governance import proposals as governance
from aos.kernel.hashing import Hash
from aos.kernel.store import open_store
from aos.kernel.store.interface import Store
from aos.kernel.wasm import LoadedModule, StepLimits, StepRunner, WasmEngine
from aos.kernel.world import chain as journal_chain
from aos.kernel.world import records, recovery
from aos.kernel.world.chain import ChainBrokenError, JournalChain
from aos.kernel.world.errors import WorldCorruptError, WorldMissingError
from aos.kernel.world.recovery import Recovery
from aos.kernel.world.replayer import SCRATCH_FLUSH_RECORDS_DEFAULT as SCRATCH_FLUSH_RECORDS_DEFAULT
from aos.kernel.world.replayer import DivergedError as DivergedError
from aos.kernel.world.replayer import Divergence as Divergence
from aos.kernel.world.replayer import Replayer as Replayer
from aos.kernel.world.replayer import ReplayError as ReplayError
from aos.kernel.world.replayer import ReplayReport as ReplayReport
from aos.kernel.world.replayer import SnapshotUnknownError as SnapshotUnknownError
from aos.kernel.world.replayer import chain_broken
from aos.kernel.world.runtime import RunnerFactory

# The `X as X` imports re-export the replay's types: the audit's callers name them here.

# Worker processes that re-run a replay's steps on fresh instances (replay_parallel.py); 1
# runs them in the replaying process (the reference path).
REPLAY_WORKERS_MAX_DEFAULT = 2
# Below this many journal records a replay takes the reference path: starting workers (a
# Python process each, loading the modules) costs more than they save.
REPLAY_PARALLEL_RECORDS_MIN_DEFAULT = 2_000


class ReplayTooLongError(ReplayError):
    code = "replay.too_long"
    hint = "rebuilding this state would replay more records than allowed; `aos world replay` has no such bound"


class NotAStepError(ReplayError):
    code = "replay.not_a_step"
    hint = "only a step record leaves a state"


class ReplayWorkersInvalidError(ReplayError):
    code = "replay.workers_invalid"
    hint = "give at least 1 worker (1: every step in the replaying process)"


def verify_replay(
    world_dir: str | Path,
    *,
    from_seq: int | None = None,
    from_snapshot: str | None = None,
    engine: WasmEngine | None = None,
    progress: Callable[[int, int], None] | None = None,
    workers_max: int = REPLAY_WORKERS_MAX_DEFAULT,
    parallel_records_min: int = REPLAY_PARALLEL_RECORDS_MIN_DEFAULT,
) -> ReplayReport:
    """Replay the world at `world_dir` into a scratch world and compare everything.

    From genesis by default; `from_snapshot` (a snapshot hash or the sequence number of its
    record) starts from that snapshot; `from_seq` starts from the latest snapshot before it.
    The audited world is opened read-only, so a running host may keep writing it.
    `workers_max` > 1 re-runs the steps on fresh instances in that many worker processes
    (replay_parallel.py) when the journal has at least `parallel_records_min` records; the
    report is the same whatever the number."""
    if type(workers_max) is not int or workers_max < 1:
        raise ReplayWorkersInvalidError(
            f"workers_max is {workers_max!r}; it must be an integer >= 1", workers_max=workers_max
        )
    root = Path(world_dir)
    if not (root / "store").is_dir():
        raise WorldMissingError(f"no world at {root}")
    engine = engine or WasmEngine()
    audit = _Audit(from_seq, from_snapshot, engine, progress)
    with (
        open_store(root, readonly=True) as source,
        source.consistent(),
        tempfile.TemporaryDirectory() as scratch,
    ):
        if workers_max > 1 and source.journal.head() >= parallel_records_min:
            report = _verify_parallel(audit, source, Path(scratch) / "parallel", workers_max)
            if report is not None:
                return report
        return audit.run(source, Path(scratch) / "reference", None)


@dataclass(frozen=True)
class _Audit:
    """One replay audit's arguments; `run` replays once (with or without workers)."""

    from_seq: int | None
    from_snapshot: str | None
    engine: WasmEngine
    progress: Callable[[int, int], None] | None

    def run(self, source: Store, spill_dir: Path, checks: FreshChecks | None) -> ReplayReport:
        spill_dir.mkdir()
        replayer = Replayer(
            source,
            self.engine,
            self.progress,
            spill_dir=spill_dir,
            runner_factory=None if checks is None else _checked_runners(checks),
            follow=_ChainAlong,
            governance=governance.replay_action,
        )
        try:
            report = replayer.run(self.from_seq, self.from_snapshot)
        finally:
            replayer.close()
        # A re-execution names a changed derived record precisely; a changed input replays
        # consistently, and only the chain shows it (at the latest in the head's chain).
        if report.divergence is None or report.divergence.what == "head_differs":
            followed = replayer.chain
            _chain_check(source, report, followed if isinstance(followed, _ChainAlong) else None)
        return report


def _checked_runners(checks: FreshChecks) -> RunnerFactory:
    """Runners that step on a reused instance and have every step re-run on a fresh one by
    the workers of `checks` (replay_parallel.py)."""

    def runner(module: LoadedModule, limits: StepLimits) -> StepRunner:
        return audit_runner(module, limits, checks)

    return runner


def _verify_parallel(
    audit: _Audit, source: Store, spill_dir: Path, workers: int
) -> ReplayReport | None:
    """The audit with fresh runs in workers; None when a fresh run disagreed with the output
    the replay took (or a worker was lost): then only the reference replay can tell."""
    with FreshChecks(workers, source.cas.get, audit.engine) as checks:
        try:
            report = audit.run(source, spill_dir, checks)
        except Exception:
            if checks.finish():
                raise
            return None
        return report if checks.finish() else None


def _chain_check(source: Store, report: ReplayReport, followed: _ChainAlong | None) -> None:
    """The journal chain from genesis against every stored chain head (verify.py): a replay
    feeds recorded inputs back, so a changed input would replay consistently; only the chain
    shows it. A break becomes the report's divergence. A replay from genesis followed the
    chain over the bytes it compared as it went; a replay from a snapshot trusts the
    snapshot, so the chain is checked from the one it carries."""
    try:
        if followed is not None:
            followed.finish()
            return
        start = None
        if report.snapshot is not None:
            content: Any = source.cas.get_value(Hash(report.snapshot))
            start = JournalChain.from_value(content["chain"]) if "chain" in content else None
        verify_chain(source, start)
    except ChainBrokenError as error:
        report.ok = False
        report.divergence = chain_broken(error, source)


class _ChainAlong:
    """`verify_chain` from genesis over the record bytes a replay compared, one at a time, as
    they come (every compared record's bytes are its stored bytes): one pass over the
    journal instead of two. The first error (of any kind, as the check would raise it) is
    kept, and raised by `finish`, where the check would have run: a replay that diverges
    first reports its divergence, as before."""

    def __init__(self, source: Store) -> None:
        self._error: Exception | None = None
        self._follower: journal_chain.Follower | None = None
        try:
            ident = world_id(source)
            witnesses, _ = stored_heads(source, ident)
            chain = JournalChain.genesis(ident)
            self._follower = journal_chain.Follower(chain, _sparse(source, witnesses))
        except Exception as error:  # kept for `finish`, raised there as is
            self._error = error

    def take(self, seq: int, raw: bytes) -> None:
        if self._error is not None or self._follower is None:
            return
        try:
            self._follower.take(seq, raw)
        except Exception as error:  # kept for `finish`, raised there as is
            self._error = error

    def finish(self) -> None:
        if self._error is not None:
            raise self._error


def _sparse(source: Store, witnesses: dict[int, bytes]) -> journal_chain.Witness:
    """`journal_chain.marks` asked only at the sequences that have a stored head (one meta
    listing instead of a read per record; elsewhere it would answer None)."""
    witness = journal_chain.marks(source, witnesses)
    stored = journal_chain.mark_seqs(source) | set(witnesses)
    return lambda seq: witness(seq) if seq in stored else None


@dataclass(frozen=True)
class StateAfter:
    """A state rebuilt by `state_after`: the step's cell and the state it left (None: the
    step deleted the cell)."""

    workflow: str
    key: bytes | None
    state: Any
    replayed: int  # records replayed to rebuild it


def state_after(source: Store, seq: int, *, engine: WasmEngine, records_max: int) -> StateAfter:
    """The state step record `seq` left its cell in, rebuilt by replaying (record-driven and
    checked, as an audit does) from the latest snapshot before `seq`, or genesis, through
    `seq` into a scratch world: for a state the store no longer keeps. Refuses with
    `replay.too_long` when that would replay more than `records_max` records. Only reads
    `source` (also the store of an open world, from its own thread)."""
    found: Any = next(iter(source.journal.read(seq, seq)), (seq, None))[1]
    if not isinstance(found, dict) or found.get("kind") != records.STEP:
        raise NotAStepError(f"record {seq} is not a step")
    with tempfile.TemporaryDirectory() as scratch:
        replayer = Replayer(
            source, engine, None, spill_dir=Path(scratch), governance=governance.replay_action
        )
        try:
            snapshot = replayer.choose_snapshot(seq, None)
            start = snapshot[0] + 1 if snapshot is not None else 2
            if seq - start + 1 > records_max:
                raise ReplayTooLongError(
                    f"rebuilding the state at {seq} replays {seq - start + 1} records (from "
                    f"{'the snapshot at ' + str(snapshot[0]) if snapshot else 'genesis'}); "
                    f"the limit is {records_max}",
                    limit=records_max,
                )
            replayer.end = seq
            world, report = replayer.start(snapshot)
            replayer.replay(world, report, compare_head=False, partial=True)
            workflow, key_bytes = str(found["workflow"]), found["key"]
            info = world.reader.cell_info(workflow, key_bytes)
            key = cbor.decode(key_bytes) if key_bytes else None
            state = None if info is None else world.reader.state(workflow, key)
        except DivergedError as diverged:
            raise WorldCorruptError(
                f"the journal does not replay: {diverged.divergence.message}",
                seq=diverged.divergence.seq,
            ) from None
        finally:
            replayer.close()
    rebuilt = None if info is None else str(info.state_hash)
    if found["state"] is not None and rebuilt != found["state"]:
        raise WorldCorruptError(f"the rebuilt state at {seq} is not the one its step recorded")
    return StateAfter(workflow, key_bytes, state, report.records)


def recover(world_dir: str | Path, *, engine: WasmEngine | None = None) -> Recovery:
    """`recovery.recover` (what opening a world with an unusable head does), taking the
    recorded governance actions again as governance checks them."""
    return recovery.recover(world_dir, engine=engine, governance=governance.replay_action)
