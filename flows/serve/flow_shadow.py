"""Shadowing a flow version against the recorded executions of a flow (spec/11 §10, FLOWS §7).

Before a new version of a flow takes new executions, or to see what an edit would change,
`shadow_flow` asks of every recorded execution of the flow: would this definition have made
the same decisions on the same inputs, and where does it first differ?

The world's journal is replayed read-only (the governance shadow's replay, spec/06), from the
newest snapshot before the first start of the executions shadowed, so every execution's cell
receives exactly the inputs it received live: its start, each receipt, signal, timer and
child's end, with the same context. Beside each step of a
shadowed execution the interpreter runs again on the execution's *shadow state*, the state the
shadowed definition has produced for it so far; its start is the recorded start with the
definition (and version) swapped. Both steps are checked by the kernel's own output checks.

The decisions compared at each step, in this order, the first difference ending the
execution's shadow (the receipts recorded after it answer intents the shadow did not make):
a fault; the history events (spec/11 §6: steps, tasks, routing, loops, the end and its status),
where `playbook.started` is compared without its version and definition; the effects emitted
(tool calls, human tasks, timers, with their parameters); the events emitted (children
started, continued, cancelled); the intents cancelled; then what the execution has decided
and shows: its status, result and business state (workload, ctx, step results). The rest of
the state is the engine's own bookkeeping and names the definition, so it is not compared.

Nothing is journaled and the world is not locked, so a node may serve the world meanwhile.
A shadow promises nothing about branches the recorded history never took.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aos.flows.define.cfd import FlowDefinition, canonical_value
from aos.flows.errors import FlowError
from aos.flows.serve.flow_operations import (
    STATUS_RUNNING,
    ExecutionUnknownError,
    FlowRequestInvalidError,
    resolve,
    resolve_subflows,
    status,
)
from aos.flows.serve.flow_world import EXEC_WORKFLOW
from aos.kernel import cbor
from aos.kernel.audit.replay import DivergedError, ReplayReport
from aos.kernel.governance.shadow import recorded_history
from aos.kernel.hashing import hash_bytes
from aos.kernel.wasm import Determinism, StepFault, StepRunner, WasmEngine
from aos.kernel.world.scheduler import Message
from aos.kernel.world.world import StepOutcome, World

SHADOW_EXECUTIONS_MAX_DEFAULT = 1000
"""Most executions one shadow follows (the first started, in journal order); past it the
report says `more`. Each followed execution holds its shadow state until it diverges."""
SHADOW_EXECUTIONS_LIMIT = 100_000
"""The largest `executions_max` a caller may ask for."""
SHADOW_EXECS_NAMED_MAX = 1000
"""Most executions a caller may name."""
TAG_FIELD, VALUE_FIELD, START_TAG, MIGRATE_TAG = "$tag", "$value", "Start", "Migrate"
"""How a start or a migration reaches the execution's cell: `aos/FlowStart@1` and
`aos/FlowMigrate@1` routed into arms of the variant input `aos/FlowExecEvent@1`."""
_PINNED_FIELDS = ("version", "definition")
_MIGRATED_FIELDS = ("from_version", "to_version", "from_definition", "to_definition")
"""The fields of `playbook.started` that name the definition: they differ by construction."""


class ShadowReplayError(FlowError):
    code = "flow.shadow_failed"
    hint = "aos world replay --verify says where the recorded history stops replaying"


@dataclass(frozen=True)
class ShadowTarget:
    """The definition shadowed: a deployed version, or a definition not deployed (version
    None) with its canonical bytes."""

    flow: str
    version: int | None
    definition: str
    blob: bytes | None = None


@dataclass
class ExecutionShadow:
    """One execution: how many of its recorded steps were shadowed, and where it diverged.
    `version`, `definition`, `status` and `engine_version` are the recorded ones at the end
    of the history."""

    exec: str
    version: int
    definition: str
    started_seq: int
    steps: int = 0
    diverged_at: int | None = None  # the recorded step record that decided otherwise
    difference: str | None = None
    recorded: Any = None  # the first differing decision, as recorded ...
    shadow: Any = None  # ... and as the shadowed definition makes it
    status: str | None = None  # the recorded status at the end of the history
    engine_version: int | None = None  # the recorded engine version at the end
    # The shadow reached the recorded state exactly, but for the definition it names: the
    # execution may go on under the shadowed definition (`migration.py`).
    migratable: bool = False

    @property
    def outcome(self) -> str:
        return "reproduces" if self.diverged_at is None else "diverges"

    def to_value(self) -> dict[str, Any]:
        return {
            "exec": self.exec,
            "version": self.version,
            "definition": self.definition,
            "started_seq": self.started_seq,
            "status": self.status,
            "engine_version": self.engine_version,
            "steps": self.steps,
            "migratable": self.migratable,
            "outcome": self.outcome,
            "diverged_at": self.diverged_at,
            "difference": self.difference,
            "recorded": cbor.to_json(self.recorded),
            "shadow": cbor.to_json(self.shadow),
        }


@dataclass
class FlowShadowReport:
    flow: str
    version: int | None
    definition: str
    state_height: int
    executions: list[ExecutionShadow] = field(default_factory=list)
    on_target: int = 0  # executions already pinned to the shadowed definition: not shadowed
    more: bool = False  # executions past `executions_max` were not shadowed
    from_snapshot: int | None = None  # the snapshot the replay began at (None: genesis)

    def summary(self) -> dict[str, int]:
        diverge = sum(1 for e in self.executions if e.diverged_at is not None)
        return {
            "executions": len(self.executions),
            "reproduce": len(self.executions) - diverge,
            "diverge": diverge,
            "on_target": self.on_target,
        }

    def to_value(self) -> dict[str, Any]:
        return {
            "flow": self.flow,
            "version": self.version,
            "definition": self.definition,
            "state_height": self.state_height,
            "from_snapshot": self.from_snapshot,
            "summary": self.summary(),
            "more": self.more,
            "executions": [e.to_value() for e in self.executions],
        }


def deployed_target(world: World, name: str, version: int | None) -> ShadowTarget:
    """A deployed version of `name` (its latest when `version` is None)."""
    picked, definition_hash = resolve(world, name, version)
    return ShadowTarget(name, picked, definition_hash)


def file_target(world: World, definition: FlowDefinition) -> ShadowTarget:
    """A definition not deployed: canonical and with its subflows pinned against `world`,
    exactly as `deploy` would store it."""
    resolve(world, definition.name, None)  # a flow that was never deployed has no executions
    data = cbor.encode(resolve_subflows(world, canonical_value(definition)))
    return ShadowTarget(definition.name, None, str(hash_bytes(data)), data)


def check_execs(world: World, name: str, execs: Collection[str]) -> None:
    """Every named execution exists and is an execution of `name`."""
    if len(execs) > SHADOW_EXECS_NAMED_MAX:
        raise FlowRequestInvalidError(
            f"{len(execs)} executions named; at most {SHADOW_EXECS_NAMED_MAX}", path="$.exec"
        )
    for exec_id in execs:
        if status(world, exec_id).get("flow") != name:
            raise ExecutionUnknownError(f"{exec_id} is not an execution of {name}", exec=exec_id)


def shadow_flow(
    world_dir: str | Path,
    target: ShadowTarget,
    *,
    execs: Collection[str] = (),
    executions_max: int = SHADOW_EXECUTIONS_MAX_DEFAULT,
    engine: WasmEngine | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FlowShadowReport:
    """Shadow `target` against the recorded executions of its flow in the world at
    `world_dir` (only `execs` when some are named), read-only."""
    if not 1 <= executions_max <= SHADOW_EXECUTIONS_LIMIT:
        raise FlowRequestInvalidError(
            f"executions_max is {executions_max}; it is 1..{SHADOW_EXECUTIONS_LIMIT}",
            path="$.executions_max",
        )
    engine = engine or WasmEngine()
    with World.reading(world_dir, engine=engine) as world:
        starts = _starts(world, target.flow, execs)
        height = world.height
    if not starts:  # no execution of the flow: nothing to replay
        return FlowShadowReport(target.flow, target.version, target.definition, height)
    shadowing = _Shadowing(world_dir, target, frozenset(execs), executions_max, engine, progress)
    report, seen = shadowing.run(from_seq=min(starts.values()))
    if not set(starts) <= seen:
        # An execution of the flow started before the snapshot the replay began at (a start
        # delivered later than its record): only the whole history shows it.
        report, seen = shadowing.run(from_seq=None)
    return report


@dataclass(frozen=True)
class _Shadowing:
    """What one shadow is asked; `run` replays the history once for it."""

    world_dir: str | Path
    target: ShadowTarget
    named: frozenset[str]
    executions_max: int
    engine: WasmEngine
    progress: Callable[[int, int], None] | None

    def run(self, *, from_seq: int | None) -> tuple[FlowShadowReport, set[str]]:
        """Replay from the newest snapshot before `from_seq` (from genesis when None or when
        there is none), the target beside each followed execution; the report and the
        executions of the flow whose start the replay saw."""
        with recorded_history(self.world_dir, self.engine, self.progress) as (_, replayer):
            target = self.target
            report = FlowShadowReport(target.flow, target.version, target.definition, replayer.end)
            snapshot = replayer.choose_snapshot(from_seq, None)
            try:
                if snapshot is None:
                    live, first = replayer.from_genesis(), 2
                else:
                    live, first = replayer.from_snapshot(*snapshot), snapshot[0] + 1
                    report.from_snapshot = snapshot[0]
                beside = _Beside(live, target, report, self.named, self.executions_max)
                live.on_step = beside.on_step
                history = ReplayReport(ok=True, start_seq=first, end_seq=replayer.end)
                replayer.replay(live, history, compare_head=False)
            except DivergedError as diverged:
                # The recorded history itself does not replay: no shadow of it can be trusted.
                raise ShadowReplayError(
                    f"the recorded history does not replay: {diverged.divergence.message}",
                    seq=diverged.divergence.seq,
                ) from None
            beside.finish()
            return report, beside.seen


def _starts(world: World, flow: str, execs: Collection[str]) -> dict[str, int]:
    """The journal sequence of the start of each execution of `flow` (the named ones, or
    all), as its state records it."""
    ids = execs or [str(cell.key) for cell in world.reader.cells_after(EXEC_WORKFLOW, None)]
    found: dict[str, int] = {}
    for exec_id in ids:
        state = world.reader.state(EXEC_WORKFLOW, exec_id)
        if isinstance(state, dict) and state.get("flow") == flow:
            found[exec_id] = int(state.get("started_seq") or 0)
    return found


class _Beside:
    """Runs the shadowed definition beside each step of a followed execution."""

    def __init__(
        self,
        live: World,
        target: ShadowTarget,
        report: FlowShadowReport,
        named: frozenset[str],
        executions_max: int,
    ) -> None:
        self.live = live
        self.target = target
        self.report = report
        self.named = named
        self.executions_max = executions_max
        self.followed: dict[bytes, ExecutionShadow] = {}
        self.seen: set[str] = set()  # executions of the flow whose start the replay met
        self.states: dict[bytes, bytes | None] = {}  # per followed, undiverged execution
        self.runner: StepRunner | None = None

    def on_step(self, message: Message, step_input: bytes, recorded: Any) -> None:
        if message.workflow != EXEC_WORKFLOW or message.key is None:
            return
        if message.key in self.states:
            migration = _arm(message.value, MIGRATE_TAG)
            if migration is None:
                self._shadow(message, step_input, recorded, replaced=None)
            else:
                self._follow_migration(message, step_input, recorded, migration)
        elif _arm(message.value, START_TAG) is not None and message.key not in self.followed:
            start = self._followed_start(message, step_input)
            if start is not None:
                self._shadow(message, step_input, recorded, replaced=start)

    def finish(self) -> None:
        """Each execution's recorded end, and whether its shadow reached the same state."""
        for key, shadowed in self.followed.items():
            recorded = status(self.live, shadowed.exec)
            # What it runs at the end: another version than its start's, if it migrated.
            shadowed.version = int(recorded.get("version") or 0)
            shadowed.definition = str(recorded.get("definition"))
            shadowed.status = str(recorded.get("status"))
            shadowed.engine_version = int(recorded.get("engine_version") or 0)
            state = self.states.get(key)
            shadowed.migratable = (
                state is not None
                and shadowed.status == STATUS_RUNNING
                and _unpinned(cbor.decode(state)) == _unpinned(recorded)
            )

    def _followed_start(self, message: Message, step_input: bytes) -> dict[str, Any] | None:
        """The start with the shadowed definition, when this start begins an execution this
        shadow follows (a start to a cell that has a state is stale and begins none)."""
        key = message.key
        value = _arm(message.value, START_TAG)
        if key is None or value is None or value.get("flow") != self.target.flow:
            return None
        envelope: Any = cbor.decode(step_input)
        if envelope.get("state") is not None:
            return None
        exec_id = value.get("exec")
        self.seen.add(str(exec_id))
        if self.named and exec_id not in self.named:
            return None
        if value.get("definition") == self.target.definition:
            self.report.on_target += 1
            return None
        if len(self.report.executions) >= self.executions_max:
            self.report.more = True
            return None
        shadowed = ExecutionShadow(
            str(exec_id),
            int(value.get("version") or 0),
            str(value.get("definition")),
            self._step_seq(),
        )
        self.report.executions.append(shadowed)
        self.followed[key] = shadowed
        self.states[key] = None
        swapped = {**value, "definition": self.target.definition, "version": self.target.version}
        return {TAG_FIELD: START_TAG, VALUE_FIELD: swapped}

    def _follow_migration(
        self, message: Message, step_input: bytes, recorded: Any, value: dict[str, Any]
    ) -> None:
        """A migration the history holds. The shadow runs the target already, so it migrates
        to the target itself, which moves its engine version as the recorded one moved (the
        definitions the history events name are not compared). A recorded migration that was
        stale changed nothing, and the shadow skips it too."""
        key = message.key
        assert key is not None
        state = self.states[key]
        applied = isinstance(recorded, StepOutcome) and not any(
            event.get("event") == "migrate.stale" for event in _history(recorded)
        )
        if not applied or state is None:
            self.followed[key].steps += 1
            return
        itself = {
            **value,
            "definition": self.target.definition,
            "from_definition": self.target.definition,
            "version": self.target.version or 0,
            "expect_version": _engine_version(state),
        }
        self._shadow(
            message, step_input, recorded, replaced={TAG_FIELD: MIGRATE_TAG, VALUE_FIELD: itself}
        )

    def _shadow(
        self, message: Message, step_input: bytes, recorded: Any, replaced: dict[str, Any] | None
    ) -> None:
        """Run the target beside the recorded step (on `replaced` instead of the recorded
        input, when given) and compare."""
        key = message.key
        assert key is not None
        shadowed = self.followed[key]
        shadowed.steps += 1
        proposed = self._run(message, step_input, self.states[key], replaced)
        difference = _first_difference(recorded, proposed)
        if difference is not None:
            shadowed.diverged_at = self._step_seq()
            shadowed.difference, shadowed.recorded, shadowed.shadow = difference
            del self.states[key]
        elif isinstance(proposed, StepOutcome):
            self.states[key] = proposed.state
        else:  # the same fault on both sides: the cell is failed, nothing more reaches it
            del self.states[key]

    def _step_seq(self) -> int:
        # The live step's record (or its fault's) is the next the replayed world appends, so
        # a report names the sequence `aos flow events` shows for the step.
        return self.live.height + 1

    def _run(
        self,
        message: Message,
        step_input: bytes,
        state: bytes | None,
        replaced: dict[str, Any] | None,
    ) -> Any:
        envelope: Any = cbor.decode(step_input)
        envelope["state"] = state
        if replaced is not None:
            envelope["event"]["value"] = cbor.encode(replaced)
        runner = self._runner()
        try:
            result = runner.step(cbor.encode(envelope), seq=message.seq, read_blob=self._read)
            return self.live.check_output(message, result, runner.module_hash)
        except StepFault as fault:
            return fault

    def _runner(self) -> StepRunner:
        # The interpreter module the live step ran, on an instance of its own, so the
        # shadow's inputs never reach the replay's. `checked` as the manifest runs it live
        # (a warm instance, a sample of steps re-run fresh and compared), where the replay
        # runs each step fresh: the shadow's own steps add ~25% to the replay, not ~85%.
        if self.runner is None:
            live = self.live.runtime.runner(EXEC_WORKFLOW)
            self.runner = StepRunner(
                live.module, limits=live.limits, determinism=Determinism.CHECKED
            )
        return self.runner

    def _read(self, hash_text: str) -> bytes | None:
        if self.target.blob is not None and hash_text == self.target.definition:
            return self.target.blob
        return self.live.read_blob(hash_text)


def _history(outcome: StepOutcome) -> list[dict[str, Any]]:
    ann = outcome.ann
    events = ann.get("events") if isinstance(ann, dict) else None
    return [_comparable(event) for event in events or () if isinstance(event, dict)]


def _unpinned(state: Any) -> Any:
    """A state without the fields that name its definition."""
    if not isinstance(state, dict):
        return state
    return {name: value for name, value in state.items() if name not in _PINNED_FIELDS}


def _engine_version(state: bytes) -> Any:
    value: Any = cbor.decode(state)
    return value.get("engine_version") if isinstance(value, dict) else None


def _arm(delivered: Any, tag: str) -> dict[str, Any] | None:
    """The value of an execution's variant input when it is the arm `tag`, else None."""
    if not isinstance(delivered, dict) or delivered.get(TAG_FIELD) != tag:
        return None
    value = delivered.get(VALUE_FIELD)
    return value if isinstance(value, dict) else None


def _comparable(event: dict[str, Any]) -> dict[str, Any]:
    """A history event without the fields that name a definition."""
    name = event.get("event")
    pinned = (
        _PINNED_FIELDS
        if name == "playbook.started"
        else _MIGRATED_FIELDS
        if name == "execution.migrated"
        else ()
    )
    return {field: value for field, value in event.items() if field not in pinned}


def _first_difference(recorded: Any, proposed: Any) -> tuple[str, Any, Any] | None:
    """(what differs, the recorded side, the shadow's side) at the first decision that
    differs, or None when the step decides the same."""
    if isinstance(recorded, StepFault) or isinstance(proposed, StepFault):
        recorded_code = recorded.code if isinstance(recorded, StepFault) else None
        proposed_code = proposed.code if isinstance(proposed, StepFault) else None
        if recorded_code == proposed_code:
            return None
        return "fault", recorded_code, proposed_code
    pairs: tuple[tuple[str, list[Any], list[Any]], ...] = (
        ("history", _history(recorded), _history(proposed)),
        ("effects", _effects(recorded), _effects(proposed)),
        ("events", _events(recorded), _events(proposed)),
        ("cancel", list(recorded.cancel), list(proposed.cancel)),
    )
    for what, before, after in pairs:
        if before != after:
            index = next(
                (i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
                min(len(before), len(after)),
            )
            return what, _at(before, index), _at(after, index)
    return _state_difference(recorded.state, proposed.state)


def _state_difference(
    recorded: bytes | None, proposed: bytes | None
) -> tuple[str, Any, Any] | None:
    """The first difference in what the execution has decided so far and shows: its status,
    result and business state (workload, ctx, step results)."""
    before, after = _decided(recorded), _decided(proposed)
    if before == after:
        return None
    path, recorded_value, shadow_value = _first_path_difference(before, after, "$")
    return f"state at {path}", recorded_value, shadow_value


def _decided(state: bytes | None) -> dict[str, Any] | None:
    value: Any = None if state is None else cbor.decode(state)
    if not isinstance(value, dict):
        return None
    engine = value.get("engine")
    return {
        "status": value.get("status"),
        "result": engine.get("result") if isinstance(engine, dict) else None,
        "business": value.get("business"),
    }


def _first_path_difference(a: Any, b: Any, path: str) -> tuple[str, Any, Any]:
    """Where two values that differ first differ (maps by key in order, lists by index)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key) or (key in a) != (key in b):
                return _first_path_difference(a.get(key), b.get(key), f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list):
        for index, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return _first_path_difference(x, y, f"{path}[{index}]")
        if len(a) != len(b):
            return f"{path}.length", len(a), len(b)
    return path, a, b


def _effects(outcome: StepOutcome) -> list[dict[str, Any]]:
    return [{"effect": e.effect, "params": e.params} for e in outcome.effects]


def _events(outcome: StepOutcome) -> list[dict[str, Any]]:
    return [{"schema": e.schema, "value": e.value} for e in outcome.events]


def _at(items: list[Any], index: int) -> Any:
    return items[index] if index < len(items) else None
