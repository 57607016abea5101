"""Waiting for a cell to step: the node's long-poll on a cell's state (a flow execution's end,
`GET /v1/executions/{exec}?wait_ms=N`, spec/11-flows.md §9.1).

A waiter is a `look` at the world (is the cell done? and the value to answer) and a `deliver`.
Everything a waiter does with the world runs on the host thread, the world's one user: its
first look and its registration are one host operation, so no step can fall between them;
after each operation's flush the host thread tells the watch which cells stepped in the records
it just published, and the watch looks again for each of their waiters right there, delivering
the value once the look says done. A waiter never sees a state that is not yet durable, and a
step of a cell nobody waits for costs nothing but a set lookup.

The watch is bounded (`cell_waiters_max`): past it a new waiter is `node.busy`. Stopping the
host delivers the stop to every waiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from aos.kernel.errors import AosError
from aos.kernel.node.errors import NodeBusyError
from aos.kernel.world.errors import WorldClosedError
from aos.kernel.world.world import World

Cell = tuple[str, bytes | None]
"""A cell as step records name it: its workflow and canonical key bytes (None: a singleton)."""

T = TypeVar("T")
Look = Callable[[World], tuple[bool, T]]
"""On the host thread: whether the wait is over, and the value to answer."""


@dataclass(frozen=True)
class _Waiter(Generic[T]):
    cell: Cell
    look: Look[T]
    deliver: Callable[[T | BaseException], None]


class CellWatch:
    """Waiters by cell. `add` and `stepped` run on the host thread; `remove` on any."""

    def __init__(self, *, waiters_max: int) -> None:
        self.waiters_max = waiters_max
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiters: dict[int, _Waiter[Any]] = {}
        self._by_cell: dict[Cell, set[int]] = {}

    @property
    def waiters(self) -> int:
        return len(self._waiters)

    @property
    def watching(self) -> bool:
        """Whether any waiter is registered (the host collects stepped cells only then)."""
        return bool(self._waiters)

    def add(self, cell: Cell, look: Look[T], deliver: Callable[[T | BaseException], None]) -> int:
        with self._lock:
            if len(self._waiters) >= self.waiters_max:
                raise NodeBusyError(
                    f"{self.waiters_max} requests are already waiting for cells to step",
                    limit=self.waiters_max,
                    limit_name="cell_waiters_max",
                )
            token = next(self._ids)
            self._waiters[token] = _Waiter(cell, look, deliver)
            self._by_cell.setdefault(cell, set()).add(token)
            return token

    def remove(self, token: int) -> bool:
        """Forget a waiter; False when it was already delivered (or removed)."""
        with self._lock:
            waiter = self._waiters.pop(token, None)
            if waiter is None:
                return False
            tokens = self._by_cell[waiter.cell]
            tokens.discard(token)
            if not tokens:
                del self._by_cell[waiter.cell]
            return True

    def stepped(self, world: World, cells: Iterable[Cell]) -> None:
        """On the host thread, after the flush that made these cells' steps durable: look
        again for their waiters, and deliver to those whose wait is over."""
        with self._lock:
            tokens = [t for cell in set(cells) for t in self._by_cell.get(cell, ())]
        for token in sorted(tokens):  # in the order the waiters came
            waiter = self._waiters.get(token)
            if waiter is None:
                continue
            try:
                done, value = waiter.look(world)
            except AosError as error:
                done, value = True, error
            if done and self.remove(token):
                waiter.deliver(value)

    def stop(self) -> None:
        """The host stopped: every waiter is answered so."""
        with self._lock:
            tokens = list(self._waiters)
        for token in tokens:
            waiter = self._waiters.get(token)
            if waiter is not None and self.remove(token):
                waiter.deliver(WorldClosedError("the node stopped"))


class CellHost(Protocol):
    """What `wait_for_cell` needs of the node's world host (kernel/node/host.py)."""

    @property
    def cells(self) -> CellWatch: ...

    async def run(self, operation: Callable[[World], T]) -> T: ...


async def wait_for_cell(
    host: CellHost,
    cell_of: Callable[[World], Cell],
    look: Look[T],
    wait_ms: int,
    *,
    first: Look[T] | None = None,
) -> T:
    """`look` at once (or `first`, which may act, then look: one host operation), and again
    after each step of the cell `cell_of` names, until it says the wait is over or `wait_ms`
    passed; the last look's value. `host` runs operations on the host thread
    (`WorldHost.run`) and has the `cells` watch."""
    loop = asyncio.get_running_loop()
    delivered: asyncio.Future[T] = loop.create_future()

    def deliver(value: T | BaseException) -> None:
        # A closed loop means nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, delivered, value)

    def start(world: World) -> tuple[bool, T, int]:
        done, value = (first or look)(world)
        if done or wait_ms == 0:
            return True, value, 0
        return False, value, host.cells.add(cell_of(world), look, deliver)

    done, value, token = await host.run(start)
    if done:
        return value
    try:
        await asyncio.wait({delivered}, timeout=wait_ms / 1000.0)
    finally:
        still_waiting = host.cells.remove(token)
    if still_waiting:  # the time is up: the state then
        _, value = await host.run(look)
        return value
    return await delivered


def _settle(future: asyncio.Future[T], value: T | BaseException) -> None:
    if future.done():
        return
    if isinstance(value, BaseException):
        future.set_exception(value)
    else:
        future.set_result(value)
