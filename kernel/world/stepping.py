"""Stepping one delivery (spec/03-world.md §7, §9): the input and context a step gets, what
the kernel checks of its output, and the records and changes an applied or faulted step
leaves.

The checks are pure: they read the manifest and the open intents and change nothing, so a
step whose output fails one is a step fault with nothing of it applied, and a replay, which
runs the same checks on the same journal, faults the same step the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Protocol

from aos.kernel import cbor
from aos.kernel.air import STEP_FAULT, TIMER_SET_EFFECT
from aos.kernel.air.errors import AirError
from aos.kernel.air.model import DefWorkflow
from aos.kernel.air.names import is_sys_name
from aos.kernel.air.normalize import normalize
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.wasm import (
    StepFault,
    StepGuestExceptionError,
    StepOutput,
    StepResult,
    encode_input,
)
from aos.kernel.world import records
from aos.kernel.world.effects import AdmittedEffect, admit
from aos.kernel.world.errors import (
    StepAnnotationInvalidError,
    StepEventInvalidError,
    StepOpenIntentsExceededError,
    StepRouteError,
    StepStateInvalidError,
)
from aos.kernel.world.intents import IntentTracker, OpenIntent
from aos.kernel.world.results import FAULT_CODES_KEPT_MAX, RunReport, StepEvent, StepOutcome
from aos.kernel.world.router import RouteError
from aos.kernel.world.runtime import Runtime
from aos.kernel.world.scheduler import CellId, Message, Scheduler
from aos.kernel.world.stamps import Stamp
from aos.kernel.world.tables import CellTables


class Journal(Protocol):
    """Where a step's records go (the world: encoded, chained, durable at its next flush)."""

    def append(self, record: records.Record) -> int: ...


class Stepper:
    """Steps one delivery: runs the cell's module on it, checks the output, and journals and
    applies the step, or journals the fault and fails the cell."""

    def __init__(
        self,
        journal: Journal,
        tables: CellTables,
        intents: IntentTracker,
        scheduler: Scheduler,
        open_intents_max: int,
        put_blob: Callable[[bytes], Hash],
    ) -> None:
        self._journal = journal
        self._tables = tables
        self._intents = intents
        self._scheduler = scheduler
        self._open_intents_max = open_intents_max
        self._put_blob = put_blob  # into the CAS with the step's flush (spec/08 §4.4)
        # The delivery that failed each failed cell: a retry steps it again.
        self.faulted: dict[CellId, Message] = {}
        # A handled fault notice unfailed a cell: the next flush must be a checkpoint (a
        # journal tail does not fail or unfail cells).
        self.checkpoint_due = False

    def step(
        self,
        runtime: Runtime,
        message: Message,
        report: RunReport,
        *,
        on_step: Callable[[Message, bytes, Any], None] | None,
        read_blob: Callable[[str], bytes | None],
    ) -> None:
        table = self._tables.get(message.workflow)
        cell = table.get(message.key)
        # A failed cell takes only its fault notice: the one delivery whose input is the
        # step_fault record that failed it (no input record is a step_fault otherwise).
        notice = cell is not None and cell.failed and message.seq == cell.last_active_seq
        if cell is not None and cell.failed and not notice:
            report.dropped += 1
            self._journal.append(
                dropped(message.seq, message.delivery, cell_id(message), "cell_failed")
            )
            return
        state = table.state_bytes(cell) if cell is not None else None
        runner = runtime.runner(message.workflow)
        module = runner.module_hash
        # The stamp the step's context and its emitted events derive from, derived once.
        step_stamp = message.stamp.derive(message.delivery)
        step_input = _step_input(runtime, message, state or None, step_stamp)
        try:
            result = runner.step(step_input, seq=message.seq, read_blob=read_blob)
            outcome = self.check(runtime, message, result, module)
        except StepFault as fault:
            if on_step is not None:
                on_step(message, step_input, fault)
            record, seq = self._record_fault(message, fault, module, report, parked=not notice)
            if not notice:
                self._notify(runtime, message, record, seq, step_stamp)
            return
        if on_step is not None:
            on_step(message, step_input, outcome)
        self._apply(message, outcome, report, step_stamp)
        if notice:  # handled: the cell runs again, and nothing is left to retry
            self.faulted.pop(cell_id(message), None)
            self.checkpoint_due = True

    def check(
        self, runtime: Runtime, message: Message, result: StepResult, module: str
    ) -> StepOutcome:
        """Everything the kernel checks about a step's output beyond the envelope: the state
        fits its schema, events fit theirs and can be routed, effects are admitted, and the
        open intents stay within their bound. Pure: a fault here leaves nothing applied."""
        workflow = runtime.workflows[message.workflow]
        output = result.output
        state = _checked_state(runtime, workflow, output, module)
        events = _checked_events(runtime, output, module)
        ann = _checked_annotation(runtime, workflow, output, module)
        effects = [
            admit(
                emitted,
                index=index,
                workflow=workflow,
                key=message.key,
                input_seq=message.seq,
                effects=runtime.effects,
                schemas=runtime.schemas,
                module=module,
            )
            for index, emitted in enumerate(output.effects)
        ]
        if effects:
            self._check_open_intents(message, effects, output.cancel, module)
        return StepOutcome(
            state, events, effects, result.fuel_used, ann, output.cancel, output.writes
        )

    def faulted_values(self) -> list[dict[str, Any]]:
        """The parked deliveries of failed cells as a head carries them, in cell order."""
        ordered = sorted(self.faulted.items(), key=lambda item: (item[0][0], item[0][1] or b""))
        return [message.to_value() for _, message in ordered]

    def keep_faulted(self, workflows: Collection[str]) -> None:
        self.faulted = {c: m for c, m in self.faulted.items() if c[0] in workflows}

    def _apply(
        self, message: Message, outcome: StepOutcome, report: RunReport, step_stamp: Stamp
    ) -> None:
        table = self._tables.get(message.workflow)
        cell: CellId = (message.workflow, message.key)
        cancelled = self._intents.cancellable(cell, outcome.cancel)
        state_hash = hash_bytes(outcome.state) if outcome.state else None
        written = [str(self._put_blob(blob)) for blob in outcome.writes]
        step_seq = self._journal.append(
            records.StepRecord(
                input_seq=message.seq,
                delivery=message.delivery,
                workflow=message.workflow,
                key=message.key,
                state=str(state_hash) if state_hash is not None else None,
                events=len(outcome.events),
                intents=[str(effect.intent) for effect in outcome.effects],
                cancelled=cancelled,
                ann=outcome.ann,
                writes=written or None,
            )
        )
        for intent in cancelled:
            self._intents.close(intent)
            self._intents.mark_cancelled(intent, step_seq)
        table.put(message.key, outcome.state, step_seq, state_hash=state_hash)
        report.steps += 1
        # Fuel is reported, never journaled: a warm instance may spend less than a fresh one
        # on the same step, and the journal must not depend on the determinism profile.
        report.fuel += outcome.fuel
        for index, event in enumerate(outcome.events):
            seq = self._journal.append(
                records.DerivedEvent(event.schema, event.value, step_seq, index, event.encoded)
            )
            self._scheduler.enqueue_deliveries(seq, event.deliveries, step_stamp.derive(index))
            report.events += 1
        for effect in outcome.effects:
            self._open_intent(effect, message, cell, step_seq, report)

    def _open_intent(
        self,
        effect: AdmittedEffect,
        message: Message,
        cell: CellId,
        step_seq: int,
        report: RunReport,
    ) -> None:
        intent = str(effect.intent)
        if intent in self._intents:
            return  # the same identity is already open: an intent is opened once
        seq = self._journal.append(
            records.EffectIntentRecord(
                intent=intent,
                effect=effect.effect,
                params=effect.params,
                workflow=message.workflow,
                key=message.key,
                cause=step_seq,
                output_index=effect.index,
                idempotency_key=effect.idempotency_key,
                issuer_ref=effect.issuer_ref,
            )
        )
        due = effect.params["deliver_at_ns"] if effect.effect == TIMER_SET_EFFECT else None
        self._intents.open(
            intent,
            OpenIntent(message.workflow, message.key, effect.effect, seq, effect.issuer_ref, due),
        )
        report.intents += 1

    def _record_fault(
        self, message: Message, fault: StepFault, module: str, report: RunReport, *, parked: bool
    ) -> tuple[records.StepFaultRecord, int]:
        """Journal the fault and fail the cell; `parked`: keep the delivery for a retry (a
        notice that faults leaves the delivery that failed the cell parked instead)."""
        record = records.StepFaultRecord.of(
            input_seq=message.seq,
            delivery=message.delivery,
            workflow=message.workflow,
            key=message.key,
            module=module,
            code=fault.code,
            message=str(fault),  # clipped by the record (records.clip_message)
            guest=fault.guest if isinstance(fault, StepGuestExceptionError) else None,
        )
        seq = self._journal.append(record)
        self._tables.get(message.workflow).mark_failed(message.key, seq)
        if parked:
            self.faulted[(message.workflow, message.key)] = message
        report.faults += 1
        if len(report.fault_codes) < FAULT_CODES_KEPT_MAX:
            report.fault_codes.append(fault.code)
        return record, seq

    def _notify(
        self,
        runtime: Runtime,
        message: Message,
        fault: records.StepFaultRecord,
        fault_seq: int,
        step_stamp: Stamp,
    ) -> None:
        """A fault notice (spec/03 §7.1): when the cell's workflow takes `sys/StepFault@1`,
        it is told of the fault as its next delivery, on its last good state."""
        workflow = runtime.workflows[message.workflow]
        router = runtime.router
        if not router.accepts(workflow.event, STEP_FAULT):
            return
        event = message.encoded if message.encoded is not None else cbor.encode_built(message.value)
        value = {
            "code": fault.code,
            "message": fault.message,
            "module": fault.module,
            "seq": fault_seq,
            "input": message.seq,
            "delivery": message.delivery,
            "event": event,
        }
        notice = cell_delivery(runtime, cell_id(message), fault_seq, STEP_FAULT, value, step_stamp)
        self._scheduler.enqueue(notice, first=True)

    def _check_open_intents(
        self, message: Message, effects: list[AdmittedEffect], cancel: tuple[str, ...], module: str
    ) -> None:
        """The step may not leave more than `open_intents_max` intents open, counted as
        applying it would leave them: its cancels close first, then its new intents open."""
        intents = self._intents
        closing = set(intents.cancellable((message.workflow, message.key), cancel))
        opening = {
            str(effect.intent)
            for effect in effects
            if str(effect.intent) not in intents or str(effect.intent) in closing
        }
        after = len(intents) - len(closing) + len(opening)
        limit = self._open_intents_max
        if after > limit:
            raise StepOpenIntentsExceededError(
                f"the step would leave {after} intents open; the world's limit is {limit}",
                module=module,
                open_intents_max=limit,
            )


def step_context(runtime: Runtime, message: Message, step_stamp: Stamp | None = None) -> bytes:
    """The encoded `sys/WorkflowContext@1` of a delivery (`step_stamp`: the delivery's
    derived stamp, when the caller has it already)."""
    workflow = runtime.workflows[message.workflow]
    if step_stamp is None:
        step_stamp = message.stamp.derive(message.delivery)
    # Every field is the kernel's own, of its schema's type already (`sys/WorkflowContext@1`:
    # time and nat are ints, hash the canonical text, key canonical bytes or null), so the
    # value is its normalized form, and its keys are written in canonical order (spec/01 §3),
    # so it is encoded as it is: tests/test_step_context.py holds this against normalize.
    value = {
        "key": message.key,
        "now_ns": message.stamp.logical_ns,
        "entropy": step_stamp.entropy,
        "workflow": message.workflow,
        "cell_mode": workflow.keyed,
        "manifest_hash": str(runtime.manifest_hash),
        "journal_height": message.seq,
    }
    return cbor.encode_ordered(value)


def cell_id(message: Message) -> CellId:
    return (message.workflow, message.key)


def cell_delivery(
    runtime: Runtime, cell: CellId, seq: int, schema: str, value: Any, stamp: Stamp
) -> Message:
    """What the kernel delivers to one cell only (a receipt, a fault notice): `value` of
    `schema` wrapped as the arm of the cell's event variant that refs it."""
    event = runtime.workflows[cell[0]].event
    return Message(
        seq=seq,
        delivery=0,
        workflow=cell[0],
        key=cell[1],
        schema=event,
        value=runtime.router.wrap(event, schema, value),
        stamp=stamp,
    )


def dropped(seq: int, delivery: int, cell: CellId, reason: str) -> records.DeliveryDropped:
    """The record of a delivery that reached a cell that cannot take it."""
    return records.DeliveryDropped(
        input_seq=seq, delivery=delivery, workflow=cell[0], key=cell[1], reason=reason
    )


def _step_input(
    runtime: Runtime, message: Message, state: bytes | None, step_stamp: Stamp
) -> bytes:
    workflow = runtime.workflows[message.workflow]
    # Normalized and encoded when it was admitted or emitted; a delivery restored from a
    # head checkpoint carries only its value.
    event_value = message.encoded
    if event_value is None:
        event_value = cbor.encode_built(message.value)
    return encode_input(
        state=state,
        event_schema=message.schema,
        event_value=event_value,
        key=message.key,
        ctx=step_context(runtime, message, step_stamp) if workflow.context is not None else None,
    )


def _checked_state(
    runtime: Runtime, workflow: DefWorkflow, output: StepOutput, module: str
) -> bytes | None:
    if output.state is None:
        return None
    try:
        return _normalized_state(output, workflow.state, runtime.schemas)
    except (AirError, cbor.CborError) as error:
        raise StepStateInvalidError(str(error), module=module) from None


def _checked_events(runtime: Runtime, output: StepOutput, module: str) -> list[StepEvent]:
    schemas = runtime.schemas
    events: list[StepEvent] = []
    for index, emitted in enumerate(output.domain_events):
        path = f"domain_events[{index}]"
        if is_sys_name(emitted.schema) or emitted.schema not in schemas:
            raise StepEventInvalidError(
                f"{emitted.schema} is not a user schema of the manifest", path=path, module=module
            )
        try:
            decoded = cbor.decode(emitted.value)
            value = normalize(decoded, emitted.schema, schemas)
        except (AirError, cbor.CborError) as error:
            raise StepEventInvalidError(str(error), path=path, module=module) from None
        # The guest's bytes, proven canonical by `decode_output`, when normalizing changed
        # nothing: the event is then never encoded again.
        encoded = emitted.value if cbor.same_encoding(value, decoded) else cbor.encode_built(value)
        try:
            deliveries = runtime.router.route(emitted.schema, value, encoded)
        except RouteError as refused:  # not `error`: compiled, a name keeps its first handler type
            raise StepRouteError(
                f"{refused.code}: {refused}", path=path, module=module, route_code=refused.code
            ) from None
        events.append(StepEvent(emitted.schema, value, deliveries, encoded))
    return events


def _checked_annotation(
    runtime: Runtime, workflow: DefWorkflow, output: StepOutput, module: str
) -> Any:
    """The step's annotation as the step record carries it: normalized against the
    workflow's `annotations` schema when it declares one."""
    if output.ann is None:
        return None
    value = output.ann_value()
    if workflow.annotations is None:
        return value
    try:
        return normalize(value, workflow.annotations, runtime.schemas)
    except AirError as error:
        raise StepAnnotationInvalidError(str(error), module=module) from None


def _normalized_state(output: StepOutput, state_type: Any, schemas: Any) -> bytes:
    """A step's output state as the cell keeps it: its value normalized against the
    workflow's state schema, canonically encoded. When normalizing changed nothing (the
    usual case: an `any` field is checked in place), the output's own bytes, which
    `decode_output` proved canonical, are kept without encoding the value again."""
    value = output.state_value()
    normalized = normalize(value, state_type, schemas)
    if output.state is not None and cbor.same_encoding(normalized, value):
        return output.state
    return cbor.encode(normalized)
