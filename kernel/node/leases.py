"""Leases: how published intents reach adapters, and come back when an adapter dies.

The world host publishes an intent here only after the flush that journaled it, and withdraws
it when a receipt settling it is journaled. An adapter leases up to `count` published intents
of the effects it serves; a lease lasts `lease_ms`, after which the intent is handed out again
(first in line, so a crashed adapter's work is retried before newer work). Nothing here is
journaled: leases are scheduling, the journal only records receipts, and whichever valid
receipt for an intent arrives first settles it (later ones are duplicates).

Thread-safe: the host thread publishes and withdraws, request handlers lease. Handlers wait
for work with `wait_for_leases`, which sleeps on the event loop (a long-poll costs no thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from aos.kernel.errors import KernelInvariantError
from aos.kernel.node.errors import LeaseRevokedError, LeaseUnknownError
from aos.kernel.signing.request_auth import AdapterForbiddenError

_LEASE_ID_BYTES = 12
# Revoked leases remembered so that their holders learn of the cancellation on renewal.
REVOKED_LEASES_KEPT_MAX = 10_000


@dataclass(frozen=True)
class PublishedIntent:
    """An open intent as adapters see it: everything needed to execute it."""

    intent: str
    effect: str
    adapters: frozenset[str]  # who may settle it (the effect's `adapters`)
    params: Any  # the normalized params, a CBOR value
    issuer_ref: str | None
    workflow: str
    key: Any  # the origin cell's key value, None for an unkeyed workflow
    seq: int  # the `effect_intent` record
    published_unix_ms: int


@dataclass(frozen=True)
class Lease:
    lease_id: str
    intent: PublishedIntent
    adapter: str
    expires_unix_ms: int


@dataclass
class _Slot:
    published: PublishedIntent
    lease_id: str | None = None
    holder: str = ""  # the adapter holding `lease_id`


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class LeaseManager:
    def __init__(
        self,
        *,
        lease_ms: int,
        clock_ms: Callable[[], float] = _monotonic_ms,
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self.lease_ms = lease_ms
        self._clock_ms = clock_ms
        self._wall_ms = wall_ms
        self._lock = threading.Lock()
        self._open: dict[str, _Slot] = {}
        # Per effect, the intents nobody holds, in the order they are to be handed out.
        self._available: dict[str, OrderedDict[str, None]] = {}
        self._expiries: list[tuple[float, str, str]] = []  # (deadline ms, lease id, intent)
        self._waiters: dict[int, Callable[[], None]] = {}
        # Leases whose intent the workflow cancelled (lease id -> intent, holder), newest last,
        # so that their holders learn it when they renew (bounded: the oldest are forgotten,
        # then answer `lease.unknown`).
        self._revoked: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._renewed_until: dict[str, float] = {}  # lease id -> its latest deadline (ms)
        self._waiter_ids = itertools.count()
        self.closed = False
        # Set by the host thread while it answers a batch (`wakes_held`).
        self._holding_wakes = False
        self._wake_due = False

    # -- the host thread ---------------------------------------------------------------------

    def publish(self, intents: Iterable[PublishedIntent]) -> None:
        added = False
        with self._lock:
            for published in intents:
                if published.intent in self._open:
                    continue
                self._open[published.intent] = _Slot(published)
                self._available.setdefault(published.effect, OrderedDict())[published.intent] = None
                added = True
        if added and self._holding_wakes:
            self._wake_due = True
        elif added:
            self._wake()

    @contextlib.contextmanager
    def wakes_held(self) -> Iterator[None]:
        """Publish without waking long-polls until the block ends (host thread only): a batch's
        receipts that ask for leases (chained leases) get the intents their steps opened first,
        instead of racing a long-poll of the same adapter that the publish woke."""
        self._holding_wakes = True
        try:
            yield
        finally:
            self._holding_wakes = False
            if self._wake_due:
                self._wake_due = False
                with self._lock:
                    # Chained leases may have taken all of it: a woken long-poll would find
                    # nothing, and the wake-up costs both threads a GIL hand-off.
                    left = any(self._available.values())
                if left:
                    self._wake()

    def withdraw(self, intents: Iterable[str]) -> None:
        """Forget settled intents (their leases die with them)."""
        with self._lock:
            for intent in intents:
                slot = self._open.pop(intent, None)
                if slot is not None:
                    self._available.get(slot.published.effect, OrderedDict()).pop(intent, None)
                    self._renewed_until.pop(slot.lease_id or "", None)

    def revoke(self, intents: Iterable[str]) -> None:
        """Withdraw cancelled intents and remember the leases that held them."""
        with self._lock:
            for intent in intents:
                slot = self._open.pop(intent, None)
                if slot is None:
                    continue
                self._available.get(slot.published.effect, OrderedDict()).pop(intent, None)
                if slot.lease_id is not None:
                    self._revoked[slot.lease_id] = (intent, slot.holder)
                    self._renewed_until.pop(slot.lease_id, None)
            while len(self._revoked) > REVOKED_LEASES_KEPT_MAX:
                self._revoked.popitem(last=False)

    def renew(self, lease_id: str, adapter: str) -> Lease:
        """Extend a lease `adapter` holds by `lease_ms` from now. A lease whose intent was
        cancelled is `lease.revoked`; one that expired or was settled is `lease.unknown`;
        another adapter's lease is `adapter.forbidden`."""
        with self._lock:
            self._reclaim_expired()
            if lease_id in self._revoked:
                intent, holder = self._revoked[lease_id]
                _check_holder(lease_id, holder, adapter)
                raise LeaseRevokedError(
                    f"lease {lease_id}: intent {intent} was cancelled", intent=intent
                )
            slot = next((s for s in self._open.values() if s.lease_id == lease_id), None)
            if slot is None:
                raise LeaseUnknownError(f"no lease {lease_id} is held")
            _check_holder(lease_id, slot.holder, adapter)
            deadline = self._clock_ms() + self.lease_ms
            self._renewed_until[lease_id] = deadline
            heapq.heappush(self._expiries, (deadline, lease_id, slot.published.intent))
            expires_unix_ms = self._wall_ms() + self.lease_ms
            return Lease(lease_id, slot.published, adapter, expires_unix_ms)

    def close(self) -> None:
        """The node is stopping: waiting lease requests return at once, empty."""
        self.closed = True
        self._wake()

    # -- request handlers --------------------------------------------------------------------

    def lease(self, adapter: str, effects: Collection[str], count: int) -> list[Lease]:
        """Lease up to `count` available intents of `effects` that `adapter` may settle."""
        if self.closed:
            return []
        leases: list[Lease] = []
        with self._lock:
            self._reclaim_expired()
            deadline = self._clock_ms() + self.lease_ms
            expires_unix_ms = self._wall_ms() + self.lease_ms
            for effect in effects:
                queue = self._available.get(effect)
                while queue and len(leases) < count:
                    intent, _ = queue.popitem(last=False)
                    slot = self._open[intent]
                    if adapter not in slot.published.adapters:
                        raise KernelInvariantError(f"{adapter} may not lease {effect} intents")
                    slot.lease_id = secrets.token_hex(_LEASE_ID_BYTES)
                    slot.holder = adapter
                    heapq.heappush(self._expiries, (deadline, slot.lease_id, intent))
                    leases.append(Lease(slot.lease_id, slot.published, adapter, expires_unix_ms))
        return leases

    def ms_until_next_expiry(self) -> float | None:
        with self._lock:
            if not self._expiries:
                return None
            return max(0.0, self._expiries[0][0] - self._clock_ms())

    def get(self, intent: str) -> PublishedIntent | None:
        with self._lock:
            slot = self._open.get(intent)
            return None if slot is None else slot.published

    def is_leased(self, intent: str) -> bool:
        """Whether an adapter holds `intent` under an unexpired lease now."""
        with self._lock:
            self._reclaim_expired()
            slot = self._open.get(intent)
            return slot is not None and slot.lease_id is not None

    def open_for(self, adapter: str, limit: int) -> list[PublishedIntent]:
        """Open intents `adapter` may settle, leased or not, in publishing order."""
        with self._lock:
            found = [s.published for s in self._open.values() if adapter in s.published.adapters]
        return found[:limit]

    def counts(self) -> dict[str, int]:
        with self._lock:
            self._reclaim_expired()
            available = sum(len(queue) for queue in self._available.values())
            return {"published": len(self._open), "leased": len(self._open) - available}

    @property
    def waiters(self) -> int:
        """Lease requests waiting for something to lease (long-polls)."""
        with self._lock:
            return len(self._waiters)

    def add_waiter(self, wake: Callable[[], None]) -> int:
        with self._lock:
            token = next(self._waiter_ids)
            self._waiters[token] = wake
            return token

    def remove_waiter(self, token: int) -> None:
        with self._lock:
            self._waiters.pop(token, None)

    # -- internals ---------------------------------------------------------------------------

    def _reclaim_expired(self) -> None:
        now = self._clock_ms()
        while self._expiries and self._expiries[0][0] <= now:
            deadline, lease_id, intent = heapq.heappop(self._expiries)
            slot = self._open.get(intent)
            if slot is None or slot.lease_id != lease_id:
                continue  # settled meanwhile, or already re-leased under a newer lease
            if self._renewed_past(lease_id, deadline):
                continue  # renewed: a later entry of the same lease decides
            self._renewed_until.pop(lease_id, None)
            slot.lease_id = None
            queue = self._available.setdefault(slot.published.effect, OrderedDict())
            queue[intent] = None
            queue.move_to_end(intent, last=False)

    def _renewed_past(self, lease_id: str, deadline: float) -> bool:
        return self._renewed_until.get(lease_id, deadline) > deadline

    def _wake(self) -> None:
        with self._lock:
            waiters = list(self._waiters.values())
        for wake in waiters:
            wake()


def _check_holder(lease_id: str, holder: str, adapter: str) -> None:
    if holder != adapter:
        raise AdapterForbiddenError(f"lease {lease_id} is not held by {adapter}", adapter=adapter)


async def wait_for_leases(
    manager: LeaseManager, adapter: str, effects: Collection[str], count: int, wait_ms: int
) -> list[Lease]:
    """Lease at once, or wait up to `wait_ms` for a publish (or an expiring lease) to make
    something available, then return what there is (possibly nothing)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_ms / 1000.0
    while True:
        woken = asyncio.Event()

        def wake(event: asyncio.Event = woken) -> None:
            # A closed loop means nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

        # Registered before looking, so a publish between the look and the wait is not missed.
        token = manager.add_waiter(wake)
        try:
            leases = manager.lease(adapter, effects, count)
            remaining_ms = (deadline - loop.time()) * 1000.0
            if leases or remaining_ms <= 0 or manager.closed:
                return leases
            expiry_ms = manager.ms_until_next_expiry()
            if expiry_ms is not None:
                remaining_ms = min(remaining_ms, expiry_ms + 1.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), remaining_ms / 1000.0)
        finally:
            manager.remove_waiter(token)
