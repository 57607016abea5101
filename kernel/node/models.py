"""Request and response bodies of the HTTP API (spec/04-effects.md §9), as pydantic models so
that `GET /openapi.json` describes them. Values of the world's data model travel as JSON with
bytes written `{"$bytes": "<hex>"}` (`Value` fields)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Value = Any
"""A value of the CBOR data model in JSON form; bytes are {"$bytes": "<hex>"}."""
OPERATION_KEY_TEXT_CHARS_MAX = 4096


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ErrorBody(_Model):
    code: str = Field(description="Stable dotted error code, e.g. receipt.signature_invalid.")
    message: str
    hint: str | None = None
    path: str | None = Field(None, description="Where in the input the problem is ($.a.b).")
    detail: dict[str, Any] | None = None


class ErrorResponse(_Model):
    error: ErrorBody


class RunReportBody(_Model):
    steps: int
    faults: int
    fault_codes: list[str]
    dropped: int
    events: int
    intents: int
    first_seq: int
    last_seq: int


class WorkflowCounts(_Model):
    cells: int
    failed: int


class LeaseCounts(_Model):
    published: int = Field(description="Open intents adapters may lease.")
    leased: int = Field(description="Of those, held under an unexpired lease.")


class HealthResponse(_Model):
    status: Literal["ok"]
    world_id: str
    api: str


class WorldResponse(_Model):
    world_id: str
    manifest: str
    height: int
    logical_ns: int
    clock: Literal["wall", "manual"]
    workflows: dict[str, WorkflowCounts]
    open_intents: int
    queued: int
    leases: LeaseCounts


class EventRequest(_Model):
    schema_: str = Field(alias="schema", description="The event schema, e.g. demo/Ping@1.")
    value: Value
    idempotency_key: str | None = Field(
        None,
        description="Admit the event once: a repeat with this key answers the first admission "
        "(`duplicate`) and journals nothing. Also the `Idempotency-Key` header.",
    )


class EventResponse(_Model):
    seq: int
    event_hash: str
    deliveries: int
    duplicate: bool = False
    report: RunReportBody


class StateResponse(_Model):
    workflow: str
    key: Value
    status: Literal["running", "waiting", "completed", "failed"]
    state: Value


class CellBody(_Model):
    key: Value
    status: Literal["running", "waiting", "completed", "failed"]
    state_hash: str
    last_active_seq: int
    key_hash: str = Field(description="The cursor: pass it as `after` for the next page.")


class CellsResponse(_Model):
    workflow: str
    count: int = Field(description="All the workflow's cells (any status).")
    truncated: bool = Field(description="More cells follow this page.")
    cells: list[CellBody]
    next_after: str | None = Field(description="`after` for the next page; null: the last.")


class JournalRecordBody(_Model):
    seq: int
    record: Value


class JournalResponse(_Model):
    head: int
    next_seq: int | None = Field(
        description="Oldest first: `from` for the next page (records may have been skipped)."
    )
    next_before: int | None = Field(
        description="Newest first: `before` for the next page; null: the journal's start."
    )
    scanned: int = Field(description="Records read for this page (at most the scan limit).")
    records: list[JournalRecordBody]


class LeaseRequest(_Model):
    adapter: str = Field(description="The adapter identity (a defadapter name).")
    effects: list[str] = Field(
        default_factory=list, description="Effects to lease; empty: every effect it may settle."
    )
    max: int = Field(1, description="Most leases to return (<= leases_per_request_max).")
    wait_ms: int = Field(0, description="Long-poll: wait this long for work (<= long_poll_ms_max).")


class Origin(_Model):
    workflow: str
    key: Value = Field(description="The origin cell's key value (null for an unkeyed workflow).")


class LeaseBody(_Model):
    lease_id: str
    intent: str
    effect: str
    params: Value
    idempotency_key: str = Field(description="The intent hash: pass it to the outside system.")
    issuer_ref: str | None
    origin: Origin
    expires_unix_ms: int
    traceparent: str | None = Field(
        None, description="The W3C trace context of the work, when the node traces (spec/11 §14)."
    )


class RenewResponse(_Model):
    lease_id: str
    intent: str
    expires_unix_ms: int


class AdapterIdentity(_Model):
    name: str
    public_key: str = Field(description="Ed25519, 64 hex digits (the defadapter's public_key).")
    effects: list[str] = Field(description="The effects this adapter may settle.")


class AdaptersResponse(_Model):
    adapters: list[AdapterIdentity]


class LeaseResponse(_Model):
    world_id: str = Field(description="Sign receipts for this world.")
    leases: list[LeaseBody]


class BytesValue(_Model):
    hex_: str = Field(alias="$bytes", pattern="^([0-9a-fA-F]{2})*$")


class ReceiptBody(_Model):
    world: str
    intent: str
    status: Literal["ok", "error", "timeout"]
    payload: Value
    adapter: str
    started_ns: int
    finished_ns: int


class SignedReceipt(_Model):
    body: ReceiptBody
    signature: BytesValue = Field(description="Ed25519 over the canonical CBOR of body.")


class LeaseAsk(_Model):
    effects: list[str] = Field(
        default_factory=list, description="Effects to lease; empty: every effect it may settle."
    )
    max: int = Field(description="Most leases to return (<= leases_per_request_max).")


class ReceiptRequest(_Model):
    """Also accepted as application/cbor: the same map, in CBOR, signature as a byte string."""

    receipt: SignedReceipt
    lease: LeaseAsk | None = Field(
        None,
        description="Lease for the same adapter once the receipt is settled (no long-poll): "
        "the answer's `leases`.",
    )


class SettleResponse(_Model):
    intent: str
    seq: int | None = Field(description="The effect_receipt record; null for a duplicate.")
    duplicate: bool
    delivered: bool
    report: RunReportBody | None
    leases: list[LeaseBody] = Field(
        default_factory=list, description="What the request's `lease` asked for (receipts only)."
    )


class BlobResponse(_Model):
    hash: str = Field(description="The blob's hash (blake3 of the raw bytes) in the CAS.")


class TaskBody(_Model):
    intent: str
    effect: str
    params: Value
    issuer_ref: str | None
    origin: Origin
    seq: int
    published_unix_ms: int
    title: str | None = Field(description="From the params' `title` (text), if any.")
    description: str | None
    assignee: str | None = Field(
        description="Who the task is for: the params' `assignee`, or whom it was reassigned to."
    )
    roles: list[str] = Field(description="Claiming needs one of these (none: anyone may).")
    form: Value
    data: Value
    status: Literal["open", "claimed"]
    holder: str | None = Field(description="The user who claimed it.")


class TasksResponse(_Model):
    adapter: str
    tasks: list[TaskBody]


class TaskCompleteRequest(_Model):
    status: Literal["ok", "error"]
    payload: Value = None
    user: str | None = Field(
        None, description="Who completes it: the caller's identity (left out, or the same name)."
    )


_USER = "The caller's identity (left out, or the same name); taken as sent only by an "
_USER += "--insecure-local node."


class TaskClaimRequest(_Model):
    user: str | None = Field(None, description=_USER)
    roles: list[str] = Field(
        default_factory=list,
        description="Roles the caller's identity holds (left out: all of them); one must be "
        "among the task's.",
    )


class TaskReleaseRequest(_Model):
    user: str | None = Field(None, description=_USER)


class TaskReassignRequest(_Model):
    user: str | None = Field(None, description=_USER)
    to: str | None = Field(description="The new assignee (null: nobody).")


class TaskHistoryEntry(_Model):
    kind: Literal[
        "created", "claimed", "released", "reassigned", "completed", "closed", "cancelled"
    ]
    at_unix_ms: int
    user: str | None
    to: str | None = Field(description="reassigned: the new assignee.")
    status: str | None = Field(description="completed: the receipt's status.")
    receipt_seq: int | None = Field(description="completed, closed: the effect_receipt record.")


class TaskHistoryResponse(_Model):
    intent: str
    status: Literal["open", "claimed", "completed", "closed", "cancelled"]
    entries: list[TaskHistoryEntry] = Field(description="Oldest first.")


class ProgressRequest(_Model):
    body: dict[str, Value] = Field(
        description="{world, intent, adapter, lease_id, fraction (0..1 or null), message, at_ns}"
    )
    signature: Value = Field(description="Ed25519 over the canonical CBOR of body, as {$bytes}.")


class IntentResponse(_Model):
    intent: str
    status: str = Field(description="open | settled | cancelled")
    record: Value = Field(None, description="The effect_intent record while the intent is open.")
    closed_seq: int | None = Field(None, description="The seq that settled or cancelled it.")
    progress: list[dict[str, Value]] = Field(
        description="Its newest progress frames, oldest first."
    )
    served: bool = Field(
        True, description="False: read from the world, no node serves it to keep progress."
    )


class GovDecisionRequest(_Model):
    approve: bool = Field(description="true approves, false rejects (final).")
    approver: str | None = Field(
        None, description="The caller's identity (left out, or the same name): who decided."
    )
    reason: str = ""


class OperationRequest(_Model):
    action: str = Field(description="cell_retry | cell_reset | intent_cancel")
    workflow: str | None = Field(None, description="The cell's workflow (cell_retry, cell_reset).")
    key: Value = Field(None, description="The cell's key value (null for an unkeyed workflow).")
    key_text: str | None = Field(
        None,
        max_length=OPERATION_KEY_TEXT_CHARS_MAX,
        description="Instead of `key`: the key as a user typed it, a value of the workflow's "
        "key type (a text key bare), else JSON (as `aos world state get` reads KEY).",
    )
    intent: str | None = Field(
        None, description="The intent hash, or a unique prefix of an open one (intent_cancel)."
    )
    reason: str = Field("", description="Why, journaled with the action.")


class OperationResponse(_Model):
    seq: int = Field(description="The journal seq of the operation record.")
    action: str
    report: RunReportBody
    target: str = Field("", description="What it acted on: the intent, or WORKFLOW[KEY].")


class TimeAdvanceRequest(_Model):
    by_ns: int


class TimeResponse(_Model):
    logical_ns: int
    report: RunReportBody | None


class _Open(BaseModel):
    """An answer that carries fields another layer defines (the flow interpreter's state, a
    tool's error envelope): the named fields are checked, the others pass through."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class RunProblem(_Model):
    """A step fault or a dropped delivery a run journaled (spec/03 §13)."""

    seq: int
    kind: Literal["step_fault", "delivery_dropped"]
    workflow: str
    key: Value = Field(description="The cell's key value (null for an unkeyed workflow).")
    input: int = Field(description="The seq of the input whose delivery went wrong.")
    code: str | None = Field(None, description="step_fault: the fault's code.")
    message: str | None = Field(None, description="step_fault: what went wrong.")
    reason: str | None = Field(None, description="delivery_dropped: why.")


class SendResponse(EventResponse):
    """`POST /v1/events`'s answer as a client gives it, from the node or from a world opened
    in process: the admission, what the run did, and what went wrong in it."""

    problems: list[RunProblem] = Field(
        default_factory=list, description="The faults and drops of the run, in journal order."
    )


class ProposalResponse(_Open):
    """A proposal after a governance action, with the world's height after it."""

    proposal: str
    seq: int = Field(description="The world's height after the action.")
    status: str
    base: str
    manifest: str
    shadow: Value = None
    decision: Value = None


class ShadowResponse(_Model):
    report: Value = Field(description="The shadow report (spec/06 §3).")
    report_hash: str = Field(description="Where the journal's shadow record keeps it (CAS).")
    seq: int = Field(description="The world's height after the report was journaled.")


class ApplyResponse(_Model):
    proposal: str
    manifest: str = Field(description="The world's manifest from now on.")
    seq: int


# Where a world is served now (`GET /v1/worlds/{world}/node`, spec/07 §11.5).
class WorldNodeResponse(BaseModel):
    world: str | None
    world_id: str | None
    url: str | None
    node_id: str | None
    epoch: int | None
    live: bool
    lease_ms_left: int


# --------------------------------------------------------------------------------------------
# Flows (spec/11 §9.1): what `aos flow` renders, the same from a world opened in process and
# from a node.

ExecutionStatus = Literal["running", "completed", "failed", "partial", "cancelled"]
TRACEBACK_CHARS_MAX = 4000
"""The most of a task's python traceback an answer shows (its last lines, where it raised)."""


class TaskError(_Open):
    """An error as a task's tool, the engine or the kernel gave it: what kind of thing failed,
    its code and message, whether a retry may help, and a python traceback when the tool sent
    one (at most `TRACEBACK_CHARS_MAX` characters shown). Other fields the tool gave pass
    through."""

    kind: str | None = None
    code: str | None = None
    message: str | None = None
    retryable: bool | None = None
    traceback: str | None = None


class FlowDeployed(_Model):
    name: str
    version: int
    definition: str = Field(description="The canonical definition's hash.")
    changed: bool = Field(description="False: that definition was already the latest version.")


class FlowVersion(_Model):
    version: int
    definition: str
    deployed_ns: int | None = Field(None, description="The logical time it was deployed at.")


class FlowEntry(_Model):
    name: str
    versions: list[FlowVersion] = Field(description="Oldest first.")


class ExecutionSummary(_Model):
    exec: str
    number: int | None = Field(
        None, description="The execution's number, NoETL's numeric execution id (spec/12)."
    )
    flow: str
    version: int | None
    status: ExecutionStatus
    engine_version: int
    key_hash: str = Field(description="The cursor: pass it as `after` for the next page.")


class FlowListing(_Model):
    flows: list[FlowEntry]
    count: int = Field(description="Executions in the world (the index's count).")
    executions: list[ExecutionSummary]
    next_after: str | None = Field(description="`after` for the next page; null: the last.")


class ExecutionStarted(_Model):
    """A run's answer: the execution it started and its status when the answer was made."""

    exec: str
    number: int | None = Field(
        None, description="The execution's number, NoETL's numeric execution id (spec/12)."
    )
    flow: str
    version: int
    definition: str
    status: ExecutionStatus
    error: TaskError | None = Field(None, description="Why it failed, when it has.")


class ExecutionState(_Open):
    """An execution's state (spec/11 §3.1) with `error`, why it failed, when it has. The
    engine's records leave out fields at their defaults (spec/11 §3.1)."""

    exec: str
    flow: str | None
    version: int | None
    definition: str | None
    status: ExecutionStatus
    engine_version: int
    started_seq: int
    business: Value
    engine: Value
    error: TaskError | None = None


class HistoryEvent(_Open):
    """One history event (spec/11 §6), with the seq of the step record that carries it."""

    seq: int
    event: str


class ExecutionEvents(_Model):
    events: list[HistoryEvent]
    status: ExecutionStatus = Field(description="The execution's status when read.")
    last_seq: int = Field(description="`after` for the next page.")
    more: bool = Field(description="The page stopped at a bound before the journal's head.")


class ExecutionAck(_Open):
    """A signal's or a cancel's answer: the execution and its status after it."""

    exec: str
    status: ExecutionStatus


class SignalAnswer(_Open):
    """A signal's answer (spec/11 §3.2): the journaled input, what became of it
    (`delivered`, `buffered`; `stale`, `dropped`, `faulted` for one not delivered) and the
    execution's status after it."""

    exec: str
    name: str
    seq: int
    outcome: str
    status: ExecutionStatus


class WaitBody(_Model):
    """An open wait of an execution (spec/11 §3.2), for a person."""

    wait: str = Field(description="The waiting token (w1, w2, ...).")
    kind: str = Field(description="call, human, timer, timeout, retry, keychain, signal, child")
    step: str | None
    task: str | None
    attempt: int
    since_ns: int = Field(description="Logical time the wait opened at.")
    signal: str | None = None
    child: str | None = None
    intent: str | None = Field(None, description="The open intent it waits on, if any.")
    effect: str | None = None
    due_ns: int | None = Field(None, description="A timer's (a retry's) logical due time.")
    last_error: TaskError | None = Field(
        None, description="A retry: the error of the attempt that failed."
    )


class FailurePoint(_Model):
    """Where an execution failed: the step and task, the attempt, the history event's seq,
    and the policy rule that decided it (its index in the task's rules; null: no rule
    matched and the default applied)."""

    step: str | None
    task: str | None
    attempt: int | None
    seq: int
    event: str
    rule: int | None = None
    action: str | None = Field(None, description="What the rule (or the default) did.")


class ExecutionExplanation(_Model):
    """`aos flow explain`: why an execution failed, or what it waits on (spec/11 §9)."""

    exec: str
    flow: str | None
    version: int | None
    status: ExecutionStatus
    logical_ns: int = Field(description="The world's logical time when read.")
    error: TaskError | None = None
    failed_at: FailurePoint | None = None
    waits: list[WaitBody] = Field(default_factory=list)
    history_complete: bool = Field(
        description="The history read reached the execution's start (a bounded read)."
    )


class LocalRunResult(ExecutionStarted):
    """`aos flow run --local`: the run to its end (or its first wait for a person)."""

    result: Value = None
    human_tasks: list[str] = Field(default_factory=list)
    receipts: int = 0
    timers_skipped: int = 0
    events: list[HistoryEvent] = Field(default_factory=list)
    world: str | None = Field(None, description="Where the world is kept (--keep, --world).")
