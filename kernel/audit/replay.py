"""Replay audits: rebuild a world from its journal and check every record byte for byte.

The replay is driven by the recorded journal. A scratch world (an in-memory store whose CAS
reads fall through to the audited world's) is given each recorded input with its recorded
stamp; whenever the next recorded record is one the kernel derives, the scratch world takes
exactly one scheduled step. Every record the scratch world appends must equal the recorded
record at the same sequence number — states, emitted events, intents, receipts and snapshot
contents are all in those records — and at the end its head (index roots, open intents,
queued work, logical time) must equal the recorded head. Every step runs on a fresh module
instance, whatever the workflow's determinism profile.

The first difference stops the audit and is reported precisely: the sequence number, the
record kind, the cell (workflow and key), the module, and which fields differ.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aos.kernel import cbor
from aos.kernel.air.errors import AirError
from aos.kernel.air.loader import LoadedManifest, assemble_manifest
from aos.kernel.air.model import Manifest
from aos.kernel.audit.integrity import stored_heads, verify_chain, world_id
from aos.kernel.audit.replay_parallel import FreshChecks, audit_runner
from aos.kernel.errors import AosError
from aos.kernel.hashing import Hash, hash_value
from aos.kernel.store import StoreError, open_store
from aos.kernel.store.interface import Store
from aos.kernel.store.memory_store import MemoryStore
from aos.kernel.wasm import LoadedModule, StepLimits, StepRunner, WasmEngine
from aos.kernel.world import chain as journal_chain
from aos.kernel.world import records
from aos.kernel.world.chain import ChainBrokenError, JournalChain
from aos.kernel.world.errors import WorldCorruptError, WorldMissingError
from aos.kernel.world.intents import cancelled_key
from aos.kernel.world.limits import WorldLimits, recorded_limits
from aos.kernel.world.pending import PendingWrites
from aos.kernel.world.receipts import ReceiptError
from aos.kernel.world.router import RouteError
from aos.kernel.world.runtime import stored_definitions
from aos.kernel.world.stamps import Stamp
from aos.kernel.world.world import World, head_at_end

SCRATCH_FLUSH_RECORDS_DEFAULT = 2_000
# Worker processes that re-run a replay's steps on fresh instances (replay_parallel.py); 1
# runs them in the replaying process (the reference path).
REPLAY_WORKERS_MAX_DEFAULT = 2
# Below this many journal records a replay takes the reference path: starting workers (a
# Python process each, loading the modules) costs more than they save.
REPLAY_PARALLEL_RECORDS_MIN_DEFAULT = 2_000


class ReplayError(AosError):
    code = "replay.error"


class SnapshotUnknownError(ReplayError):
    code = "replay.snapshot_unknown"
    hint = "list snapshots with `aos world journal tail --kind snapshot`"


class ReplayTooLongError(ReplayError):
    code = "replay.too_long"
    hint = "rebuilding this state would replay more records than allowed; `aos world replay` has no such bound"


class NotAStepError(ReplayError):
    code = "replay.not_a_step"
    hint = "only a step record leaves a state"


class ReplayWorkersInvalidError(ReplayError):
    code = "replay.workers_invalid"
    hint = "give at least 1 worker (1: every step in the replaying process)"


@dataclass
class Divergence:
    """The first place where the replay and the record disagree."""

    seq: int
    # record_differs | record_missing | record_extra | input_refused | head_differs | integrity
    # | chain_broken
    what: str
    kind: str | None = None
    workflow: str | None = None
    key: Any = None
    module: str | None = None
    fields: list[str] = field(default_factory=list)
    expected: Any = None
    found: Any = None
    message: str = ""

    def to_value(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "what": self.what,
            "kind": self.kind,
            "workflow": self.workflow,
            "key": self.key,
            "module": self.module,
            "fields": self.fields,
            "expected": cbor.to_json(self.expected),
            "found": cbor.to_json(self.found),
            "message": self.message,
        }


@dataclass
class ReplayReport:
    ok: bool
    start_seq: int  # the first record re-derived (2 from genesis; a snapshot's seq + 1)
    end_seq: int
    records: int = 0
    inputs: int = 0
    steps: int = 0
    snapshot: str | None = None
    divergence: Divergence | None = None

    def to_value(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "start_seq": self.start_seq,
            "end_seq": self.end_seq,
            "records": self.records,
            "inputs": self.inputs,
            "steps": self.steps,
            "snapshot": self.snapshot,
            "divergence": self.divergence.to_value() if self.divergence else None,
        }


class DivergedError(Exception):
    """A replay's first disagreement with the record, raised where it is found and turned
    into the report's divergence by the audit that ran the replay (verify here, shadow)."""

    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.message)
        self.divergence = divergence


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
            checks=checks,
            follow_chain=True,
        )
        try:
            report = replayer.run(self.from_seq, self.from_snapshot)
        finally:
            replayer.close()
        # A re-execution names a changed derived record precisely; a changed input replays
        # consistently, and only the chain shows it (at the latest in the head's chain).
        if report.divergence is None or report.divergence.what == "head_differs":
            _chain_check(source, report, replayer.chain)
        return report


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
        report.divergence = _chain_broken(error, source)


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


def _chain_broken(error: ChainBrokenError, source: Store) -> Divergence:
    seq = int(error.detail["seq"])
    record: Any = next(iter(source.journal.read(seq, seq)), (seq, None))[1]
    kind = str(record.get("kind")) if isinstance(record, dict) else None
    return Divergence(seq, "chain_broken", kind=kind, expected=record, message=str(error))


class Replayer:
    """Replays an audited store's journal into a scratch world and compares every record
    (verify here; shadow runs one against a proposed manifest)."""

    def __init__(
        self,
        source: Store,
        engine: WasmEngine,
        progress: Callable[[int, int], None] | None,
        *,
        keep_all_blobs: bool = False,
        spill_dir: Path | None = None,
        checks: FreshChecks | None = None,
        follow_chain: bool = False,
    ) -> None:
        self.source = source
        self.checks = checks
        # Whether a replay from genesis follows the chain as it compares (verify does), and
        # the chain it follows.
        self.follow_chain = follow_chain
        self.chain: _ChainAlong | None = None
        self.keep_all_blobs = keep_all_blobs
        # The scratch CAS goes to a temporary LMDB environment here, so a replay of a large
        # world runs in bounded memory.
        self.spill_dir = spill_dir
        self._stores: list[MemoryStore] = []
        self.engine = engine
        self.progress = progress
        self.blobs = PendingWrites(source)
        self.produced: dict[int, records.Record] = {}
        self.produced_bytes: dict[int, bytes] = {}
        self.end = source.journal.head()
        config: Any = source.meta.get("world.config")
        self.config: dict[str, Any] = config

    # -- setting up the scratch world ----------------------------------------------------

    def run(self, from_seq: int | None, from_snapshot: str | None) -> ReplayReport:
        snapshot = self.choose_snapshot(from_seq, from_snapshot)
        report = ReplayReport(ok=True, start_seq=2, end_seq=self.end)
        try:
            if snapshot is None:
                world = self.from_genesis()
            else:
                world = self.from_snapshot(*snapshot)
                report.start_seq = snapshot[0] + 1
                report.snapshot = str(snapshot[1])
            self.replay(world, report)
        except DivergedError as diverged:
            report.ok = False
            report.divergence = diverged.divergence
        except ChainBrokenError as error:  # folding the recorded tail checks the chain
            report.ok = False
            report.divergence = _chain_broken(error, self.source)
        except StoreError as error:
            report.ok = False
            report.divergence = Divergence(
                seq=int(error.detail.get("seq", 0)),
                what="integrity",
                message=f"{error.code}: {error}",
                found=error.detail.get("hash"),
            )
        return report

    def choose_snapshot(
        self, from_seq: int | None, from_snapshot: str | None
    ) -> tuple[int, Hash] | None:
        known = _snapshot_records(self.source)
        if from_snapshot is not None:
            for seq, hash_ in known:
                if from_snapshot in (str(seq), str(hash_)):
                    return seq, hash_
            raise SnapshotUnknownError(f"no snapshot {from_snapshot} in the journal")
        if from_seq is not None:
            before = [(seq, hash_) for seq, hash_ in known if seq < from_seq]
            return before[-1] if before else None
        return None

    def loaded(self, manifest_hash: str) -> LoadedManifest:
        try:
            manifest = Manifest.model_validate(self.blobs.get_value(Hash(manifest_hash)))
            return assemble_manifest(manifest, stored_definitions(manifest, self.blobs))
        except AirError as error:
            raise WorldCorruptError(f"the recorded manifest does not check: {error}") from None

    def _scratch(self, store: MemoryStore, loaded: LoadedManifest) -> World:
        world = World.scratch(
            store,
            loaded,
            engine=self.engine,
            clock=str(self.config["clock"]),
            limits=recorded_limits(self.config, WorldLimits()),
            runner_factory=None if self.checks is None else self._speculative,
        )
        world.on_append = self._capture
        world.blob_source = self._source_blob
        return world

    def _speculative(self, module: LoadedModule, limits: StepLimits) -> StepRunner:
        assert self.checks is not None
        return audit_runner(module, limits, self.checks)

    def _source_blob(self, hash_: Hash) -> bytes | None:
        """A blob the replayed steps read (spec/08 §4.1) comes from the audited store."""
        return self.source.cas.get(hash_) if self.source.cas.has(hash_) else None

    def from_genesis(self) -> World:
        genesis: Any = next(iter(self.source.journal.read(1, 1)))[1]
        store = self._store(0)
        world = self._scratch(store, self.loaded(str(genesis["manifest"])))
        world.replay_genesis(Stamp.from_value(genesis["stamp"]), self.source.cas.get)
        if self.follow_chain:
            self.chain = _ChainAlong(self.source)
        self._compare(1, genesis)
        if world.world_id != self.config["id"]:
            raise DivergedError(
                Divergence(1, "record_differs", "manifest", message="world id differs")
            )
        return world

    def from_snapshot(self, seq: int, snapshot_hash: Hash) -> World:
        content: Any = self.source.cas.get_value(snapshot_hash)
        for root in content["roots"].values():
            if not self.source.cas.has(Hash(root)):
                raise WorldCorruptError(
                    f"snapshot {snapshot_hash} (seq {seq}) names a missing index root {root}"
                )
        store = self._store(seq)
        world = self._scratch(store, self.loaded(str(content["manifest"])))
        # The snapshot describes the world at `height`; its own record follows it.
        world.replay_restore({**content, "height": seq}, str(self.config["id"]))
        world.chain = self._chain_through(content, seq)
        world.snapshots = [(s, h) for s, h in _snapshot_records(self.source) if s <= seq]
        world.intents.cancelled_source = lambda intent: self._cancelled_before(intent, seq)
        return world

    def _chain_through(self, content: dict[str, Any], seq: int) -> JournalChain:
        """The chain after the snapshot record at `seq`: the snapshot carries it at the
        record before (spec/05 §1.2); one from before chains is computed from genesis."""
        if "chain" not in content:
            return journal_chain.from_genesis(self.source, str(self.config["id"]), seq)
        chain = JournalChain.from_value(content["chain"])
        raws = self.source.journal.read_encoded(chain.seq + 1, seq)
        return journal_chain.follow(chain, raws, journal_chain.no_witness)

    def _cancelled_before(self, intent: str, seq: int) -> int | None:
        """The step that cancelled `intent`, if it was before the snapshot at `seq` (later
        cancellations the replay makes itself)."""
        found = self.source.meta.get(cancelled_key(intent), None)
        return found if isinstance(found, int) and found < seq else None

    def _store(self, base_height: int) -> MemoryStore:
        spill = None
        if self.spill_dir is not None:
            spill = self.spill_dir / f"cas-{len(self._stores)}"
            spill.mkdir(parents=True)
        store = MemoryStore(
            base_height=base_height,
            fallback_cas=self.source.cas,
            fallback_has=not self.keep_all_blobs,
            spill_dir=spill,
        )
        self._stores.append(store)
        return store

    def close(self) -> None:
        for store in self._stores:
            store.close()

    # -- the replay loop -----------------------------------------------------------------

    def _capture(self, seq: int, record: records.Record, raw: bytes) -> None:
        self.produced[seq] = record
        self.produced_bytes[seq] = raw

    def replay(
        self,
        world: World,
        report: ReplayReport,
        *,
        compare_head: bool = True,
        partial: bool = False,
    ) -> None:
        """Replay records report.start_seq..self.end into `world`, checking each. `partial`:
        `end` is not the head, so what the last step produced past it is expected."""
        start = report.start_seq
        since_flush = 0
        for seq, recorded in self._recorded(start):
            report.records += 1
            if seq not in self.produced:
                if "stamp" in recorded:
                    self._feed(world, seq, recorded)
                    report.inputs += 1
                elif recorded["kind"] == records.SNAPSHOT:
                    world.snapshot()
                else:
                    while seq not in self.produced and world.step_next():
                        report.steps += 1
            if seq not in self.produced:
                raise DivergedError(self._divergence(world, seq, recorded, None, "record_missing"))
            self._compare(seq, recorded, world)
            since_flush += 1
            if since_flush >= SCRATCH_FLUSH_RECORDS_DEFAULT:
                world.flush()  # bound the scratch world's pending (unmaterialized) memory
                since_flush = 0
            if self.progress is not None:
                self.progress(seq, self.end)
        # Work still queued at the recorded head is not stepped: the head comparison checks
        # that the same deliveries are queued.
        extra = sorted(s for s in self.produced if s > self.end)
        if extra and not partial:
            seq = extra[0]
            found = self.produced[seq].to_value()
            raise DivergedError(
                Divergence(seq, "record_extra", found=found, message="the replay produced more")
            )
        if compare_head:
            self._compare_head(world)

    def _recorded(self, start: int) -> Iterator[tuple[int, dict[str, Any]]]:
        record: Any
        for seq, record in self.source.journal.read(start, self.end):
            if not isinstance(record, dict) or "kind" not in record:
                raise DivergedError(Divergence(seq, "integrity", message="a record is not a map"))
            yield seq, record

    def _feed(self, world: World, seq: int, recorded: dict[str, Any]) -> None:
        """Give the scratch world the recorded input with its recorded stamp."""
        kind = recorded["kind"]
        try:
            record = records.parse(recorded)
            stamp = Stamp.from_value(recorded["stamp"])
            world.force_stamp(stamp)
            if isinstance(record, records.IngressEvent):
                world.ingress(
                    record.schema,
                    record.value,
                    idempotency_key=record.idempotency_key,
                    readmit=True,
                )
            elif isinstance(record, records.IngressRejected):
                world.ingress(record.schema, record.value, readmit=True)
            elif isinstance(record, records.EffectReceipt):
                receipt = {"body": record.body, "signature": record.signature}
                world.settle(receipt, by=record.by)  # who completed a human task
            elif isinstance(record, records.ReceiptRejected):
                # Kept as a digest (or, in older journals, whole or not at all): a refusal
                # changed nothing but this record, which stands.
                world.force_stamp(None)
                world.append(record)
            elif isinstance(record, records.TimeRecord):
                world.time_input(stamp)
            elif isinstance(record, records.GovernanceRecord):
                self._feed_governance(world, record)
            elif isinstance(record, records.OperationRecord):
                world.operate(record.operation)
            else:
                world.force_stamp(None)
                raise DivergedError(
                    Divergence(seq, "input_refused", kind, message=f"cannot replay a {kind} input")
                )
        except (RouteError, ReceiptError):
            pass  # a refused input is journaled as refused: the comparison checks that
        except DivergedError:
            raise
        except AosError as error:
            raise DivergedError(
                Divergence(
                    seq,
                    "input_refused",
                    kind,
                    message=f"the recorded input is refused now: {error.code}: {error}",
                    expected=recorded,
                )
            ) from None
        finally:
            world.force_stamp(None)

    def _feed_governance(self, world: World, recorded: records.GovernanceRecord) -> None:
        from aos.kernel.governance import (
            proposals as governance,  # governance builds on the world, like replay
        )

        action, proposal = recorded.action, recorded.proposal
        if action == records.PROPOSED:
            governance.propose(world, self.source.cas.get_value(Hash(str(recorded.patch))))
        elif action == records.SHADOWED:
            assert recorded.state_height is not None and recorded.summary is not None
            governance.record_shadow_raw(
                world, proposal, recorded.state_height, str(recorded.report), recorded.summary
            )
        elif action in (records.APPROVED, records.REJECTED):
            governance.decide(
                world,
                proposal,
                approve=action == records.APPROVED,
                approver=str(recorded.approver),
                reason=str(recorded.reason),
            )
        elif action == records.APPLIED:
            governance.apply(world, proposal)

    def _compare(self, seq: int, recorded: dict[str, Any], world: World | None = None) -> None:
        produced = self.produced.pop(seq, None)
        raw = self.produced_bytes.pop(seq, None)
        if produced is None or raw is None:
            raise DivergedError(self._divergence(world, seq, recorded, None, "record_missing"))
        # The produced record's bytes are the ones the world encoded when it appended it; the
        # recorded one was decoded strictly, so encoding it gives its stored bytes.
        if not _same_bytes(raw, recorded):
            found = produced.to_value()
            raise DivergedError(self._divergence(world, seq, recorded, found, "record_differs"))
        if self.chain is not None:
            self.chain.take(seq, raw)

    def _divergence(
        self,
        world: World | None,
        seq: int,
        recorded: dict[str, Any],
        produced: dict[str, Any] | None,
        what: str,
    ) -> Divergence:
        workflow = recorded.get("workflow")
        key = recorded.get("key")
        if workflow is None and isinstance(recorded.get("origin"), dict):
            workflow = recorded["origin"].get("workflow")
            key = recorded["origin"].get("key")
        module = recorded.get("module")
        if module is None and workflow is not None and world is not None:
            try:
                module = str(world.runtime.module_hash(str(workflow)))
            except (AosError, KeyError):
                module = None
        fields = []
        if produced is not None:
            fields = sorted(
                k
                for k in set(recorded) | set(produced)
                if cbor.encode(recorded.get(k)) != cbor.encode(produced.get(k))
            )
        shown_key = cbor.decode(key) if isinstance(key, bytes) and key else key
        return Divergence(
            seq=seq,
            what=what,
            kind=str(recorded.get("kind")),
            workflow=None if workflow is None else str(workflow),
            key=shown_key,
            module=module,
            fields=fields,
            expected=recorded,
            found=produced,
            message=(
                f"seq {seq} ({recorded.get('kind')}): "
                + (f"fields {', '.join(fields)} differ" if fields else what.replace("_", " "))
            ),
        )

    def _compare_head(self, world: World) -> None:
        world.checkpoint()
        found: Any = world.store.cas.get_value(Hash(str(world.store.meta.get("world.head"))))
        recorded: Any = head_at_end(self.source, self.engine)
        if "chain" not in recorded:
            found.pop("chain", None)  # a head from before chains (spec/05 §1.2)
        if hash_value(found) != hash_value(recorded):
            fields = sorted(
                str(k)
                for k in set(recorded) | set(found)
                if cbor.encode(recorded.get(k)) != cbor.encode(found.get(k))
            )
            raise DivergedError(
                Divergence(
                    self.end,
                    "head_differs",
                    fields=fields,
                    expected=recorded,
                    found=found,
                    message=f"the replayed head differs from the recorded head in {', '.join(fields)}",
                )
            )


# CBOR heads of floats: a record whose bytes hold none of them holds no float.
_FLOAT_HEADS = (b"\xf9", b"\xfa", b"\xfb")


def _same_bytes(raw: bytes, recorded: Any) -> bool:
    """Whether `raw` is the stored form of `recorded`, a strictly decoded record. A decoded
    record's maps are in canonical order already, so without floats (which cbor2's plain
    mode widens) the plain encoding is the stored one and no canonical-order walk is needed."""
    if not any(head in raw for head in _FLOAT_HEADS) and raw == cbor.encode_ordered(recorded):
        return True
    return raw == cbor.encode_built(recorded)


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
        replayer = Replayer(source, engine, None, spill_dir=Path(scratch))
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
            world = (
                replayer.from_genesis() if snapshot is None else replayer.from_snapshot(*snapshot)
            )
            report = ReplayReport(ok=True, start_seq=start, end_seq=seq)
            replayer.replay(world, report, compare_head=False, partial=True)
            workflow, key_bytes = str(found["workflow"]), found["key"]
            info = world.cell_info(workflow, key_bytes)
            key = cbor.decode(key_bytes) if key_bytes else None
            state = None if info is None else world.state(workflow, key)
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


@dataclass
class Recovery:
    """How `recover` rebuilt a world's head."""

    start: str  # "genesis" or the snapshot hash replay started from
    skipped: list[str]  # snapshots that could not be used, and why
    records: int


def recover(world_dir: str | Path, *, engine: WasmEngine | None = None) -> Recovery:
    """Rebuild a world's head from the newest usable snapshot (or genesis) and its journal
    tail, verifying every tail record, and store it. For a world whose head checkpoint is
    missing, corrupt or does not match the journal; a snapshot whose roots are missing is
    skipped for the one before it."""
    root = Path(world_dir)
    skipped: list[str] = []
    with open_store(root, readonly=True) as source, source.consistent():
        replayer = Replayer(source, engine or WasmEngine(), None, keep_all_blobs=True)
        candidates: list[tuple[int, Hash] | None] = [*reversed(_snapshot_records(source)), None]
        for candidate in candidates:
            report = ReplayReport(ok=True, start_seq=2, end_seq=replayer.end)
            replayer.produced.clear()
            replayer.produced_bytes.clear()
            try:
                if candidate is None:
                    world = replayer.from_genesis()
                else:
                    world = replayer.from_snapshot(*candidate)
                    report.start_seq = candidate[0] + 1
                replayer.replay(world, report, compare_head=False)
            except (WorldCorruptError, StoreError) as error:
                skipped.append(f"{'genesis' if candidate is None else candidate[1]}: {error}")
                continue
            except DivergedError as diverged:
                raise WorldCorruptError(
                    f"the journal does not replay: {diverged.divergence.message}",
                    seq=diverged.divergence.seq,
                ) from None
            world.checkpoint()
            scratch = world.store
            assert isinstance(scratch, MemoryStore)
            blobs = dict(scratch.cas.blobs)
            head = str(scratch.meta.get("world.head"))
            start = "genesis" if candidate is None else str(candidate[1])
            break
        else:
            raise WorldCorruptError(
                f"no snapshot and not genesis could rebuild the head: {skipped}"
            )
    with open_store(root) as store, store.batch() as batch:
        for data in blobs.values():
            batch.cas_put(data)
        # Which objects only the lost head named is unknown: reclaim nothing until the next
        # snapshot (`aos world gc` still finds the garbage).
        batch.cas_clear_marks()
        batch.meta_put("world.head", head)
    return Recovery(start=start, skipped=skipped, records=report.records)


def _snapshot_records(store: Store) -> list[tuple[int, Hash]]:
    value: Any = store.meta.get("world.snapshots", [])
    return [(int(seq), Hash(str(hash_))) for seq, hash_ in value]
