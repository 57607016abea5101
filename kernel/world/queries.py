"""Reads of a world's cells: states, statuses and listings (spec/03-world.md §12). Reads
change nothing a head checkpoint says (a table opened to read has no root entry)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from aos.kernel import cbor
from aos.kernel.air.normalize import normalize
from aos.kernel.air.types import RefType
from aos.kernel.world.cells import (
    STATUS_COMPLETED,
    STATUS_FAILED,
    STATUS_RUNNING,
    STATUS_WAITING,
    Cell,
)
from aos.kernel.world.errors import KeyRequiredError
from aos.kernel.world.intents import IntentTracker
from aos.kernel.world.results import CellInfo
from aos.kernel.world.runtime import Runtime
from aos.kernel.world.scheduler import Scheduler
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
        if self._scheduler.is_queued((workflow, key_bytes)):
            return STATUS_RUNNING
        if self._intents.is_waiting((workflow, key_bytes)):
            return STATUS_WAITING
        return STATUS_COMPLETED

    def cells_after(self, workflow: str, after: bytes | None) -> Iterator[CellInfo]:
        for _, cell in self._tables.get(workflow).items_after(after):
            yield self._info(workflow, cell)

    def cells(self, workflow: str) -> list[CellInfo]:
        return [self._info(workflow, cell) for _, cell in self._tables.get(workflow).items()]

    def cell_count(self, workflow: str) -> int:
        return self._tables.get(workflow).count()

    def cell_info(self, workflow: str, key_bytes: bytes | None) -> CellInfo | None:
        cell = self._tables.get(workflow).get(key_bytes)
        return None if cell is None else self._info(workflow, cell)

    def counts(self, workflows: Iterable[str]) -> dict[str, dict[str, int]]:
        """Cells and failed cells of each workflow (the failed ones by a walk)."""
        found = {}
        for name in sorted(workflows):
            table = self._tables.get(name)
            failed = sum(1 for _, cell in table.items() if cell.failed)
            found[name] = {"cells": table.count(), "failed": failed}
        return found

    def _info(self, workflow: str, cell: Cell) -> CellInfo:
        return CellInfo(
            workflow=workflow,
            key=cbor.decode(cell.key) if cell.key else None,
            key_bytes=cell.key,
            state_hash=cell.state_hash,
            status=self.status_of(workflow, cell.key),
            last_active_seq=cell.last_active_seq,
        )


def key_bytes(runtime: Runtime, workflow: str, key: Any) -> bytes | None:
    """The canonical key bytes of a cell, from a key value (normalized like routing)."""
    definition = runtime.workflow(workflow)
    if definition.key_schema is None:
        return None
    if key is None:
        raise KeyRequiredError(f"{workflow} is keyed; name a key")
    key_type: Any = definition.key_schema
    if isinstance(key_type, str):
        key_type = RefType(ref=key_type)
    return cbor.encode(normalize(key, key_type, runtime.schemas))
