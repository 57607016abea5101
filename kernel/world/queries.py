"""Reads of a world's cells: states, statuses and listings (spec/03-world.md §12). Reads
change nothing a head checkpoint says (a table opened to read has no root entry).

A cell's status is the kernel's (failed, queued, waiting on an intent, else completed)
unless its workflow's layer says more from the state: a flow execution's cell is idle while
it waits for a signal or a child and its interpreter fails it without a fault, so the flows
layer registers a reader of the execution's own status (`status_from_state`, flows/serve/flow_world.py)
and the kernel's views say `running` and `failed` where the execution is. Reads only: no
status is ever journaled or stepped on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from aos.kernel import cbor
from aos.kernel.air.errors import AirError
from aos.kernel.air.normalize import normalize
from aos.kernel.air.types import RefType
from aos.kernel.text import jsontext
from aos.kernel.world.cells import (
    STATUS_COMPLETED,
    STATUS_FAILED,
    STATUS_RUNNING,
    STATUS_WAITING,
    Cell,
)
from aos.kernel.world.errors import KeyRequiredError, KeyUnexpectedError
from aos.kernel.world.intents import IntentTracker
from aos.kernel.world.results import CellInfo
from aos.kernel.world.runtime import Runtime
from aos.kernel.world.scheduler import Scheduler
from aos.kernel.world.tables import CellTables

StateStatus = Callable[[Any], str | None]
"""A cell's status as its state says it (`failed`, `running`), or None: the kernel's."""
_state_statuses: dict[str, StateStatus] = {}


def status_from_state(workflow: str, reader: StateStatus) -> None:
    """Let `reader` say, from their decoded state, whether `workflow`'s cells have failed or
    still run (for every world this process reads)."""
    _state_statuses[workflow] = reader


def state_status(workflow: str) -> StateStatus | None:
    """The reader `status_from_state` registered for `workflow` (None: the kernel's status)."""
    return _state_statuses.get(workflow)


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
        reader = _state_statuses.get(workflow)
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


def key_from_text(runtime: Runtime, workflow: str, text: str | None) -> tuple[Any, bytes | None]:
    """The key value and canonical key bytes a user's KEY names, as `aos world state get`
    and the cell operations read it: as typed (a text key bare: `order-1`), else, when that
    does not fit the workflow's key type, as JSON (`42`, `{"a": 1}`); left out for a workflow
    that is not keyed."""
    if runtime.workflow(workflow).key_schema is None:
        if text is not None:
            raise KeyUnexpectedError(f"{workflow} is not keyed; leave KEY out")
        return None, None
    if text is None:
        return None, key_bytes(runtime, workflow, None)  # raises world.key_required
    try:
        return text, key_bytes(runtime, workflow, text)
    except AirError as as_typed:
        try:
            parsed = jsontext.parse(text, path="key")
        except jsontext.JsonInvalidError:
            raise as_typed from None
        return parsed, key_bytes(runtime, workflow, parsed)
