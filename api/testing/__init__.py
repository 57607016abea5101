"""aos.testing: the flow test kit (spec/11 §13.2, docs/python.md "Testing flows").

    from aos.testing import Failure, ToolDoubles, test_world

    doubles = ToolDoubles(tasks={"charge": [Failure("card.declined"), {"paid": True}]})
    with test_world(doubles) as flows:
        outcome = flows.run("checkout.yaml").wait()
    assert doubles.calls_of("charge")[-1].attempt == 2

`test_world` is a flow world on the `manual` clock whose waiting is free: whenever nothing is
left to do but timers (no tool call open, nobody awaited), its adapters skip the clock to the
next due timer, so an hour of retry backoff or a week's timer takes no wall time and the
history shows the logical times. Its tool calls go to `ToolDoubles` first (the real tools
answer what no double matches), each call recorded. `Replayer` checks a recorded world
against the current kernel and flow definitions and names the first divergence. The pytest
plugin (`aos.testing.fixtures`, registered by the package) gives the fixtures `aos_world`
and `aos_flows`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aos.testing._doubles import Failure, ToolCall, ToolDoubles
    from aos.testing._replayer import Replay, Replayer
    from aos.testing._world import test_world

# Imported on first use (PEP 562): the pytest plugin, a module of this package, is loaded by
# every pytest run, most of which never use the kit.
_PUBLIC = {
    "Failure": "aos.testing._doubles",
    "Replay": "aos.testing._replayer",
    "Replayer": "aos.testing._replayer",
    "ToolCall": "aos.testing._doubles",
    "ToolDoubles": "aos.testing._doubles",
    "test_world": "aos.testing._world",
}

__all__ = ["Failure", "Replay", "Replayer", "ToolCall", "ToolDoubles", "test_world"]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'aos.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
