"""Replaying a recorded journal into a replaying world, record by record (spec/05-snapshots-
replay.md §2).

The replay is driven by the recorded journal. A replaying world (replaying.py: an in-memory
store whose CAS reads fall through to the audited world's) is given each recorded input with
its recorded stamp; whenever the next recorded record is one the kernel derives, it takes
exactly one scheduled step. Every record it appends must equal the recorded record at the
same sequence number (states, emitted events, intents, receipts and snapshot contents are all
in those records), and at the end its head (index roots, open intents, queued work, logical
time) must equal the recorded head. Every step runs on a fresh module instance, whatever the
workflow's determinism profile.

The first difference stops the replay and is reported precisely: the sequence number, the
record kind, the cell (workflow and key), the module, and which fields differ. The audits
built on it (`replay --verify`, the state of a past step) are in kernel/audit/replay.py; recovery,
which rebuilds a head when a world opens, is recovery.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aos.kernel import cbor
from aos.kernel.air.errors import AirError
from aos.kernel.air.loader import LoadedManifest, assemble_manifest
from aos.kernel.air.model import Manifest
from aos.kernel.errors import AosError
from aos.kernel.hashing import Hash, hash_value
from aos.kernel.store import StoreError
from aos.kernel.store.interface import Store
from aos.kernel.store.memory_store import MemoryStore
from aos.kernel.wasm import WasmEngine
from aos.kernel.world import chain as journal_chain
from aos.kernel.world import governance_records, records
from aos.kernel.world.chain import ChainBrokenError, JournalChain
from aos.kernel.world.errors import WorldCorruptError
from aos.kernel.world.intents import cancelled_key
from aos.kernel.world.limits import WorldLimits, recorded_limits
from aos.kernel.world.receipts import ReceiptError
from aos.kernel.world.replaying import ReplayingWorld
from aos.kernel.world.router import RouteError
from aos.kernel.world.runtime import RunnerFactory, stored_definitions
from aos.kernel.world.staged import StagedWrites
from aos.kernel.world.stamps import Stamp
from aos.kernel.world.world import World, head_at_end

SCRATCH_FLUSH_RECORDS_DEFAULT = 2_000

# Takes a recorded governance action again on the replaying world, reading what it names
# (the patch) from the audited store (governance.replay_action).
GovernanceFeed = Callable[[World, records.GovernanceRecord, Store], None]


class Follower(Protocol):
    """What a replay from genesis hands each compared record's stored bytes to, in order."""

    def take(self, seq: int, raw: bytes) -> None: ...


class ReplayError(AosError):
    code = "replay.error"


class SnapshotUnknownError(ReplayError):
    code = "replay.snapshot_unknown"
    hint = "list snapshots with `aos world journal tail --kind snapshot`"


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
    into the report's divergence by the audit that ran the replay (verify, shadow)."""

    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.message)
        self.divergence = divergence


def chain_broken(error: ChainBrokenError, source: Store) -> Divergence:
    """The divergence a broken journal chain is (the record where it broke)."""
    seq = int(error.detail["seq"])
    record: Any = next(iter(source.journal.read(seq, seq)), (seq, None))[1]
    kind = str(record.get("kind")) if isinstance(record, dict) else None
    return Divergence(seq, "chain_broken", kind=kind, expected=record, message=str(error))


class Replayer:
    """Replays an audited store's journal into a replaying world and compares every record
    (`replay --verify` and `state_after` in replay.py, recovery in recovery.py, shadows).

    `runner_factory`: the runners the scratch world steps with (a replay audit's parallel
    path brings its own, runtime.py); `follow`: what a replay from genesis hands each
    compared record's bytes to (the audit follows the journal chain); `governance`: how
    recorded governance actions are taken again (governance.replay_action checks them as
    when they were taken; without it, a recorded action is applied as recorded)."""

    def __init__(
        self,
        source: Store,
        engine: WasmEngine,
        progress: Callable[[int, int], None] | None,
        *,
        keep_all_blobs: bool = False,
        spill_dir: Path | None = None,
        runner_factory: RunnerFactory | None = None,
        follow: Callable[[Store], Follower] | None = None,
        governance: GovernanceFeed | None = None,
    ) -> None:
        self.source = source
        self.runner_factory = runner_factory
        self.governance = governance
        # What a replay from genesis hands the compared bytes to (verify follows the chain),
        # and the follower it made.
        self.follow = follow
        self.chain: Follower | None = None
        self.keep_all_blobs = keep_all_blobs
        # The scratch CAS goes to a temporary LMDB environment here, so a replay of a large
        # world runs in bounded memory.
        self.spill_dir = spill_dir
        self._stores: list[MemoryStore] = []
        self.engine = engine
        self.progress = progress
        self.blobs = StagedWrites(source)
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
            world, report = self.start(snapshot)
            self.replay(world, report)
        except DivergedError as diverged:
            report.ok = False
            report.divergence = diverged.divergence
        except ChainBrokenError as error:  # folding the recorded tail checks the chain
            report.ok = False
            report.divergence = chain_broken(error, self.source)
        except StoreError as error:
            report.ok = False
            report.divergence = Divergence(
                seq=int(error.detail.get("seq", 0)),
                what="integrity",
                message=f"{error.code}: {error}",
                found=error.detail.get("hash"),
            )
        return report

    def start(self, snapshot: tuple[int, Hash] | None) -> tuple[ReplayingWorld, ReplayReport]:
        """The replaying world at `snapshot` (its record's seq and hash; None: genesis), and
        the report of a replay from there to `end`."""
        if snapshot is None:
            return self.from_genesis(), ReplayReport(ok=True, start_seq=2, end_seq=self.end)
        world = self.from_snapshot(*snapshot)
        report = ReplayReport(ok=True, start_seq=snapshot[0] + 1, end_seq=self.end)
        report.snapshot = str(snapshot[1])
        return world, report

    def choose_snapshot(
        self, from_seq: int | None, from_snapshot: str | None
    ) -> tuple[int, Hash] | None:
        known = snapshot_records(self.source)
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

    def _scratch(self, store: MemoryStore, loaded: LoadedManifest) -> ReplayingWorld:
        world = ReplayingWorld.scratch(
            store,
            loaded,
            engine=self.engine,
            clock=str(self.config["clock"]),
            limits=recorded_limits(self.config, WorldLimits()),
            runner_factory=self.runner_factory,
        )
        world.journaler.on_append = self._capture
        world.blob_source = self._source_blob
        return world

    def _source_blob(self, hash_: Hash) -> bytes | None:
        """A blob the replayed steps read (spec/08 §4.1) comes from the audited store."""
        return self.source.cas.get(hash_) if self.source.cas.has(hash_) else None

    def from_genesis(self) -> ReplayingWorld:
        genesis: Any = next(iter(self.source.journal.read(1, 1)))[1]
        store = self._store(0)
        world = self._scratch(store, self.loaded(str(genesis["manifest"])))
        world.genesis_at(Stamp.from_value(genesis["stamp"]), self.source.cas.get)
        if self.follow is not None:
            self.chain = self.follow(self.source)
        self._compare(1, genesis)
        if world.world_id != self.config["id"]:
            raise DivergedError(
                Divergence(1, "record_differs", "manifest", message="world id differs")
            )
        return world

    def from_snapshot(self, seq: int, snapshot_hash: Hash) -> ReplayingWorld:
        content: Any = self.source.cas.get_value(snapshot_hash)
        for root in content["roots"].values():
            if not self.source.cas.has(Hash(root)):
                raise WorldCorruptError(
                    f"snapshot {snapshot_hash} (seq {seq}) names a missing index root {root}"
                )
        store = self._store(seq)
        world = self._scratch(store, self.loaded(str(content["manifest"])))
        # The snapshot describes the world at `height`; its own record follows it.
        world.restore_snapshot({**content, "height": seq}, str(self.config["id"]))
        world.journaler.chain = self._chain_through(content, seq)
        world.snapshots = [(s, h) for s, h in snapshot_records(self.source) if s <= seq]
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
        world: ReplayingWorld,
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
                world.commit()  # bound the scratch world's pending (unmaterialized) memory
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

    def _feed(self, world: ReplayingWorld, seq: int, recorded: dict[str, Any]) -> None:
        """Give the scratch world the recorded input with its recorded stamp."""
        kind = recorded["kind"]
        try:
            record = records.parse(recorded)
            stamp = Stamp.from_value(recorded["stamp"])
            world.force_stamp(stamp)
            if isinstance(record, records.IngressEvent):
                world.readmit(record.schema, record.value, record.idempotency_key)
            elif isinstance(record, records.IngressRejected):
                world.readmit(record.schema, record.value)
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
                self._feed_governance(world, seq, record)
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

    def _feed_governance(
        self, world: ReplayingWorld, seq: int, recorded: records.GovernanceRecord
    ) -> None:
        if self.governance is not None:
            self.governance(world, recorded, self.source)
            return
        if recorded.action != governance_records.PROPOSED and recorded.proposal not in (
            world.proposals
        ):
            raise DivergedError(
                Divergence(
                    seq,
                    "input_refused",
                    records.GOVERNANCE,
                    message="not a governance action this world can take",
                )
            )
        world.force_stamp(None)
        governance_records.record(world, recorded)
        world.commit()

    def _compare(
        self, seq: int, recorded: dict[str, Any], world: ReplayingWorld | None = None
    ) -> None:
        produced = self.produced.pop(seq, None)
        raw = self.produced_bytes.pop(seq, None)
        if produced is None or raw is None:
            raise DivergedError(self._divergence(world, seq, recorded, None, "record_missing"))
        # The produced record's bytes are the ones the world encoded when it appended it; the
        # recorded one was decoded strictly, so encoding it gives its stored bytes.
        if not same_bytes(raw, recorded):
            found = produced.to_value()
            raise DivergedError(self._divergence(world, seq, recorded, found, "record_differs"))
        if self.chain is not None:
            self.chain.take(seq, raw)

    def _divergence(
        self,
        world: ReplayingWorld | None,
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

    def _compare_head(self, world: ReplayingWorld) -> None:
        world.commit(checkpoint=True)
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


def same_bytes(raw: bytes, recorded: Any) -> bool:
    """Whether `raw` is the stored form of `recorded`, a strictly decoded record. A decoded
    record's maps are in canonical order already, so without floats (which cbor2's plain
    mode widens) the plain encoding is the stored one and no canonical-order walk is needed."""
    if not any(head in raw for head in _FLOAT_HEADS) and raw == cbor.encode_ordered(recorded):
        return True
    return raw == cbor.encode_built(recorded)


def snapshot_records(store: Store) -> list[tuple[int, Hash]]:
    """The snapshots a store's meta lists, (journal seq, snapshot hash), oldest first."""
    value: Any = store.meta.get("world.snapshots", [])
    return [(int(seq), Hash(str(hash_))) for seq, hash_ in value]
