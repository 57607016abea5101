"""Waiting for a cell to step: the node's long-poll on a cell's state (a flow execution's end,
`GET /v1/executions/{exec}?wait_ms=N`, spec/11-flows.md §9.1).

A waiter registers the cell it waits for (workflow, canonical key bytes) *before* it looks at
the cell's state, on the host thread like every read; the host thread, after each operation's
flush, tells the watch which cells stepped in the records it just published, and the watch wakes
their waiters, which look again. Registering first means a step between the look and the wait
is never missed; being told only after the flush means a waiter never sees a state that is not
yet durable.

The watch is bounded (`cell_waiters_max`): past it a new waiter is `node.busy`. Stopping the
host wakes every waiter, whose next look then fails as the stopped world does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from aos.kernel.node.errors import NodeBusyError

Cell = tuple[str, bytes | None]
"""A cell as step records name it: its workflow and canonical key bytes (None: a singleton)."""

T = TypeVar("T")


class CellWatch:
    """Waiters by cell, woken from the host thread when their cell stepped. Thread-safe."""

    def __init__(self, *, waiters_max: int) -> None:
        self.waiters_max = waiters_max
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._by_cell: dict[Cell, dict[int, Callable[[], None]]] = {}
        self._cell_of: dict[int, Cell] = {}

    @property
    def waiters(self) -> int:
        return len(self._cell_of)

    @property
    def watching(self) -> bool:
        """Whether any waiter is registered (the host collects stepped cells only then)."""
        return bool(self._cell_of)

    def add(self, cell: Cell, wake: Callable[[], None]) -> int:
        with self._lock:
            if len(self._cell_of) >= self.waiters_max:
                raise NodeBusyError(
                    f"{self.waiters_max} requests are already waiting for cells to step",
                    limit=self.waiters_max,
                    limit_name="cell_waiters_max",
                )
            token = next(self._ids)
            self._by_cell.setdefault(cell, {})[token] = wake
            self._cell_of[token] = cell
            return token

    def remove(self, token: int) -> None:
        with self._lock:
            cell = self._cell_of.pop(token, None)
            if cell is None:
                return
            waiters = self._by_cell[cell]
            waiters.pop(token, None)
            if not waiters:
                del self._by_cell[cell]

    def stepped(self, cells: Iterable[Cell]) -> None:
        """On the host thread, after the flush that made these cells' steps durable."""
        with self._lock:
            wakes = [w for cell in set(cells) for w in self._by_cell.get(cell, {}).values()]
        for wake in wakes:
            wake()

    def wake_all(self) -> None:
        """The host stopped: every waiter looks again (and learns so)."""
        with self._lock:
            wakes = [w for waiters in self._by_cell.values() for w in waiters.values()]
        for wake in wakes:
            wake()


async def wait_for_cell(
    watch: CellWatch,
    cell: Cell,
    look: Callable[[], Awaitable[tuple[bool, T]]],
    wait_ms: int,
) -> T:
    """Look at `cell` until `look` says it is done (its first item) or `wait_ms` passed; the
    last look's value either way. Each step of the cell wakes one more look."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_ms / 1000.0
    woken = asyncio.Event()

    def wake() -> None:
        # A closed loop means nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(woken.set)

    token = watch.add(cell, wake)  # before the first look: no step is missed
    try:
        while True:
            woken.clear()
            done, value = await look()
            remaining_s = deadline - loop.time()
            if done or remaining_s <= 0:
                return value
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), remaining_s)
    finally:
        watch.remove(token)
