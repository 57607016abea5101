"""The test world (spec/11 §13.2): a flow world on the `manual` clock with its tool adapters
in process, doubles answering first; waiting is free (flows/serve/local.py skips the clock
to the next due timer whenever only timers are left)."""

from __future__ import annotations

import os
from contextlib import ExitStack

from aos._flows import Flows, HeldFlows
from aos._worlds import closed_on_error, new_world
from aos.flows.serve.flow_world import EXEC_WORKFLOW, REGISTRY_WORKFLOW
from aos.kernel.world.world import CLOCK_MANUAL
from aos.testing._doubles import DoubledAdapters, ToolDoubles


def test_world(
    doubles: ToolDoubles | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    python_allow: tuple[str, ...] = (),
) -> Flows:
    """A new flow world on the manual clock: kept at `path` (its keys in `PATH.keys`), or a
    scratch one gone when the handle closes. `doubles` answer its tool calls first."""
    resources = ExitStack()
    with closed_on_error(resources):
        world, keys, folder = new_world(path, resources, clock=CLOCK_MANUAL, sync=False)
        for workflow in (EXEC_WORKFLOW, REGISTRY_WORKFLOW):
            world.runtime.runner(workflow)  # loaded now: a test's first run is not charged
        adapters = DoubledAdapters(world, keys, doubles or ToolDoubles(), python_allow=python_allow)
        return Flows(HeldFlows(world, folder), adapters=adapters, resources=resources)


test_world.__test__ = False  # type: ignore[attr-defined]  # a factory, not a test to collect
