"""The canonical flow definition (CFD, spec/11-flows.md §1): its models, loading and checking,
the canonical form and its hash.

One set of pydantic models serves both directions. Authoring input may use the shorthands of
§1.5 (string guards, `next` as a list or a step name, a rule's `else`, unnamed tasks,
durations in seconds, null for a field's default); the models expand them while validating,
so a validated `FlowDefinition` always holds the explicit shape, and `canonical_value` writes
it with every default (but a limit added later, at its default: `LIMITS_WRITTEN_WHEN_SET`).
Reading the canonical form back (`decode_definition`) runs the same models, and refuses bytes
that are not exactly the canonical form of what they decode to.

Every model is strict (no coercion: `"1"` is not an int), forbids unknown fields and is
frozen. Validators raise `PydanticCustomError` with a `flow.*` type, which becomes the
problem's code; any other pydantic error is `flow.schema`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from aos.flows import limits as _limits
from aos.flows.define.checks import check_definition, is_template, nesting_depth
from aos.flows.define.document import check_values, read_document
from aos.flows.define.tool_schema import TOOL_KINDS
from aos.flows.errors import FlowCheckError, FlowDecodeError, FlowTooLargeError, Problem, json_path
from aos.flows.limits import EXECUTION_LIMITS, LIMITS_WRITTEN_WHEN_SET, DefinitionLimits
from aos.kernel import cbor
from aos.kernel.air.base import HashText
from aos.kernel.hashing import Hash, hash_bytes

__all__ = [
    "ACTIONS",
    "FORMAT",
    "FORMATS",
    "FORMAT_1",
    "FORMAT_2",
    "TASK_MODELS",
    "TOOL_KINDS",
    "Arc",
    "AssignTask",
    "BranchCase",
    "BranchTask",
    "BusinessRefTask",
    "CallBranches",
    "CallTask",
    "ContinueWithTask",
    "DefinitionLimits",
    "FailTask",
    "FlowDefinition",
    "Guard",
    "HumanTask",
    "JsonPathGuard",
    "KeychainEntry",
    "Limits",
    "Loop",
    "Next",
    "NoopTask",
    "Policy",
    "RepeatTask",
    "Rule",
    "Step",
    "Subflow",
    "SubflowTask",
    "Task",
    "TaskPolicy",
    "TemplateGuard",
    "Then",
    "Tool",
    "WaitSignalTask",
    "WaitTimerTask",
    "canonical_value",
    "decode_definition",
    "definition_from_value",
    "definition_hash",
    "encode_definition",
    "load_definition",
]

FORMAT_1: Literal["aos.flow/1"] = "aos.flow/1"
FORMAT_2: Literal["aos.flow/2"] = "aos.flow/2"
FORMATS = (FORMAT_1, FORMAT_2)
"""The versions of the definition's meaning (§1.8). `aos.flow/1` is every definition deployed
before `aos.flow/2` existed, read exactly as it was; `aos.flow/2` adds a step's `set_ctx` and
NoETL's template rules (what playbooks compile to)."""
FORMAT = FORMAT_1
"""The format of a definition that names none."""
FORMAT_2_STEP_FIELDS = ("set_ctx",)
"""Step fields `aos.flow/2` adds: an `aos.flow/1` canonical form holds none of them, so its
bytes (and its hash) are those every earlier version of aos wrote."""
ACTIONS = (
    "assign",
    "business_ref",
    "call",
    "branch",
    "repeat",
    "human",
    "wait_signal",
    "wait_timer",
    "subflow",
    "continue_with",
    "fail",
    "noop",
)
SELF_FLOW = "self"
DEFAULT_LIMITS = DefinitionLimits()

FLOW_NAME_PATTERN = r"^[a-z0-9][a-z0-9._/-]{0,127}$"
STEP_NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]{1,128}$"
"""A step's name: any text of 1 to 128 characters but control characters (seeds 000 and 003
name steps with any YAML string key: `fetch data`, `step-1`). Templates read a name that is
not an identifier as `steps['fetch data']` (§3.6)."""
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$"
"""Signal names and subflow aliases."""
TASK_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]{0,255}$"
IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
"""Iterator and `as` names: template variables, so no dots or dashes."""
SUBFLOW_FLOW_PATTERN = r"^[a-z0-9][a-z0-9._/-]{0,127}(@[0-9]{1,9})?$"
"""A deployed flow's name, optionally pinned to a version (`orders/charge@3`)."""
KEYCHAIN_KIND_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
PATH_PATTERN = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+){0,31}$"
"""A dotted path under `ctx` (or the iteration) that assignments write."""

FlowName = Annotated[str, StringConstraints(pattern=FLOW_NAME_PATTERN)]
StepName = Annotated[str, StringConstraints(pattern=STEP_NAME_PATTERN)]
TaskName = Annotated[str, StringConstraints(pattern=TASK_NAME_PATTERN)]
SignalName = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
Identifier = Annotated[str, StringConstraints(pattern=IDENTIFIER_PATTERN)]
DataPath = Annotated[
    str, StringConstraints(pattern=PATH_PATTERN, max_length=_limits.PATH_LENGTH_MAX)
]
ShortText = Annotated[str, StringConstraints(max_length=_limits.NAME_LENGTH_MAX)]
DurationMs = Annotated[int, Field(ge=0, le=_limits.DURATION_MS_MAX)]
DurationS = Annotated[float, Field(ge=0, le=_limits.DURATION_MS_MAX / 1000, allow_inf_nan=False)]
Template = Any
"""Any value; strings in it containing `{{` or `{%` are rendered at run time (§1.3)."""


def _not_self(alias: str) -> str:
    if alias == SELF_FLOW:
        raise PydanticCustomError("flow.schema", "`self` names the flow itself, not an alias")
    return alias


SubflowAlias = Annotated[str, StringConstraints(pattern=NAME_PATTERN), AfterValidator(_not_self)]
FlowRef = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
"""A subflow alias, or `self`: checked against `subflows` with the whole definition."""


def _flow_ref_or_template(value: str) -> str:
    if is_template(value) or re.fullmatch(NAME_PATTERN, value) is not None:
        return value
    raise PydanticCustomError(
        "flow.schema",
        "a subflow's `flow` is `self`, an alias of `subflows`, or a template (aos.flow/2)",
    )


SubflowRef = Annotated[
    str,
    StringConstraints(max_length=_limits.NAME_LENGTH_MAX * 4),
    AfterValidator(_flow_ref_or_template),
]
"""A subflow task's `flow`: a FlowRef, or (`aos.flow/2`) a template rendered when the task runs
to the name of a deployed flow (its latest version then; §3.5)."""


def _authoring_optional(*names: str) -> Callable[[dict[str, Any]], None]:
    """A `json_schema_extra` that lists `names` as optional: the models fill them in from
    their context (a task's position, the first step), so authors may leave them out."""

    def edit(schema: dict[str, Any]) -> None:
        required = [name for name in schema.get("required", []) if name not in names]
        if required:
            schema["required"] = required
        else:
            schema.pop("required", None)

    return edit


class CfdModel(BaseModel):
    """Base of every CFD model. A null where a field's default is not null means the
    default (YAML writes an empty value as null: `tasks:`)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        defaulted = _defaulted_keys(cls)
        return {
            key: value for key, value in data.items() if value is not None or key not in defaulted
        }


_DEFAULTED_KEYS: dict[type[BaseModel], frozenset[str]] = {}


def _defaulted_keys(model: type[BaseModel]) -> frozenset[str]:
    """The input keys of `model` whose fields are optional with a default that is not null."""
    keys = _DEFAULTED_KEYS.get(model)
    if keys is None:
        keys = frozenset(
            field.alias or name
            for name, field in model.model_fields.items()
            if not field.is_required() and field.get_default(call_default_factory=True) is not None
        )
        _DEFAULTED_KEYS[model] = keys
    return keys


def _seconds_to_ms(data: Any, *names: str) -> Any:
    """The authoring form `NAME_s: number` as the canonical `NAME_ms: int` (rounded like the
    interpreter does). A value that is not a valid number of seconds stays where it is, so
    the field's own validation reports it at its path."""
    if not isinstance(data, dict):
        return data
    converted = dict(data)
    for name in names:
        seconds_key, ms_key = f"{name}_s", f"{name}_ms"
        if seconds_key not in converted:
            continue
        if converted.get(ms_key) is not None and converted[seconds_key] is not None:
            raise PydanticCustomError(
                "flow.schema", "give {s} or {ms}, not both", {"s": seconds_key, "ms": ms_key}
            )
        seconds = converted[seconds_key]
        if seconds is None:
            del converted[seconds_key]
        elif _is_seconds(seconds):
            converted[ms_key] = round(seconds * 1000)
            del converted[seconds_key]
    return converted


def _is_seconds(value: Any) -> bool:
    if type(value) not in (int, float) or not math.isfinite(value):
        return False
    return bool(0 <= value <= _limits.DURATION_MS_MAX / 1000)


def _name_tasks(tasks: Any, prefix: str) -> Any:
    """Name the unnamed tasks of a list `PREFIXtask_N`, N the 1-based position (§1.2)."""
    if not isinstance(tasks, list):
        return tasks
    named = []
    for position, task in enumerate(tasks, start=1):
        if isinstance(task, dict) and task.get("name") is None:
            task = {**task, "name": f"{prefix}task_{position}"}
        named.append(task)
    return named


# --------------------------------------------------------------------------------------------
# Guards


class TemplateGuard(CfdModel):
    """A Jinja2 guard: a template, or a bare expression (`x > 1` means `{{ x > 1 }}`)."""

    kind: ClassVar[Literal["template"]] = "template"
    template: str

    @property
    def text(self) -> str:
        return self.template


class JsonPathGuard(CfdModel):
    """An RFC 9535 JSONPath query over the template namespace: true iff it selects at least
    one node and not every selected node is false or null."""

    kind: ClassVar[Literal["jsonpath"]] = "jsonpath"
    jsonpath: str

    @property
    def text(self) -> str:
        return self.jsonpath


def _guard_shorthand(value: Any) -> Any:
    if isinstance(value, str):
        return {"jsonpath": value} if value.startswith("$") else {"template": value}
    return value


def _guard_tag(value: Any) -> str | None:
    if isinstance(value, TemplateGuard) or (isinstance(value, dict) and "template" in value):
        return ":template"
    if isinstance(value, JsonPathGuard) or (isinstance(value, dict) and "jsonpath" in value):
        return ":jsonpath"
    return None


Guard = Annotated[
    Annotated[TemplateGuard, Tag(":template")] | Annotated[JsonPathGuard, Tag(":jsonpath")],
    Discriminator(
        _guard_tag,
        custom_error_type="flow.schema",
        custom_error_message="a guard is {template: TEXT}, {jsonpath: TEXT} or a string",
    ),
    BeforeValidator(_guard_shorthand, json_schema_input_type=str | TemplateGuard | JsonPathGuard),
]
"""`{template: TEXT}` or `{jsonpath: TEXT}`; a string starting with `$` is the second."""


# --------------------------------------------------------------------------------------------
# Rules (task outcome policies, §1.4)


class Then(CfdModel):
    """What a matching rule does."""

    do: Literal["continue", "retry", "jump", "break", "fail"] = "continue"
    attempts: int = Field(default=3, ge=1, le=_limits.ATTEMPTS_MAX)
    backoff: Literal["none", "linear", "exponential"] = "none"
    delay_ms: DurationMs = 1000
    delay_s: DurationS | None = Field(default=None, exclude=True)
    to: TaskName | None = None
    set_ctx: dict[DataPath, Template] = Field(default_factory=dict)
    set_iter: dict[DataPath, Template] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        return _seconds_to_ms(data, "delay")

    @model_validator(mode="after")
    def _jump_has_target(self) -> Then:
        if self.do == "jump" and self.to is None:
            raise PydanticCustomError("flow.schema", "a jump names its target task in `to`")
        if self.do != "jump" and self.to is not None:
            raise PydanticCustomError("flow.schema", "`to` is for `do: jump` only")
        return self


class Rule(CfdModel):
    """`when` (null matches anything) and `then`. Authoring also accepts `else: {then: ...}`
    and `else: true` beside `then`."""

    model_config = ConfigDict(json_schema_extra=_authoring_optional("then"))

    when: Guard | None = None
    then: Then
    else_: Literal[True] | _ElseRule | None = Field(default=None, alias="else", exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "else" not in data:
            return data
        rest = {key: value for key, value in data.items() if key != "else"}
        otherwise = data["else"]
        if otherwise is None:
            return rest
        if "when" in rest:
            raise PydanticCustomError("flow.schema", "a rule has `when` or `else`, not both")
        if otherwise is True and "then" in rest:
            return {**rest, "when": None}
        if isinstance(otherwise, dict) and set(otherwise) == {"then"} and "then" not in rest:
            return {**rest, "when": None, "then": otherwise["then"]}
        return data  # not a shorthand: the fields' validation says why


class _ElseRule(CfdModel):
    then: Then


class TaskPolicy(CfdModel):
    """A task's outcome rules, scanned in order; the first match wins (§3.3)."""

    rules: list[Rule] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Tasks (§1.2)


TaskListPath = tuple[str | int, ...]


class TaskBase(CfdModel):
    """What every task has. `name` is filled in for an unnamed task by the list holding it."""

    model_config = ConfigDict(json_schema_extra=_authoring_optional("name"))

    name: TaskName
    when: Guard | None = None
    policy: TaskPolicy | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_empty_policy(cls, data: Any) -> Any:
        # No rules means the same as no policy: one canonical form for both.
        policy = data.get("policy") if isinstance(data, dict) else None
        if isinstance(policy, dict) and set(policy) <= {"rules"} and not policy.get("rules"):
            return {**data, "policy": None}
        return data

    def task_lists(self) -> list[tuple[TaskListPath, list[Task]]]:
        """The task lists nested in this task, each with its path from the task."""
        return []


class AssignTask(TaskBase):
    """Write `ctx.PATH` for each entry of `set`."""

    do: Literal["assign"]
    set: dict[DataPath, Template]


class BusinessRefTask(TaskBase):
    """Set the execution's business reference."""

    do: Literal["business_ref"]
    value: Template


class Tool(CfdModel):
    """The tool a call runs: its `kind`, and the tool's spec (every other field, rendered like
    `args`)."""

    model_config = ConfigDict(extra="allow")

    kind: Annotated[
        str,
        StringConstraints(max_length=_limits.NAME_LENGTH_MAX),
        WithJsonSchema({"type": "string", "enum": list(TOOL_KINDS)}),
    ]


class CallBranches(CfdModel):
    """The task lists run after a call whose outcome no rule matched (§3.3)."""

    ok: list[Task] = Field(default_factory=list)
    error: list[Task] = Field(default_factory=list)
    timeout: list[Task] = Field(default_factory=list)


class CallTask(TaskBase):
    """Call a tool: one effect, its receipt resumes the task."""

    do: Literal["call"]
    tool: Tool
    args: Template = Field(default_factory=dict)
    timeout_ms: DurationMs | None = None
    timeout_s: DurationS | None = Field(default=None, exclude=True)
    branches: CallBranches = Field(default_factory=CallBranches)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        data = _seconds_to_ms(data, "timeout")
        if isinstance(data, dict) and isinstance(data.get("branches"), dict):
            prefix = f"{data.get('name')}."
            branches = {
                key: _name_tasks(tasks, f"{prefix}{key}.")
                for key, tasks in data["branches"].items()
            }
            data = {**data, "branches": branches}
        return data

    def task_lists(self) -> list[tuple[TaskListPath, list[Task]]]:
        return [
            (("branches", "ok"), self.branches.ok),
            (("branches", "error"), self.branches.error),
            (("branches", "timeout"), self.branches.timeout),
        ]


class BranchCase(CfdModel):
    when: Guard
    tasks: list[Task] = Field(default_factory=list)


class BranchTask(TaskBase):
    """Run the tasks of the first case whose `when` holds, else `else`."""

    do: Literal["branch"]
    cases: list[BranchCase] = Field(default_factory=list)
    else_: list[Task] = Field(default_factory=list, alias="else")

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        prefix = f"{data.get('name')}."
        data = {**data, "else": _name_tasks(data.get("else"), f"{prefix}else.")}
        if isinstance(data.get("cases"), list):
            data["cases"] = [
                {**case, "tasks": _name_tasks(case.get("tasks"), f"{prefix}case_{number}.")}
                if isinstance(case, dict) and "tasks" in case
                else case
                for number, case in enumerate(data["cases"], start=1)
            ]
        if data["else"] is None:
            del data["else"]
        return data

    def task_lists(self) -> list[tuple[TaskListPath, list[Task]]]:
        cases: list[tuple[TaskListPath, list[Task]]] = [
            (("cases", index, "tasks"), case.tasks) for index, case in enumerate(self.cases)
        ]
        return [*cases, (("else",), self.else_)]


class RepeatTask(TaskBase):
    """Run `tasks` once per item of `over`, the item named `as`."""

    do: Literal["repeat"]
    over: Template
    as_: Identifier = Field(default="item", alias="as")
    tasks: list[Task] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        if isinstance(data, dict) and "tasks" in data:
            data = {**data, "tasks": _name_tasks(data["tasks"], f"{data.get('name')}.")}
        return data

    def task_lists(self) -> list[tuple[TaskListPath, list[Task]]]:
        return [(("tasks",), self.tasks)]


class HumanTask(TaskBase):
    """Ask a person; the task waits for the human adapter's receipt."""

    do: Literal["human"]
    title: Template = ""
    description: Template = None
    assignee: Template = None
    roles: list[ShortText] = Field(default_factory=list)
    form: Any = None
    data: Template = None
    timeout_ms: DurationMs | None = None
    timeout_s: DurationS | None = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        return _seconds_to_ms(data, "timeout")


class WaitSignalTask(TaskBase):
    """Wait for the signal `signal`; its payload is the result."""

    do: Literal["wait_signal"]
    signal: SignalName
    timeout_ms: DurationMs | None = None
    timeout_s: DurationS | None = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        return _seconds_to_ms(data, "timeout")


class WaitTimerTask(TaskBase):
    """Wait `duration_ms`, or until the logical time `until_ns` (exactly one)."""

    do: Literal["wait_timer"]
    duration_ms: DurationMs | None = None
    duration_s: DurationS | None = Field(default=None, exclude=True)
    until_ns: Template = None

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        return _seconds_to_ms(data, "duration")

    @model_validator(mode="after")
    def _one_deadline(self) -> WaitTimerTask:
        if (self.duration_ms is None) == (self.until_ns is None):
            raise PydanticCustomError(
                "flow.schema", "a timer wait has duration_s (or duration_ms) or until_ns"
            )
        return self


class SubflowTask(TaskBase):
    """Start a child execution and wait for it; its result lands under `ctx.into`."""

    do: Literal["subflow"]
    flow: SubflowRef = SELF_FLOW
    workload: Template = Field(default_factory=dict)
    into: DataPath | None = None


class ContinueWithTask(TaskBase):
    """Start a new execution; do not wait."""

    do: Literal["continue_with"]
    flow: FlowRef = SELF_FLOW
    workload: Template = Field(default_factory=dict)


class FailTask(TaskBase):
    """Fail the step with `message`."""

    do: Literal["fail"]
    message: Template = ""
    kind: ShortText = "expression"


class NoopTask(TaskBase):
    """Nothing; the result is `result` rendered."""

    do: Literal["noop"]
    result: Template = None


TASK_MODELS: tuple[type[TaskBase], ...] = (
    AssignTask,
    BusinessRefTask,
    CallTask,
    BranchTask,
    RepeatTask,
    HumanTask,
    WaitSignalTask,
    WaitTimerTask,
    SubflowTask,
    ContinueWithTask,
    FailTask,
    NoopTask,
)
"""The task models, in the order of ACTIONS."""


def _task_tag(value: Any) -> str | None:
    action = value.get("do") if isinstance(value, dict) else getattr(value, "do", None)
    return f":{action}" if action in ACTIONS else None


Task = Annotated[
    Annotated[AssignTask, Tag(":assign")]
    | Annotated[BusinessRefTask, Tag(":business_ref")]
    | Annotated[CallTask, Tag(":call")]
    | Annotated[BranchTask, Tag(":branch")]
    | Annotated[RepeatTask, Tag(":repeat")]
    | Annotated[HumanTask, Tag(":human")]
    | Annotated[WaitSignalTask, Tag(":wait_signal")]
    | Annotated[WaitTimerTask, Tag(":wait_timer")]
    | Annotated[SubflowTask, Tag(":subflow")]
    | Annotated[ContinueWithTask, Tag(":continue_with")]
    | Annotated[FailTask, Tag(":fail")]
    | Annotated[NoopTask, Tag(":noop")],
    Discriminator(
        _task_tag,
        custom_error_type="flow.schema",
        custom_error_message="a task's `do` is one of: " + ", ".join(ACTIONS),
    ),
]
"""One task: the model for its `do`."""


# --------------------------------------------------------------------------------------------
# Steps (§1.1)


class Arc(CfdModel):
    """An arc to step `to`, taken when `when` holds (null: always); `args` become the new
    token's arguments. A step name alone is an arc without a guard."""

    to: StepName
    when: Guard | None = None
    args: Template = Field(default_factory=dict)


def _arc_shorthand(value: Any) -> Any:
    return {"to": value} if isinstance(value, str) else value


ArcItem = Annotated[Arc, BeforeValidator(_arc_shorthand, json_schema_input_type=Arc | StepName)]


class Next(CfdModel):
    """Where tokens go after the step: the first matching arc, or every matching arc."""

    mode: Literal["exclusive", "inclusive"] = "exclusive"
    arcs: list[ArcItem] = Field(default_factory=list)


def _next_shorthand(value: Any) -> Any:
    if isinstance(value, str):
        return {"arcs": [value]}
    if isinstance(value, list):
        return {"arcs": value}
    return value


NextField = Annotated[
    Next,
    BeforeValidator(_next_shorthand, json_schema_input_type=Next | StepName | list[ArcItem]),
]


class Loop(CfdModel):
    """Run the step's pipeline once per item of `in` (§3.4)."""

    in_: Template = Field(alias="in")
    iterator: Identifier = "item"
    mode: Literal["sequential", "parallel"] = "sequential"
    max_in_flight: int | None = Field(default=None, ge=1)
    exec: Literal["local", "distributed"] = "local"


class Step(CfdModel):
    """A Petri-net transition: admission, an optional loop, a task pipeline, and arcs."""

    name: StepName
    description: str | None = None
    admit: Guard | None = None
    join: Literal["none", "all"] = "none"
    loop: Loop | None = None
    tasks: list[Task] = Field(default_factory=list)
    result: Template = None
    set_ctx: dict[DataPath, Template] = Field(default_factory=dict)
    """`aos.flow/2`: `ctx` written once the step's tasks are done, before its arcs (§3.4)."""
    next: NextField = Field(default_factory=Next)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        if isinstance(data, dict) and "tasks" in data:
            data = {**data, "tasks": _name_tasks(data["tasks"], "")}
        return data


# --------------------------------------------------------------------------------------------
# The definition


class Policy(CfdModel):
    """Execution-wide policy (§1, §3.4)."""

    on_deny: Literal["keep", "discard"] = "keep"
    no_next_is_error: bool = False
    failure_mode: Literal["fail_fast", "best_effort"] = "fail_fast"
    final_step: StepName | None = None


def _limit_field(name: str) -> Any:
    default, ceiling = EXECUTION_LIMITS[name]
    return Field(default=default, ge=1, json_schema_extra={"maximum": ceiling})


class Limits(CfdModel):
    """The execution limits (§7) for this flow's executions, each at most its ceiling."""

    tokens_max: int = _limit_field("tokens_max")
    loop_items_max: int = _limit_field("loop_items_max")
    in_flight_max: int = _limit_field("in_flight_max")
    iter_depth_max: int = _limit_field("iter_depth_max")
    history_events_per_step_max: int = _limit_field("history_events_per_step_max")
    tasks_per_input_max: int = _limit_field("tasks_per_input_max")
    result_inline_bytes_max: int = _limit_field("result_inline_bytes_max")
    signals_buffered_max: int = _limit_field("signals_buffered_max")

    @field_validator(*EXECUTION_LIMITS, mode="after")
    @classmethod
    def _under_ceiling(cls, value: int, info: ValidationInfo) -> int:
        ceiling = EXECUTION_LIMITS[str(info.field_name)][1]
        if value > ceiling:
            raise PydanticCustomError(
                "flow.limit",
                "{name} is at most {ceiling}",
                {"name": info.field_name, "ceiling": ceiling},
            )
        return value


class Subflow(CfdModel):
    """A flow this one starts, by its deployed name (`NAME` or `NAME@VERSION`); deploying
    pins `definition` to that version's hash (§5)."""

    flow: Annotated[str, StringConstraints(pattern=SUBFLOW_FLOW_PATTERN)]
    definition: HashText | None = None


class KeychainEntry(CfdModel):
    """A credential the flow may use, by name (§1.7). Every field but `name` and `kind` is the
    entry's spec, kept as written; resolving it is an effect, so no secret enters the CFD or
    the journal."""

    model_config = ConfigDict(extra="allow")

    name: Identifier
    kind: Annotated[str, StringConstraints(pattern=KEYCHAIN_KIND_PATTERN)]


class FlowDefinition(CfdModel):
    """A canonical flow definition (§1)."""

    model_config = ConfigDict(json_schema_extra=_authoring_optional("entry"))

    format: Literal["aos.flow/1", "aos.flow/2"] = FORMAT
    name: FlowName
    description: str | None = None
    workload: dict[str, Any] = Field(default_factory=dict)
    entry: StepName
    policy: Policy = Field(default_factory=Policy)
    limits: Limits = Field(default_factory=Limits)
    subflows: dict[SubflowAlias, Subflow] = Field(default_factory=dict)
    keychain: list[KeychainEntry] = Field(default_factory=list)
    steps: list[Step] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        # `entry` defaults to the first step (§1).
        if not isinstance(data, dict) or data.get("entry") is not None:
            return data
        steps = data.get("steps")
        if isinstance(steps, list) and steps and isinstance(steps[0], dict):
            first = steps[0].get("name")
            if isinstance(first, str):
                return {**data, "entry": first}
        return data


_FORWARD_REFERENCING: tuple[type[BaseModel], ...] = (
    Rule,
    TaskBase,
    CallBranches,
    CallTask,
    BranchCase,
    BranchTask,
    RepeatTask,
    AssignTask,
    BusinessRefTask,
    HumanTask,
    WaitSignalTask,
    WaitTimerTask,
    SubflowTask,
    ContinueWithTask,
    FailTask,
    NoopTask,
    Step,
    FlowDefinition,
)
# The models name `Task` and `_ElseRule` before they exist; resolve them now.
for _model in _FORWARD_REFERENCING:
    _model.model_rebuild()


# --------------------------------------------------------------------------------------------
# Loading, the canonical form, its hash


def load_definition(
    data: bytes | str,
    *,
    source: str = "<input>",
    limits: DefinitionLimits = DEFAULT_LIMITS,
) -> FlowDefinition:
    """Read, check and expand an authored definition (YAML or JSON text).

    Raises FlowTooLargeError (over `definition_bytes_max`, before parsing), FlowDecodeError
    (not one UTF-8 YAML or JSON document, a duplicate key), or FlowCheckError with every
    problem found (§1.6)."""
    value = read_document(data, source=source, limits=limits)
    if isinstance(value, str) and looks_like_flow_language(value):
        # Arrow text with no `.flow` name (an HTTP deploy without one, say): YAML reads it as
        # one string, which is never a definition.
        from aos.flows.define.flowlang import compile_text

        value = compile_text(value, source=source, limits=limits)
    return _validated(value, source, limits)


def looks_like_flow_language(text: str) -> bool:
    """Whether a document that YAML read as a single string is the flow language (spec/11
    §11): it has an arrow, or begins with a declaration."""
    return "→" in text or "->" in text or text.lstrip().startswith(("@flow", "@task"))


def definition_from_value(
    value: Any,
    *,
    source: str = "<input>",
    limits: DefinitionLimits = DEFAULT_LIMITS,
    unreachable: bool = True,
) -> FlowDefinition:
    """Check and expand an authored definition already parsed into plain data (what a front
    end such as the playbook compiler or the flow language produces), exactly as
    `load_definition` does once it has read a document; `unreachable=False` accepts steps no path
    from `entry` reaches. Raises FlowCheckError or FlowTooLargeError."""
    return _validated(value, source, limits, unreachable=unreachable)


def canonical_value(defn: FlowDefinition) -> dict[str, Any]:
    """The canonical form as plain data (maps, lists, text, numbers, booleans, nulls), every
    default written (but `LIMITS_WRITTEN_WHEN_SET`) and nulls kept: what `encode_definition`
    encodes. A fresh copy each call."""
    dumped = defn.model_dump(mode="python", by_alias=True)
    plain: dict[str, Any] = _plain(dumped)
    if defn.format == FORMAT_1:
        for step in plain["steps"]:
            for name in FORMAT_2_STEP_FIELDS:
                del step[name]
    for name in LIMITS_WRITTEN_WHEN_SET:
        if plain["limits"][name] == EXECUTION_LIMITS[name][0]:
            del plain["limits"][name]
    return plain


def encode_definition(defn: FlowDefinition) -> bytes:
    """The canonical CBOR of the definition: what a deploy stores in the CAS."""
    return cbor.encode(canonical_value(defn))


def definition_hash(defn: FlowDefinition) -> Hash:
    """The definition's hash: BLAKE3 of its canonical CBOR. Same meaning, same hash."""
    return hash_bytes(encode_definition(defn))


def decode_definition(
    raw: bytes,
    *,
    source: str = "<cas>",
    limits: DefinitionLimits = DEFAULT_LIMITS,
) -> FlowDefinition:
    """A definition read back from a CAS: strict canonical CBOR, a valid definition, and
    exactly the canonical form of that definition (so its hash is the one it was stored
    under). Raises FlowTooLargeError, FlowDecodeError or FlowCheckError."""
    if len(raw) > limits.definition_bytes_max:
        raise _too_large(len(raw), limits.definition_bytes_max, source)
    try:
        value = cbor.decode(raw, depth_max=min(limits.depth_max, cbor.NESTING_DEPTH_MAX_DEFAULT))
    except cbor.CborError as error:
        raise FlowDecodeError(
            f"{source}: not canonical CBOR: [{error.code}] {error}", source=source
        ) from None
    defn = _validated(value, source, limits)
    if encode_definition(defn) != raw:
        raise FlowDecodeError(
            f"{source}: valid, but not the canonical form of its definition", source=source
        )
    return defn


def _validated(
    value: Any, source: str, limits: DefinitionLimits, *, unreachable: bool = True
) -> FlowDefinition:
    problems = check_values(value, limits)
    if not problems and not isinstance(value, dict):
        problems = [Problem("flow.schema", "$", "a flow definition is a map")]
    if problems:
        raise FlowCheckError(problems, source=source)
    try:
        defn = FlowDefinition.model_validate(value)
    except ValidationError as error:
        raise FlowCheckError(_schema_problems(error.errors()), source=source) from None
    problems = check_definition(defn, limits, unreachable=unreachable)
    canonical = canonical_value(defn)
    depth_max = min(limits.depth_max, cbor.NESTING_DEPTH_MAX_DEFAULT)
    if nesting_depth(canonical, depth_max + 1) > depth_max:
        message = f"the canonical form nests deeper than {depth_max} maps and lists"
        problems.append(Problem("flow.limit", "$", message))
    if problems:
        raise FlowCheckError(problems, source=source)
    size = len(cbor.encode(canonical))
    if size > limits.definition_bytes_max:
        raise _too_large(size, limits.definition_bytes_max, source, canonical=True)
    return defn


def _too_large(size: int, limit: int, source: str, *, canonical: bool = False) -> FlowTooLargeError:
    what = "canonical form" if canonical else "definition"
    return FlowTooLargeError(
        f"{source}: the {what} is {size} bytes; the limit is {limit}",
        source=source,
        size=size,
        limit=limit,
    )


def _plain(value: Any) -> Any:
    """A deep copy made of dict, list and scalars only: callers may change it freely (deploy
    fills in subflow hashes) without touching the model."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


# --------------------------------------------------------------------------------------------
# Pydantic errors as problems

_MESSAGES = {
    "extra_forbidden": "unknown field",
    "missing": "missing field",
}


def _schema_problems(errors: list[ErrorDetails]) -> list[Problem]:
    problems: list[Problem] = []
    steps_invalid = any(error["loc"][:1] == ("steps",) for error in errors)
    for error in errors:
        kind = error["type"]
        if kind == "missing" and error["loc"] == ("entry",) and steps_invalid:
            continue  # `entry` defaults to the first step: that problem is the one to fix
        code = kind if kind.startswith("flow.") else "flow.schema"
        message = _MESSAGES.get(kind, error["msg"])
        problems.append(Problem(code, _loc_path(error["loc"]), message))
    return problems


def _loc_path(loc: tuple[int | str, ...]) -> str:
    # Union tags (`:call`) name the branch tried; the next part repeats the field name.
    parts = [part for part in loc if not (isinstance(part, str) and part.startswith(":"))]
    return json_path([part for part in parts if part != "[key]"])
