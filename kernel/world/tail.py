"""The journal tail after the head checkpoint, folded into what the head would say
(spec/05 §1.1): the journal is the durable truth between checkpoints.

A flush between checkpoints writes only journal records and new state blobs. Opening the
world reads the last head checkpoint and folds the records after it: every value it needs is
in the records (state hashes, intent identities, stamps), so no step runs again. The fold is
pure reconstruction: it appends nothing and calls nothing that would.

Only records of the kinds below can be in a tail. Every record whose effect the fold could not
rebuild from the record alone (a step fault parks a delivery, an operation, a governance
action, a snapshot, genesis, a receipt that fails its cell) forces a checkpoint in the flush
that writes it, and so does a flush that leaves deliveries queued: a tail ends quiescent.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aos.kernel import cbor
from aos.kernel.air.builtin_names import TIMER_SET_EFFECT
from aos.kernel.hashing import Hash
from aos.kernel.store import codec
from aos.kernel.store.interface import Journal
from aos.kernel.world import records
from aos.kernel.world.errors import WorldCorruptError
from aos.kernel.world.intents import IntentTracker, OpenIntent
from aos.kernel.world.scheduler import CellId, Message, Scheduler
from aos.kernel.world.tables import CellTables

# What a tail may hold; anything else forces a checkpoint when it is written.
FOLDABLE_KINDS = frozenset(
    {
        records.DOMAIN_EVENT,
        records.INGRESS_REJECTED,
        records.STEP,
        records.DELIVERY_DROPPED,
        records.EFFECT_INTENT,
        records.EFFECT_RECEIPT,
        records.RECEIPT_REJECTED,
        records.TIME,
    }
)


@dataclass
class TailFold:
    """What the records after a head checkpoint change, in journal order."""

    height: int
    logical_ns: int
    state_height: int
    # The last state each touched cell has (None: deleted) and the step that wrote it.
    cells: dict[CellId, tuple[Hash | None, int]] = field(default_factory=dict)
    opened: dict[str, OpenIntent] = field(default_factory=dict)
    # Intents the head had open that the tail closed (settled, timer fired, cancelled).
    closed: list[str] = field(default_factory=list)


def records_after(
    journal: Journal, height: int, end: int, chained_through: int
) -> Iterator[tuple[int, Any]]:
    """The records `height + 1 .. end`. Those through `chained_through` are the bytes the
    open's chain check just hashed: decoded without the canonical checks (a third of a crashed
    world's open). Any after them (a reader's, whose writer went on) are decoded strictly."""
    for seq, raw in journal.read_encoded(height + 1, end):
        if seq <= chained_through:
            yield seq, codec.decode_chained_record(seq, raw)
        else:
            yield seq, codec.decode_record(seq, raw)


def restore_cells(
    head: dict[str, Any],
    journal: Journal,
    tables: CellTables,
    intents: IntentTracker,
    scheduler: Scheduler,
    *,
    chained_through: int = 0,
) -> TailFold:
    """Restore the cell tables, open intents and queued deliveries a head checkpoint names
    into empty ones, with the journal tail after it folded in; what the world is at then
    (height, logical time, state height). The one restore of a world's cells: opening a world
    (world.py) and reading its status without opening it (world_status.py) both call it."""
    height = head["height"]
    tables.restore(head["roots"])
    intents.restore(head["open_intents"])
    scheduler.restore([Message.from_value(value) for value in head["queued"]])
    state_height = int(head.get("state_height", height))
    end = journal.head()
    if end <= height:
        return TailFold(height, head["logical_ns"], state_height)
    tail = records_after(journal, height, end, chained_through)
    folded = fold(height, head["logical_ns"], state_height, tail)
    tables.put_folded(folded.cells)
    for intent in folded.closed:
        intents.close(intent)
    for intent, open_intent in folded.opened.items():
        intents.open(intent, open_intent)
    scheduler.restore([])  # a tail ends quiescent
    return folded


def fold(
    head_height: int, logical_ns: int, state_height: int, tail: Iterable[tuple[int, Any]]
) -> TailFold:
    """Fold the records after the head checkpoint; a record no tail may hold is corrupt."""
    folded = TailFold(head_height, logical_ns, state_height)
    for seq, value in tail:
        kind = value.get("kind") if isinstance(value, dict) else None
        if kind not in FOLDABLE_KINDS:
            raise WorldCorruptError(f"a {kind} record at seq {seq} follows the head checkpoint")
        _fold_one(folded, seq, records.parse(value))
        folded.height = seq
        folded.state_height = seq  # governance and snapshot records never reach a tail
    return folded


def _fold_one(folded: TailFold, seq: int, record: records.Record) -> None:
    if isinstance(record, records.IngressEvent | records.TimeRecord):
        folded.logical_ns = record.stamp["logical_ns"]
    elif isinstance(record, records.StepRecord):
        cell = (record.workflow, record.key)
        folded.cells[cell] = (Hash(record.state) if record.state is not None else None, seq)
        for intent in record.cancelled or ():
            _close(folded, intent)
    elif isinstance(record, records.EffectIntentRecord):
        effect = record.effect
        due = _deliver_at(seq, record.params) if effect == TIMER_SET_EFFECT else None
        folded.opened[record.intent] = OpenIntent(
            record.workflow, record.key, effect, seq, record.issuer_ref, due
        )
    elif isinstance(record, records.EffectReceipt):
        if record.stamp is not None:
            folded.logical_ns = record.stamp["logical_ns"]
        _close(folded, record.intent)


def _deliver_at(seq: int, params: cbor.Value) -> int:
    """When a timer intent is due: its params were checked against the timer's schema when it
    was admitted, so a timer without a time is a changed journal."""
    due = params.get("deliver_at_ns") if isinstance(params, dict) else None
    if type(due) is not int:
        raise WorldCorruptError(f"the timer intent at seq {seq} has no deliver_at_ns")
    return due


def _close(folded: TailFold, intent: str) -> None:
    if folded.opened.pop(intent, None) is None:
        folded.closed.append(intent)
