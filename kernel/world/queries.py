"""Reads of a world's cells: states, statuses and listings (spec/03-world.md §12). Reads
change nothing a head checkpoint says (a table opened to read has no root entry).

A cell's status is the kernel's (failed, queued, waiting on an intent, else completed)
unless its workflow's layer says more from the state: a flow execution's cell is idle while
it waits for a signal or a child and its interpreter fails it without a fault, so the flows
layer registers a reader of the execution's own status (state_status.py, flows/serve/cell_status.py)
and the kernel's views say `running` and `failed` where the execution is. Reads only: no
status is ever journaled or stepped on.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from aos.kernel import cbor
from aos.kernel.world.cells import (
    STATUS_COMPLETED,
    STATUS_FAILED,
    STATUS_RUNNING,
    STATUS_WAITING,
    Cell,
)
from aos.kernel.world.intents import IntentTracker
from aos.kernel.world.results import CellInfo
from aos.kernel.world.scheduler import Scheduler
from aos.kernel.world.state_status import state_status
from aos.kernel.world.tables import CellTables


class CellReads:
    """A cell's state and status, and a workflow's cells, by canonical key bytes."""

    def __init__(self, tables: CellTables, scheduler: Scheduler, intents: IntentTracker) -> None:
        self._tables = tables
        self._scheduler = scheduler
        self._intents = intents

    def state(self, workflow: str, key_bytes: bytes | None) -> Any:
        table = self._tables.get(workflow)
        cell = table.get(key_bytes)
        if cell is None:
            return None
        data = table.state_bytes(cell)
        return cbor.decode(data) if data else None

    def status_of(self, workflow: str, key_bytes: bytes | None) -> str:
        cell = self._tables.get(workflow).get(key_bytes)
        if cell is not None and cell.failed:
            return STATUS_FAILED
        said = None if cell is None else self._said(workflow, cell)
        if said == STATUS_FAILED:
            return STATUS_FAILED
        if self._scheduler.is_queued((workflow, key_bytes)):
            return STATUS_RUNNING
        if self._intents.is_waiting((workflow, key_bytes)):
            return STATUS_WAITING
        return STATUS_RUNNING if said == STATUS_RUNNING else STATUS_COMPLETED

    def _said(self, workflow: str, cell: Cell) -> str | None:
        """What the workflow's registered reader says of the cell's state (None: nothing)."""
        reader = state_status(workflow)
        if reader is None:
            return None
        data = self._tables.get(workflow).state_bytes(cell)
        return reader(cbor.decode(data)) if data else None

    def cells_after(self, workflow: str, after: bytes | None) -> Iterator[CellInfo]:
        for _, cell in self._tables.get(workflow).items_after(after):
            yield self._info(workflow, cell)

    def keys_after(self, workflow: str, after: bytes | None) -> Iterator[Any]:
        """The decoded keys of a workflow's cells after key hash `after`, in key-hash order
        (no state is read)."""
        for _, cell in self._tables.get(workflow).items_after(after):
            yield cbor.decode(cell.key) if cell.key else None

    def cells(self, workflow: str) -> list[CellInfo]:
        return [self._info(workflow, cell) for _, cell in self._tables.get(workflow).items()]

    def cell_count(self, workflow: str) -> int:
        return self._tables.get(workflow).count()

    def cell_info(self, workflow: str, key_bytes: bytes | None) -> CellInfo | None:
        cell = self._tables.get(workflow).get(key_bytes)
        return None if cell is None else self._info(workflow, cell)

    def counts(self, workflows: Iterable[str]) -> dict[str, dict[str, int]]:
        """Cells and failed cells of each workflow (the failed ones by a walk; a workflow with a
        state reader has each state decoded)."""
        found = {}
        for name in sorted(workflows):
            table = self._tables.get(name)
            failed = sum(1 for _, cell in table.items() if self._failed(name, cell))
            found[name] = {"cells": table.count(), "failed": failed}
        return found

    def _failed(self, workflow: str, cell: Cell) -> bool:
        return cell.failed or self._said(workflow, cell) == STATUS_FAILED

    def _info(self, workflow: str, cell: Cell) -> CellInfo:
        return CellInfo(
            workflow=workflow,
            key=cbor.decode(cell.key) if cell.key else None,
            key_bytes=cell.key,
            state_hash=cell.state_hash,
            status=self.status_of(workflow, cell.key),
            last_active_seq=cell.last_active_seq,
            faulted=cell.failed,
        )
