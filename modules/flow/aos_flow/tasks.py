"""The actions (spec/11 §1.2). Each returns an outcome (inline tasks), `WAIT` (the task
opened a wait; an input will resume it), or a `Push` (a branch or repeat body to run)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from aos_flow import grants, results, waits
from aos_flow.definition import is_hash
from aos_flow.errors import ExprError
from aos_flow.expressions import is_template
from aos_flow.run import (
    HUMAN_EFFECT,
    ITER_PARENT_KEY,
    LOOKUP_EVENT,
    NS_PER_MS,
    START_EVENT,
    TIMER_EFFECT,
    Run,
    error_outcome,
    error_value,
    iter_depth,
    ok_outcome,
)

WAIT: Any = object()
FLOW_NAME = re.compile(r"[a-z0-9][a-z0-9._/-]{0,127}")
"""A deployed flow's name (spec/11 §1)."""
CONTEXT_NAME = re.compile(r"\bcontext\b")


class Push:
    """Run the nested list at `path` (relative to the task), then hand the task's outcome
    to its rules; `repeat` is the repeat's bookkeeping, None for a branch."""

    def __init__(self, path: list[Any], repeat: dict[str, Any] | None = None) -> None:
        self.path = path
        self.repeat = repeat


Token = dict[str, Any]
Frame = dict[str, Any]
Task = dict[str, Any]


def perform(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    """Run one task once (its `when` was already checked). A template that fails is the
    task's `expression` error, which its rules may handle."""
    try:
        return HANDLERS[task["do"]](run, token, frame, task)
    except ExprError as error:
        return failed(frame, "expression", "template", error.message)


def ok(frame: Frame, result: Any) -> dict[str, Any]:
    return ok_outcome(result, frame["attempt"])


def failed(
    frame: Frame, kind: str, code: str, message: str, retryable: bool = False
) -> dict[str, Any]:
    return error_outcome(error_value(kind, code, message, retryable), frame["attempt"])


def text(value: Any) -> str | None:
    """A rendered value where the schema wants text (null stays null)."""
    if value is None or type(value) is str:
        return value
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) in (int, float):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def items_of(run: Run, value: Any) -> list[Any]:
    """A collection to iterate: a list as it is, a reference loaded, null nothing, any
    other value one item."""
    value = run.blobs.deref(value)
    if type(value) is list:
        return value
    return [] if value is None else [value]


def iteration(name: str, items: list[Any], index: int, parent: Any) -> dict[str, Any]:
    return {
        name: items[index],
        "index": index,
        "first": index == 0,
        "last": index == len(items) - 1,
        "parent": parent,
    }


def next_repeat_item(block: dict[str, Any], outer: dict[str, Any] | None) -> None:
    repeat = block["repeat"]
    repeat["index"] += 1
    repeat["iter"] = iteration(repeat["as"], repeat["items"], repeat["index"], outer)
    block["pos"] = 0


def where(token: Token, task: Task) -> dict[str, Any]:
    return {"step": token["step"], "task": task["name"], "token": token["id"]}


# -- inline -----------------------------------------------------------------------------------


def _assign(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    scope = run.scope(token, frame)
    values = {path: run.render(value, scope) for path, value in task["set"].items()}
    for path, value in values.items():
        run.set_ctx(path, value)
    return ok(frame, values)


def _business_ref(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    value = text(run.render(task["value"], run.scope(token, frame)))
    run.business["business_ref"] = value
    return ok(frame, value)


def _noop(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    return ok(frame, run.render_task(task["result"], run.scope(token, frame)))


def _fail(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    message = text(run.render(task["message"], run.scope(token, frame))) or ""
    return failed(frame, text(task["kind"]) or "expression", "fail", message)


def _branch(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    """The first case whose `when` holds runs, else `else`; the branch's result is the
    last result of what ran."""
    scope = run.scope(token, frame)
    for position, case in enumerate(task["cases"]):
        if case["when"] is None or run.check(case["when"], scope, **where(token, task)):
            return Push(["cases", position, "tasks"]) if case["tasks"] else ok(frame, frame["prev"])
    return Push(["else"]) if task["else"] else ok(frame, frame["prev"])


def _repeat(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    """The body once per item, with `iter: {AS: item, index, first, last, parent}` (and the
    item also as `AS`); the result is the list of each iteration's last result."""
    items = items_of(run, run.render(task["over"], run.scope(token, frame)))
    if not items or not task["tasks"]:
        return ok(frame, [frame["prev"] for _ in items])
    outer = run.enclosing_iter(frame)
    if iter_depth(outer) + 1 > run.limits["iter_depth_max"]:
        message = f"iter.parent would be {run.limits['iter_depth_max']} levels deep or more"
        return failed(frame, "engine", "limit.iter_depth_max", message)
    repeat = {
        "as": task["as"],
        "items": items,
        "index": 0,
        "results": [],
        "iter": iteration(task["as"], items, 0, outer),
    }
    return Push(["tasks"], repeat)


# -- waits ------------------------------------------------------------------------------------


def _call(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    scope = run.scope(token, frame)
    kind = task["tool"]["kind"]
    tool = _rendered_tool(run, task["tool"], scope)
    args = run.render_task(task["args"], scope)
    effect = f"aos/tool.{kind}@1"
    params = {
        "exec": run.exec_id,
        "step": token["step"],
        "task": task["name"],
        "attempt": frame["attempt"],
        "tool": tool,
        "args": args,
        "result_inline_bytes_max": results.call_inline_max(run, token["loop"]),
    }
    if run.noetl:  # an `aos.flow/1` call's params are what they always were
        params["flow_format"] = run.defn.format
        if _reads_context(tool, args):
            params["context"] = run.execution_context(token, frame)
    wait_id = waits.open_wait(run, token, frame, task, "call", effect=effect)
    keychain = grants.of_call(run, task["tool"])
    if keychain:  # else null
        params["keychain"] = keychain
    run.effect(effect, params, wait_id)
    if task["timeout_ms"] is not None:
        waits.arm_timeout(run, wait_id, task["timeout_ms"])
    return WAIT


def _rendered_tool(run: Run, tool: dict[str, Any], scope: dict[str, Any]) -> dict[str, Any]:
    """The tool's fields rendered (its `kind` as it is). A playbook's python `code` renders
    as NoETL renders it, and when it cannot (a `{{ ... }}` in a comment that is no template)
    it runs as written (spec/12 §6)."""
    rendered = {"kind": tool["kind"]}
    for key, value in tool.items():
        if key == "kind":
            continue
        if key == "code" and run.noetl and tool["kind"] == "python":
            rendered[key] = run.render_or_keep(value, scope)
        else:
            rendered[key] = run.render_task(value, scope)
    return rendered


def _reads_context(tool: dict[str, Any], args: Any) -> bool:
    """Python code that names `context` (and gets no `context` from its args) is given the
    execution's context; nothing else is (it can be large, and a call's params are journaled)."""
    code = tool.get("code")
    if tool["kind"] != "python" or type(code) is not str:
        return False
    if type(args) is dict and "context" in args:
        return False
    return CONTEXT_NAME.search(code) is not None


def _human(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    scope = run.scope(token, frame)
    params = {
        "exec": run.exec_id,
        "step": token["step"],
        "task": task["name"],
        "title": text(run.render(task["title"], scope)) or "",
        "description": text(run.render(task["description"], scope)),
        "assignee": text(run.render(task["assignee"], scope)),
        "roles": [text(role) or "" for role in task["roles"]],
        "form": copy_value(task["form"]),
        "data": run.render(task["data"], scope),
    }
    wait_id = waits.open_wait(run, token, frame, task, "human", effect=HUMAN_EFFECT)
    run.effect(HUMAN_EFFECT, params, wait_id)
    run.history.add("human.task.created", wait=wait_id, **where(token, task))
    if task["timeout_ms"] is not None:
        waits.arm_timeout(run, wait_id, task["timeout_ms"])
    return WAIT


def _wait_signal(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    wait_id = waits.open_wait(run, token, frame, task, "signal", signal=task["signal"])
    if task["timeout_ms"] is not None:
        waits.arm_timeout(run, wait_id, task["timeout_ms"])
    return WAIT


def _wait_timer(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    if task["duration_ms"] is not None:
        deliver_at = run.now + task["duration_ms"] * NS_PER_MS
    else:
        deliver_at = run.render(task["until_ns"], run.scope(token, frame))
        if type(deliver_at) is not int:
            raise ExprError(f"until_ns is {deliver_at!r}, not an integer time")
    wait_id = waits.open_wait(run, token, frame, task, "timer", effect=TIMER_EFFECT)
    run.arm_timer(wait_id, deliver_at)
    return WAIT


def _subflow(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    if is_template(task["flow"]) and run.defn.format >= 2:
        return _subflow_named(run, token, frame, task)
    target = _target(run, task["flow"])
    if target is None:
        return failed(frame, "engine", "subflow.unknown", f"no subflow {task['flow']!r}")
    workload = _inside(run.render_task(task["workload"], run.scope(token, frame)), run, frame)
    child, parent = _child_wait(run, token, frame, task)
    run.emit(START_EVENT, start_event(run, child, target, workload, parent))
    run.history.add("child.started", child=child, wait=parent["token"], **where(token, task))
    return WAIT


def _subflow_named(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    """`flow` is a template (spec/11 §3.5): rendered now to a deployed flow's name (a leading
    `/` of a catalog path dropped), which the registry cell of that name looks up: it starts
    the child at its latest version, or ends the task with `subflow.unknown`."""
    scope = run.scope(token, frame)
    name = (text(run.render(task["flow"], scope)) or "").lstrip("/")
    if FLOW_NAME.fullmatch(name) is None:
        message = f"{task['flow']!r} rendered {name!r}, which cannot name a flow"
        return failed(frame, "engine", "subflow.unknown", message)
    workload = _inside(run.render_task(task["workload"], scope), run, frame)
    child, parent = _child_wait(run, token, frame, task)
    lookup = {
        "name": name,
        "path": task["flow"],
        "exec": child,
        "workload": workload,
        "parent": parent,
        "business_ref": run.business["business_ref"],
    }
    run.emit(LOOKUP_EVENT, lookup)
    wait_id = parent["token"]
    run.history.add("child.started", child=child, wait=wait_id, flow=name, **where(token, task))
    return WAIT


def _child_wait(run: Run, token: Token, frame: Frame, task: Task) -> tuple[str, dict[str, str]]:
    """A child's id (`PARENT:STEP:N`) and the wait for its end: the child's `parent`."""
    child = f"{run.exec_id}:{token['step']}:{run.next_id('child', '')}"
    wait_id = waits.open_wait(run, token, frame, task, "child", child=child, into=task["into"])
    run.engine["children"][child] = wait_id
    return child, {"exec": run.exec_id, "token": wait_id}


def _inside(workload: Any, run: Run, frame: Frame) -> Any:
    """A child started inside an iteration carries it: the child's iterations see it as
    `iter.parent` (a workload that is not a map fails the child as it is)."""
    outer = run.enclosing_iter(frame)
    if outer is None or (workload is not None and type(workload) is not dict):
        return workload
    return {**(workload or {}), ITER_PARENT_KEY: outer}


def _continue_with(run: Run, token: Token, frame: Frame, task: Task) -> Any:
    target = _target(run, task["flow"])
    if target is None:
        return failed(frame, "engine", "subflow.unknown", f"no subflow {task['flow']!r}")
    workload = run.render(task["workload"], run.scope(token, frame))
    successor = f"{run.exec_id}~{run.next_id('continue', '')}"
    run.emit(START_EVENT, start_event(run, successor, target, workload, None))
    run.history.add("continue.started", child=successor, **where(token, task))
    return ok(frame, {"exec": successor})


def start_event(
    run: Run, exec_id: str, target: dict[str, Any], workload: Any, parent: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "exec": exec_id,
        "flow": target["flow"],
        "version": target["version"],
        "definition": target["definition"],
        "workload": workload,
        "parent": parent,
        "business_ref": run.business["business_ref"],
    }


def _target(run: Run, alias: str) -> dict[str, Any] | None:
    """`self` (this execution's own definition) or an alias of `subflows`, pinned at deploy."""
    if alias == "self":
        state = run.state
        return {
            "flow": state["flow"],
            "version": state["version"],
            "definition": state["definition"],
        }
    entry = run.defn.subflows.get(alias)
    if type(entry) is not dict or not is_hash(entry.get("definition")):
        return None  # unknown, or never resolved by a deploy
    name, _, pinned = (text(entry.get("flow")) or alias).partition("@")
    version = entry.get("version")
    if type(version) is not int or version < 0:
        version = int(pinned) if pinned.isdigit() else 0  # `flow@N`; unpinned: unknown (0)
    return {"flow": name, "version": version, "definition": entry["definition"]}


def copy_value(value: Any) -> Any:
    """A fresh copy of a definition value (containers are never shared with the state)."""
    if type(value) is dict:
        return {key: copy_value(item) for key, item in value.items()}
    if type(value) is list:
        return [copy_value(item) for item in value]
    return value


HANDLERS: dict[str, Callable[[Run, Token, Frame, Task], Any]] = {
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
    "fail": _fail,
    "noop": _noop,
}
