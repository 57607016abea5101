"""Errors of the world runtime (codes `world.*`, `step.*` for kernel-side step faults,
`effect.*` for effect admission)."""

from __future__ import annotations

from aos.kernel.errors import AosError
from aos.kernel.wasm.faults import StepFault


class WorldError(AosError):
    code = "world.error"


class WorldExistsError(WorldError):
    code = "world.exists"
    hint = "choose a new directory, or an empty one"


class WorldMissingError(WorldError):
    code = "world.missing"
    hint = (
        "create it first with `aos world create DIR --manifest MANIFEST_DIR` (a flow world: "
        "`aos flow world create DIR`); `aos flow run FILE --local` runs on a scratch world "
        "that is gone after it, and keeps it with `--keep DIR`"
    )


class WorldCorruptError(WorldError):
    code = "world.corrupt"
    hint = "the world's stored head does not match its journal; run a replay audit"


class WorldClosedError(WorldError):
    code = "world.closed"
    hint = "the world was closed (or a failed flush closed it); open it again"


class SchemaUnknownError(WorldError):
    code = "world.schema_unknown"
    hint = "the manifest defines no such schema; see `aos air check` for what it defines"


class SchemaReservedError(WorldError):
    code = "world.schema_reserved"
    hint = "sys/ events are produced by the kernel only"


class EventTooLargeError(WorldError):
    code = "world.event_too_large"
    hint = "events are limited in size (event_bytes_max)"


class WorkflowUnknownError(WorldError):
    code = "world.workflow_unknown"
    hint = "the manifest has no such workflow"


class StepBudgetExceededError(WorldError):
    code = "world.step_budget_exceeded"
    hint = "a workflow storm: more steps than one run allows; the rest stays queued"


class CellMissingError(WorldError):
    code = "world.cell_missing"
    hint = (
        "`aos world state cells WORKFLOW` (or GET /v1/cells/{workflow}) lists the cells that exist"
    )


class KeyUnexpectedError(WorldError):
    code = "world.key_unexpected"
    hint = "the workflow is not keyed: it has one cell, named by no key; leave the key out"


class KeyRequiredError(WorldError):
    code = "world.key_required"
    hint = "the workflow is keyed: name the cell's key"


class NotFoundError(WorldError):
    code = "world.not_found"
    hint = "nothing in the journal has that hash"


# Kernel-side step faults: the guest ran fine, but what it returned breaks the manifest.


class StepStateInvalidError(StepFault):
    code = "step.state_invalid"
    hint = "the state a step returned does not fit the workflow's state schema"


class StepAnnotationInvalidError(StepFault):
    code = "step.ann_invalid"
    hint = "the annotation a step returned does not fit the workflow's annotations schema"


class StepEventInvalidError(StepFault):
    code = "step.event_invalid"
    hint = "an emitted domain event names an unknown or sys/ schema, or does not fit its schema"


class StepRouteError(StepFault):
    code = "step.route_failed"
    hint = "an emitted domain event could not be routed (see the detail's route code)"


class StepOpenIntentsExceededError(StepFault):
    code = "step.open_intents_exceeded"
    hint = (
        "the step would leave more intents open than the world's open_intents_max; settle or "
        "cancel some first"
    )


class EffectUndeclaredError(StepFault):
    code = "effect.undeclared"
    hint = "list the effect in the workflow's effects_emitted"


class EffectUnknownError(StepFault):
    code = "effect.unknown"
    hint = "the manifest defines no such effect"


class EffectParamsInvalidError(StepFault):
    code = "effect.params_invalid"
    hint = "the effect's params do not fit its params schema"


class ClockManualOnlyError(WorldError):
    code = "world.clock_manual_only"
    hint = "only a world created with --clock manual has its time moved by hand"


class TimeBackwardsError(WorldError):
    code = "world.time_backwards"
    hint = "logical time only moves forward"


class TimeOutOfRangeError(WorldError):
    code = "world.time_out_of_range"
    hint = "logical time stays at or below LOGICAL_NS_MAX (2**63-1 ns); nothing was changed"


class WorldNotQuiescentError(WorldError):
    code = "world.not_quiescent"
    hint = "a snapshot needs an idle scheduler: run to idle first"


class BlobTooLargeError(WorldError):
    code = "world.blob_too_large"
    hint = "blobs are limited in size (the store's blob_bytes_max)"


class CellNotFailedError(WorldError):
    code = "world.cell_not_failed"
    hint = "only a failed cell is retried; `aos world state cells WORKFLOW` shows each status"


class CellBusyError(WorldError):
    code = "world.cell_busy"
    hint = "the cell has open intents or queued deliveries: cancel them (aos world intent cancel)"


class IntentNotOpenError(WorldError):
    code = "world.intent_not_open"
    hint = "`aos world status` lists the open intents; a settled or cancelled one stays closed"


class OperationInvalidError(WorldError):
    code = "world.operation_invalid"
    hint = "an operation is cell_retry or cell_reset (workflow, key) or intent_cancel (intent)"


class RecordMalformedError(WorldError):
    code = "world.record_malformed"
    hint = (
        "a journal record is canonical CBOR but not a record of its kind (spec/03-world.md §10): "
        "the journal was changed outside aos; restore it from a backup or an export"
    )
