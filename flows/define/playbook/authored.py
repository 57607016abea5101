"""The authored CFD value a playbook compiles to (spec/12 §2): the map `cfd.FlowDefinition`
then validates, in its authoring form (spec/11 §1.5: null for a field's default, seconds for
durations, `next` without a mode).

These are the shapes the compiler writes, not a second model of the definition: each names
the `cfd` model that reads it, and that model alone says what is valid (its checks run on
every compiled value, `definition_of`). Values a playbook author wrote and the compiler passes
on as they are (a workload, a tool's fields, a rule's `then`) stay plain maps, and a value it
passes on unread is an `object`: the compiler makes no claim about it.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class AuthoredGuard(TypedDict):
    """A template guard (`cfd.TemplateGuard`)."""

    template: str


class AuthoredRule(TypedDict):
    """A task policy's rule (`cfd.Rule`): no `when` is the `else` rule; `then` is the
    playbook's own (its `delay` in seconds as `delay_s`)."""

    when: AuthoredGuard | None
    then: dict[str, Any]


class AuthoredTaskPolicy(TypedDict):
    """A task's policy (`cfd.TaskPolicy`)."""

    rules: list[AuthoredRule]


class AuthoredTask(TypedDict):
    """A task (`cfd.NoopTask`, `cfd.SubflowTask` or `cfd.CallTask`, by `do`)."""

    name: str
    policy: NotRequired[AuthoredTaskPolicy]
    do: NotRequired[str]
    result: NotRequired[dict[str, Any] | None]  # noop
    flow: NotRequired[str]  # subflow
    workload: NotRequired[dict[str, Any]]  # subflow
    tool: NotRequired[dict[str, Any]]  # call: {kind, ...its fields}
    args: NotRequired[dict[str, Any]]  # call
    timeout_s: NotRequired[object]  # call


class AuthoredArc(TypedDict):
    """An arc of a step's `next` (`cfd.Arc`)."""

    to: str
    args: object
    when: NotRequired[AuthoredGuard]


class AuthoredNext(TypedDict):
    """A step's router (`cfd.Next`)."""

    mode: NotRequired[object]
    arcs: list[AuthoredArc]


AuthoredLoop = TypedDict(
    "AuthoredLoop",
    {
        "in": object,
        "iterator": object,
        "mode": object,
        "max_in_flight": object,
        "exec": object,
        # The loop's `spec`, which the step's tasks layer under theirs: read, never written.
        "spec": NotRequired[dict[str, Any]],
    },
)
"""A step's loop (`cfd.Loop`); `in` is a keyword, hence the functional form."""


class AuthoredStep(TypedDict):
    """A step (`cfd.Step`), its fields in the order the compiler writes them."""

    name: str
    description: object
    admit: NotRequired[AuthoredGuard]
    loop: NotRequired[AuthoredLoop]
    set_ctx: NotRequired[dict[str, Any]]
    tasks: NotRequired[list[AuthoredTask]]
    result: NotRequired[str]
    next: NotRequired[AuthoredNext]


class AuthoredPolicy(TypedDict):
    """The definition's policy (`cfd.Policy`): each null is the CFD's default."""

    on_deny: object
    no_next_is_error: object
    failure_mode: object
    final_step: object


class AuthoredLimits(TypedDict, total=False):
    """The definition's limits (`cfd.Limits`) a playbook sets."""

    result_inline_bytes_max: object


class AuthoredDefinition(TypedDict):
    """The definition (`cfd.FlowDefinition`); `steps` and `subflows` are written last."""

    format: str
    name: str
    description: object
    workload: object
    keychain: object
    policy: AuthoredPolicy
    limits: AuthoredLimits
    entry: NotRequired[str]
    steps: NotRequired[list[AuthoredStep]]
    subflows: NotRequired[dict[str, dict[str, str]]]
