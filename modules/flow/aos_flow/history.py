"""The step's history (spec/11 §6): boundary events, annotated on the step record."""

from __future__ import annotations

from typing import Any

HISTORY_EVENTS_DEFAULT = 1000


class History:
    """Events of one step, in order, capped at `limit`: past it, the first `limit - 1`
    events and one `history.truncated {dropped}` (so the annotation stays bounded)."""

    def __init__(self, limit: int = HISTORY_EVENTS_DEFAULT) -> None:
        self.limit = max(1, limit)
        self.events: list[dict[str, Any]] = []
        self.total = 0

    def add(self, event: str, /, **fields: Any) -> None:
        self.total += 1
        if len(self.events) < self.limit:
            entry = {key: value for key, value in fields.items() if value is not None}
            entry["event"] = event  # the name always wins over a field of the same name
            self.events.append(entry)

    def value(self) -> dict[str, Any]:
        if self.total <= self.limit:
            return {"events": list(self.events)}
        kept = self.events[: self.limit - 1]
        dropped = self.total - len(kept)
        return {"events": [*kept, {"event": "history.truncated", "dropped": dropped}]}
