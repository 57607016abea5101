"""A flow execution's cell as the kernel's views show it (`aos world state cells`, `aos world
status`, the inspector's cells): the cell of an execution that waits for a signal or a child
is idle, and one its interpreter failed has no step fault, so the kernel alone would call
both `completed`. The execution's own status says `running` or `failed` (a `partial` end is
a failure of some branch), and the kernel asks it (kernel/world/state_status.py,
`status_from_state`; spec/11 §9).

Imported by every module that opens flow worlds (flows/serve/flow_world.py) and by the kernel's own
commands (cli/world_cmd.py), so that any view of a world in this process says the same."""

from __future__ import annotations

from typing import Any

from aos.kernel.world.cells import STATUS_COMPLETED, STATUS_FAILED, STATUS_RUNNING
from aos.kernel.world.state_status import status_from_state

EXEC_WORKFLOW = "aos/FlowExec@1"
CELL_STATUS_OF_EXECUTION = {
    "running": STATUS_RUNNING,
    "completed": STATUS_COMPLETED,
    "cancelled": STATUS_COMPLETED,  # ended: nothing more runs (the flow pages say which end)
    "failed": STATUS_FAILED,
    "partial": STATUS_FAILED,
}
"""An execution's status in the kernel's words, as every view of its cell says it."""


def execution_cell_status(state: Any) -> str | None:
    """`failed` for an execution that ended failed or partial, `running` for one that has
    not ended, `completed` for one that ended otherwise; None (the kernel's own status) for a
    state that is no execution's. The kernel's reads take `failed` and `running` from it (an
    execution that has not ended may still wait on an intent there); the node's reads take
    all of it (kernel/node/read_model.py `cell_status_of`)."""
    status = state.get("status") if isinstance(state, dict) else None
    return CELL_STATUS_OF_EXECUTION.get(str(status))


status_from_state(EXEC_WORKFLOW, execution_cell_status)
