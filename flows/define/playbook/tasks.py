"""A step's `tool` as CFD tasks (seed 003 §5.4, §7): list shapes normalized, each task's
effective spec layered, its policy rules translated, its kind mapped onto a CFD action.

    {name: X, kind: K, ...}      kept (canonical)
    {kind: K, ...} in a list     named task_N (N its 0-based position, as seed 003 §7.2 says)
    {kind: K, ...} alone         one task named <step>_task
    {X: {kind: K, ...}}          refused (the removed sugar)

Kinds: `noop` is an inline CFD `noop`; `workbook` runs the named workbook entry's tool;
`playbook` is a CFD `subflow` (a child execution of the deployed playbook at `path`); every
other kind is a CFD `call` whose `tool` is `{kind, ...the task's own fields}`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from aos.flows.define.cfd import FLOW_NAME_PATTERN
from aos.flows.define.playbook import spec as specs
from aos.flows.define.playbook.authored import (
    AuthoredGuard,
    AuthoredRule,
    AuthoredTask,
    AuthoredTaskPolicy,
)
from aos.flows.define.playbook.problems import Parts, Problems
from aos.flows.define.playbook.spec import as_map
from aos.flows.define.tool_schema import TOOL_KINDS, TOOL_SCHEMAS, field_problems

INLINE_KINDS = ("noop", "workbook", "playbook")
PLAYBOOK_TOOL_KINDS: tuple[str, ...] = (*TOOL_KINDS, *INLINE_KINDS)
"""Every `kind` a playbook task may name."""

TASK_OWN_FIELDS = frozenset({"name", "kind", "args", "spec", "desc", "description", "assert"})
"""Task fields that are not the tool's: everything else a task holds is the tool's spec.
`assert` (`{expects, returns}`, the fixtures' contract of a workbook entry) is descriptive:
NoETL 2.13.1 reads it nowhere."""
SPEC_TOOL_FIELDS = frozenset(
    {"code", "function", "libs", "args", "url", "endpoint", "method", "params", "headers"}
    | {"body", "json", "data", "payload", "command", "query", "auth", "path"}
)
"""Tool fields upstream fixtures write under `tool.spec`; they are lifted beside `kind`."""
ENGINE_SPEC_KEYS = frozenset(
    {"policy", "timeout_s", "lifecycle", "failure", "mode", "max_in_flight", "entry_step"}
    | {"no_next_is_error", "on_deny", "final_step", "emit"}
)
"""Effective-spec keys the front end reads itself; the rest reach the tool as `tool.spec`."""
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "playbook": ("path",),
    **{kind: schema.required for kind, schema in TOOL_SCHEMAS.items()},
}
"""Per kind: the task needs at least one of these fields (a tool kind's, from its schema)."""
RULE_THEN_FIELDS = frozenset({"do", "attempts", "backoff", "delay", "to", "set_ctx", "set_iter"})
ACTIONS = ("continue", "retry", "jump", "break", "fail")
SUBFLOW_ALIAS_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
TASK_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_FLOW_NAME = re.compile(FLOW_NAME_PATTERN)


@dataclass
class TaskContext:
    """What compiling one step's tasks needs from around it."""

    problems: Problems
    workbook: dict[str, Any]
    outer_specs: tuple[Any, ...]
    step_args: dict[str, Any]
    subflows: dict[str, dict[str, str]] = field(default_factory=dict)


def normalized(tool: Any, step_name: str, parts: Parts, problems: Problems) -> list[Any]:
    """The step's tasks in the canonical list shape, each named (problems for the rest)."""
    if isinstance(tool, dict):
        if "kind" not in tool and len(tool) == 1 and isinstance(next(iter(tool.values())), dict):
            _sugar(problems, parts, str(next(iter(tool))))
            return []
        named = tool if tool.get("name") is not None else {**tool, "name": _task_name(step_name)}
        return [(named, parts)]
    if not isinstance(tool, list):
        problems.add(
            "playbook.schema",
            parts,
            "`tool` is a task (a map with `kind`) or a list of tasks",
            "write `tool: {kind: noop}` or a list of `{name, kind, ...}`",
        )
        return []
    tasks: list[Any] = []
    for index, item in enumerate(tool):
        where = (*parts, index)
        if not isinstance(item, dict):
            problems.add("playbook.schema", where, "a task is a map", "write `{name, kind, ...}`")
        elif "kind" not in item and len(item) == 1 and isinstance(next(iter(item.values())), dict):
            _sugar(problems, where, str(next(iter(item))))
        else:
            named = item if item.get("name") is not None else {**item, "name": f"task_{index}"}
            tasks.append((named, where))
    return tasks


def _task_name(step_name: str) -> str:
    """A single task's synthetic name, `<step>_task` (seed 003 §7.3), made a task name when the
    step's is not one (`fetch data` -> `fetch_data_task`)."""
    name = TASK_NAME_UNSAFE.sub("_", f"{step_name}_task")
    return name if name[0].isascii() and (name[0].isalpha() or name[0] == "_") else f"_{name}"


def _sugar(problems: Problems, parts: Parts, name: str) -> None:
    problems.add(
        "playbook.task_sugar",
        parts,
        f"the `{{{name}: {{kind: ...}}}}` task shape was removed in v10",
        f"write `- name: {name}` beside `kind:` in the task itself",
    )


def compile_task(task: dict[str, Any], parts: Parts, context: TaskContext) -> AuthoredTask | None:
    """One playbook task as a CFD task (None, with problems, when it cannot be)."""
    kind = task.get("kind")
    if kind is None:
        context.problems.add(
            "playbook.tool_missing",
            parts,
            "the task has no `kind`",
            f"add `kind:` (one of {', '.join(PLAYBOOK_TOOL_KINDS)})",
        )
        return None
    if kind not in PLAYBOOK_TOOL_KINDS:
        context.problems.add(
            "playbook.tool_unknown",
            (*parts, "kind"),
            f"unknown tool kind {kind!r}",
            f"use one of {', '.join(PLAYBOOK_TOOL_KINDS)}",
        )
        return None
    if kind == "workbook":
        return _workbook_task(task, parts, context)
    return _task(task, parts, context, entry_args={}, entry_spec={})


def _workbook_task(task: dict[str, Any], parts: Parts, context: TaskContext) -> AuthoredTask | None:
    name = task.get("name")
    entry = context.workbook.get(name) if isinstance(name, str) else None
    if entry is None:
        known = ", ".join(sorted(context.workbook)) or "none"
        context.problems.add(
            "playbook.workbook_unknown",
            (*parts, "name"),
            f"no workbook entry named {name!r} (entries: {known})",
            "name an entry of the root `workbook:` list",
        )
        return None
    tool = _lifted(entry["tool"])
    if tool.get("kind") == "workbook":
        context.problems.add(
            "playbook.workbook_unknown",
            (*parts, "name"),
            f"workbook entry {name!r} is itself a workbook reference",
            "give the entry a tool of its own kind (python, http, ...)",
        )
        return None
    extra = {k: v for k, v in task.items() if k not in ("name", "kind", "args", "spec")}
    fields = {k: v for k, v in tool.items() if k not in ("args", "spec")}
    merged = {**fields, **extra, "name": name, "args": task.get("args")}
    return _task(
        merged,
        parts,
        context,
        entry_args=as_map(tool.get("args")),
        entry_spec=as_map(tool.get("spec")),
        spec=task.get("spec"),
    )


def _lifted(task: dict[str, Any]) -> dict[str, Any]:
    """The task with the tool fields written under its `spec` lifted beside `kind` (those
    upstream fixtures write there, and any field its kind's schema names)."""
    inner = task.get("spec")
    if not isinstance(inner, dict):
        return dict(task)
    schema = TOOL_SCHEMAS.get(str(task.get("kind")))
    named = SPEC_TOOL_FIELDS | (set(schema.fields) if schema else set())
    lifted = {k: v for k, v in inner.items() if k in named and k not in task}
    rest = {k: v for k, v in inner.items() if k not in lifted}
    return {**task, **lifted, "spec": rest}


def _task(
    task: dict[str, Any],
    parts: Parts,
    context: TaskContext,
    *,
    entry_args: dict[str, Any],
    entry_spec: dict[str, Any],
    spec: Any = None,
) -> AuthoredTask | None:
    task = _lifted(task)
    own_spec = task.get("spec") if spec is None else _lifted({"spec": spec}).get("spec")
    effective = specs.merge(*context.outer_specs, entry_spec, own_spec)
    kind = str(task["kind"])
    if kind in TOOL_SCHEMAS:
        own = {k: v for k, v in task.items() if k not in TASK_OWN_FIELDS}
        _check_tool_fields(kind, own, parts, context.problems)
    if not _has_required(task, kind, parts, context.problems):
        return None
    args = _args(task.get("args"), entry_args, context.step_args, (*parts, "args"), context)
    compiled: AuthoredTask = {"name": task["name"]}
    # Policies are typed by scope (seed 003 §3.2): a task's rules are its own, never a step's.
    own_policy = specs.merge(entry_spec, own_spec).get("policy")
    policy = _policy(own_policy, (*parts, "spec", "policy"), context.problems)
    if policy is not None:
        compiled["policy"] = policy
    if kind == "noop":
        compiled["do"], compiled["result"] = "noop", args or None
    elif kind == "playbook":
        compiled["do"] = "subflow"
        compiled["flow"] = _subflow_flow(task["path"], (*parts, "path"), context)
        compiled["workload"] = args
    else:
        tool = {k: v for k, v in task.items() if k not in TASK_OWN_FIELDS}
        tool_spec = {k: v for k, v in effective.items() if k not in ENGINE_SPEC_KEYS}
        if tool_spec:
            tool["spec"] = tool_spec
        compiled["do"], compiled["tool"], compiled["args"] = "call", {"kind": kind, **tool}, args
        if effective.get("timeout_s") is not None:
            compiled["timeout_s"] = effective["timeout_s"]
    return compiled


def _check_tool_fields(kind: str, tool: dict[str, Any], parts: Parts, problems: Problems) -> None:
    """The tool's fields against its kind's schema, the one the tool checks when it runs."""
    for problem in field_problems({"kind": kind, **tool}):
        fix = f"a {kind} task takes {problem.takes}"
        problems.add("playbook.tool_field_unknown", (*parts, problem.name), problem.why, fix)


def _has_required(task: dict[str, Any], kind: str, parts: Parts, problems: Problems) -> bool:
    wanted = REQUIRED_FIELDS.get(kind, ())
    if not wanted or any(task.get(name) is not None for name in wanted):
        return True
    names = " or ".join(f"`{name}`" for name in wanted)
    problems.add(
        "playbook.tool_field_missing",
        parts,
        f"a {kind} task needs {names}",
        f"add {names} inside the task (beside `kind: {kind}`)",
    )
    return False


def _args(
    own: Any, entry: dict[str, Any], step: dict[str, Any], parts: Parts, context: TaskContext
) -> dict[str, Any]:
    """The call's args: the step's `args`, under the workbook entry's, under the task's own."""
    if own is not None and not isinstance(own, dict):
        context.problems.add("playbook.schema", parts, "`args` is a map", "write `args: {k: v}`")
        own = None
    return {**step, **entry, **(own or {})}


def flow_name(path: Any) -> str:
    """The flow a catalog path names: `/examples/x` and `examples/x` are one flow (NoETL
    writes catalog paths both ways; spec/12 §2)."""
    return str(path).lstrip("/")


def _subflow_flow(path: Any, parts: Parts, context: TaskContext) -> str:
    """A literal path: an alias of `subflows`, pinned when the playbook is deployed. A
    template: itself, rendered when the task runs and looked up then (spec/11 §3.5)."""
    if isinstance(path, str) and ("{{" in path or "{%" in path):
        return path
    if _FLOW_NAME.match(flow_name(path)) is None:
        context.problems.add(
            "playbook.schema",
            parts,
            f"{path!r} cannot name a deployed playbook ([a-z0-9][a-z0-9._/-]*, at most 128)",
            "write the `metadata.path` of a deployed playbook, or a template that renders one",
        )
    alias = "pb_" + SUBFLOW_ALIAS_UNSAFE.sub("_", flow_name(path))[:120]
    context.subflows[alias] = {"flow": flow_name(path)}
    return alias


# -- task policies (seed 003 §5.4) -------------------------------------------------------------


def _policy(policy: Any, parts: Parts, problems: Problems) -> AuthoredTaskPolicy | None:
    if policy is None:
        return None
    rules = policy.get("rules") if isinstance(policy, dict) else None
    if not isinstance(rules, list):
        problems.add(
            "playbook.policy_invalid",
            parts,
            "a task policy is an object with a `rules:` list",
            "write `policy: {rules: [{when: ..., then: {do: ...}}, {else: {then: {do: ...}}}]}`",
        )
        return None
    compiled = [_rule(rule, (*parts, "rules", i), problems) for i, rule in enumerate(rules)]
    return {"rules": [rule for rule in compiled if rule is not None]}


def _rule(rule: Any, parts: Parts, problems: Problems) -> AuthoredRule | None:
    """`{when, then}`, `{else: {then}}`, or the upstream fixtures' `{else: {do, ...}}`."""
    if isinstance(rule, dict) and set(rule) == {"else"} and isinstance(rule["else"], dict):
        otherwise = rule["else"]
        then = otherwise.get("then") if set(otherwise) == {"then"} else otherwise
        compiled_then = _then(then, (*parts, "else"), problems)
        return None if compiled_then is None else {"when": None, "then": compiled_then}
    if not isinstance(rule, dict) or set(rule) != {"when", "then"}:
        problems.add(
            "playbook.policy_invalid",
            parts,
            "a rule is `{when, then}` or `{else: {then}}`",
            'write `- when: "{{ ... }}"` with `then: {do: ...}`, or `- else: {then: {do: ...}}`',
        )
        return None
    when = guard(rule["when"], (*parts, "when"), problems)
    then = _then(rule["then"], (*parts, "then"), problems)
    return None if then is None else {"when": when, "then": then}


def _then(then: Any, parts: Parts, problems: Problems) -> dict[str, Any] | None:
    if not isinstance(then, dict) or then.get("do", "continue") not in ACTIONS:
        problems.add(
            "playbook.policy_invalid",
            parts,
            f"`then.do` is one of {', '.join(ACTIONS)}",
            "write `then: {do: continue}` (or retry, jump, break, fail)",
        )
        return None
    unknown = sorted(set(then) - RULE_THEN_FIELDS)
    if unknown:
        problems.add(
            "playbook.policy_invalid",
            parts,
            f"unknown field(s) {unknown} in `then`",
            f"use only {', '.join(sorted(RULE_THEN_FIELDS))}",
        )
        return None
    compiled = {k: v for k, v in then.items() if k != "delay"}
    if "delay" in then:
        compiled["delay_s"] = then["delay"]
    return compiled


def guard(when: Any, parts: Parts, problems: Problems) -> AuthoredGuard | None:
    """A `when` as a CFD template guard (booleans as the templates `{{ true }}` / `{{ false }}`;
    never JSONPath, even for text starting with `$`)."""
    if isinstance(when, bool):
        return {"template": "{{ true }}" if when else "{{ false }}"}
    if isinstance(when, str):
        return {"template": when}
    problems.add(
        "playbook.schema",
        parts,
        "`when` is a template (text) or a boolean",
        'write `when: "{{ expression }}"`',
    )
    return None
