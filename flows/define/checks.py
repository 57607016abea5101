"""Semantic checks of a flow definition (spec/11-flows.md §1.6): what the models' structural
validation cannot see, because it needs the whole definition.

    flow.step_duplicate    two steps with one name
    flow.step_unknown      an arc, `entry` or `final_step` naming no step
    flow.task_duplicate    two tasks of one step with one name (nested lists included: a
                           task's name is its handle in `results` and for `jump`)
    flow.task_unknown      a `jump` to no task of the jumping task's own list
    flow.tool_unknown      a `tool.kind` that is not supported
    flow.tool_field_unknown a tool field its kind does not take (flows/define/tool_schema.py: the
                           message lists the fields it takes, or why and what to write)
    flow.tool_args_invalid a key of a python call's `args` no code could receive as given
    flow.subflow_unknown   a subflow or continue-with `flow` that is neither `self` nor an alias
    flow.template_invalid  a template or template guard that does not parse
    flow.jsonpath_invalid  a JSONPath guard that does not compile
    flow.unreachable       a step no path from `entry` reaches (`final_step` excepted)
    flow.keychain_duplicate two keychain entries with one name
    flow.shell_templated   a template in a shell tool's command text (or in the script of an
                           `argv` that runs a shell with -c): values must not be shell syntax
    flow.limit             more steps, tasks, arcs, rules, subflows, keychain entries or
                           nesting than allowed

`check_definition` returns every problem, in definition order. `reference_warnings` returns
what `aos flow check` warns of without refusing the definition (NoETL renders an unknown name
as nothing in a task's fields, and playbooks rely on it):

    flow.template_reference_unknown a template reading a name no step, task, workload key,
                           arc argument, loop item or namespace provides, or a field its
                           value's known shape lacks (flows/define/references.py)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jsonpath
from jinja2.sandbox import ImmutableSandboxedEnvironment

from aos.flows.define.references import KnownNames
from aos.flows.define.tool_schema import (
    TOOL_KINDS,
    field_problems,
    python_args_problems,
)
from aos.flows.errors import Problem, json_path
from aos.flows.limits import DefinitionLimits

if TYPE_CHECKING:
    from aos.flows.define.cfd import (
        CallTask,
        FlowDefinition,
        JsonPathGuard,
        Rule,
        Step,
        Task,
        TemplateGuard,
        Tool,
    )

# Parsing only: the interpreter adds its own filters (coalesce, merge_objects, ...), which a
# plain environment would refuse at compile time but not at parse time.
_JINJA = ImmutableSandboxedEnvironment()

Parts = tuple[str | int, ...]


@dataclass
class _Context:
    defn: FlowDefinition
    limits: DefinitionLimits
    problems: list[Problem] = field(default_factory=list)
    references: bool = False
    """Whether to check what templates read (into `warnings`)."""
    warnings: list[Problem] = field(default_factory=list)
    _known: KnownNames | None = None

    @property
    def known(self) -> KnownNames:
        """The names the definition's templates may read (made at the first template)."""
        if self._known is None:
            self._known = KnownNames(self.defn)
        return self._known

    def add(self, code: str, parts: Parts, message: str) -> None:
        self.problems.append(Problem(code, json_path(parts), message))


def check_definition(
    defn: FlowDefinition, limits: DefinitionLimits, *, unreachable: bool = True
) -> list[Problem]:
    """Every semantic problem of a structurally valid definition (`flow.unreachable` only
    with `unreachable`: playbooks may hold steps no arc reaches, seed 000 §5.1)."""
    return _checked(_Context(defn, limits), unreachable).problems


def reference_warnings(defn: FlowDefinition, limits: DefinitionLimits) -> list[Problem]:
    """What the templates of a definition (without problems) read that nothing provides."""
    return _checked(_Context(defn, limits, references=True), unreachable=False).warnings


def _checked(context: _Context, unreachable: bool) -> _Context:
    defn, limits = context.defn, context.limits
    steps = _step_names(context)
    _check_step_refs(context, steps)
    for index, step in enumerate(defn.steps):
        _check_step(context, step, ("steps", index))
    if len(defn.subflows) > limits.subflows_max:
        context.add("flow.limit", ("subflows",), f"more than {limits.subflows_max} subflows")
    _check_keychain(context)
    if unreachable and defn.entry in steps:
        _check_reachable(context, steps)
    return context


def _check_keychain(context: _Context) -> None:
    """Keychain entry names are unique: templates name an entry as `keychain.NAME`."""
    entries = context.defn.keychain
    if len(entries) > context.limits.keychain_entries_max:
        limit = context.limits.keychain_entries_max
        context.add("flow.limit", ("keychain",), f"more than {limit} keychain entries")
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        if entry.name in seen:
            message = f"keychain entry {entry.name!r} is defined twice; rename or remove one"
            context.add("flow.keychain_duplicate", ("keychain", index, "name"), message)
        seen.add(entry.name)


def nesting_depth(value: Any, stop: int) -> int:
    """How deeply maps and lists nest in `value` (a scalar is 0, `{}` is 1), counted no
    further than `stop`."""
    if stop <= 0 or not isinstance(value, (dict, list)):
        return 0
    items = value.values() if isinstance(value, dict) else value
    return 1 + max((nesting_depth(item, stop - 1) for item in items), default=0)


# --------------------------------------------------------------------------------------------
# Steps and arcs


def _step_names(context: _Context) -> dict[str, int]:
    """Step name -> index of its first definition."""
    steps: dict[str, int] = {}
    if len(context.defn.steps) > context.limits.steps_max:
        context.add("flow.limit", ("steps",), f"more than {context.limits.steps_max} steps")
    for index, step in enumerate(context.defn.steps):
        if step.name in steps:
            first = json_path(("steps", steps[step.name]))
            message = f"a step named {step.name!r} is already defined at {first}"
            context.add("flow.step_duplicate", ("steps", index, "name"), message)
            continue
        steps[step.name] = index
    return steps


def _check_step_refs(context: _Context, steps: dict[str, int]) -> None:
    defn = context.defn
    if defn.entry not in steps:
        context.add("flow.step_unknown", ("entry",), f"no step named {defn.entry!r}")
    final = defn.policy.final_step
    if final is not None and final not in steps:
        context.add("flow.step_unknown", ("policy", "final_step"), f"no step named {final!r}")
    for index, step in enumerate(defn.steps):
        for arc_index, arc in enumerate(step.next.arcs):
            if arc.to not in steps:
                parts = ("steps", index, "next", "arcs", arc_index, "to")
                context.add("flow.step_unknown", parts, f"no step named {arc.to!r}")


def _check_reachable(context: _Context, steps: dict[str, int]) -> None:
    defn = context.defn
    by_name = {step.name: step for step in defn.steps}
    seen = {defn.entry}
    frontier = [defn.entry]
    while frontier:
        step = by_name[frontier.pop()]
        for arc in step.next.arcs:
            if arc.to in steps and arc.to not in seen:
                seen.add(arc.to)
                frontier.append(arc.to)
    for name, index in steps.items():
        if name not in seen and name != defn.policy.final_step:
            message = f"no path from the entry step {defn.entry!r} reaches {name!r}"
            context.add("flow.unreachable", ("steps", index), message)


def _check_step(context: _Context, step: Step, parts: Parts) -> None:
    limits = context.limits
    if step.admit is not None:
        _check_guard(context, step.admit, (*parts, "admit"))
    if step.loop is not None:  # a `max_in_flight` over `in_flight_max` runs clamped (§3.4)
        _check_templates(context, step.loop.in_, (*parts, "loop", "in"))
    _check_templates(context, step.result, (*parts, "result"))
    _check_step_set_ctx(context, step, parts)
    arcs = step.next.arcs
    if len(arcs) > limits.arcs_per_step_max:
        message = f"more than {limits.arcs_per_step_max} arcs"
        context.add("flow.limit", (*parts, "next", "arcs"), message)
    for index, arc in enumerate(arcs):
        arc_parts = (*parts, "next", "arcs", index)
        if arc.when is not None:
            _check_guard(context, arc.when, (*arc_parts, "when"))
        _check_templates(context, arc.args, (*arc_parts, "args"))
    _check_tasks(context, step, parts)


def _check_step_set_ctx(context: _Context, step: Step, parts: Parts) -> None:
    if step.set_ctx:
        _format_2_only(context, (*parts, "set_ctx"), "a step's `set_ctx`")
    for key, value in step.set_ctx.items():
        _check_templates(context, value, (*parts, "set_ctx", key))


def _format_2_only(context: _Context, parts: Parts, what: str) -> bool:
    """Whether the definition may hold `what`: an `aos.flow/1` one may not (a problem)."""
    from aos.flows.define.cfd import FORMAT_1  # cfd imports this module

    if context.defn.format != FORMAT_1:
        return True
    context.add("flow.schema", parts, f"{what} needs `format: aos.flow/2` (spec/11 §1.8)")
    return False


# --------------------------------------------------------------------------------------------
# Tasks


@dataclass
class _TaskList:
    parts: Parts
    tasks: list[Task]
    depth: int


def _task_lists(context: _Context, step: Step, parts: Parts) -> Iterator[_TaskList]:
    """Every task list of a step, depth first; lists nested too deeply are reported and not
    entered."""
    pending = [_TaskList((*parts, "tasks"), step.tasks, 1)]
    while pending:
        current = pending.pop()
        yield current
        for index in reversed(range(len(current.tasks))):
            task = current.tasks[index]
            for sub_parts, sub_tasks in reversed(task.task_lists()):
                nested = _TaskList(
                    (*current.parts, index, *sub_parts), sub_tasks, current.depth + 1
                )
                if nested.depth > context.limits.task_nesting_max:
                    message = f"task lists nest deeper than {context.limits.task_nesting_max}"
                    context.add("flow.limit", nested.parts, message)
                    continue
                pending.append(nested)


def _check_tasks(context: _Context, step: Step, parts: Parts) -> None:
    names: dict[str, Parts] = {}
    count = 0
    for task_list in _task_lists(context, step, parts):
        count += len(task_list.tasks)
        local = {task.name for task in task_list.tasks}
        for index, task in enumerate(task_list.tasks):
            task_parts = (*task_list.parts, index)
            first = names.setdefault(task.name, task_parts)
            if first != task_parts:
                message = f"a task named {task.name!r} is already defined at {json_path(first)}"
                context.add("flow.task_duplicate", (*task_parts, "name"), message)
            _check_task(context, task, task_parts, local)
    if count > context.limits.tasks_per_step_max:
        message = f"{count} tasks; a step has at most {context.limits.tasks_per_step_max}"
        context.add("flow.limit", (*parts, "tasks"), message)


def _check_task(context: _Context, task: Task, parts: Parts, local: set[str]) -> None:
    if task.when is not None:
        _check_guard(context, task.when, (*parts, "when"))
    if task.policy is not None:
        rules = task.policy.rules
        if len(rules) > context.limits.rules_per_task_max:
            message = f"more than {context.limits.rules_per_task_max} rules"
            context.add("flow.limit", (*parts, "policy", "rules"), message)
        for index, rule in enumerate(rules):
            _check_rule(context, rule, (*parts, "policy", "rules", index), local)
    _check_action(context, task, parts)


def _check_rule(context: _Context, rule: Rule, parts: Parts, local: set[str]) -> None:
    if rule.when is not None:
        _check_guard(context, rule.when, (*parts, "when"))
    then = rule.then
    if then.do == "jump" and then.to is not None and then.to not in local:
        message = f"no task named {then.to!r} in this task's own list (a jump stays in it)"
        context.add("flow.task_unknown", (*parts, "then", "to"), message)
    for key, value in then.set_ctx.items():
        _check_templates(context, value, (*parts, "then", "set_ctx", key))
    for key, value in then.set_iter.items():
        _check_templates(context, value, (*parts, "then", "set_iter", key))


def _check_action(context: _Context, task: Task, parts: Parts) -> None:
    """The action's own fields: its templates, and the tool or flow it names."""
    if task.do == "call":
        _check_tool(context, task.tool, (*parts, "tool"))
        _check_python_args(context, task, parts)
    elif task.do == "branch":
        for index, case in enumerate(task.cases):
            _check_guard(context, case.when, (*parts, "cases", index, "when"))
    elif task.do == "subflow" and is_template(task.flow):
        if _format_2_only(context, (*parts, "flow"), "a subflow named by a template"):
            _check_templates(context, task.flow, (*parts, "flow"))
    elif task.do in ("subflow", "continue_with"):
        flow = task.flow
        if flow != "self" and flow not in context.defn.subflows:
            message = f"{flow!r} is neither `self` nor an alias of `subflows`"
            context.add("flow.subflow_unknown", (*parts, "flow"), message)
    for field_parts, value in _template_fields(task):
        _check_templates(context, value, (*parts, *field_parts))


def _check_tool(context: _Context, tool: Tool, parts: Parts) -> None:
    if tool.kind not in TOOL_KINDS:
        message = f"unknown tool kind {tool.kind!r}; supported: {', '.join(TOOL_KINDS)}"
        context.add("flow.tool_unknown", (*parts, "kind"), message)
    fields = tool.model_extra or {}
    for problem in field_problems({"kind": tool.kind, **fields}):
        context.add("flow.tool_field_unknown", (*parts, problem.name), str(problem))
    from aos.flows.define.cfd import FORMAT_1  # cfd imports this module

    for key, value in fields.items():
        if key == "code" and tool.kind == "python" and context.defn.format != FORMAT_1:
            continue  # a playbook's code runs as written where it does not render (spec/12 §6)
        _check_templates(context, value, (*parts, key))
    if tool.kind == "shell":
        _check_shell(context, fields, parts)
        spec = fields.get("spec")
        if isinstance(spec, dict):  # NoETL's place for a tool's fields
            _check_shell(context, spec, (*parts, "spec"))


# --------------------------------------------------------------------------------------------
# Shell commands

SHELL_TEMPLATED_FIX = (
    "keep the command fixed and pass the value in `args` (each key is an environment variable "
    'of the command: `args: {name: "{{ workload.name }}"}`, read as "$name"), or write '
    '`argv: [program, "{{ ... }}"]`, which runs the program with no shell'
)
SHELL_PROGRAMS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})
"""Programs that parse their `-c` argument as shell syntax."""


def _check_shell(context: _Context, fields: dict[str, Any], parts: Parts) -> None:
    """A shell parses its command text, so a template rendered into it would let a run-time
    value (a workload field, a result) run as commands: refused, with the fix."""
    command = fields.get("command")
    if isinstance(command, str) and is_template(command):
        message = f"/bin/sh parses the command: it cannot hold a template; {SHELL_TEMPLATED_FIX}"
        context.add("flow.shell_templated", (*parts, "command"), message)
    argv = fields.get("argv")
    if not isinstance(argv, list):
        return
    script = _shell_script(argv)
    if script is not None and isinstance(argv[script], str) and is_template(argv[script]):
        program = argv[0]
        message = f"{program} -c parses this text: it cannot hold a template; {SHELL_TEMPLATED_FIX}"
        context.add("flow.shell_templated", (*parts, "argv", script), message)


def _shell_script(argv: list[Any]) -> int | None:
    """The index of the command string of `argv` when it runs a shell with `-c` (`sh -c
    SCRIPT [NAME [ARG...]]`: the first operand after the options), else None. The operands
    after it are positional parameters ("$1"), which a shell does not parse: templates there
    are safe."""
    if not argv or not isinstance(argv[0], str) or argv[0].rsplit("/", 1)[-1] not in SHELL_PROGRAMS:
        return None
    with_c = False
    for index, word in enumerate(argv[1:], start=1):
        if not isinstance(word, str):
            return None
        if word == "--":
            return index + 1 if with_c and index + 1 < len(argv) else None
        if len(word) > 1 and word[0] in "-+" and not word.startswith("--"):
            with_c = with_c or (word[0] == "-" and "c" in word[1:])
            continue
        if word.startswith("--"):
            continue  # a long option (bash's --norc ...)
        return index if with_c else None
    return None


def _check_python_args(context: _Context, task: CallTask, parts: Parts) -> None:
    """The keys of a python call's literal `args` that no code could receive as given."""
    if task.tool.kind == "python":
        libs = (task.tool.model_extra or {}).get("libs")
        for key, message in python_args_problems(task.args, libs):
            context.add("flow.tool_args_invalid", (*parts, "args", key), message)


def _template_fields(task: Task) -> list[tuple[Parts, Any]]:
    """The fields of a task rendered at run time, by path from the task."""
    if task.do == "assign":
        return [(("set", key), value) for key, value in task.set.items()]
    if task.do == "business_ref":
        return [(("value",), task.value)]
    if task.do == "call":
        return [(("args",), task.args)]
    if task.do == "repeat":
        return [(("over",), task.over)]
    if task.do == "human":
        fields = ("title", "description", "assignee", "data")
        return [((name,), getattr(task, name)) for name in fields]
    if task.do == "wait_timer":
        return [(("until_ns",), task.until_ns)]
    if task.do in ("subflow", "continue_with"):
        return [(("workload",), task.workload)]
    if task.do == "fail":
        return [(("message",), task.message)]
    if task.do == "noop":
        return [(("result",), task.result)]
    return []


# --------------------------------------------------------------------------------------------
# Templates and guards


def is_template(text: str) -> bool:
    """A string is a template iff it contains `{{` or `{%` (§3.6)."""
    return "{{" in text or "{%" in text


def _check_templates(context: _Context, value: Any, parts: Parts) -> None:
    """Parse every template string in `value` (nested values included)."""
    if isinstance(value, str):
        if is_template(value):
            _parse_template(context, value, parts)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_templates(context, item, (*parts, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_templates(context, item, (*parts, index))


def _check_guard(context: _Context, guard: TemplateGuard | JsonPathGuard, parts: Parts) -> None:
    text = guard.text
    if guard.kind == "template":
        # A bare guard is an expression: the interpreter renders `{{ TEXT }}`.
        wrapped = text if is_template(text) else "{{ " + text + " }}"
        _parse_template(context, wrapped, (*parts, "template"))
        return
    problem = _jsonpath_problem(text)
    if problem is not None:
        context.add("flow.jsonpath_invalid", (*parts, "jsonpath"), problem)


def _parse_template(context: _Context, text: str, parts: Parts) -> None:
    try:
        parsed = _JINJA.parse(text)
    except RecursionError:
        context.add("flow.template_invalid", parts, "the template nests too deeply to parse")
        return
    except Exception as error:  # any parse failure is the author's problem
        context.add("flow.template_invalid", parts, _first_line(error))
        return
    if context.references:
        for message in context.known.problems(parsed):
            warning = Problem("flow.template_reference_unknown", json_path(parts), message)
            context.warnings.append(warning)


def _jsonpath_problem(text: str) -> str | None:
    if not text.startswith("$"):
        return "a JSONPath query starts with `$` (the root)"
    try:
        jsonpath.compile(text)
    except RecursionError:
        return "the query nests too deeply to compile"
    except Exception as error:  # any compile failure is the author's problem
        return _first_line(error)
    return None


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
