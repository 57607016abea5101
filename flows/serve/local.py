"""Running a flow world's adapters in process: `aos flow run --local`, the demo and tests.

A real deployment runs `aos node up` and one adapter process per tool kind. For one command
on an embedded world, `LocalAdapters` does their work in this process instead: it performs
every open tool intent and keychain resolution (the same handlers the adapter processes run, `flows/tools/dispatch.py`),
signs each receipt with the world's own adapter keys and settles it, so the journal is the
same as with real adapters: signed receipts, one flush per batch. Human tasks stay open
until someone completes them (`complete_task`). On a `manual`-clock world, when nothing is
left to do but timers and no execution waits for a person or a signal, it skips time to the
next timer (a time-skipping test world: retries and timer waits take no wall time). With
OpenTelemetry set up, the spans of what the world commits are made as it goes, and a tool
runs inside its task's span (flows/serve/tracing.py, spec/11 §14).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aos.flows.define.cfd import FlowDefinition
from aos.flows.errors import FlowError
from aos.flows.serve.flow_world import (
    ADAPTER_KEY_FILES,
    EXEC_WORKFLOW,
    HUMAN_ADAPTER,
    HUMAN_EFFECT,
    FlowKeys,
    create_flow_world,
    default_keys_dir,
    is_flow_world,
    load_or_make_keys,
)
from aos.flows.serve.tracing import tracer_for
from aos.flows.tools.config import ToolConfig, default_config
from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import TOOL_EFFECTS, run_tool
from aos.flows.tools.keychain import KEYCHAIN_ADAPTER, KEYCHAIN_EFFECT, fingerprint_key, resolve
from aos.flows.tools.outcomes import ToolOutcome
from aos.kernel import cbor
from aos.kernel.node.models import LocalRunResult
from aos.kernel.signing.signatures import signed_receipt
from aos.kernel.world.world import CLOCK_MANUAL, World

ROUNDS_MAX_DEFAULT = 10_000


@dataclass
class DrainReport:
    """What one `drain` did, and what it left waiting."""

    rounds: int = 0
    receipts: int = 0
    timers_skipped: int = 0
    human_tasks: list[str] = field(default_factory=list)  # open human task intents
    timers_pending: bool = False


class LocalAdapters:
    """The flow world's tool adapters and human adapter, in this process."""

    def __init__(
        self,
        world: World,
        keys: FlowKeys,
        *,
        python_allow: tuple[str, ...] = (),
        skip_time: bool = True,
        config: ToolConfig | None = None,
        file_base: Path | None = None,
    ) -> None:
        self.world = world
        self.keys = keys
        self.python_allow = python_allow
        self.config = config or default_config()
        self.file_base = file_base
        self.skip_time = skip_time and world.clock == CLOCK_MANUAL
        self.tracer = tracer_for(world)  # None unless OpenTelemetry is set up (tracing.py)

    def drain(self, *, rounds_max: int = ROUNDS_MAX_DEFAULT, wait_wall: bool = True) -> DrainReport:
        """Perform open tool intents (and skip to due timers) until only human tasks, or
        nothing, are left open. On a wall-clock world it waits for each timer, unless
        `wait_wall` is False (the caller waits: `aos.Execution.wait`)."""
        report = DrainReport()
        while report.rounds < rounds_max:
            report.rounds += 1
            self.observe()
            tool_intents = self._open(tool=True)
            if tool_intents:
                report.receipts += self._perform(tool_intents)
                continue
            if self.world.reader.next_timer_ns() is None:
                break
            if self.world.clock == CLOCK_MANUAL:
                if not self.skip_time or self.awaiting_outside():
                    break
                self.world.jump_next_timer()
                report.timers_skipped += 1
                continue
            if not wait_wall or self.awaiting_outside() or not self._tick_wall():
                break
        self.observe()
        report.human_tasks = [i["intent"] for i in self._open(tool=False)]
        report.timers_pending = self.world.reader.next_timer_ns() is not None
        return report

    def observe(self) -> None:
        """Spans of what the world has committed since the last look, when tracing."""
        if self.tracer is not None:
            self.tracer.observe(self.world)

    def complete_task(self, intent: str, payload: Any, *, status: str = "ok") -> None:
        """Complete a human task as the world's human adapter, then run to idle."""
        self.settle(intent, HUMAN_ADAPTER, status, payload)
        self.world.run_to_idle()

    # -- helpers ---------------------------------------------------------------------------

    def awaiting_outside(self) -> bool:
        """Whether an execution waits for a person or a signal: skipping time then would
        only time that wait out, so the drain stops and leaves it to the caller."""
        if self._open(tool=False):
            return True
        for cell in self.world.reader.cells(EXEC_WORKFLOW):
            state = self.world.reader.state(EXEC_WORKFLOW, cell.key)
            engine = state.get("engine") if isinstance(state, dict) else None
            waits = engine.get("waits", {}) if isinstance(engine, dict) else {}
            if any(isinstance(w, dict) and w.get("kind") == "signal" for w in waits.values()):
                return True
        return False

    def _joined(self, params: Any) -> AbstractContextManager[None]:
        """The call's task span is the current span while the tool runs (its own spans join)."""
        return nullcontext() if self.tracer is None else self.tracer.joined(params)

    def _open(self, *, tool: bool) -> list[dict[str, Any]]:
        wanted = {*TOOL_EFFECTS, KEYCHAIN_EFFECT} if tool else {HUMAN_EFFECT}
        return [i for i in self.world.reader.open_intents() if i["effect"] in wanted]

    def _perform(self, intents: list[dict[str, Any]]) -> int:
        """Run each tool, settle every receipt, then run the world once (group commit)."""
        for intent in intents:
            record = self.world.reader.open_intent(str(intent["intent"]))
            if record is None:
                continue
            effect = str(intent["effect"])
            with self._joined(record["params"]):
                outcome = self.outcome(str(intent["intent"]), effect, record["params"])
            adapter = KEYCHAIN_ADAPTER if effect == KEYCHAIN_EFFECT else TOOL_EFFECTS[effect]
            self.settle(str(intent["intent"]), adapter, outcome.status, outcome.payload)
        self.world.run_to_idle()
        return len(intents)

    def outcome(self, intent: str, effect: str, params: Any) -> ToolOutcome:
        """What the tool (or keychain) adapter would answer."""
        if effect == KEYCHAIN_EFFECT:
            key = fingerprint_key(self.keys.seed(KEYCHAIN_ADAPTER))
            return resolve(params, self.config.keychain, key)
        context = ToolContext(
            intent=intent,
            put_blob=lambda data: str(self.world.put_blob(data)),
            python_allow=self.python_allow,
            file_base=self.file_base,
            **self.config.context(),
        )
        return run_tool(effect, params, context=context)

    def settle(self, intent: str, adapter: str, status: str, payload: Any) -> None:
        """Sign a receipt as `adapter` (a key of this world) and settle it; a refusal is the
        world's typed error, journaled."""
        now = time.time_ns()
        body = {
            "world": self.world.world_id,
            "intent": intent,
            "status": status,
            "payload": payload,
            "adapter": adapter,
            "started_ns": now,
            "finished_ns": now,
        }
        self.world.settle(signed_receipt(self.keys.seed(adapter), body))

    def _tick_wall(self) -> bool:
        """On a wall-clock world, wait for the next timer (bounded by the drain's rounds)."""
        due = self.world.reader.next_timer_ns()
        if due is None:
            return False
        time.sleep(max(0.0, min((due - time.time_ns()) / 1e9, 1.0)))
        self.world.tick()
        return True


# --------------------------------------------------------------------------------------------
# `aos flow run --local`


class LocalWorldInvalidError(FlowError):
    code = "flow.local_world_invalid"
    hint = (
        "--local runs on a scratch world, on a new one kept at --keep DIR, or on an existing "
        "flow world named with --world DIR whose adapter keys are in DIR.keys "
        "(`aos flow world create DIR`)"
    )


@contextmanager
def local_world(
    *, world_dir: Path | None = None, keep: Path | None = None
) -> Iterator[tuple[World, FlowKeys, Path | None]]:
    """The world a local run uses, its adapter keys, and where it is kept (None: a scratch
    world that vanishes when the block ends): the existing flow world `world_dir` (its keys
    beside it, `DIR.keys`), a new one made at `keep` (kept, its keys beside it), or a
    scratch world with throwaway keys. A new world's clock is `manual` (time is skipped)."""
    if world_dir is not None and keep is not None:
        raise LocalWorldInvalidError(
            "give --world DIR (an existing world) or --keep DIR (a new one)"
        )
    if world_dir is not None:
        with _existing(world_dir) as (world, keys):
            yield world, keys, world_dir
        return
    if keep is not None:
        if keep.exists() and any(keep.iterdir()):
            raise LocalWorldInvalidError(f"--keep {keep}: the folder exists and is not empty")
        world, keys = create_flow_world(keep, keys_dir=default_keys_dir(keep), clock=CLOCK_MANUAL)
        with world:
            yield world, keys, keep
        return
    with tempfile.TemporaryDirectory(prefix="aos-flow-local-") as scratch:
        world, keys = create_flow_world(Path(scratch) / "world", clock=CLOCK_MANUAL, sync=False)
        with world:
            yield world, keys, None


@contextmanager
def _existing(world_dir: Path) -> Iterator[tuple[World, FlowKeys]]:
    folder = default_keys_dir(world_dir)
    missing = [name for name in ADAPTER_KEY_FILES.values() if not (folder / name).is_file()]
    if missing:
        raise LocalWorldInvalidError(
            f"{world_dir}: its adapter keys are not in {folder} (missing {', '.join(missing)})"
        )
    world = World.open(world_dir)
    try:
        if not is_flow_world(world):
            raise LocalWorldInvalidError(f"{world_dir} is not a flow world")
        yield world, load_or_make_keys(folder)
    finally:
        world.close()


def run_here(
    world: World,
    adapters: LocalAdapters,
    definition: FlowDefinition,
    *,
    children: tuple[FlowDefinition, ...] = (),
    workload: Any = None,
    exec_id: str | None = None,
) -> LocalRunResult:
    """Deploy `children` (in order, so `kind: playbook` steps and subflows find them), then
    `definition`; start it and run the adapters here until it ends or waits for a person or
    a signal. Its history, result and error as `aos flow run --local` prints them."""
    from aos.flows.serve import flow_operations as ops
    from aos.flows.serve.flow_client import history_event, started

    for child in children:
        ops.deploy(world, child)
    ops.deploy(world, definition)
    run = ops.start(world, definition.name, workload=workload, exec_id=exec_id)
    drained = adapters.drain()
    state = ops.status(world, run.exec)
    engine = state["engine"] if isinstance(state["engine"], dict) else {}
    return LocalRunResult(
        **started(run, state).model_dump(),
        result=cbor.to_json(engine.get("result")),
        human_tasks=drained.human_tasks,
        receipts=drained.receipts,
        timers_skipped=drained.timers_skipped,
        events=[history_event(e) for e in ops.history(world, run.exec)],
    )
