"""The single writer: one thread owns the `World`; everything else submits operations to it.

A `World` is not thread-safe, and its journal must have one writer, so every world call of the
node — writes and reads alike — runs on this thread, one after another, in the order they
were submitted (a bounded queue of `(operation, future)`). Between operations the thread
does the world's own chores:

* **publishing** — after every operation it reads the journal records that operation flushed
  and hands new `effect_intent`s to the lease manager and withdraws intents whose
  `effect_receipt` was journaled. Reading them back from the store is what guarantees an
  intent is published only after the flush that journaled it.
* **ticking** — a wall-clock world is ticked every `timer_tick_ms` while a kernel timer is
  pending, so timers fire without any input arriving.
* **draining** — a run that stopped at the step budget left work queued; the thread keeps
  running the world to idle until nothing is queued.

**Group commit.** Receipts and events are *batched* operations (`run_batched`): an `admit`
that puts the input into the world without running it, and an `answer` that makes the
caller's result from the run's report. When the thread takes a batched operation from the
queue it also takes every batched operation queued right behind it (at most
`host_batch_max`; the first other operation ends the batch and runs next), admits them one
after another, runs the world to idle once — one flush — publishes, and only then answers
each caller with its own result or its own error. Admitting needs no flush (a refused
receipt or an unroutable event journals its rejection and flushes it itself), so a batch of
N receipts costs one fsync instead of N.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from aos.kernel import cbor
from aos.kernel.air import TIMER_ADAPTER, TIMER_SET_EFFECT
from aos.kernel.errors import AosError, KernelInvariantError
from aos.kernel.node.cell_watch import Cell, CellWatch
from aos.kernel.node.errors import NodeBusyError, NodeInternalError
from aos.kernel.node.leases import LeaseManager, PublishedIntent
from aos.kernel.node.limits import NodeLimits
from aos.kernel.node.metrics import HostCounts
from aos.kernel.store.interface import CommitTimes
from aos.kernel.world import records
from aos.kernel.world.errors import StepBudgetExceededError, WorldClosedError
from aos.kernel.world.world import CLOCK_WALL, RunReport, World

T = TypeVar("T")
Operation = Callable[[World], T]

log = logging.getLogger("aos.node")

_STOP = object()


@dataclass
class _Job(Generic[T]):
    operation: Operation[T]
    future: Future[T]


@dataclass(frozen=True)
class Admission(Generic[T]):
    """What admitting one batched input left to do: whether the world must run for it (a
    duplicate receipt needs nothing), and how to answer its caller from the run's report
    (None when the batch ran nothing)."""

    runs: bool
    answer: Callable[[RunReport | None], T]
    # Run errors are raised to this caller with these details added (say, its event's seq).
    error_detail: dict[str, Any] = field(default_factory=dict)


Admit = Callable[[World], Admission[T]]


class PublishWatcher(Protocol):
    """Told on the host thread what was published and withdrawn (the human task inbox)."""

    def opened(self, intents: Sequence[PublishedIntent]) -> None:
        """Every intent open when the world was opened."""

    def published(
        self,
        fresh: Sequence[PublishedIntent],
        settled: Mapping[str, int],
        cancelled: Collection[str],
    ) -> None:
        """Intents just journaled; intents just settled (intent -> its receipt's seq) or
        cancelled."""


@dataclass
class _BatchJob(Generic[T]):
    admit: Admit[T]
    future: Future[T]


class WorldHost:
    """Runs a `World` on its own thread. `start` opens it (through `opener`, on that thread),
    `submit`/`run` queue operations, `close` finishes the queue's current operation, stops
    and closes the world."""

    def __init__(
        self,
        opener: Callable[[], World],
        leases: LeaseManager,
        *,
        limits: NodeLimits,
        on_manifest: Callable[[World], None] | None = None,
        watcher: PublishWatcher | None = None,
    ) -> None:
        self._opener = opener
        self._watcher = watcher
        self._on_manifest = on_manifest
        self._manifest_hash = ""
        self._leases = leases
        self._limits = limits
        self._jobs: queue.Queue[Any] = queue.Queue(maxsize=limits.host_queue_max)
        self._thread = threading.Thread(target=self._main, name="aos-world-host", daemon=True)
        self._ready: Future[None] = Future()
        self._stopping = False
        self._published_height = 0
        self._timer_pending = False
        self._drain = False
        self._last_tick_s = 0.0
        self._held: Any = None  # the job that ended a batch, run next
        self.cells = CellWatch(waiters_max=limits.cell_waiters_max)  # woken after each publish
        # Told on the host thread, with the world and the first record of each commit (its
        # head + 1 once it is open), before its intents are leased (flows/serve/tracing.py); a
        # failure is logged and changes nothing.
        self.committed: list[Callable[[World, int], None]] = []
        self.batches = 0  # batches run, and the operations in them (tests, benches)
        self.batched = 0
        self.counts = HostCounts()  # what the metrics show (metrics.py); host thread only
        self.world_id = ""
        self.clock = ""
        self._world: World  # opened on the host thread
        self._commit_times: CommitTimes  # its store's, kept for when that store is closed

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Open the world on the host thread; raise what opening it raised."""
        self._thread.start()
        self._ready.result()

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._stopping = True
        self._jobs.put(_STOP)  # blocks only while the queue is full, which drains
        self._thread.join()

    @property
    def queue_jobs(self) -> int:
        """World operations waiting for the host thread (approximate, as `Queue.qsize`)."""
        return self._jobs.qsize()

    # -- submitting --------------------------------------------------------------------------

    def submit(self, operation: Operation[T]) -> Future[T]:
        future: Future[T] = Future()
        return self._put(_Job(operation, future), future)

    def submit_batched(self, admit: Admit[T]) -> Future[T]:
        """Queue an input to be admitted with the batched operations around it and run to
        idle with them (group commit, see the module's doc)."""
        future: Future[T] = Future()
        return self._put(_BatchJob(admit, future), future)

    def _put(self, job: _Job[T] | _BatchJob[T], future: Future[T]) -> Future[T]:
        if self._stopping or not self._thread.is_alive():
            future.set_exception(WorldClosedError("the node is stopping"))
            return future
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            future.set_exception(
                NodeBusyError(
                    f"{self._limits.host_queue_max} world operations are waiting",
                    limit=self._limits.host_queue_max,
                )
            )
        return future

    async def run(self, operation: Operation[T]) -> T:
        """Submit from the event loop and await the result without blocking it."""
        return await asyncio.wrap_future(self.submit(operation))

    async def run_batched(self, admit: Admit[T]) -> T:
        """`submit_batched` from the event loop."""
        return await asyncio.wrap_future(self.submit_batched(admit))

    def call(self, operation: Operation[T]) -> T:
        """Submit from any other thread and wait."""
        return self.submit(operation).result()

    # -- the host thread ---------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._world = self._opener()
            self._commit_times = self._world.store.commit_times
        except BaseException as error:
            self._ready.set_exception(error)
            return
        try:
            world = self._world
            self.world_id = world.world_id
            self.clock = world.clock
            self._manifest_hash = str(world.manifest_hash)
            self._publish_open_intents(world)
            self._ready.set_result(None)
            self._serve()
        except KernelInvariantError:
            log.critical("a kernel invariant broke; the world is closed", exc_info=True)
        except _UnexpectedFailureError:
            log.critical("a world operation failed unexpectedly; the world is closed")
        finally:
            self._stopping = True
            self._world.close()
            self._fail_waiting()
            self.cells.stop()

    def _serve(self) -> None:
        while True:
            world = self._world
            if self._held is not None:
                job, self._held = self._held, None
            else:
                try:
                    job = self._jobs.get(timeout=self._idle_timeout_s())
                except queue.Empty:
                    job = None
            if job is _STOP:
                return
            try:
                failed = False
                if isinstance(job, _BatchJob):
                    failed = self._run_batch(world, self._batch(job))
                elif job is not None:
                    failed = self._run(world, job)
                if failed and world.unflushed_records:
                    world = self._discard_unflushed(world)
                self._chores(world)
            except (KernelInvariantError, _UnexpectedFailureError):
                raise
            except Exception:
                # Publishing or a chore failed (a bug, or the store): the world's own state
                # is intact, so keep serving and say so loudly.
                log.exception("the world host's bookkeeping failed")

    def _discard_unflushed(self, world: World) -> World:
        """A refused operation left records it appended unflushed: memory is ahead of the
        store. Closing without a flush drops them; the reopened world is the durable one, as if
        the operation had never run (a refusal changes nothing)."""
        log.warning(
            "discarding %d unflushed records of a refused operation", world.unflushed_records
        )
        world.close()
        # The closed store's commits stay counted (a failed flush may have closed it already,
        # so they are taken from what the host kept at open, not from the closed world).
        self.counts.closed_commit_seconds.add(self._commit_times.seconds)
        self._world = self._opener()
        self._commit_times = self._world.store.commit_times
        return self._world

    def _run(self, world: World, job: _Job[Any]) -> bool:
        """Run one operation and answer it; True if it failed."""
        if not job.future.set_running_or_notify_cancel():
            return False  # the requester went away before its turn
        self.counts.operations += 1
        result: Any = None
        failure: BaseException | None = None
        unexpected: BaseException | None = None
        try:
            result = job.operation(world)
        except StepBudgetExceededError as error:
            self._drain = True
            failure = error
        except AosError as error:
            failure = error
        except KernelInvariantError as error:
            job.future.set_exception(WorldClosedError(f"a kernel invariant broke: {error}"))
            raise
        except Exception as error:
            log.exception("a world operation failed unexpectedly")
            failure = unexpected = NodeInternalError(f"{type(error).__name__}: {error}")
        if unexpected is not None:
            # A bug, not a refusal: what it left in memory is unknown, so stop the world.
            job.future.set_exception(unexpected)
            raise _UnexpectedFailureError from unexpected
        # Publish before answering: whoever sent the input that opened an intent can lease it
        # as soon as the answer arrives.
        try:
            self._after(world)
        finally:
            if failure is None:
                job.future.set_result(result)
            else:
                job.future.set_exception(failure)
        return failure is not None

    def _batch(self, first: _BatchJob[Any]) -> list[_BatchJob[Any]]:
        """`first` and the batched jobs queued right behind it; the first job of another
        kind (or the stop) is held to run next, so operations still run in arrival order."""
        batch = [first]
        while len(batch) < self._limits.host_batch_max:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if not isinstance(job, _BatchJob):
                self._held = job
                break
            batch.append(job)
        return batch

    def _run_batch(self, world: World, batch: list[_BatchJob[Any]]) -> bool:
        """Admit every input of the batch, run the world to idle once, publish, answer; True
        if any of it failed."""
        # When each phase ended, for the metrics only (a host clock: nothing a step sees).
        marks_s = [time.perf_counter()]
        admitted: list[tuple[_BatchJob[Any], Admission[Any] | BaseException]] = []
        report: RunReport | None = None
        run_error: BaseException | None = None
        try:
            for job in batch:
                if not job.future.set_running_or_notify_cancel():
                    continue  # the requester went away before its turn
                try:
                    admitted.append((job, job.admit(world)))
                except AosError as error:
                    admitted.append((job, error))  # its own refusal; the others go on
            marks_s.append(time.perf_counter())
            runs = sum(1 for _, a in admitted if isinstance(a, Admission) and a.runs)
            if runs:
                # Each input keeps the step budget it would have had on its own.
                budget = world.limits.steps_per_run_max * runs
                try:
                    report = world.run_to_idle(steps_max=budget)
                except StepBudgetExceededError as error:
                    self._drain = True
                    run_error = error
                except AosError as error:
                    run_error = error
            marks_s.append(time.perf_counter())
        except (KernelInvariantError, Exception) as error:
            # A broken invariant or a bug, not a refusal: stop the world.
            if not isinstance(error, KernelInvariantError):
                log.exception("a batch of world operations failed unexpectedly")
            self._fail_batch(batch, error)
            if isinstance(error, KernelInvariantError):
                raise
            raise _UnexpectedFailureError from error
        # Publish before answering, as for any operation; long-polls wake once the answers
        # (which may lease what was published: chained leases) are made.
        with self._leases.wakes_held():
            try:
                self._after(world)
            finally:
                marks_s.append(time.perf_counter())
                self.batches += 1
                self.batched += len(admitted)
                for job, admission in admitted:
                    _answer(job.future, admission, report, run_error)
                marks_s.append(time.perf_counter())
                self.counts.batch(len(admitted), marks_s)
        return run_error is not None or any(isinstance(a, BaseException) for _, a in admitted)

    @staticmethod
    def _fail_batch(batch: list[_BatchJob[Any]], error: BaseException) -> None:
        if isinstance(error, KernelInvariantError):
            closed: BaseException = WorldClosedError(f"a kernel invariant broke: {error}")
        else:
            closed = NodeInternalError(f"{type(error).__name__}: {error}")
        for job in batch:
            if job.future.running() or (
                not job.future.done() and job.future.set_running_or_notify_cancel()
            ):
                job.future.set_exception(closed)

    def _idle_timeout_s(self) -> float | None:
        if self._drain:
            return 0.0
        if self._timer_pending and self.clock == CLOCK_WALL:
            since = time.monotonic() - self._last_tick_s
            return max(0.0, self._limits.timer_tick_ms / 1000.0 - since)
        return None

    def _chores(self, world: World) -> None:
        try:
            if self._drain:
                self._drain = False
                world.run_to_idle()
            if self._timer_pending and self.clock == CLOCK_WALL:
                now = time.monotonic()
                if now - self._last_tick_s >= self._limits.timer_tick_ms / 1000.0:
                    self._last_tick_s = now
                    world.tick()
        except StepBudgetExceededError:
            self._drain = True
        except AosError:
            log.exception("a world chore failed")
        finally:
            self._after(world)

    def _after(self, world: World) -> None:
        """Publish what the last operation flushed; note whether a timer is pending."""
        try:
            head = world.store.journal.head()
        except WorldClosedError:
            self._timer_pending = False
            return
        if head <= self._published_height:
            return
        if str(world.manifest_hash) != self._manifest_hash:
            # A governance apply changed the manifest (it needs quiescence: nothing was open).
            self._manifest_hash = str(world.manifest_hash)
            if self._on_manifest is not None:
                self._on_manifest(world)
        fresh: list[PublishedIntent] = []
        settled: dict[str, int] = {}  # intent -> its effect_receipt's seq
        cancelled: set[str] = set()
        stepped: list[Cell] = []
        watching = self.cells.watching
        timers_changed = False
        first = self._published_height + 1
        for seq, value in world.store.journal.read(first, head):
            record = records.parse(value)
            self.counts.journaled(record)
            if watching and isinstance(record, records.StepRecord | records.StepFaultRecord):
                stepped.append((record.workflow, record.key))
            if isinstance(record, records.EffectIntentRecord):
                timers_changed |= record.effect == TIMER_SET_EFFECT
                published = _published(world, seq, record)
                if published is not None:
                    fresh.append(published)
            elif isinstance(record, records.StepRecord) and record.cancelled:
                cancelled.update(record.cancelled)
                timers_changed = True
            elif isinstance(record, records.OperationRecord) and record.operation.intent:
                cancelled.add(record.operation.intent)
                timers_changed = True
            elif isinstance(record, records.EffectReceipt):
                timers_changed |= record.body.get("adapter") == TIMER_ADAPTER
                settled[record.intent] = seq
        self._published_height = head
        self._tell_committed(world, first)  # before leasing: a lease names its work's trace
        self._leases.withdraw(settled)
        self._leases.revoke(cancelled)
        self._leases.publish(p for p in fresh if p.intent not in settled.keys() | cancelled)
        if timers_changed:
            # Asking the world scans every open intent: only when a timer came or went.
            self._timer_pending = world.reader.next_timer_ns() is not None
        if self._watcher is not None:
            self._watcher.published(fresh, settled, cancelled)
        if stepped:
            self.cells.stepped(world, stepped)

    def _tell_committed(self, world: World, first: int) -> None:
        for observer in self.committed:
            try:
                observer(world, first)
            except Exception:
                log.exception("a commit observer failed")

    def _publish_open_intents(self, world: World) -> None:
        """On open: intents journaled (and flushed) before this node started are still open."""
        fresh = []
        for value in world.reader.open_intents():
            for seq, record in world.store.journal.read(value["seq"], value["seq"]):
                published = _published(world, seq, records.parse(record))
                if published is not None:
                    fresh.append(published)
        self._published_height = world.store.journal.head()
        self._leases.publish(fresh)
        self._timer_pending = world.reader.next_timer_ns() is not None
        if self._watcher is not None:
            self._watcher.opened(fresh)
        self._tell_committed(world, self._published_height + 1)

    def _fail_waiting(self) -> None:
        while True:
            if self._held is not None:
                job, self._held = self._held, None
            else:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    return
            if isinstance(job, (_Job, _BatchJob)) and job.future.set_running_or_notify_cancel():
                job.future.set_exception(WorldClosedError("the node stopped"))


class _UnexpectedFailureError(Exception):
    """An operation failed with an exception that is not a refusal; the host stops."""


def _answer(
    future: Future[Any],
    admission: Admission[Any] | BaseException,
    report: RunReport | None,
    run_error: BaseException | None,
) -> None:
    """One caller's answer from a batch: its own refusal, the run's error (when the world
    had to run for it) with its own details, or its result."""
    if isinstance(admission, BaseException):
        future.set_exception(admission)
        return
    if admission.runs and run_error is not None:
        # Only a budget stop leaves the input durable; any other run error discards it, so
        # its sequence must not be reported.
        durable = isinstance(run_error, StepBudgetExceededError)
        future.set_exception(_own_copy(run_error, admission.error_detail if durable else {}))
        return
    try:
        future.set_result(admission.answer(report if admission.runs else None))
    except Exception as error:
        log.exception("answering a batched operation failed")
        future.set_exception(NodeInternalError(f"{type(error).__name__}: {error}"))


def _own_copy(error: BaseException, detail: dict[str, Any]) -> BaseException:
    """A copy of a run error for one caller (callers do not share exception objects)."""
    if not isinstance(error, AosError):
        return error
    try:
        copy = type(error)(error.message, path=error.path, **{**error.detail, **detail})
    except TypeError:
        return error
    return copy


def _published(world: World, seq: int, record: records.Record) -> PublishedIntent | None:
    """An `effect_intent` record as adapters see it; None when no adapter of the manifest may
    settle it (kernel timers are settled by the kernel itself)."""
    if not isinstance(record, records.EffectIntentRecord):
        raise KernelInvariantError(f"journal record {seq} is not the effect_intent it should be")
    effect = world.runtime.effects[record.effect]
    adapters = frozenset(a for a in effect.adapters if a in world.runtime.adapters)
    if not adapters:
        return None
    key = record.key
    return PublishedIntent(
        intent=record.intent,
        effect=record.effect,
        adapters=adapters,
        params=record.params,
        issuer_ref=record.issuer_ref,
        workflow=record.workflow,
        key=cbor.decode(key) if key else None,
        seq=seq,
        published_unix_ms=time.time_ns() // 1_000_000,
    )
