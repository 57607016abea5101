"""A world's status read without opening it as a world (spec/03-world.md §12): its height,
manifest, logical time, cells and failed cells per workflow, open intents and queued
deliveries, from the head checkpoint and the journal tail after it, with no manifest
assembled, no module loaded and no wasm engine made. `aos world status` answers from it
(issue 32: well under a second on a small world, where opening the world for reading takes
over one; `bench/cli_status.py`).

    status = read_status(path)       # WorldStatus (world.missing, world.corrupt)
    status.summary()                 # the dict `World.reader.status()` gives

It restores the cells exactly as opening the world does (tail.py `restore_cells`, the one
restore), so both say the same (a test compares them on worlds with a journal tail, failed
cells, open intents and queued deliveries). A cell's status as its state says it comes from
the readers registered in this process (state_status.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos.kernel.hashing import Hash
from aos.kernel.store.interface import Store
from aos.kernel.world.cells import CACHE_CELLS_MAX_DEFAULT, RESIDENT_STATE_BYTES_MAX_DEFAULT
from aos.kernel.world.committed import as_map, check_format, committed_store, head_checkpoint
from aos.kernel.world.intents import IntentTracker
from aos.kernel.world.meta import META_CONFIG
from aos.kernel.world.queries import CellReads
from aos.kernel.world.scheduler import Scheduler
from aos.kernel.world.staged import StagedWrites
from aos.kernel.world.tables import CellTables
from aos.kernel.world.tail import restore_cells


@dataclass(frozen=True)
class WorldStatus:
    """A world as of its last commit, as `aos world status` shows it."""

    height: int
    manifest: str
    logical_ns: int
    clock: str
    workflows: dict[str, dict[str, int]]  # cells and failed cells, by workflow name
    open_intents: list[dict[str, Any]]  # as the head carries them, in intent order
    queued: int

    def summary(self) -> dict[str, Any]:
        """What `WorldReader.status()` says of the same world."""
        return {
            "height": self.height,
            "manifest": self.manifest,
            "logical_ns": self.logical_ns,
            "clock": self.clock,
            "workflows": self.workflows,
            "open_intents": len(self.open_intents),
            "queued": self.queued,
        }


def read_status(root: str | Path) -> WorldStatus:
    """The status of the world at `root` as of its last commit, read-only (no writer lock:
    it works while a node serves the world). `world.missing` where there is none, and
    `world.corrupt` for a head only a writer can rebuild, as `World.reading` says."""
    with committed_store(Path(root)) as store:
        return _status(store)


def _status(store: Store) -> WorldStatus:
    check_format(store)
    config = as_map(store.meta.get(META_CONFIG), "world config")
    head = head_checkpoint(store)
    manifest = as_map(store.cas.get_value(Hash(str(head["manifest"]))), "manifest")
    pending = StagedWrites(store)
    tables = CellTables(
        pending,
        cache_cells_max=CACHE_CELLS_MAX_DEFAULT,
        resident_state_bytes_max=RESIDENT_STATE_BYTES_MAX_DEFAULT,
        reclaim=False,
        check_workflow=lambda _name: None,  # only the manifest's workflows are counted
    )
    intents = IntentTracker(pending, lambda: store)
    scheduler = Scheduler()
    folded = restore_cells(head, store.journal, tables, intents, scheduler)
    workflows = [str(ref["name"]) for ref in manifest.get("workflows", [])]
    return WorldStatus(
        height=folded.height,
        manifest=str(head["manifest"]),
        logical_ns=folded.logical_ns,
        clock=str(config["clock"]),
        workflows=CellReads(tables, scheduler, intents).counts(workflows),
        open_intents=intents.values(),
        queued=len(scheduler),
    )
