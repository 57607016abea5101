"""The world's open intents: which are open, how many each cell waits on, the kernel timers
among them, and the marks left when one is settled or cancelled (spec/04-effects.md).

An intent is open from its `effect_intent` record until a receipt settles it, an operator or
its own cell cancels it. The tracker holds only what the head checkpoint carries (the open
intents) plus the counts derived from them; the settled/cancelled marks are meta keys written
with the flush that closed the intent, so they survive the intent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aos.kernel.errors import KernelInvariantError
from aos.kernel.store.interface import Store
from aos.kernel.world.scheduler import CellId
from aos.kernel.world.staged import StagedWrites


@dataclass
class OpenIntent:
    """One open intent as the head checkpoint carries it (the intent hash is its key)."""

    workflow: str
    key: bytes | None
    effect: str
    seq: int
    issuer_ref: str | None = None
    due_ns: int | None = None  # a kernel timer's logical deadline

    @property
    def cell(self) -> CellId:
        return (self.workflow, self.key)

    def to_value(self, intent: str) -> dict[str, Any]:
        return {
            "intent": intent,
            "workflow": self.workflow,
            "key": self.key,
            "effect": self.effect,
            "seq": self.seq,
            "issuer_ref": self.issuer_ref,
            "due_ns": self.due_ns,
        }

    def origin(self, intent: str, adapter: str) -> dict[str, Any]:
        """The identity fields of a receipt envelope for this intent."""
        return {
            "origin_workflow": self.workflow,
            "origin_key": self.key,
            "intent_hash": intent,
            "effect": self.effect,
            "adapter": adapter,
            "issuer_ref": self.issuer_ref,
            "emitted_seq": self.seq,
        }

    @staticmethod
    def from_value(value: Any) -> OpenIntent:
        return OpenIntent(
            value["workflow"],
            value["key"],
            value["effect"],
            value["seq"],
            value["issuer_ref"],
            value["due_ns"],
        )


class IntentTracker:
    """Open intents by hash, waiting counts by cell, and settled/cancelled marks."""

    def __init__(self, pending: StagedWrites, store: Callable[[], Store]) -> None:
        self._open: dict[str, OpenIntent] = {}
        self._waiting: dict[CellId, int] = {}
        self._pending = pending
        self._store = store
        # Where `cancelled_seq` looks after the store: a replay that starts from a snapshot
        # does not have the markers of intents cancelled before it (the audited store does).
        self.cancelled_source: Callable[[str], int | None] | None = None

    # -- open intents ------------------------------------------------------------------------

    def get(self, intent: str) -> OpenIntent | None:
        return self._open.get(intent)

    def __contains__(self, intent: str) -> bool:
        return intent in self._open

    def __len__(self) -> int:
        return len(self._open)

    def open(self, intent: str, open_intent: OpenIntent) -> None:
        self._open[intent] = open_intent
        cell = open_intent.cell
        self._waiting[cell] = self._waiting.get(cell, 0) + 1

    def close(self, intent: str) -> OpenIntent:
        open_intent = self._open.pop(intent)
        cell = open_intent.cell
        self._waiting[cell] -= 1
        if not self._waiting[cell]:
            del self._waiting[cell]
        return open_intent

    def is_waiting(self, cell: CellId) -> bool:
        return cell in self._waiting

    def waiting(self, cell: CellId) -> int:
        return self._waiting.get(cell, 0)

    def cancellable(self, cell: CellId, issuer_refs: tuple[str, ...]) -> list[str]:
        """The open intents of `cell` a step's `cancel` names, in the order they were opened
        (so the step record lists them deterministically)."""
        if not issuer_refs or cell not in self._waiting:
            return []
        wanted = set(issuer_refs)
        found = [
            (open_.seq, intent)
            for intent, open_ in self._open.items()
            if open_.cell == cell and open_.issuer_ref in wanted
        ]
        return [intent for _, intent in sorted(found)]

    def values(self) -> list[dict[str, Any]]:
        """The open intents as the head checkpoint carries them, in intent order (checked
        first: a head never carries counts that disagree with its intents)."""
        self.check()
        return [intent.to_value(key) for key, intent in sorted(self._open.items())]

    def restore(self, values: Iterable[Any]) -> None:
        for value in values:
            intent = str(value["intent"])
            if intent in self._open:
                raise KernelInvariantError(f"the head names open intent {intent} twice")
            self.open(intent, OpenIntent.from_value(value))
        self.check()

    def check(self) -> None:
        """The waiting count of each cell is exactly how many open intents it has; a broken
        count would leave a cell waiting forever or let it finish early, so it stops the
        world (KernelInvariantError) instead."""
        counted: dict[CellId, int] = {}
        for open_intent in self._open.values():
            counted[open_intent.cell] = counted.get(open_intent.cell, 0) + 1
        if counted != self._waiting:
            raise KernelInvariantError("the waiting counts disagree with the open intents")

    # -- kernel timers -----------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """The earliest pending timer deadline (timers are few: open timer intents)."""
        deadlines = [i.due_ns for i in self._open.values() if i.due_ns is not None]
        return min(deadlines) if deadlines else None

    def any_due(self, now_ns: int) -> bool:
        return any(i.due_ns is not None and i.due_ns <= now_ns for i in self._open.values())

    def due(self, now_ns: int) -> list[str]:
        """The timers due at `now_ns`, by deadline then intent hash (the settling order)."""
        due = sorted(
            (intent.due_ns, key)
            for key, intent in self._open.items()
            if intent.due_ns is not None and intent.due_ns <= now_ns
        )
        return [key for _, key in due]

    # -- settled and cancelled marks ---------------------------------------------------------

    def mark_settled(self, intent: str, seq: int) -> None:
        self._pending.meta[settled_key(intent)] = seq

    def mark_cancelled(self, intent: str, seq: int) -> None:
        self._pending.meta[cancelled_key(intent)] = seq

    def settled_seq(self, intent: str) -> int | None:
        """The `effect_receipt` that settled `intent`, or None if none did."""
        return self._mark(settled_key(intent))

    def cancelled_seq(self, intent: str) -> int | None:
        """The record that cancelled `intent` (a step or an operation), or None."""
        found = self._mark(cancelled_key(intent))
        if found is None and self.cancelled_source is not None:
            return self.cancelled_source(intent)
        return found

    def _mark(self, key: str) -> int | None:
        if key in self._pending.meta:
            return int(self._pending.meta[key])
        found = self._store().meta.get(key, None)
        return None if found is None else int(found)  # type: ignore[arg-type]


def cancelled_key(intent: str) -> str:
    """The meta key that records which step cancelled `intent` (spec/08 §4.2)."""
    return f"cancelled/{intent}"


def settled_key(intent: str) -> str:
    return f"settled/{intent}"
