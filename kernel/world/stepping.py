"""What the kernel checks of a step's output, and the context a step gets (spec/03-world.md
§7, §9).

The checks are pure: they read the manifest and the open intents and change nothing, so a
step whose output fails one is a step fault with nothing of it applied, and a replay, which
runs the same checks on the same journal, faults the same step the same way.
"""

from __future__ import annotations

from typing import Any

from aos.kernel import cbor
from aos.kernel.air.errors import AirError
from aos.kernel.air.model import DefWorkflow
from aos.kernel.air.names import is_sys_name
from aos.kernel.air.normalize import normalize
from aos.kernel.wasm import StepOutput, StepResult
from aos.kernel.world.effects import AdmittedEffect, admit
from aos.kernel.world.errors import (
    StepAnnotationInvalidError,
    StepEventInvalidError,
    StepOpenIntentsExceededError,
    StepRouteError,
    StepStateInvalidError,
)
from aos.kernel.world.intents import IntentTracker
from aos.kernel.world.results import StepOutcome
from aos.kernel.world.router import Delivery, RouteError
from aos.kernel.world.runtime import Runtime
from aos.kernel.world.scheduler import Message
from aos.kernel.world.stamps import derive_entropy

EmittedEvent = tuple[str, Any, list[Delivery]]  # schema, normalized value, its deliveries


class StepChecker:
    """The output checks of a step beyond its envelope (which the runner checked)."""

    def __init__(self, intents: IntentTracker, open_intents_max: int) -> None:
        self._intents = intents
        self._open_intents_max = open_intents_max

    def check(
        self, runtime: Runtime, message: Message, result: StepResult, module: str
    ) -> StepOutcome:
        """The state fits its schema, events fit theirs and can be routed, effects are
        admitted, and the open intents stay within their bound."""
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
        return StepOutcome(state, events, effects, result.fuel_used, ann, output.cancel)

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


def step_context(runtime: Runtime, message: Message) -> bytes:
    """The encoded `sys/WorkflowContext@1` of a delivery."""
    workflow = runtime.workflows[message.workflow]
    value = {
        "now_ns": message.stamp.logical_ns,
        "entropy": derive_entropy(message.stamp.entropy, message.delivery),
        "journal_height": message.seq,
        "manifest_hash": str(runtime.manifest_hash),
        "workflow": message.workflow,
        "key": message.key,
        "cell_mode": workflow.keyed,
    }
    # Every field is the kernel's own, of its schema's type already (`sys/WorkflowContext@1`:
    # time and nat are ints, hash the canonical text, key canonical bytes or null), so the
    # value is its normalized form: tests/test_step_context.py holds this against normalize.
    return cbor.encode_built(value)


def _checked_state(
    runtime: Runtime, workflow: DefWorkflow, output: StepOutput, module: str
) -> bytes | None:
    if output.state is None:
        return None
    try:
        return _normalized_state(output, workflow.state, runtime.schemas)
    except (AirError, cbor.CborError) as error:
        raise StepStateInvalidError(str(error), module=module) from None


def _checked_events(runtime: Runtime, output: StepOutput, module: str) -> list[EmittedEvent]:
    schemas = runtime.schemas
    events: list[EmittedEvent] = []
    for index, emitted in enumerate(output.domain_events):
        path = f"domain_events[{index}]"
        if is_sys_name(emitted.schema) or emitted.schema not in schemas:
            raise StepEventInvalidError(
                f"{emitted.schema} is not a user schema of the manifest", path=path, module=module
            )
        try:
            value = normalize(cbor.decode(emitted.value), emitted.schema, schemas)
        except (AirError, cbor.CborError) as error:
            raise StepEventInvalidError(str(error), path=path, module=module) from None
        try:
            deliveries = runtime.router.route(emitted.schema, value)
        except RouteError as error:
            raise StepRouteError(
                f"{error.code}: {error}", path=path, module=module, route_code=error.code
            ) from None
        events.append((emitted.schema, value, deliveries))
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
