"""The canonical flow definition (spec/11 §1): read from the CAS, normalized once, indexed.

The host writes the canonical form with every default present; this reader still fills
defaults and accepts the authoring shorthands, because a definition written by another
version of the host must fail the execution cleanly (`engine`), never trap the step.
Decoded definitions are memoized by hash (content-keyed, bounded): per-step cost does not
grow with the definition's size."""

from __future__ import annotations

import re
from typing import Any

from aos_flow.blobs import Blobs, remember
from aos_flow.errors import DefinitionError
from aos_sdk import cbor

LIMIT_DEFAULTS = {
    "tokens_max": 10_000,
    "loop_items_max": 10_000,
    "in_flight_max": 100,
    "iter_depth_max": 8,
    "history_events_per_step_max": 1_000,
    "tasks_per_input_max": 100_000,
    "result_inline_bytes_max": 64 * 1024,
    "signals_buffered_max": 100,
}
TOOL_KINDS = ("echo", "http", "python", "postgres", "duckdb", "shell", "file", "transfer")
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
RULE_ACTIONS = ("continue", "retry", "jump", "break", "fail")
FORMATS = {"aos.flow/1": 1, "aos.flow/2": 2}
"""The format versions this interpreter reads (spec/11 §1.8), by their number."""
BRANCH_NAMES = ("ok", "error", "timeout")
DEFINITIONS_MAX = 8
_CACHE: dict[str, Any] = {}
_HASH = re.compile(r"blake3:[0-9a-f]{64}")


def is_hash(value: Any) -> bool:
    """A CAS hash as the kernel's `hash` type writes it (anything else would be refused)."""
    return type(value) is str and _HASH.fullmatch(value) is not None


class Definition:
    """A normalized CFD and its indexes. Shared by every step that memoizes it: never
    mutated after construction, and values taken from it are copied before they are
    stored in a state (rendering rebuilds every container)."""

    def __init__(self, hash_: str, raw: dict[str, Any]) -> None:
        self.hash = hash_
        self.format = _format(raw.get("format"))
        self.name = _text(raw.get("name", ""), "$.name")
        self.workload = _map(raw.get("workload"), "$.workload")
        self.steps = _steps(raw.get("steps"), self.format)
        self.order = [step["name"] for step in self.steps.values()]
        self.entry = _step_ref(self.steps, raw.get("entry") or self.order[0], "$.entry")
        self.policy = _policy(raw.get("policy"), self.steps)
        self.limits = _limits(raw.get("limits"))
        self.subflows = _map(raw.get("subflows"), "$.subflows")
        self.keychain = _keychain(raw.get("keychain"))
        self.sources = _sources(self.steps)
        self.jumps = _jump_index(self.steps)
        self.signals = _waited_signals(self.steps)

    def step(self, name: str) -> dict[str, Any]:
        return self.steps[name]

    def task_list(self, step: str, path: list[Any]) -> list[dict[str, Any]]:
        """The nested task list a resume pointer names (a path of keys from the step)."""
        node: Any = self.steps[step]
        for key in path:
            node = node[key]
        return node


def load(blobs: Blobs, hash_: Any) -> Definition:
    """The definition named `hash_`: memoized, else read (a read request the first time)."""
    if not is_hash(hash_):
        raise DefinitionError("the execution names no definition")
    cached = _CACHE.get(hash_)
    if cached is None:
        cached = _build(hash_, blobs.raw(hash_))
        remember(_CACHE, hash_, cached, DEFINITIONS_MAX)
    if type(cached) is str:
        raise DefinitionError(cached)
    return cached


def _build(hash_: str, data: bytes) -> Definition | str:
    """A Definition, or the message of why it is not one (memoized the same way)."""
    try:
        # Read by hash: its bytes are what deploy wrote, and the kernel proved them against
        # the hash, so the re-encode that checks canonical form is skipped (half of a fresh
        # instance's definition cost); the shape is still checked while reading.
        raw = cbor.decode(data, trusted=True)
    except cbor.CborError as error:
        return f"the definition {hash_} is not CBOR: {error}"
    if type(raw) is not dict:
        return f"the definition {hash_} is not a map"
    try:
        return Definition(hash_, raw)
    except DefinitionError as error:
        return f"the definition {hash_} is malformed: {error.message}"


# -- shapes -----------------------------------------------------------------------------------


def _keychain(value: Any) -> list[dict[str, Any]]:
    """The keychain entries (spec/11 §1.7): maps with a text `name`, as written."""
    entries = _list(value, "$.keychain")
    for index, entry in enumerate(entries):
        if type(entry) is not dict or type(entry.get("name")) is not str:
            raise _fail(f"$.keychain[{index}]", "expected a map with a text name")
    return entries


def _fail(path: str, message: str) -> DefinitionError:
    return DefinitionError(f"{path}: {message}")


def _text(value: Any, path: str) -> str:
    if type(value) is not str:
        raise _fail(path, "expected text")
    return value


def _map(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if type(value) is not dict:
        raise _fail(path, "expected a map")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if type(value) is not list:
        raise _fail(path, "expected a list")
    return value


def _choice(value: Any, allowed: tuple[str, ...], default: str, path: str) -> str:
    if value is None:
        return default
    if value not in allowed:
        raise _fail(path, f"expected one of {', '.join(allowed)}")
    return value


def _int(value: Any, path: str, default: int | None = None) -> int | None:
    if value is None:
        return default
    if type(value) is not int or value < 0:
        raise _fail(path, "expected a non-negative integer")
    return value


def _ms(node: dict[str, Any], name: str, path: str, default: int | None = None) -> int | None:
    """A duration in integer milliseconds: canonical `NAME_ms`, or an authored `NAME_s`."""
    if node.get(f"{name}_ms") is not None:
        return _int(node[f"{name}_ms"], f"{path}.{name}_ms")
    seconds = node.get(f"{name}_s")
    if seconds is None:
        return default
    if type(seconds) not in (int, float) or seconds < 0:
        raise _fail(f"{path}.{name}_s", "expected a non-negative number")
    return round(seconds * 1000)


def guard(value: Any, path: str) -> dict[str, str] | None:
    """`{template: TEXT}` | `{jsonpath: TEXT}` | null; a string is the authoring shorthand."""
    if value is None:
        return None
    if type(value) is str:
        return {"jsonpath": value} if value.startswith("$") else {"template": value}
    if type(value) is dict and len(value) == 1:
        kind, text = next(iter(value.items()))
        if kind in ("template", "jsonpath") and type(text) is str:
            return {kind: text}
    raise _fail(path, "a guard is {template: TEXT} or {jsonpath: TEXT}")


def _format(value: Any) -> int:
    """The definition's format version (none named: 1, as every definition before 2)."""
    if value is None:
        return 1
    if value not in FORMATS:
        raise _fail("$.format", f"{value!r} is not a format this interpreter reads")
    return FORMATS[value]


# -- steps ------------------------------------------------------------------------------------


def _steps(value: Any, format_: int) -> dict[str, dict[str, Any]]:
    raw = _list(value, "$.steps")
    if not raw:
        raise _fail("$.steps", "a flow has at least one step")
    steps: dict[str, dict[str, Any]] = {}
    for index, step in enumerate(raw):
        normal = _step(step, f"$.steps[{index}]", format_)
        if normal["name"] in steps:
            raise _fail(f"$.steps[{index}].name", f"duplicate step {normal['name']!r}")
        steps[normal["name"]] = normal
    for name, step in steps.items():
        for arc_index, arc in enumerate(step["next"]["arcs"]):
            _step_ref(steps, arc["to"], f"step {name}: arc {arc_index}")
    return steps


def _step(value: Any, path: str, format_: int) -> dict[str, Any]:
    step = _map(value, path)
    set_ctx = _map(step.get("set_ctx"), f"{path}.set_ctx") if format_ >= 2 else {}
    return {
        "name": _text(step.get("name"), f"{path}.name"),
        "admit": guard(step.get("admit"), f"{path}.admit"),
        "join": _choice(step.get("join"), ("none", "all"), "none", f"{path}.join"),
        "loop": _loop(step.get("loop"), f"{path}.loop"),
        "tasks": _tasks(step.get("tasks"), f"{path}.tasks"),
        "result": step.get("result"),
        "set_ctx": set_ctx,
        "next": _next(step.get("next"), f"{path}.next"),
    }


def _loop(value: Any, path: str) -> dict[str, Any] | None:
    if value is None:
        return None
    loop = _map(value, path)
    if "in" not in loop:
        raise _fail(path, "a loop has `in`")
    spec = _map(loop.get("spec"), f"{path}.spec")  # NoETL's `loop.spec.{mode, ...}` form
    policy = _map(spec.get("policy"), f"{path}.spec.policy")
    merged = {**policy, **spec, **loop}
    return {
        "in": loop["in"],
        "iterator": _text(loop.get("iterator") or "item", f"{path}.iterator"),
        "mode": _choice(merged.get("mode"), ("sequential", "parallel"), "sequential", path),
        "max_in_flight": _int(merged.get("max_in_flight"), f"{path}.max_in_flight"),
        "exec": _choice(merged.get("exec"), ("local", "distributed"), "local", f"{path}.exec"),
    }


def _next(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {"mode": "exclusive", "arcs": []}
    if type(value) is str:
        return {"mode": "exclusive", "arcs": [_arc(value, path)]}
    if type(value) is list:
        return {"mode": "exclusive", "arcs": [_arc(a, f"{path}[{i}]") for i, a in enumerate(value)]}
    node = _map(value, path)
    spec = _map(node.get("spec"), f"{path}.spec")
    mode = _choice(
        node.get("mode", spec.get("mode")), ("exclusive", "inclusive"), "exclusive", path
    )
    arcs = _list(node.get("arcs"), f"{path}.arcs")
    return {"mode": mode, "arcs": [_arc(arc, f"{path}.arcs[{i}]") for i, arc in enumerate(arcs)]}


def _arc(value: Any, path: str) -> dict[str, Any]:
    if type(value) is str:
        return {"to": value, "when": None, "args": {}}
    arc = _map(value, path)
    target = arc.get("to", arc.get("step"))
    return {
        "to": _text(target, f"{path}.to"),
        "when": guard(arc.get("when"), f"{path}.when"),
        "args": arc.get("args") if arc.get("args") is not None else {},
    }


# -- tasks ------------------------------------------------------------------------------------


def _tasks(value: Any, path: str) -> list[dict[str, Any]]:
    raw = [value] if type(value) is dict else _list(value, path)
    tasks = [
        _task(task, position, f"{path}[{position - 1}]")
        for position, task in enumerate(raw, start=1)
    ]
    seen: dict[str, int] = {}
    for task in tasks:
        if task["name"] in seen:
            raise _fail(path, f"duplicate task {task['name']!r}")
        seen[task["name"]] = 1
    return tasks


def _task(value: Any, position: int, path: str) -> dict[str, Any]:
    task = _map(value, path)
    action = task.get("do")
    if action not in ACTIONS:
        raise _fail(f"{path}.do", f"unknown action {action!r}")
    normal = {
        "name": _text(task.get("name") or f"task_{position}", f"{path}.name"),
        "do": action,
        "when": guard(task.get("when"), f"{path}.when"),
        "policy": _policy_rules(task.get("policy"), f"{path}.policy"),
    }
    normal.update(ACTION_READERS[action](task, path))
    return normal


def _assign(task: dict[str, Any], path: str) -> dict[str, Any]:
    return {"set": _map(task.get("set"), f"{path}.set")}


def _business_ref(task: dict[str, Any], path: str) -> dict[str, Any]:
    return {"value": task.get("value")}


def _call(task: dict[str, Any], path: str) -> dict[str, Any]:
    tool = _map(task.get("tool"), f"{path}.tool")
    if tool.get("kind") not in TOOL_KINDS:
        raise _fail(f"{path}.tool.kind", f"unknown tool kind; supported: {', '.join(TOOL_KINDS)}")
    branches = _map(task.get("branches"), f"{path}.branches")
    return {
        "tool": tool,
        "args": task.get("args") if task.get("args") is not None else {},
        "timeout_ms": _ms(task, "timeout", path),
        "branches": {
            name: _tasks(branches.get(name), f"{path}.branches.{name}") for name in BRANCH_NAMES
        },
    }


def _branch(task: dict[str, Any], path: str) -> dict[str, Any]:
    cases = []
    for index, case in enumerate(_list(task.get("cases"), f"{path}.cases")):
        case = _map(case, f"{path}.cases[{index}]")
        cases.append(
            {
                "when": guard(case.get("when"), f"{path}.cases[{index}].when"),
                "tasks": _tasks(case.get("tasks"), f"{path}.cases[{index}].tasks"),
            }
        )
    return {"cases": cases, "else": _tasks(task.get("else"), f"{path}.else")}


def _repeat(task: dict[str, Any], path: str) -> dict[str, Any]:
    return {
        "over": task.get("over"),
        "as": _text(task.get("as") or "item", f"{path}.as"),
        "tasks": _tasks(task.get("tasks"), f"{path}.tasks"),
    }


def _human(task: dict[str, Any], path: str) -> dict[str, Any]:
    return {
        "title": task.get("title") if task.get("title") is not None else "",
        "description": task.get("description"),
        "assignee": task.get("assignee"),
        "roles": _list(task.get("roles"), f"{path}.roles"),
        "form": task.get("form"),
        "data": task.get("data"),
        "timeout_ms": _ms(task, "timeout", path),
    }


def _wait_signal(task: dict[str, Any], path: str) -> dict[str, Any]:
    return {
        "signal": _text(task.get("signal"), f"{path}.signal"),
        "timeout_ms": _ms(task, "timeout", path),
    }


def _wait_timer(task: dict[str, Any], path: str) -> dict[str, Any]:
    duration = _ms(task, "duration", path)
    until = task.get("until_ns")
    if duration is None and until is None:
        raise _fail(path, "a timer wait has duration_ms or until_ns")
    return {"duration_ms": duration, "until_ns": until}


def _subflow(task: dict[str, Any], path: str) -> dict[str, Any]:
    return {
        "flow": _text(task.get("flow") or "self", f"{path}.flow"),
        "workload": task.get("workload") if task.get("workload") is not None else {},
        "into": task.get("into"),
    }


def _continue_with(task: dict[str, Any], path: str) -> dict[str, Any]:
    return {
        "flow": _text(task.get("flow") or "self", f"{path}.flow"),
        "workload": task.get("workload") if task.get("workload") is not None else {},
    }


def _fail_task(task: dict[str, Any], path: str) -> dict[str, Any]:
    return {"message": task.get("message") or "", "kind": task.get("kind") or "expression"}


def _noop(task: dict[str, Any], path: str) -> dict[str, Any]:
    return {"result": task.get("result")}


ACTION_READERS = {
    "assign": _assign,
    "business_ref": _business_ref,
    "call": _call,
    "branch": _branch,
    "repeat": _repeat,
    "human": _human,
    "wait_signal": _wait_signal,
    "wait_timer": _wait_timer,
    "subflow": _subflow,
    "continue_with": _continue_with,
    "fail": _fail_task,
    "noop": _noop,
}


# -- policies ---------------------------------------------------------------------------------


def _policy_rules(value: Any, path: str) -> list[dict[str, Any]]:
    """A task's rules (`policy: {rules: [...]}`); no policy is no rules."""
    if value is None:
        return []
    policy = _map(value, path)
    return [
        _rule(rule, f"{path}.rules[{i}]")
        for i, rule in enumerate(_list(policy.get("rules"), f"{path}.rules"))
    ]


def _rule(value: Any, path: str) -> dict[str, Any]:
    rule = _map(value, path)
    if type(rule.get("else")) is dict:  # the authoring form `- else: {then: ...}`
        rule = {"when": None, "then": rule["else"].get("then")}
    then = _map(rule.get("then"), f"{path}.then")
    return {
        "when": guard(rule.get("when"), f"{path}.when"),
        "then": {
            "do": _choice(then.get("do"), RULE_ACTIONS, "continue", f"{path}.then.do"),
            "attempts": _int(then.get("attempts"), f"{path}.then.attempts", 3),
            "backoff": _choice(
                then.get("backoff"),
                ("none", "linear", "exponential"),
                "none",
                f"{path}.then.backoff",
            ),
            "delay_ms": _ms(then, "delay", f"{path}.then", 1000),
            "to": then.get("to"),
            "set_ctx": _map(then.get("set_ctx"), f"{path}.then.set_ctx"),
            "set_iter": _map(then.get("set_iter"), f"{path}.then.set_iter"),
        },
    }


def _policy(value: Any, steps: dict[str, Any]) -> dict[str, Any]:
    policy = _map(value, "$.policy")
    final = policy.get("final_step")
    if final is not None:
        _step_ref(steps, final, "$.policy.final_step")
    return {
        "on_deny": _choice(policy.get("on_deny"), ("keep", "discard"), "keep", "$.policy.on_deny"),
        "no_next_is_error": policy.get("no_next_is_error") is True,
        "failure_mode": _choice(
            policy.get("failure_mode"),
            ("fail_fast", "best_effort"),
            "fail_fast",
            "$.policy.failure_mode",
        ),
        "final_step": final,
    }


def _limits(value: Any) -> dict[str, int]:
    given = _map(value, "$.limits")
    limits = dict(LIMIT_DEFAULTS)
    for name in LIMIT_DEFAULTS:
        if given.get(name) is not None:
            limits[name] = _int(given[name], f"$.limits.{name}")
    return limits


def _step_ref(steps: dict[str, Any], name: Any, path: str) -> str:
    if type(name) is not str or name not in steps:
        raise _fail(path, f"no step named {name!r}")
    return name


# -- indexes ----------------------------------------------------------------------------------


def _sources(steps: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """For `join: all`: the distinct steps with an arc to each step, in definition order."""
    sources: dict[str, list[str]] = {name: [] for name in steps}
    for name, step in steps.items():
        for arc in step["next"]["arcs"]:
            if name not in sources[arc["to"]]:
                sources[arc["to"]].append(name)
    return sources


def _waited_signals(steps: dict[str, dict[str, Any]]) -> frozenset[str]:
    """The signal names some `wait_signal` task of the flow waits for: a signal named
    otherwise can never be delivered (spec/11 §3.2), so it is never buffered."""
    found: set[str] = set()
    pending = [task for step in steps.values() for task in step["tasks"]]
    while pending:
        task = pending.pop()
        if task["do"] == "wait_signal":
            found.add(task["signal"])
        for _, nested in nested_lists(task):
            pending.extend(nested)
    return frozenset(found)


def _jump_index(steps: dict[str, dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, int]]:
    """For `jump`: each nested task list (step, path) -> {task name: position}."""
    index: dict[tuple[Any, ...], dict[str, int]] = {}
    for name, step in steps.items():
        _index_list(index, name, ["tasks"], step["tasks"])
    return index


def _index_list(
    index: dict[tuple[Any, ...], dict[str, int]],
    step: str,
    path: list[Any],
    tasks: list[dict[str, Any]],
) -> None:
    index[(step, *path)] = {task["name"]: position for position, task in enumerate(tasks)}
    for position, task in enumerate(tasks):
        for sub_path, sub_tasks in nested_lists(task):
            _index_list(index, step, [*path, position, *sub_path], sub_tasks)


def nested_lists(task: dict[str, Any]) -> list[tuple[list[Any], list[dict[str, Any]]]]:
    """The task lists nested in a task, with their path relative to it."""
    if task["do"] == "call":
        return [(["branches", name], task["branches"][name]) for name in BRANCH_NAMES]
    if task["do"] == "branch":
        cases = [(["cases", i, "tasks"], case["tasks"]) for i, case in enumerate(task["cases"])]
        return [*cases, (["else"], task["else"])]
    if task["do"] == "repeat":
        return [(["tasks"], task["tasks"])]
    return []


def forget() -> None:
    """Empty the memo of decoded definitions (after the import-time warm-up, `warmup.py`)."""
    _CACHE.clear()
