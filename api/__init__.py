"""aos from Python (spec/11 §13, docs/python.md): open, create or connect to a
flow world, then deploy and run flows, wait for them, send events, signal, cancel, complete
human tasks and read executions, cells and history as typed models.

    import aos

    with aos.create() as flows:                  # a scratch world, adapters in process
        run = flows.run("flows/examples/hello.yaml")
        outcome = run.wait()                     # Outcome: status, result, error, exit_code
        run.events(kind="step.started")          # its history, as typed models

`aos.open(DIR)` holds an existing flow world for writing (its adapter keys in `DIR.keys`),
`aos.create(DIR)` makes one, and `aos.connect(URL, token=...)` works through the node that
serves a world, with the same calls and answers. The names in `__all__` are the whole
public surface; `aos.testing` is the flow test kit. Everything else in the package is
private, and `aos.kernel`, `aos.flows` and `aos.cli` are the engine behind it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aos._flows import Execution, Flows, Outcome, Task
    from aos._worlds import connect
    from aos._worlds import create_world as create
    from aos._worlds import open_world as open
    from aos.kernel.errors import AosError
    from aos.kernel.node.models import (
        ExecutionState,
        FlowDeployed,
        HistoryEvent,
        SendResponse,
        SignalAnswer,
        StateResponse,
        TaskError,
    )

# Where each public name lives. They are imported on first use (PEP 562), so that importing
# any `aos.*` module, `aos.cli.main` or a guest tool worker, does not load the API's engine.
_PUBLIC = {
    "AosError": ("aos.kernel.errors", "AosError"),
    "Execution": ("aos._flows", "Execution"),
    "ExecutionState": ("aos.kernel.node.models", "ExecutionState"),
    "FlowDeployed": ("aos.kernel.node.models", "FlowDeployed"),
    "Flows": ("aos._flows", "Flows"),
    "HistoryEvent": ("aos.kernel.node.models", "HistoryEvent"),
    "Outcome": ("aos._flows", "Outcome"),
    "SendResponse": ("aos.kernel.node.models", "SendResponse"),
    "SignalAnswer": ("aos.kernel.node.models", "SignalAnswer"),
    "StateResponse": ("aos.kernel.node.models", "StateResponse"),
    "Task": ("aos._flows", "Task"),
    "TaskError": ("aos.kernel.node.models", "TaskError"),
    "connect": ("aos._worlds", "connect"),
    "create": ("aos._worlds", "create_world"),
    "open": ("aos._worlds", "open_world"),
}

__all__ = [
    "AosError",
    "Execution",
    "ExecutionState",
    "FlowDeployed",
    "Flows",
    "HistoryEvent",
    "Outcome",
    "SendResponse",
    "SignalAnswer",
    "StateResponse",
    "Task",
    "TaskError",
    "connect",
    "create",
    "open",
]


def __getattr__(name: str) -> Any:
    found = _PUBLIC.get(name)
    if found is None:
        raise AttributeError(f"module 'aos' has no attribute {name!r}")
    value = getattr(importlib.import_module(found[0]), found[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
