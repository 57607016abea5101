"""Admission of inputs from outside (spec/03-world.md §3, spec/04-effects.md §2): an event
is checked against its schema and the event size limit and answered from the idempotency
keys the world remembers; a receipt is parsed, authenticated and authorized for an open
intent; an operator's action is checked against the cell or intent it names.

Everything here only checks: a refused input raises a typed error and changes nothing. What
is journaled for a refusal, and when, is the world's (world.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aos.kernel import cbor
from aos.kernel.air.names import is_sys_name
from aos.kernel.air.normalize import normalize
from aos.kernel.hashing import Hash
from aos.kernel.world import receipts
from aos.kernel.world.errors import (
    CellBusyError,
    CellMissingError,
    CellNotFailedError,
    EventTooLargeError,
    IntentNotOpenError,
    SchemaReservedError,
    SchemaUnknownError,
)
from aos.kernel.world.idempotency import (
    FirstAdmission,
    IdempotencyIndex,
    check_key,
    event_content,
)
from aos.kernel.world.intents import IntentTracker, OpenIntent
from aos.kernel.world.limits import WorldLimits
from aos.kernel.world.operations import CELL_RESET, CELL_RETRY, INTENT_CANCEL, Operation
from aos.kernel.world.router import Delivery, RouteNoSubscriberError
from aos.kernel.world.runtime import Runtime
from aos.kernel.world.scheduler import CellId
from aos.kernel.world.staged import StagedWrites
from aos.kernel.world.tables import CellTables


@dataclass(frozen=True, slots=True)
class CheckedEvent:
    """An event from outside that fits its schema and limits, normalized."""

    schema: str
    value: Any
    encoded: bytes  # the normalized value's canonical stored form, encoded once
    idempotency_key: str | None = None
    content: str = ""  # what the idempotency key is bound to (event_content), "" without one


class Ingress:
    """The checks an input passes before it is stamped, and the idempotency keys of the
    events admitted."""

    def __init__(self, limits: WorldLimits, pending: StagedWrites) -> None:
        self._event_bytes_max = limits.event_bytes_max
        self._receipt_bytes_max = limits.receipt_bytes_max
        self._idempotency = IdempotencyIndex(pending, limits.idempotency_keys_max)

    # -- events ------------------------------------------------------------------------------

    def check_event(
        self, runtime: Runtime, schema: str, value: Any, idempotency_key: object
    ) -> CheckedEvent:
        key = check_key(idempotency_key) if idempotency_key is not None else None
        if is_sys_name(schema):
            raise SchemaReservedError(f"{schema} is a kernel schema; it cannot be sent")
        if schema not in runtime.schemas:
            raise SchemaUnknownError(f"no schema {schema} in the manifest")
        normalized = normalize(value, schema, runtime.schemas)
        encoded = cbor.encode(normalized)
        if len(encoded) > self._event_bytes_max:
            raise EventTooLargeError(
                f"the event is {len(encoded)} bytes; the limit is {self._event_bytes_max}"
            )
        if key is None:
            return CheckedEvent(schema, normalized, encoded)
        return CheckedEvent(schema, normalized, encoded, key, event_content(schema, normalized))

    def first_admission(self, event: CheckedEvent) -> FirstAdmission | None:
        """The first admission of an event under the same idempotency key, if remembered
        (`idempotency.key_reused` when that one had other content)."""
        if event.idempotency_key is None:
            return None
        return self._idempotency.find(event.idempotency_key, event.content)

    def remember(self, event: CheckedEvent, seq: int, event_hash: Hash, deliveries: int) -> None:
        if event.idempotency_key is not None:
            admission = FirstAdmission(seq, event_hash, deliveries, event.content)
            self._idempotency.remember(event.idempotency_key, admission)

    # -- receipts ----------------------------------------------------------------------------

    def check_receipt(
        self,
        runtime: Runtime,
        receipt_value: Any,
        *,
        world_id: str,
        intents: IntentTracker,
        cell_exists: Callable[[CellId], bool],
    ) -> tuple[receipts.Receipt, OpenIntent | None]:
        """The receipt and the open intent it settles; None for a duplicate of a settled
        intent. A refused receipt raises its ReceiptError."""
        receipt = receipts.parse(receipt_value, receipt_bytes_max=self._receipt_bytes_max)
        receipts.authenticate(receipt, world_id=world_id, adapters=runtime.adapters)
        open_intent = intents.get(receipt.intent)
        if open_intent is None:
            if intents.settled_seq(receipt.intent) is not None:
                return receipt, None
            cancelled = intents.cancelled_seq(receipt.intent)
            if cancelled is not None:
                raise receipts.ReceiptIntentCancelledError(
                    f"intent {receipt.intent} was cancelled at seq {cancelled}",
                    cancelled_seq=cancelled,
                )
            raise receipts.ReceiptUnknownIntentError(f"no open intent {receipt.intent}")
        receipts.authorize(receipt, runtime.effects[open_intent.effect])
        if not cell_exists(open_intent.cell):
            raise receipts.ReceiptCellDeletedError(
                f"the cell of {open_intent.workflow} that opened intent {receipt.intent} "
                "was deleted; the receipt would start a new cell"
            )
        return receipt, open_intent

    # -- operations --------------------------------------------------------------------------

    @staticmethod
    def check_operation(
        operation: Operation,
        intents: IntentTracker,
        tables: CellTables,
        is_queued: Callable[[CellId], bool],
    ) -> None:
        """An operator's action names an open intent, or a cell in the state it needs."""
        if operation.action == INTENT_CANCEL:
            intent = str(operation.intent)
            if intent not in intents:
                settled, cancelled = intents.settled_seq(intent), intents.cancelled_seq(intent)
                closed = f"settled at seq {settled}" if settled is not None else "not open"
                closed = f"cancelled at seq {cancelled}" if cancelled is not None else closed
                raise IntentNotOpenError(f"intent {intent} is {closed}")
            return
        workflow = str(operation.workflow)
        cell_id: CellId = (workflow, operation.key)
        cell = tables.get(workflow).get(operation.key)
        if cell is None:
            raise CellMissingError(f"{workflow} has no cell for that key")
        if operation.action == CELL_RETRY and not cell.failed:
            raise CellNotFailedError(f"the cell of {workflow} has not failed")
        if operation.action == CELL_RESET and (intents.is_waiting(cell_id) or is_queued(cell_id)):
            raise CellBusyError(f"the cell of {workflow} has open intents or queued deliveries")


def route(runtime: Runtime, event: CheckedEvent) -> list[Delivery]:
    """The deliveries of an admitted event (a RouteError when nothing may take it)."""
    if not runtime.router.subscribed(event.schema):
        raise RouteNoSubscriberError(f"no subscription routes {event.schema}")
    return runtime.router.route(event.schema, event.value, event.encoded)
