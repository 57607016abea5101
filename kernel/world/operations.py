"""Operator actions on a running world: retry or reset a cell, cancel an open intent.

Each is an input, journaled as an `operation` record with its stamp (spec/03-world.md §13),
so a replay performs it again at the same place:

    cell_retry    WORKFLOW KEY   a failed cell takes deliveries again, and the delivery that
                                 failed it is stepped again (by the module the world runs now)
    cell_reset    WORKFLOW KEY   the cell is deleted: its next event starts it afresh
    intent_cancel INTENT         the intent is closed; its origin cell gets a receipt envelope
                                 with status `cancelled`, and a later receipt is refused

    op = Operation.parse({"action": "intent_cancel", "intent": "blake3:..."})
    seq = world.operate(op)       # journaled and queued; world.run_to_idle() steps it
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aos.kernel.hashing import is_hash
from aos.kernel.world.errors import OperationInvalidError

CELL_RETRY = "cell_retry"
CELL_RESET = "cell_reset"
INTENT_CANCEL = "intent_cancel"
ACTIONS = (CELL_RETRY, CELL_RESET, INTENT_CANCEL)

OPERATION_REASON_CHARS_MAX = 500
"""Characters of the free-text reason an operator may give (journaled with the action)."""
OPERATION_KEY_BYTES_MAX = 1024
"""Bytes of a cell key in an operation (the world's own key limit applies after)."""

OPERATOR_ADAPTER = "sys/operator@1"
"""The `adapter` of the receipt envelope a cancelled intent's cell receives."""
STATUS_CANCELLED = "cancelled"


@dataclass(frozen=True)
class Operation:
    """One operator action. `key` is the cell's canonical key bytes (None: unkeyed)."""

    action: str
    workflow: str | None = None
    key: bytes | None = None
    intent: str | None = None
    reason: str = ""

    @classmethod
    def parse(cls, value: Any) -> Operation:
        """An operation from a request body or a journaled record; refuses any other shape."""
        if not isinstance(value, dict):
            raise OperationInvalidError("an operation is a map")
        action = value.get("action")
        if action not in ACTIONS:
            raise OperationInvalidError(f"unknown action {action!r}")
        reason = value.get("reason", "")
        if not isinstance(reason, str) or len(reason) > OPERATION_REASON_CHARS_MAX:
            raise OperationInvalidError(
                f"reason must be text of at most {OPERATION_REASON_CHARS_MAX} characters"
            )
        if action == INTENT_CANCEL:
            intent = value.get("intent")
            if not isinstance(intent, str) or not is_hash(intent):
                raise OperationInvalidError("intent_cancel needs an intent hash")
            return cls(action, intent=intent, reason=reason)
        workflow, key = value.get("workflow"), value.get("key")
        if not isinstance(workflow, str) or not workflow:
            raise OperationInvalidError(f"{action} needs a workflow")
        if key is not None and (not isinstance(key, bytes) or len(key) > OPERATION_KEY_BYTES_MAX):
            raise OperationInvalidError(
                f"key must be canonical key bytes of at most {OPERATION_KEY_BYTES_MAX}"
            )
        return cls(action, workflow=workflow, key=key, reason=reason)

    def target(self) -> dict[str, Any]:
        """The record fields naming what the action is on (and why, if said)."""
        fields: dict[str, Any] = (
            {"intent": self.intent}
            if self.action == INTENT_CANCEL
            else {"workflow": self.workflow, "key": self.key}
        )
        if self.reason:
            fields["reason"] = self.reason
        return fields
