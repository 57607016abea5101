"""A flow world for tests: created once per test in a temporary folder (the interpreter module
is built once and cached), with the adapters in process and a manual clock that skips time."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos.flows.define.document import load_flow
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import FlowKeys, create_flow_world
from aos.flows.serve.local import LocalAdapters
from aos.kernel import cbor
from aos.kernel.node.models import FlowDeployed
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World
from tests.test_world import engine


@dataclass
class FlowWorld:
    world: World
    keys: FlowKeys
    adapters: LocalAdapters
    path: Path

    def deploy(self, text: str) -> FlowDeployed:
        """A canonical definition, a playbook or a `.flow` text (`load_flow`), deployed."""
        return ops.deploy(self.world, load_flow(text, source="<test>"))

    def run(self, text: str, workload: Any = None, exec_id: str = "e1") -> dict[str, Any]:
        """Deploy, start and drain: the execution's state once nothing but people, signals
        or nothing is left to wait for."""
        name = self.deploy(text).name
        ops.start(self.world, name, workload=workload, exec_id=exec_id)
        self.adapters.drain()
        return self.state(exec_id)

    def state(self, exec_id: str = "e1") -> dict[str, Any]:
        return ops.status(self.world, exec_id)

    def events(self, exec_id: str = "e1") -> list[dict[str, Any]]:
        return [e.event for e in ops.history(self.world, exec_id)]

    def names(self, exec_id: str = "e1") -> list[str]:
        return [str(e["event"]) for e in self.events(exec_id)]

    def waits(self, exec_id: str = "e1") -> dict[str, Any]:
        return dict(self.state(exec_id)["engine"]["waits"])

    def human_tasks(self) -> list[dict[str, Any]]:
        return [i for i in self.world.reader.open_intents() if i["effect"] == "aos/human.task@1"]

    def journal(self) -> list[tuple[int, dict[str, Any]]]:
        return list(self.world.store.journal.read(1, self.world.height))  # type: ignore[arg-type]

    def state_bytes(self, exec_id: str = "e1") -> bytes:
        return cbor.encode(self.state(exec_id))


def make_flow_world(path: Path, **options: Any) -> FlowWorld:
    options.setdefault("stamps", PinnedStampSource())
    world, keys = create_flow_world(path, clock="manual", sync=False, engine=engine(), **options)
    return FlowWorld(world, keys, LocalAdapters(world, keys, python_allow=("tests",)), path)
