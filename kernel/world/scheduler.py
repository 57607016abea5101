"""Per-cell mailboxes served in deterministic fair round-robin.

A cell with queued work is in the ready queue once. Each turn takes the cell at the front,
steps one message, and puts the cell at the back if it has more, so one busy cell cannot
starve the others. The order depends only on the order of enqueues, which the journal fixes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aos.kernel.world.stamps import Stamp

if TYPE_CHECKING:
    from aos.kernel.world.router import Delivery

CellId = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Message:
    """One delivery waiting in a mailbox."""

    seq: int  # the journal record of the event
    delivery: int  # the index of this delivery among the event's deliveries
    workflow: str
    key: bytes | None
    schema: str
    value: Any
    stamp: Stamp  # the event's stamp (ingress, or derived from its cause)
    # `value`'s canonical stored form, carried from admission or the emitting step so the
    # step's input does not encode it again (None after a restore: encoded when stepped).
    encoded: bytes | None = field(default=None, compare=False, repr=False)

    def to_value(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "delivery": self.delivery,
            "workflow": self.workflow,
            "key": self.key,
            "schema": self.schema,
            "value": self.value,
            "stamp": self.stamp.to_value(),
        }

    @staticmethod
    def from_value(value: Any) -> Message:
        return Message(
            seq=value["seq"],
            delivery=value["delivery"],
            workflow=value["workflow"],
            key=value["key"],
            schema=value["schema"],
            value=value["value"],
            stamp=Stamp.from_value(value["stamp"]),
        )


class Scheduler:
    def __init__(self) -> None:
        self._boxes: dict[CellId, deque[Message]] = {}
        self._ready: deque[CellId] = deque()

    def enqueue_deliveries(self, seq: int, deliveries: list[Delivery], stamp: Stamp) -> None:
        """Queue the deliveries of the event journaled at `seq`, in their order."""
        for index, delivery in enumerate(deliveries):
            self.enqueue(
                Message(
                    seq=seq,
                    delivery=index,
                    workflow=delivery.workflow,
                    key=delivery.key,
                    schema=delivery.schema,
                    value=delivery.value,
                    stamp=stamp,
                    encoded=delivery.encoded,
                )
            )

    def enqueue(self, message: Message, *, first: bool = False) -> None:
        """Queue a delivery at the back of its cell's mailbox (`first`: at the front)."""
        cell = (message.workflow, message.key)
        box = self._boxes.get(cell)
        if box is None:
            box = self._boxes[cell] = deque()
            self._ready.append(cell)
        if first:
            box.appendleft(message)
        else:
            box.append(message)

    def next(self) -> Message | None:
        if not self._ready:
            return None
        cell = self._ready.popleft()
        box = self._boxes[cell]
        message = box.popleft()
        if box:
            self._ready.append(cell)
        else:
            del self._boxes[cell]
        return message

    def is_queued(self, cell: CellId) -> bool:
        return cell in self._boxes

    def __len__(self) -> int:
        return sum(len(box) for box in self._boxes.values())

    def snapshot(self) -> list[Message]:
        """Every queued message, in an order that `restore` turns back into the same queues."""
        messages: list[Message] = []
        for cell in self._ready:
            messages.extend(self._boxes[cell])
        return messages

    def restore(self, messages: list[Message]) -> None:
        self._boxes.clear()
        self._ready.clear()
        for message in messages:
            self.enqueue(message)
