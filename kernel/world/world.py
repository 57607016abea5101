"""The world: a deterministic, event-sourced machine over one store (spec/03-world.md).

    with World.create(path, manifest_dir) as world:
        world.send("demo/CounterEvent@1", {"$tag": "Increment", "$value": {"id": "a", "by": 1}})
        world.reader.state("demo/Counter@1", "a")

`World` takes inputs and steps: `ingress` admits an event (validated, normalized, stamped,
routed into cell mailboxes), `settle` a receipt, `operate` an operator's action, and
`run_to_idle` steps ready cells round-robin until none is ready and commits everything they
produced at once; `snapshot` takes a snapshot. Its parts have their own homes: the queries
are `world.reader` (reader.py), the journal and its one durable commit `world.journaler`
(journaler.py: records, CAS blobs and, when due, the head checkpoint, in one transaction
and one fsync), and what only a replay does (recorded stamps, genesis and restore, re-
admission) is the replaying world (replaying.py). Nothing on the step path reads a clock, a
random source or the environment: the ingress stamp is the only source of time and entropy,
and it is journaled.

A failed commit closes the world: its memory is ahead of the store, so the only consistent
state left is the last durable one, which reopening restores.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from aos.kernel import cbor
from aos.kernel.air import RECEIPT_ENVELOPE
from aos.kernel.air.loader import LoadedManifest, assemble_manifest
from aos.kernel.air.model import Manifest
from aos.kernel.hashing import Hash, hash_bytes, hash_value, is_hash
from aos.kernel.store.interface import Store
from aos.kernel.wasm import StepResult, WasmEngine
from aos.kernel.world import chain as journal_chain
from aos.kernel.world import meta, opening, receipts, records, worldkey
from aos.kernel.world.checkpointer import stored_snapshots
from aos.kernel.world.errors import (
    BlobTooLargeError,
    StepBudgetExceededError,
    WorldCorruptError,
    WorldNotQuiescentError,
)
from aos.kernel.world.ingress import CheckedEvent, Ingress, route
from aos.kernel.world.intents import IntentTracker, OpenIntent
from aos.kernel.world.journaler import Journaler
from aos.kernel.world.limits import OPEN_INTENTS_MAX_DEFAULT as OPEN_INTENTS_MAX_DEFAULT
from aos.kernel.world.limits import SNAPSHOT_EVERY_RECORDS_DEFAULT as SNAPSHOT_EVERY_RECORDS_DEFAULT
from aos.kernel.world.limits import SNAPSHOTS_KEPT_MAX_DEFAULT as SNAPSHOTS_KEPT_MAX_DEFAULT
from aos.kernel.world.limits import WorldLimits as WorldLimits
from aos.kernel.world.limits import world_config
from aos.kernel.world.operations import (
    CELL_RESET,
    CELL_RETRY,
    INTENT_CANCEL,
    OPERATOR_ADAPTER,
    STATUS_CANCELLED,
    Operation,
)
from aos.kernel.world.queries import CellReads
from aos.kernel.world.reader import WorldReader
from aos.kernel.world.results import FAULT_CODES_KEPT_MAX as FAULT_CODES_KEPT_MAX
from aos.kernel.world.results import Admitted as Admitted
from aos.kernel.world.results import CellInfo as CellInfo
from aos.kernel.world.results import RunReport as RunReport
from aos.kernel.world.results import Settlement as Settlement
from aos.kernel.world.results import StepOutcome as StepOutcome
from aos.kernel.world.router import RouteError
from aos.kernel.world.runtime import RunnerFactory, Runtime, stored_definitions
from aos.kernel.world.scheduler import CellId, Message, Scheduler
from aos.kernel.world.staged import StagedWrites
from aos.kernel.world.stamps import Stamp, StampSource
from aos.kernel.world.stepping import Stepper, cell_delivery, dropped
from aos.kernel.world.tables import CellTables
from aos.kernel.world.tail import restore_cells
from aos.kernel.world.timers import CLOCK_MANUAL as CLOCK_MANUAL
from aos.kernel.world.timers import CLOCK_WALL as CLOCK_WALL
from aos.kernel.world.timers import LOGICAL_NS_MAX as LOGICAL_NS_MAX
from aos.kernel.world.timers import Timers

# The `X as X` imports re-export limits and results: callers keep naming them through here.

WORLD_FORMAT = meta.WORLD_FORMAT


class World:
    """One open world. Not thread-safe: one writer, one thread."""

    def __init__(
        self,
        store: Store,
        loaded: LoadedManifest,
        *,
        engine: WasmEngine,
        stamps: StampSource,
        limits: WorldLimits,
        clock: str,
        fresh_instances: bool = False,
        runner_factory: RunnerFactory | None = None,
    ) -> None:
        self._pending = StagedWrites(store)
        self._ingress = Ingress(limits, self._pending)
        self._engine = engine
        self.limits = limits
        self._runtime = Runtime(
            loaded,
            self._pending,
            engine,
            sample_rate=limits.checked_sample_rate,
            key_bytes_max=limits.key_bytes_max,
            fresh_instances=fresh_instances,
            runner_factory=runner_factory,
        )
        self._cells = CellTables(
            self._pending,
            cache_cells_max=limits.cache_cells_max,
            resident_state_bytes_max=limits.resident_state_bytes_max,
            reclaim=limits.reclaim_superseded,
            check_workflow=self._check_workflow,
            index_nodes_cached_max=limits.index_nodes_cached_max,
        )
        self._scheduler = Scheduler()
        self.journaler = Journaler(
            store,
            self._pending,
            self._cells,
            limits,
            head_content=self._head_content,
            queued=lambda: len(self._scheduler),
        )
        self.intents = IntentTracker(self._pending, lambda: self.store)
        self._timers = Timers(clock, stamps, self.intents)
        self._stepper = Stepper(
            self,
            self._cells,
            self.intents,
            self._scheduler,
            limits.open_intents_max,
            self._pending.put,
        )
        self._checkpoints = self.journaler.checkpoints
        # Every query of this world (reader.py): code that only reads takes this.
        self.reader = WorldReader(
            lambda: self._runtime,
            CellReads(self._cells, self._scheduler, self.intents),
            self.intents,
            self._scheduler,
            self.journaler,
            self._timers,
        )
        self.world_id = ""
        # Governance: proposals by id (governance.py).
        self.proposals: dict[str, dict[str, Any]] = {}
        # Called after every step with the message, the exact input envelope, and the checked
        # outcome or the fault (a governance shadow runs the proposed module beside it).
        self.on_step: Callable[[Message, bytes, Any], None] | None = None
        # Where a step's reads look after this world's own CAS: a replay's or a shadow's
        # scratch world reads the audited world's blobs (deployed definitions, say) here.
        self.blob_source: Callable[[Hash], bytes | None] | None = None

    # ----------------------------------------------------------------------------------------
    # Creating and opening

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        manifest_dir: str | os.PathLike[str],
        *,
        sync: bool = True,
        stamps: StampSource | None = None,
        engine: WasmEngine | None = None,
        limits: WorldLimits | None = None,
        clock: str = CLOCK_WALL,
    ) -> World:
        """Genesis: check the manifest folder (building module sources through the build
        cache), store every definition and module in the world's CAS, journal the manifest
        and write the empty head."""
        root = Path(path)
        engine = engine or WasmEngine()
        opening.create(
            cls,
            root,
            manifest_dir,
            sync=sync,
            stamps=stamps,
            engine=engine,
            limits=limits,
            clock=clock,
        )
        return cls.open(root, sync=sync, stamps=stamps, engine=engine, limits=limits)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        sync: bool = True,
        stamps: StampSource | None = None,
        engine: WasmEngine | None = None,
        limits: WorldLimits | None = None,
    ) -> World:
        """Open an existing world at its head checkpoint; cells load lazily. A head that is
        missing, corrupt or out of step with the journal is rebuilt first from the newest
        usable snapshot and the journal tail (`recovery.recover`), or the open fails closed."""
        return opening.open_writing(
            cls, Path(path), sync=sync, stamps=stamps, engine=engine, limits=limits
        )

    @classmethod
    @contextmanager
    def reading(
        cls, path: str | os.PathLike[str], *, engine: WasmEngine | None = None
    ) -> Iterator[World]:
        """The world as of its last commit, for reading only: the store is opened read-only
        (no writer lock, so this works while another process, `aos node up`, writes it) and
        every read inside the block sees that one commit. Anything that would write raises
        `store.readonly`. A head that is not usable is `world.corrupt` here: only a writer
        rebuilds it."""
        with opening.open_reading(cls, Path(path), engine=engine) as world:
            yield world

    @classmethod
    def scratch(
        cls,
        store: Store,
        loaded: LoadedManifest,
        *,
        engine: WasmEngine,
        clock: str,
        limits: WorldLimits | None = None,
        runner_factory: RunnerFactory | None = None,
    ) -> Self:
        """A world over a scratch store (replay, recovery, shadow): every step runs on a fresh
        instance, and no automatic snapshots are taken (a replay follows the recorded ones).
        `runner_factory`: the runners a replay audit's parallel path brings (runtime.py)."""
        return cls(
            store,
            loaded,
            engine=engine,
            stamps=StampSource(),
            limits=opening.scratch_limits(limits),
            clock=clock,
            fresh_instances=True,
            runner_factory=runner_factory,
        )

    def genesis(self, module_bytes: Callable[[Hash], bytes]) -> None:
        """Write genesis into an empty store: every definition and module, the manifest
        record (its hash names the world), and the first head."""
        loaded = self._runtime.loaded
        opening.store_definitions(self._pending, self._runtime, module_bytes)
        stamp = self.next_stamp()
        self.logical_ns = stamp.logical_ns
        genesis = records.ManifestRecord(str(loaded.manifest_hash), stamp.to_value())
        # The genesis record carries fresh entropy, so its hash names this world and no other:
        # receipts are signed for it, and the journal chain starts from it.
        self.world_id = str(hash_value(genesis.to_value()))
        self.journaler.chain = journal_chain.JournalChain.genesis(self.world_id)
        self.append(genesis)
        self._pending.meta[meta.META_FORMAT] = WORLD_FORMAT
        self._pending.meta[meta.META_CONFIG] = world_config(self.clock, self.world_id, self.limits)
        self.commit()

    # ----------------------------------------------------------------------------------------
    # Properties

    @property
    def store(self) -> Store:
        return self.journaler.store

    @property
    def state_height(self) -> int:
        """The height of the last record that was not a governance action or a snapshot."""
        return self.journaler.state_height

    @property
    def snapshots(self) -> list[tuple[int, Hash]]:
        """The snapshots kept, (journal seq, snapshot hash), oldest first."""
        return self._checkpoints.snapshots

    @snapshots.setter
    def snapshots(self, snapshots: list[tuple[int, Hash]]) -> None:
        self._checkpoints.snapshots = snapshots

    @property
    def clock(self) -> str:
        """`wall` or `manual` (timers.py)."""
        return self._timers.clock

    @property
    def logical_ns(self) -> int:
        return self._timers.logical_ns

    @logical_ns.setter
    def logical_ns(self, logical_ns: int) -> None:
        self._timers.logical_ns = logical_ns

    @property
    def height(self) -> int:
        """The journal height including records not yet flushed."""
        return self.journaler.height

    @property
    def unflushed_records(self) -> int:
        """Records appended since the last flush. After a refused operation this must be 0:
        if it is not, memory is ahead of the store and the holder closes the world without a
        flush (discarding them) and reopens it."""
        return len(self._pending.records)

    @property
    def reclaimed_objects(self) -> int:
        """CAS objects this world's flushes reclaimed since it was opened: deleted, never
        written, or released after retention dropped their snapshot (spec/05 §5.1)."""
        stats = self._pending.reclaim
        return stats.deleted_objects + stats.dropped_objects + stats.released_objects

    @property
    def manifest_hash(self) -> Hash:
        return self._runtime.manifest_hash

    @property
    def engine(self) -> WasmEngine:
        """The WASM engine this world steps with (a replay of it may share its compiled
        modules)."""
        return self._engine

    @property
    def runtime(self) -> Runtime:
        return self._runtime

    @property
    def blobs(self) -> StagedWrites:
        """The world's CAS view: what the next flush writes, over the store (governance stores
        patches, definitions and reports through it)."""
        return self._pending

    def close(self) -> None:
        """Close the store; a writer first checkpoints the journal tail, if it has one and
        nothing is left unflushed (records not flushed are discarded, never half-written)."""
        if not self.journaler.is_open:
            return
        try:
            tail = self.journaler.height > self._checkpoints.height
            if tail and not self.store.readonly and not self._pending.records:
                self.commit(checkpoint=True)
        finally:
            self.journaler.close()

    def __enter__(self) -> World:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------------
    # Ingress

    def ingress(
        self,
        schema: str,
        value: Any,
        *,
        idempotency_key: str | None = None,
    ) -> Admitted:
        """Admit one event from outside: validate and normalize it against its schema, stamp
        it, journal it and queue its deliveries. An event that cannot be routed is journaled
        as `ingress_rejected` (and committed) and the routing error is raised. With an
        `idempotency_key` the world remembers had, it answers that first admission and
        journals nothing."""
        self.require_open()
        event = self._ingress.check_event(self._runtime, schema, value, idempotency_key)
        first = self._ingress.first_admission(event)
        if first is not None:
            return Admitted(first.seq, first.event_hash, first.deliveries, duplicate=True)
        return self._admit(event)

    def _admit(self, event: CheckedEvent) -> Admitted:
        """Stamp, journal and route a checked event (a replay re-admits recorded ones here)."""
        schema = event.schema
        stamp = self.next_stamp()
        try:
            deliveries = route(self._runtime, event)
        except RouteError as error:
            rejected = records.IngressRejected.of(
                schema, event.value, stamp.to_value(), error.code, str(error)
            )
            self.append(rejected)
            self.commit()
            raise
        self.logical_ns = stamp.logical_ns
        seq = self.append(
            records.IngressEvent(
                schema, event.value, stamp.to_value(), event.idempotency_key, event.encoded
            )
        )
        event_hash = hash_bytes(self._pending.record_bytes[-1])
        self._ingress.remember(event, seq, event_hash, len(deliveries))
        self._scheduler.enqueue_deliveries(seq, deliveries, stamp)
        self._commit_if_full()
        return Admitted(seq, event_hash, len(deliveries))

    def send(
        self, schema: str, value: Any, *, idempotency_key: str | None = None
    ) -> tuple[Admitted, RunReport]:
        """Ingress one event and run to idle: when this returns, the event and everything it
        caused are durable (a repeat under an idempotency key runs nothing new)."""
        admitted = self.ingress(schema, value, idempotency_key=idempotency_key)
        try:
            return admitted, self.run_to_idle()
        except StepBudgetExceededError as error:
            # The event itself is durable: tell the caller not to send it again.
            error.detail.update(seq=admitted.seq, event_hash=str(admitted.event_hash))
            raise

    def put_blob(self, data: bytes) -> Hash:
        """Store a blob (a large receipt payload an adapter uploads, a flow definition) and
        make it durable at once. A blob is a GC root only while a receipt payload or an event
        names its hash; one nothing journaled names is garbage at the next collection."""
        self.require_open()
        if len(data) > self.store.limits.blob_bytes_max:
            raise BlobTooLargeError(
                f"the blob is {len(data)} bytes; the limit is {self.store.limits.blob_bytes_max}"
            )
        hash_ = self._pending.put(bytes(data))
        self.commit()
        return hash_

    # ----------------------------------------------------------------------------------------
    # Receipts and time

    def settle(self, receipt_value: Any, *, by: str | None = None) -> Settlement:
        """Take a signed receipt for an open intent (spec/04-effects.md). A refused receipt is
        journaled as `receipt_rejected` (flushed at once) and its error raised; a duplicate of
        a settled intent changes nothing. An accepted one is journaled (with `by`, the node
        identity that completed a human task) and its envelope queued for the origin cell
        only; `run_to_idle` steps it."""
        self.require_open()
        stamp = self.next_stamp()
        try:
            receipt, open_intent = self._ingress.check_receipt(
                self._runtime,
                receipt_value,
                world_id=self.world_id,
                intents=self.intents,
                cell_exists=self._cell_exists,
            )
        except receipts.ReceiptError as error:
            kept, message = receipts.rejection(receipt_value, error)
            self.append(records.ReceiptRejected(kept, stamp.to_value(), error.code, message))
            self.commit()
            raise
        if open_intent is None:
            return Settlement(receipt.intent, None, duplicate=True, delivered=False)
        self.logical_ns = stamp.logical_ns
        settlement = self._accept(receipt.body, receipt.signature, open_intent, stamp, None, by=by)
        self._commit_if_full()
        return settlement

    def advance_time(self, by_ns: int) -> RunReport:
        """Move a `manual` clock world's logical time forward, settle the kernel timers that
        fell due, and run to idle."""
        return self._tick(self._timers.advanced_by(by_ns))

    def jump_next_timer(self) -> RunReport | None:
        """Advance a `manual` clock world to its earliest timer deadline (None if no timer is
        pending), settle what is due, and run to idle."""
        deadline = self._timers.next_jump()
        return None if deadline is None else self._tick(deadline)

    def tick(self) -> RunReport | None:
        """For a `wall` clock world: if a kernel timer is due at the current wall time, journal
        a `time` input, settle the due timers and run to idle. None when nothing was due."""
        self.require_open()
        return self._tick(None) if self._timers.wall_due() else None

    def _tick(self, logical_ns: int | None) -> RunReport:
        self.require_open()
        stamp = self.next_stamp()
        if logical_ns is not None:
            stamp = Stamp(stamp.wall_ns, logical_ns, stamp.entropy, stamp.height, stamp.manifest)
        self.time_input(stamp)
        return self.run_to_idle()

    def time_input(self, stamp: Stamp) -> None:
        """Journal a `time` input and settle the kernel timers it makes due."""
        self.logical_ns = stamp.logical_ns
        seq = self.append(records.TimeRecord(stamp.to_value()))
        for index, (open_intent, body) in enumerate(self._timers.due_receipts(self.world_id)):
            self._accept(body, None, open_intent, stamp.derive(index), seq)

    def _accept(
        self,
        body: dict[str, Any],
        signature: bytes | None,
        open_intent: OpenIntent,
        stamp: Stamp,
        cause: int | None,
        *,
        by: str | None = None,
    ) -> Settlement:
        """Settle an authenticated receipt: journal it, close the intent, and queue the
        envelope for the origin cell (or fail the cell if it cannot take the rejection)."""
        intent = str(body["intent"])
        effect = self._runtime.effects[open_intent.effect]
        payload, payload_error = receipts.checked_payload(body, effect, self._runtime.schemas)
        seq = self.append(
            records.EffectReceipt.of(
                body=body,
                signature=signature,
                stamp=stamp.to_value() if cause is None else None,
                cause=cause,
                payload_error=payload_error,
                by=by,
            )
        )
        self.intents.close(intent)
        self.intents.mark_settled(intent, seq)
        origin = open_intent.origin(intent, str(body["adapter"]))
        schema, value = receipts.envelope(origin, body, payload, payload_error)
        return self._deliver_receipt(open_intent, seq, stamp, schema, value)

    def _deliver_receipt(
        self, open_intent: OpenIntent, seq: int, stamp: Stamp, schema: str, value: Any
    ) -> Settlement:
        """Queue a receipt envelope for the cell that opened the intent, unless that cell is
        gone (deleted or reset: nothing may start a new cell from a receipt) or its workflow
        cannot take this kind of envelope."""
        intent = str(value["intent_hash"])
        workflow = self._runtime.workflows[open_intent.workflow]
        if self._cells.get(open_intent.workflow).get(open_intent.key) is None:
            self.append(dropped(seq, 0, open_intent.cell, "cell_deleted"))
            return Settlement(intent, seq, delivered=False)
        router = self._runtime.router
        if not router.accepts(workflow.event, schema):
            # The seed's rule: a workflow that cannot take a rejected receipt fails, and its
            # later receipts are dropped when they reach the failed cell.
            self._cells.get(open_intent.workflow).mark_failed(open_intent.key, seq)
            self._checkpoints.due = True  # the tail's fold does not fail cells
            return Settlement(intent, seq, delivered=False)
        self._scheduler.enqueue(
            cell_delivery(self._runtime, open_intent.cell, seq, schema, value, stamp)
        )
        return Settlement(intent, seq)

    def next_stamp(self) -> Stamp:
        return self._timers.next_stamp(self.journaler.height + 1, str(self._runtime.manifest_hash))

    # ----------------------------------------------------------------------------------------
    # Operations (operations.py)

    def operate(self, operation: Operation) -> int:
        """Journal an operator's action and queue what it causes (`run_to_idle` steps it).
        A refused action raises and journals nothing."""
        self.require_open()
        self._ingress.check_operation(
            operation, self.intents, self._cells, self._scheduler.is_queued
        )
        stamp = self.next_stamp()
        self.logical_ns = stamp.logical_ns
        seq = self.append(records.OperationRecord(operation, stamp.to_value()))
        if operation.action == INTENT_CANCEL:
            assert operation.intent is not None
            self._cancel_intent(operation.intent, seq, stamp)
        else:
            assert operation.workflow is not None
            self._restart_cell(operation, seq)
        self._commit_if_full()
        return seq

    def _restart_cell(self, operation: Operation, seq: int) -> None:
        """Retry: clear the failure, keeping the state, and queue the delivery that failed
        the cell again. Reset: delete the cell."""
        cell_id: CellId = (str(operation.workflow), operation.key)
        parked = self._stepper.faulted.pop(cell_id, None)
        table = self._cells.get(cell_id[0])
        if operation.action == CELL_RESET:
            table.put(operation.key, None, seq)
            return
        cell = table.get(operation.key)
        assert cell is not None and operation.action == CELL_RETRY
        table.put(operation.key, table.state_bytes(cell) or None, seq)
        if parked is not None:
            self._scheduler.enqueue(parked)

    def _cancel_intent(self, intent: str, seq: int, stamp: Stamp) -> None:
        """Close the intent (a later receipt is `receipt.intent_cancelled`) and tell its cell
        with a receipt envelope of status `cancelled` and a null payload."""
        open_intent = self.intents.close(intent)
        self.intents.mark_cancelled(intent, seq)
        value = {
            **open_intent.origin(intent, OPERATOR_ADAPTER),
            "status": {"$tag": STATUS_CANCELLED},
            "payload": cbor.encode(None),
        }
        self._deliver_receipt(open_intent, seq, stamp, RECEIPT_ENVELOPE, value)

    # ----------------------------------------------------------------------------------------
    # Stepping

    def run_to_idle(self, *, steps_max: int | None = None) -> RunReport:
        """Step ready cells round-robin until none is ready, then flush once. More than
        `steps_max` steps (default `limits.steps_per_run_max`) flushes what was done, leaves
        the rest queued, and raises `world.step_budget_exceeded`."""
        self.require_open()
        budget = self.limits.steps_per_run_max if steps_max is None else steps_max
        report = RunReport(first_seq=self.journaler.height + 1)
        while True:
            if report.steps >= budget and len(self._scheduler):
                report.last_seq = self.journaler.height
                self.commit()
                raise StepBudgetExceededError(
                    f"{report.steps} steps and {len(self._scheduler)} deliveries still queued",
                    steps=report.steps,
                    queued=len(self._scheduler),
                )
            if not self.step_next(report):
                break
            self._commit_if_full()
        report.last_seq = self.journaler.height
        if self._pending.records:
            self.commit()
        if not len(self._scheduler) and self._checkpoints.snapshot_due(self.journaler.height):
            self.snapshot()
        return report

    # ----------------------------------------------------------------------------------------
    # Snapshots

    def snapshot(self) -> tuple[int, Hash]:
        """Take a snapshot (the world must be quiescent: nothing queued): materialize every
        cell, store the snapshot blob in the CAS, journal a `snapshot` record. Returns the
        record's sequence and the snapshot hash."""
        self.require_open()
        if len(self._scheduler):
            raise WorldNotQuiescentError(
                f"{len(self._scheduler)} deliveries are queued; run to idle first"
            )
        content = self._head_content(self._cells.materialize())
        snapshot_hash = self._pending.put_value(content)
        seq = self.append(records.SnapshotRecord(str(snapshot_hash), content["height"]))
        self.journaler.sign_chain_head(self.world_id)
        self._checkpoints.keep_snapshot(seq, snapshot_hash)
        self.commit()
        return seq, snapshot_hash

    def step_next(self, report: RunReport | None = None) -> bool:
        """Step the next scheduled delivery, without flushing; False when nothing is queued.
        `run_to_idle` is this in a loop followed by one flush; a replay calls it one step at a
        time to compare each step's records with the journal."""
        message = self._scheduler.next()
        if message is None:
            return False
        self._stepper.step(
            self._runtime,
            message,
            report if report is not None else RunReport(),
            on_step=self.on_step,
            read_blob=self.read_blob,
        )
        if self._stepper.checkpoint_due:
            self._stepper.checkpoint_due = False
            self._checkpoints.due = True
        return True

    def read_blob(self, hash_text: str) -> bytes | None:
        """A CAS blob a step asked to read (spec/08 §4.1), or None when there is none by that
        hash. Blobs are content-addressed, so what a step reads is fixed by its hash."""
        if not is_hash(hash_text):
            return None
        hash_ = Hash(hash_text)
        if self._pending.has(hash_):
            return self._pending.get(hash_)
        return self.blob_source(hash_) if self.blob_source is not None else None

    def check_output(self, message: Message, result: StepResult, module: str) -> StepOutcome:
        """Everything the kernel checks about a step's output (stepping.py); pure."""
        return self._stepper.check(self._runtime, message, result, module)

    # ----------------------------------------------------------------------------------------
    # The journal and its one commit (journaler.py)

    def append(self, record: records.Record) -> int:
        """Journal a record (durable at the next commit); its sequence number (journaler.py)."""
        return self.journaler.append(record)

    def commit(self, *, checkpoint: bool = False) -> None:
        """Make everything appended durable in one transaction, with a head checkpoint when
        one is due or `checkpoint` asks for it (journaler.py)."""
        self.journaler.commit(checkpoint=checkpoint)

    def _commit_if_full(self) -> None:
        """Commit at a safe point (never inside a step) once enough records are pending."""
        if self.journaler.uncommitted_records >= self.limits.flush_records_max:
            self.commit()

    def _head_content(self, materialized: dict[str, str]) -> dict[str, Any]:
        """The head checkpoint (or snapshot) of the world now, over the materialized roots."""
        chain = self.journaler.chain
        return {
            "format": WORLD_FORMAT,
            "height": self.journaler.height,
            "logical_ns": self.logical_ns,
            "manifest": str(self._runtime.manifest_hash),
            "roots": self._cells.head_roots(materialized),
            "open_intents": self.intents.values(),
            "queued": [message.to_value() for message in self._scheduler.snapshot()],
            "proposals": {key: dict(value) for key, value in sorted(self.proposals.items())},
            "state_height": self.journaler.state_height,
            **({"chain": chain.to_value()} if chain is not None else {}),
            # Written only when a cell has failed, so older heads keep their form.
            **({"faulted": self._stepper.faulted_values()} if self._stepper.faulted else {}),
        }

    def switch_manifest(self, manifest_hash: Hash) -> None:
        """Make a stored manifest the world's (governance apply). Cells of workflows the new
        manifest no longer has leave the head; the others keep their index roots."""
        manifest = Manifest.model_validate(self._pending.get_value(manifest_hash))
        loaded = assemble_manifest(manifest, stored_definitions(manifest, self._pending))
        self._runtime = Runtime(
            loaded,
            self._pending,
            self._engine,
            sample_rate=self.limits.checked_sample_rate,
            key_bytes_max=self.limits.key_bytes_max,
            fresh_instances=self._runtime.fresh_instances,
            runner_factory=self._runtime.runner_factory,
        )
        self._cells.keep(loaded.workflows)
        self._stepper.keep_faulted(loaded.workflows)

    def restore_head(self, world_id: str, head: dict[str, Any], head_hash: Hash) -> None:
        """Take a stored world's id and head checkpoint `head_hash` as this world's, with the
        journal tail after it folded in (opening.py)."""
        self.world_id = world_id
        self.snapshots = stored_snapshots(self.store)
        chain = journal_chain.on_open(self.store, world_id, head)  # before the fold
        self.journaler.chain = chain
        self._restore(head, chained_through=chain.seq if chain is not None else 0)
        self._checkpoints.restored(head["height"], head_hash)
        if not self.store.readonly:
            self.journaler.key_seed = worldkey.load_seed(self.store.world_dir)
            # A head from before chains: the first commit checkpoints, so that the head carries
            # the chain the commit stores (spec/05 §1.2).
            self._checkpoints.due = "chain" not in head

    def _restore(self, head: dict[str, Any], *, chained_through: int = 0) -> None:
        if head["height"] > self.store.journal.head():
            raise WorldCorruptError(
                f"the head checkpoint is at {head['height']}, past the journal at "
                f"{self.store.journal.head()}"
            )
        self._checkpoints.restored(head["height"])
        folded = restore_cells(
            head,
            self.store.journal,
            self._cells,
            self.intents,
            self._scheduler,
            chained_through=chained_through,
        )
        self.journaler.height = folded.height
        self.logical_ns = folded.logical_ns
        self.journaler.state_height = folded.state_height
        self.proposals = {key: dict(value) for key, value in head.get("proposals", {}).items()}
        for value in head.get("faulted", []):
            message = Message.from_value(value)
            self._stepper.faulted[(message.workflow, message.key)] = message

    def current_head(self) -> dict[str, Any]:
        """The head checkpoint as it would be written now (materializes the cells; nothing
        is committed): what a replay compares."""
        return self._head_content(self._cells.materialize())

    def _cell_exists(self, cell: CellId) -> bool:
        return self._cells.get(cell[0]).get(cell[1]) is not None

    def _check_workflow(self, workflow: str) -> None:
        self._runtime.workflow(workflow)  # raises for a name the manifest does not have

    def require_open(self) -> None:
        self.journaler.store  # noqa: B018 - raises `world.closed` for a closed world


def head_at_end(store: Store, engine: WasmEngine) -> dict[str, Any]:
    """The head of the world in `store` at its journal's end (opening.head_at_end)."""
    return opening.head_at_end(World, store, engine)
