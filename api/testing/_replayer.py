"""The replayer (spec/11 §13.2): does a recorded flow world still replay, and would the
current definitions of its flows make the same decisions on its recorded inputs?

Two checks, the first difference ending them and named:

1. the replay audit (`aos world replay --verify`, kernel/audit/replay.py): the journal
   rebuilt by the current kernel with the recorded modules, every record compared byte for
   byte (`journal`: the sequence, record kind, cell, module and fields that differ);
2. for each definition given, the flow shadow (`aos flow shadow`, spec/11 §10.1): every
   recorded execution of that flow replayed with the definition as it is now, beside the
   recorded steps (`execution`: the execution, the step record that decided otherwise,
   what differs, as recorded and as the definition makes it).

The world is read, never written; it must not be held open for writing by this process
(close its `Flows` handle first): a world directory is opened once per process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos._flows import FlowSource, definition_of
from aos.flows.serve.flow_shadow import SHADOW_EXECUTIONS_MAX_DEFAULT, file_target, shadow_flow
from aos.kernel.audit.replay import verify_replay
from aos.kernel.world.world import World


@dataclass(frozen=True)
class Replay:
    """A replayer's answer: `ok`, or the first `divergence` (`where`: journal or execution)."""

    ok: bool
    records: int
    executions: int
    divergence: dict[str, Any] | None = None

    def describe(self) -> str:
        """One line for a failed assertion's message."""
        if self.divergence is None:
            return f"replays: {self.records} records, {self.executions} executions shadowed"
        found = self.divergence
        if found["where"] == "journal":
            return (
                f"journal diverges at seq {found['seq']}: {found['what']} "
                f"({found['kind']}, {found['workflow']}) {found['fields']} {found['message']}"
            )
        return (
            f"execution {found['exec']} diverges at seq {found['diverged_at']}: "
            f"{found['difference']}; recorded {found['recorded']!r}, now {found['shadow']!r}"
        )


class Replayer:
    """Checks recorded worlds against the current kernel and these flow definitions."""

    def __init__(self, *definitions: FlowSource) -> None:
        self.definitions = [definition_of(d) for d in definitions]

    def replay(self, world_dir: str | os.PathLike[str]) -> Replay:
        root = Path(world_dir)
        audit = verify_replay(root, workers_max=1)
        if audit.divergence is not None:
            found = {"where": "journal", **audit.divergence.to_value()}
            return Replay(False, audit.records, 0, found)
        shadowed = 0
        for definition in self.definitions:
            with World.reading(root) as world:
                target = file_target(world, definition)
            report = shadow_flow(root, target, executions_max=SHADOW_EXECUTIONS_MAX_DEFAULT)
            for execution in report.executions:
                shadowed += 1
                if execution.diverged_at is not None:
                    found = {"where": "execution", **execution.to_value()}
                    return Replay(False, audit.records, shadowed, found)
        return Replay(True, audit.records, shadowed)
