"""A playbook (seeds 000, 003) compiled onto the canonical flow definition (spec/11): the root
sections, steps, admission, arcs, loops, workbook and keychain. Every rejection is a problem
with the path into the playbook and a one-line fix; a playbook with any is not compiled."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aos.flows.define.cfd import FLOW_NAME_PATTERN, FORMAT_2, STEP_NAME_PATTERN
from aos.flows.define.playbook.authored import (
    AuthoredArc,
    AuthoredDefinition,
    AuthoredGuard,
    AuthoredLimits,
    AuthoredLoop,
    AuthoredNext,
    AuthoredPolicy,
    AuthoredStep,
    AuthoredTask,
)
from aos.flows.define.playbook.problems import Parts, Problems
from aos.flows.define.playbook.spec import as_map
from aos.flows.define.playbook.tasks import TaskContext, compile_task, flow_name, guard, normalized

API_VERSION_PREFIX = "noetl.io/"
KIND = "Playbook"
ROOT_SECTIONS = ("apiVersion", "kind", "metadata", "keychain", "executor", "workload")
ROOT_SECTIONS_ALL = (*ROOT_SECTIONS, "workflow", "workbook")
ROOT_UNREAD = ("spec",)
"""Root sections NoETL 2.13.1 accepts and never reads (its `Playbook` model drops fields it
does not declare, `noetl/core/dsl/v2/models.py`): accepted here and not compiled (spec/12 §9)."""
EXECUTOR_FIELDS = frozenset({"profile", "version", "requires", "spec"})
STEP_FIELDS = frozenset({"step", "desc", "description", "spec", "loop", "tool", "next", "args"})
STEP_FIELDS_ALL = STEP_FIELDS | {"set_ctx"}
LEGACY_STEP_FIELDS = {
    "when": "admission is `spec.policy.admit.rules` (v10 has no step `when`)",
    "case": "`case` was replaced by `next.arcs[].when`",
    "eval": "`eval` was replaced by the task's `spec.policy.rules`",
    "expr": "`expr` was replaced by `when`",
    "sink": "there is no sink: storage is a tool task that returns a reference",
    "vars": "there are no `vars`: write `ctx` with `set_ctx` in a task policy",
}
STEP_SET_ITER_FIX = (
    "`iter` lives only while the step's pipeline runs, so nothing would read it; write "
    "`set_iter` in a task's policy (`spec.policy.rules[].then.set_iter`)"
)
LOOP_FIELDS = frozenset({"in", "iterator", "spec"})
EVENT_ALIASES = {"call.done": "step.done", "call.error": "step.failed"}
"""Upstream event names arc guards may test, read as the CFD's boundary events."""
PIPELINE_RESULT = (
    "{{ (_prev if _prev is mapping and '$ref' not in _prev else {'result': _prev})"
    " | merge_objects({'results': results}) }}"
)
"""A pipeline step's result (more than one task, no loop): the last task's result (a map; any
other value, or a result stored by reference, as `{result: VALUE}`) with every task's result by
name under `results`, as the v10 example reads `process_data.results.transform`. The map prints
as its Python literal, which rendering reads back (spec/11 §3.6); `| tojson` would keep it text
in `aos.flow/2`."""
_EVENT_LITERAL = re.compile(r"""(['"])(call\.done|call\.error)\1""")
_FLOW_NAME = re.compile(FLOW_NAME_PATTERN)
_STEP_NAME = re.compile(STEP_NAME_PATTERN)


@dataclass
class Compiled:
    """The authored CFD value (`aos.flow/2`: a step's `set_ctx` is the step's own field)."""

    value: AuthoredDefinition


def is_playbook(value: Any) -> bool:
    """Whether a parsed document is a playbook (and not a CFD): `kind: Playbook`, or a NoETL
    `apiVersion`."""
    if not isinstance(value, dict):
        return False
    api = value.get("apiVersion")
    return value.get("kind") == KIND or (isinstance(api, str) and api.startswith("noetl.io"))


def compile_playbook(doc: dict[str, Any], problems: Problems) -> Compiled:
    """The CFD value of a playbook document (problems are added for what it cannot hold)."""
    _root(doc, problems)
    executor = _executor(doc.get("executor"), problems)
    executor_spec = as_map(executor.get("spec"))
    workflow = doc.get("workflow")
    if not isinstance(workflow, list) or not workflow:
        problems.add(
            "playbook.schema",
            ("workflow",),
            "`workflow` is a non-empty list of steps",
            "add `workflow:` with at least one `- step: NAME` and its `tool`",
        )
        workflow = []
    names = _step_names(workflow, problems)
    workbook = _workbook(doc.get("workbook"), problems)
    compiled = Compiled(_definition(doc, executor_spec, names, problems))
    subflows: dict[str, dict[str, str]] = {}
    steps = []
    for index, step in enumerate(workflow):
        if not isinstance(step, dict):
            continue
        context = TaskContext(problems, workbook, (executor_spec,), {}, subflows)
        steps.append(_step(step, ("workflow", index), names, context))
    compiled.value["steps"] = steps
    compiled.value["subflows"] = subflows
    return compiled


# -- the root ----------------------------------------------------------------------------------


def _root(doc: dict[str, Any], problems: Problems) -> None:
    api = doc.get("apiVersion")
    if not isinstance(api, str) or not api.startswith(API_VERSION_PREFIX):
        problems.add(
            "playbook.schema",
            ("apiVersion",),
            f"`apiVersion` is {api!r}",
            "write `apiVersion: noetl.io/v2`",
        )
    if doc.get("kind") != KIND:
        problems.add(
            "playbook.schema", ("kind",), f"`kind` is {doc.get('kind')!r}", "write `kind: Playbook`"
        )
    for key in doc:
        if key in ROOT_SECTIONS_ALL or key in ROOT_UNREAD:
            continue
        if key == "vars":
            problems.add(
                "playbook.root_vars",
                (key,),
                "root `vars` is not part of v10",
                "move inputs to `workload`; write execution state with `set_ctx` (read it as `ctx.NAME`)",
            )
        else:
            problems.add(
                "playbook.root_unknown",
                (str(key),),
                f"unknown root section {key!r}",
                f"keep only {', '.join(ROOT_SECTIONS_ALL)}",
            )


def _metadata_name(doc: dict[str, Any], problems: Problems) -> str:
    """The deployed name: `metadata.path` (the catalog path `kind: playbook` tasks name; a
    leading `/` is not part of it), else `metadata.name`."""
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        problems.add(
            "playbook.schema",
            ("metadata",),
            "`metadata.name` is missing",
            "add `metadata: {name: my_playbook, path: examples/my_playbook}`",
        )
        return "playbook"
    path = metadata.get("path")
    key = "path" if isinstance(path, str) else "name"
    name = flow_name(metadata[key]) if key == "path" else str(metadata[key])
    if not _FLOW_NAME.match(name):
        problems.add(
            "playbook.schema",
            ("metadata", key),
            f"{name!r} cannot name a flow ([a-z0-9][a-z0-9._/-]*, at most 128)",
            "use lower-case letters, digits and . _ / -",
        )
    return name


def _executor(executor: Any, problems: Problems) -> dict[str, Any]:
    if executor is None:
        return {}
    if not isinstance(executor, dict):
        problems.add(
            "playbook.schema",
            ("executor",),
            "`executor` is a map",
            "write `executor: {spec: {...}}`",
        )
        return {}
    for key in sorted(set(executor) - EXECUTOR_FIELDS):
        problems.add(
            "playbook.schema",
            ("executor", key),
            f"unknown executor field {key!r}",
            f"keep only {', '.join(sorted(EXECUTOR_FIELDS))}",
        )
    spec = executor.get("spec")
    if spec is not None and not isinstance(spec, dict):
        problems.add(
            "playbook.schema",
            ("executor", "spec"),
            "`spec` is a map",
            "write `spec: {entry_step: ...}`",
        )
    return executor


def _definition(
    doc: dict[str, Any], spec: dict[str, Any], names: list[str], problems: Problems
) -> AuthoredDefinition:
    metadata = as_map(doc.get("metadata"))
    value: AuthoredDefinition = {
        "format": FORMAT_2,
        "name": _metadata_name(doc, problems),
        "description": metadata.get("description"),
        "workload": doc.get("workload") if doc.get("workload") is not None else {},
        "keychain": doc.get("keychain") if doc.get("keychain") is not None else [],
        "policy": _policy(spec, names, problems),
        "limits": _limits(spec),
    }
    entry = spec.get("entry_step")
    if entry is not None:
        _known_step(entry, ("executor", "spec", "entry_step"), names, problems)
        value["entry"] = entry
    return value


def _policy(spec: dict[str, Any], names: list[str], problems: Problems) -> AuthoredPolicy:
    failure = spec.get("failure")
    mode = failure.get("mode") if isinstance(failure, dict) else None
    policy: AuthoredPolicy = {
        "on_deny": spec.get("on_deny"),
        "no_next_is_error": spec.get("no_next_is_error"),
        "failure_mode": mode,
        "final_step": spec.get("final_step"),
    }
    if policy["final_step"] is not None:
        _known_step(policy["final_step"], ("executor", "spec", "final_step"), names, problems)
    return policy


def _limits(spec: dict[str, Any]) -> AuthoredLimits:
    """`executor.spec.policy.limits.max_payload_bytes` (seed 003 §5.1): results over it are
    stored by reference (the CFD's `result_inline_bytes_max`)."""
    limits = as_map(as_map(as_map(spec.get("policy")).get("limits")))
    payload = limits.get("max_payload_bytes")
    return {} if payload is None else {"result_inline_bytes_max": payload}


def _step_names(workflow: list[Any], problems: Problems) -> list[str]:
    names: list[str] = []
    for index, step in enumerate(workflow):
        name = step.get("step") if isinstance(step, dict) else None
        if not isinstance(name, str) or not _STEP_NAME.match(name):
            problems.add(
                "playbook.schema",
                ("workflow", index, "step"),
                f"a step is a map with `step: NAME` (text, 1-128 characters, no control "
                f"characters), not {name!r}",
                "write `- step: my_step`",
            )
            continue
        if name in names:
            problems.add(
                "playbook.step_duplicate",
                ("workflow", index, "step"),
                f"a second step named {name!r}",
                "give every step its own name",
            )
        names.append(name)
    return names


def _known_step(name: Any, parts: Parts, names: list[str], problems: Problems) -> None:
    if name not in names:
        problems.add(
            "playbook.step_unknown",
            parts,
            f"no step named {name!r}",
            f"name one of the workflow's steps ({', '.join(names)})",
        )


def _workbook(workbook: Any, problems: Problems) -> dict[str, Any]:
    if workbook is None:
        return {}
    if not isinstance(workbook, list):
        problems.add(
            "playbook.schema",
            ("workbook",),
            "`workbook` is a list",
            "write `workbook: [{name, tool}]`",
        )
        return {}
    entries: dict[str, Any] = {}
    for index, entry in enumerate(workbook):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not isinstance(entry.get("tool"), dict):
            problems.add(
                "playbook.schema",
                ("workbook", index),
                "a workbook entry is `{name, tool: {kind, ...}}`",
                "write `- name: my_action` with `tool: {kind: python, code: ...}`",
            )
            continue
        if name in entries:
            problems.add(
                "playbook.schema",
                ("workbook", index, "name"),
                f"a second entry {name!r}",
                "rename one",
            )
        entries[name] = entry
    return entries


# -- steps -------------------------------------------------------------------------------------


def _step(
    step: dict[str, Any], parts: Parts, names: list[str], context: TaskContext
) -> AuthoredStep:
    problems = context.problems
    name = str(step.get("step"))
    _step_fields(step, parts, problems)
    for key in ("spec", "args", "set_ctx"):
        if step.get(key) is not None and not isinstance(step[key], dict):
            problems.add(
                "playbook.schema", (*parts, key), f"`{key}` is a map", f"write `{key}: {{...}}`"
            )
    spec = as_map(step.get("spec"))
    loop = _loop(step.get("loop"), (*parts, "loop"), problems)
    args = step.get("args")
    context.step_args = args if isinstance(args, dict) else {}
    loop_spec = loop.pop("spec", {}) if loop is not None else {}
    context.outer_specs = (*context.outer_specs, spec, loop_spec)
    compiled: AuthoredStep = {
        "name": name,
        "description": step.get("desc", step.get("description")),
    }
    admit = _admit(spec, (*parts, "spec", "policy", "admit"), problems)
    if admit is not None:
        compiled["admit"] = admit
    if loop is not None:
        compiled["loop"] = loop
    if isinstance(step.get("set_ctx"), dict):
        compiled["set_ctx"] = step["set_ctx"]  # after the tasks, before the arcs (spec/12 §5)
    tasks: list[AuthoredTask] = []
    if step.get("tool") is None:
        problems.add(
            "playbook.tool_missing",
            parts,
            f"step {name!r} has no `tool`",
            "add `tool: {kind: noop}` for a step that only routes",
        )
    for task, where in normalized(step.get("tool") or [], name, (*parts, "tool"), problems):
        compiled_task = compile_task(task, where, context)
        if compiled_task is not None:
            tasks.append(compiled_task)
    compiled["tasks"] = tasks
    if loop is None and len(tasks) > 1:
        compiled["result"] = PIPELINE_RESULT
    compiled["next"] = _next(step.get("next"), (*parts, "next"), names, problems)
    return compiled


def _step_fields(step: dict[str, Any], parts: Parts, problems: Problems) -> None:
    for key in step:
        if key in STEP_FIELDS_ALL:
            continue
        if key == "set_iter":
            problems.add(
                "playbook.field_unknown",
                (*parts, key),
                "a step has no `set_iter`",
                STEP_SET_ITER_FIX,
            )
        elif key in LEGACY_STEP_FIELDS:
            problems.add(
                f"playbook.legacy_{key}",
                (*parts, key),
                f"step-level `{key}` is not part of v10",
                LEGACY_STEP_FIELDS[key],
            )
        else:
            problems.add(
                "playbook.field_unknown",
                (*parts, str(key)),
                f"unknown step field {key!r}",
                "tool fields go inside `tool:`; a step has " + ", ".join(sorted(STEP_FIELDS_ALL)),
            )


def _loop(loop: Any, parts: Parts, problems: Problems) -> AuthoredLoop | None:
    if loop is None:
        return None
    if not isinstance(loop, dict) or "in" not in loop or "iterator" not in loop:
        problems.add(
            "playbook.loop_invalid",
            parts,
            "a loop needs both `in` and `iterator`",
            'write `loop: {in: "{{ workload.items }}", iterator: item}`',
        )
        return None
    for key in sorted(set(loop) - LOOP_FIELDS):
        problems.add(
            "playbook.loop_invalid",
            (*parts, key),
            f"unknown loop field {key!r}",
            "put `mode`, `max_in_flight` and `policy.exec` under `loop.spec`",
        )
    if loop.get("spec") is not None and not isinstance(loop["spec"], dict):
        problems.add(
            "playbook.loop_invalid",
            (*parts, "spec"),
            "`loop.spec` is a map",
            "write `spec: {mode: parallel}`",
        )
    spec = as_map(loop.get("spec"))
    policy = as_map(spec.get("policy"))
    return {
        "in": loop["in"],
        "iterator": loop["iterator"],
        "mode": spec.get("mode"),
        "max_in_flight": spec.get("max_in_flight"),
        "exec": policy.get("exec"),
        "spec": spec,
    }


def _admit(spec: dict[str, Any], parts: Parts, problems: Problems) -> AuthoredGuard | None:
    """`spec.policy.admit.rules` as one guard: the first rule whose `when` holds decides;
    none holding admits (no `admit` is allow)."""
    policy = spec.get("policy")
    admit = policy.get("admit") if isinstance(policy, dict) else None
    if admit is None:
        return None
    rules = admit.get("rules") if isinstance(admit, dict) else None
    if not isinstance(rules, list):
        problems.add(
            "playbook.policy_invalid",
            parts,
            "admission is an object with a `rules:` list",
            "write `admit: {rules: [{when: ..., then: {allow: true}}, {else: {then: {allow: false}}}]}`",
        )
        return None
    decided = [_admit_rule(rule, (*parts, "rules", i), problems) for i, rule in enumerate(rules)]
    if any(rule is None for rule in decided):
        return None
    return _admit_guard([rule for rule in decided if rule is not None])


def _admit_rule(rule: Any, parts: Parts, problems: Problems) -> tuple[str | None, bool] | None:
    """(the rule's expression, or None for `else`; whether it allows)."""
    when, then = None, None
    if isinstance(rule, dict) and set(rule) == {"else"} and isinstance(rule["else"], dict):
        then = rule["else"].get("then")
    elif isinstance(rule, dict) and set(rule) == {"when", "then"}:
        when, then = rule["when"], rule["then"]
        if isinstance(when, bool):
            when = "{{ true }}" if when else "{{ false }}"
    allow = then.get("allow") if isinstance(then, dict) else None
    expression = _expression(when) if isinstance(when, str) else None
    if not isinstance(allow, bool) or (when is not None and expression is None):
        problems.add(
            "playbook.policy_invalid",
            parts,
            'an admission rule is `{when: "{{ expr }}", then: {allow: BOOL}}` or `{else: {then: {allow: BOOL}}}`',
            'write `- when: "{{ ctx.ready }}"` with `then: {allow: true}`',
        )
        return None
    return expression, allow


def _expression(template: str) -> str | None:
    """The expression of a template that is one `{{ expression }}`."""
    text = template.strip()
    if text.startswith("{{") and text.endswith("}}") and text.count("{{") == 1:
        return text[2:-2].strip()
    return None


def _admit_guard(rules: list[tuple[str | None, bool]]) -> AuthoredGuard | None:
    """The rules as one template: `{% if (w1) %}true{% elif (w2) %}false{% else %}...`; no rule
    matching admits, as no `admit` does."""
    if not rules:
        return None
    first_when, first_allow = rules[0]
    if len(rules) == 2 and first_allow and first_when is not None and rules[1] == (None, False):
        return {"template": "{{ " + first_when + " }}"}  # the common `when`, else deny
    parts: list[str] = []
    for when, allow in rules:
        verdict = "true" if allow else "false"
        if when is None:
            if not parts:
                return {"template": verdict}
            parts.append("{% else %}" + verdict)
            break
        parts.append(("{% elif " if parts else "{% if ") + f"({when}) %}}" + verdict)
    else:
        parts.append("{% else %}true")
    return {"template": "".join(parts) + "{% endif %}"}


def _next(next_: Any, parts: Parts, names: list[str], problems: Problems) -> AuthoredNext:
    if next_ is None:
        return {"arcs": []}
    if (
        isinstance(next_, list)
        or not isinstance(next_, dict)
        or not isinstance(next_.get("arcs", []), list)
    ):
        problems.add(
            "playbook.next_list",
            parts,
            "`next` is a router object, not a list or a name",
            "write `next: {spec: {mode: exclusive}, arcs: [{step: NAME, when: ...}]}`",
        )
        return {"arcs": []}
    spec = as_map(next_.get("spec"))
    arcs = [
        _arc(arc, (*parts, "arcs", i), names, problems)
        for i, arc in enumerate(next_.get("arcs") or [])
    ]
    return {"mode": spec.get("mode"), "arcs": [arc for arc in arcs if arc is not None]}


def _arc(arc: Any, parts: Parts, names: list[str], problems: Problems) -> AuthoredArc | None:
    if not isinstance(arc, dict) or not isinstance(arc.get("step"), str):
        problems.add(
            "playbook.schema",
            parts,
            "an arc is `{step: NAME, when?, args?}`",
            "write `- step: NAME`",
        )
        return None
    _known_step(arc["step"], (*parts, "step"), names, problems)
    compiled: AuthoredArc = {"to": arc["step"], "args": arc.get("args")}
    if arc.get("when") is not None:
        when = guard(arc["when"], (*parts, "when"), problems)
        if when is not None:
            compiled["when"] = {"template": _EVENT_LITERAL.sub(_event_alias, when["template"])}
    return compiled


def _event_alias(match: re.Match[str]) -> str:
    quote = match.group(1)
    return f"{quote}{EVENT_ALIASES[match.group(2)]}{quote}"
