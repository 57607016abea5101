"""Reading a world: its cells, intents and status, as of what it has done so far
(spec/03-world.md §12).

`World.reader` is the world's `WorldReader`, made with the world and valid while it is open
(it follows a manifest switch). Code that only reads a world takes a `WorldReader`, not a
`World`: whatever it is given, it cannot ingress, settle, step or commit. The reads see what
the world has done, committed or not (a step's state is readable before its commit), and
change nothing a head checkpoint says; how a cell's status is worked out is queries.py.

    with World.reading(path) as world:
        reader = world.reader
        reader.state("demo/Counter@1", "a")
        [info.key for info in reader.cells("demo/Counter@1")]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from aos.kernel.world import cell_keys
from aos.kernel.world.intents import IntentTracker
from aos.kernel.world.journaler import Journaler
from aos.kernel.world.queries import CellReads
from aos.kernel.world.results import CellInfo
from aos.kernel.world.runtime import Runtime
from aos.kernel.world.scheduler import Scheduler
from aos.kernel.world.timers import Timers


class WorldReader:
    """The queries of one world."""

    def __init__(
        self,
        runtime: Callable[[], Runtime],
        reads: CellReads,
        intents: IntentTracker,
        scheduler: Scheduler,
        journaler: Journaler,
        timers: Timers,
    ) -> None:
        self._runtime = runtime  # the world's runtime now (a manifest switch replaces it)
        self._reads = reads
        self._intents = intents
        self._scheduler = scheduler
        self._journaler = journaler
        self._timers = timers

    # -- cells -------------------------------------------------------------------------------

    def key_bytes(self, workflow: str, key: Any) -> bytes | None:
        """The canonical key bytes of a cell, from a key value (normalized like routing)."""
        return cell_keys.key_bytes(self._runtime(), workflow, key)

    def key_from_text(self, workflow: str, text: str | None) -> tuple[Any, bytes | None]:
        """The key value and key bytes a user's KEY names (cell_keys.key_from_text)."""
        return cell_keys.key_from_text(self._runtime(), workflow, text)

    def state(self, workflow: str, key: Any = None) -> Any:
        """The state of a cell (None if it does not exist)."""
        return self._reads.state(workflow, self.key_bytes(workflow, key))

    def status_of(self, workflow: str, key_bytes: bytes | None) -> str:
        return self._reads.status_of(workflow, key_bytes)

    def cells(self, workflow: str) -> list[CellInfo]:
        """Every cell of a workflow, in key-hash order."""
        return self._reads.cells(workflow)

    def cells_after(self, workflow: str, after: bytes | None) -> Iterator[CellInfo]:
        """A workflow's cells whose key hash is greater than `after` (all when None), in
        key-hash order, lazily: a page of cells reads what it shows, not the whole index."""
        return self._reads.cells_after(workflow, after)

    def cell_keys_after(self, workflow: str, after: bytes | None) -> Iterator[Any]:
        """The keys of a workflow's cells after key hash `after`, lazily, reading no state."""
        return self._reads.keys_after(workflow, after)

    def cell_count(self, workflow: str) -> int:
        """How many cells a workflow has (index counts, no walk)."""
        return self._reads.cell_count(workflow)

    def cell_info(self, workflow: str, key_bytes: bytes | None) -> CellInfo | None:
        """One cell by its canonical key bytes (None if it does not exist)."""
        return self._reads.cell_info(workflow, key_bytes)

    # -- intents and timers ------------------------------------------------------------------

    def open_intents(self) -> list[dict[str, Any]]:
        return self._intents.values()

    def open_intent(self, intent: str) -> dict[str, Any] | None:
        """The journaled `effect_intent` record of an open intent (params included)."""
        found = self._intents.get(intent)
        if found is None:
            return None
        journaler = self._journaler
        committed = journaler.height - journaler.uncommitted_records
        if found.seq > committed:
            return journaler.staged.records[found.seq - committed - 1].to_value()
        stored: Any = next(iter(journaler.store.journal.read(found.seq, found.seq)))[1]
        return dict(stored)

    def settled_seq(self, intent: str) -> int | None:
        """The `effect_receipt` that settled `intent`, or None if none did."""
        return self._intents.settled_seq(intent)

    def cancelled_seq(self, intent: str) -> int | None:
        """The record that cancelled `intent`, or None if none did."""
        return self._intents.cancelled_seq(intent)

    def next_timer_ns(self) -> int | None:
        """The earliest pending kernel timer deadline (timers are few: open timer intents)."""
        return self._timers.next_deadline()

    # -- the world ---------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        runtime = self._runtime()
        return {
            "height": self._journaler.height,
            "manifest": str(runtime.manifest_hash),
            "logical_ns": self._timers.logical_ns,
            "clock": self._timers.clock,
            "workflows": self._reads.counts(runtime.workflows),
            "open_intents": len(self._intents),
            "queued": len(self._scheduler),
        }
