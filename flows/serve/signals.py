"""Signals sent to an execution (spec/11 §3.2): checked before they are journaled, and what
became of each one that was.

The interpreter buffers a signal no open wait takes, in order, until a wait of its name
opens (`modules/flow/aos_flow/signals.py`). A signal that could never be delivered is refused here,
before ingress, so a refusal journals nothing and the world is as it was:

- no step of the execution's pinned definition waits for its name (`flow.signal_unknown`);
- it names an `expect_version` and no open wait of its name was made at that version: a
  versioned signal is for the wait the sender saw open, never buffered (`flow.signal_stale`);
- the execution started on an interpreter that does not buffer, and no wait takes it now
  (`flow.signal_stale`);
- the buffer already holds `signals_buffered_max` signals (`flow.signal_buffer_full`).

An ended execution is refused before these (`flow.execution_ended`). The check and the send
run in one host operation, so nothing steps the execution between them; only a signal sent
around this check (a raw `aos world send`) reaches the interpreter unchecked, where it is
dropped or stale, recorded, with the state untouched.

    check(world, state, "go", None)            # raises a typed refusal, or returns
    outcome(records_after_seq, cell_key, seq)  # "delivered", "buffered", "stale", ...
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aos.flows.define.cfd import FlowDefinition, Task, decode_definition
from aos.flows.errors import FlowError
from aos.flows.serve.flow_world import EXEC_WORKFLOW
from aos.kernel.world import records
from aos.kernel.world.world import World

BUFFER_FIELD = "signals"
"""The engine state's buffer; an execution started before buffering has none."""
DEFINITIONS_REMEMBERED_MAX = 64
"""Definitions whose waited names and limit are kept (by hash: content never changes), so a
burst of signals to the executions of one flow decodes its definition once."""
OUTCOMES = {
    "signal.received": "delivered",
    "signal.buffered": "buffered",
    "signal.stale": "stale",
    "signal.dropped": "dropped",
}
"""The history event the signal's step recorded first, and what `aos flow signal` says."""
NOT_DELIVERED = frozenset({"stale", "dropped", "faulted"})


class SignalUnknownError(FlowError):
    """No step of the execution's definition waits for the signal; nothing was journaled."""

    code = "flow.signal_unknown"
    hint = "a signal is for a wait_signal task of the execution's definition: aos flow status EXEC"


class SignalStaleError(FlowError):
    """A versioned signal with no wait made at its version, or a signal nothing waits for now
    in an execution that does not buffer; nothing was journaled."""

    code = "flow.signal_stale"
    hint = "aos flow status EXEC shows each open wait with its version; or send it unversioned"


class SignalBufferFullError(FlowError):
    """The execution's buffer holds `signals_buffered_max` signals; nothing was journaled."""

    code = "flow.signal_buffer_full"
    hint = (
        "the execution keeps at most signals_buffered_max signals until their waits open "
        "(the flow's limits); send it again once it has taken some"
    )


@dataclass(frozen=True)
class _Waited:
    names: frozenset[str]
    buffered_max: int


_WAITED: dict[str, _Waited] = {}


def check(world: World, state: dict[str, Any], name: str, expect_version: int | None) -> None:
    """Refuse (raise) a signal to the running execution `state` that could never be
    delivered; return when an open wait takes it or the buffer will keep it."""
    engine = state.get("engine") or {}
    versions = [
        wait.get("version")
        for wait in (engine.get("waits") or {}).values()
        if isinstance(wait, dict) and wait.get("kind") == "signal" and wait.get("signal") == name
    ]
    if versions and (expect_version is None or expect_version in versions):
        return
    exec_id = state.get("exec")
    waited = _waited(world, str(state.get("definition")))
    if waited is not None and name not in waited.names:
        raise SignalUnknownError(
            f"no step of {exec_id}'s definition waits for {name}", exec=exec_id
        )
    if expect_version is not None:
        message = f"no wait of {exec_id} for {name} was made at version {expect_version}"
        raise SignalStaleError(message, exec=exec_id, expect_version=expect_version)
    buffered = engine.get(BUFFER_FIELD)
    if not isinstance(buffered, list):
        message = f"{exec_id} started before signals were buffered, and nothing waits for {name}"
        raise SignalStaleError(message, exec=exec_id)
    if waited is not None and len(buffered) >= waited.buffered_max:
        message = f"{exec_id} keeps {len(buffered)} signals already, its limit"
        raise SignalBufferFullError(message, exec=exec_id, signals_buffered_max=waited.buffered_max)


def _waited(world: World, definition_hash: str) -> _Waited | None:
    """The signal names the definition waits for and its buffer's limit; None when it cannot
    be read as a definition (the interpreter then decides, and fails the execution)."""
    found = _WAITED.get(definition_hash)
    if found is not None:
        return found
    raw = world.read_blob(definition_hash)
    try:
        defn = decode_definition(raw) if raw is not None else None
    except FlowError:
        defn = None
    if defn is None:
        return None
    found = _Waited(waited_signals(defn), defn.limits.signals_buffered_max)
    if len(_WAITED) >= DEFINITIONS_REMEMBERED_MAX:
        del _WAITED[next(iter(_WAITED))]
    _WAITED[definition_hash] = found
    return found


def waited_signals(defn: FlowDefinition) -> frozenset[str]:
    """The names of the signals a `wait_signal` task of the definition waits for."""
    found: set[str] = set()
    pending: list[Task] = [task for step in defn.steps for task in step.tasks]
    while pending:
        task = pending.pop()
        if task.do == "wait_signal":
            found.add(task.signal)
        for _, nested in task.task_lists():
            pending.extend(nested)
    return frozenset(found)


def outcome(journal: Iterable[tuple[int, Any]], key: bytes | None, seq: int) -> str:
    """What the execution whose cell key is `key` made of the signal journaled at `seq`,
    read from the records after it: the first signal event of its step, `faulted` when the
    kernel refused that step, `dropped` when the kernel did not deliver it."""
    for _, value in journal:
        record = records.parse(value)
        if not isinstance(
            record, records.StepRecord | records.StepFaultRecord | records.DeliveryDropped
        ):
            continue
        if (record.input_seq, record.workflow, record.key) != (seq, EXEC_WORKFLOW, key):
            continue
        if isinstance(record, records.StepFaultRecord):
            return "faulted"
        if isinstance(record, records.DeliveryDropped):
            return "dropped"
        return _step_outcome(record.ann)
    return "dropped"


def _step_outcome(ann: Any) -> str:
    events = ann.get("events") if isinstance(ann, dict) else None
    for event in events if isinstance(events, list) else []:
        name = event.get("event") if isinstance(event, dict) else None
        if name in OUTCOMES:
            return OUTCOMES[str(name)]
    return "dropped"
