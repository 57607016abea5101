"""What a workflow's layer says of its cells' status from their state (spec/03-world.md §12):
the registry the kernel's reads ask (queries.py, the node's read model, the light status
read). A flow execution's cell is idle while it waits for a signal or a child, and its
interpreter fails it without a fault, so the flows layer registers a reader of the
execution's own status (flows/serve/cell_status.py) and the kernel's views say `running` and
`failed` where the execution is. Reads only: no status is ever journaled or stepped on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
