"""Frames: one run of a step's task pipeline (the step's, or one loop iteration's).

A frame's resume pointer is its `stack` of blocks; a block is a path into the step's
nested task lists (`["tasks"]`, `["tasks", 2, "branches", "ok"]`, ...) and a position in
it. A frame runs until its pipeline ends or a task waits; a wait stores nothing but the
frame's coordinates, and the input that ends the wait puts the outcome in `resume`."""

from __future__ import annotations

from typing import Any

from aos_flow import signals, tasks, waits
from aos_flow.errors import EngineFailure, ExprError
from aos_flow.run import Run, error_value, set_iter
from aos_flow.waits import PROTOCOL_FIELDS


def new_frame(index: int | None, iteration: dict[str, Any]) -> dict[str, Any]:
    return {
        "index": index,
        "iter": iteration,
        "stack": [new_block(["tasks"], "root")],
        "attempt": 1,
        "prev": None,
        "results": {},
        "status": "running",
        "wait": None,
        "resume": None,
        "remote": False,
        "error": None,
    }


def new_block(path: list[Any], after: str, repeat: dict[str, Any] | None = None) -> dict[str, Any]:
    """`after` says what the end of the list means: `root` ends the frame, `advance` goes
    past the task that opened it (a call's branch), `composite` is the end of a branch or
    repeat task, whose own outcome is then handled."""
    return {"list": path, "pos": 0, "after": after, "repeat": repeat, "attempt": 1}


def run_frame(run: Run, token: dict[str, Any], frame: dict[str, Any]) -> None:
    """Run until the frame ends (`done` / `failed`) or waits."""
    while frame["status"] == "running":
        if frame["resume"] is not None:
            resume, frame["resume"] = frame["resume"], None
            if frame["remote"]:
                _end_remote(frame, resume["outcome"])
                return
            task = current_task(run, token, frame)
            outcome = _start(run, token, frame, task) if resume.get("retry") else resume["outcome"]
        else:
            task = _next_task(run, token, frame)
            if task is None:
                continue
            outcome = _start(run, token, frame, task)
        if outcome is tasks.WAIT:
            frame["status"] = "waiting"
        elif isinstance(outcome, tasks.Push):
            push(frame, outcome.path, "composite", outcome.repeat)
        else:
            on_outcome(run, token, frame, task, outcome)


def _start(run: Run, token: dict[str, Any], frame: dict[str, Any], task: dict[str, Any]) -> Any:
    """Run a task (a first attempt or a retry): every run counts against the input's budget."""
    run.count_task()
    run.history.add(
        "task.started",
        step=token["step"],
        task=task["name"],
        token=token["id"],
        attempt=frame["attempt"],
        index=frame["index"],
    )
    buffered = signals.take(run, token, frame, task)  # a signal that came before its wait
    return buffered if buffered is not None else tasks.perform(run, token, frame, task)


def current_task(run: Run, token: dict[str, Any], frame: dict[str, Any]) -> dict[str, Any]:
    block = frame["stack"][-1]
    task_list = run.defn.task_list(token["step"], block["list"])
    if block["pos"] >= len(task_list):
        raise EngineFailure("engine.resume_pointer", f"no task at {block['list']}[{block['pos']}]")
    return task_list[block["pos"]]


def current_path(frame: dict[str, Any]) -> list[Any]:
    """The path of the current task (for nested lists below it)."""
    block = frame["stack"][-1]
    return [*block["list"], block["pos"]]


def push(
    frame: dict[str, Any], sub_path: list[Any], after: str, repeat: dict[str, Any] | None = None
) -> None:
    block = new_block([*current_path(frame), *sub_path], after, repeat)
    block["attempt"] = frame["attempt"]  # the opening task's, for its own rules at the end
    frame["stack"].append(block)
    frame["attempt"] = 1


def end(frame: dict[str, Any], error: dict[str, Any] | None = None) -> None:
    frame["status"] = "done" if error is None else "failed"
    frame["error"] = error
    frame["stack"] = []


def _end_remote(frame: dict[str, Any], outcome: dict[str, Any]) -> None:
    """A distributed loop iteration: the child execution's end is the iteration's end."""
    if outcome["status"] == "ok":
        frame["prev"] = outcome["result"]
        end(frame)
    else:
        end(frame, outcome["error"])


def _next_task(run: Run, token: dict[str, Any], frame: dict[str, Any]) -> dict[str, Any] | None:
    """The task to start at the resume pointer, closing finished blocks and skipping tasks
    whose `when` is false (None: nothing to start now; look at the frame's status)."""
    if not frame["stack"]:
        end(frame)
        return None
    block = frame["stack"][-1]
    task_list = run.defn.task_list(token["step"], block["list"])
    if block["pos"] >= len(task_list):
        _close_block(run, token, frame)
        return None
    task = task_list[block["pos"]]
    if task["when"] is not None:
        where = {"step": token["step"], "task": task["name"], "token": token["id"]}
        if not run.check(task["when"], run.scope(token, frame), **where):
            run.history.add("task.skipped", **where)
            _advance(frame)
            return None
    return task


def _advance(frame: dict[str, Any]) -> None:
    frame["stack"][-1]["pos"] += 1
    frame["attempt"] = 1


def _close_block(run: Run, token: dict[str, Any], frame: dict[str, Any]) -> None:
    block = frame["stack"][-1]
    repeat = block["repeat"]
    if repeat is not None:
        repeat["results"] = [*repeat["results"], frame["prev"]]
        if repeat["index"] + 1 < len(repeat["items"]):
            tasks.next_repeat_item(block, run.enclosing_iter(frame, skip=1))
            return
    frame["stack"].pop()
    if block["after"] == "root":
        end(frame)
    elif block["after"] == "advance":
        _advance(frame)
    else:
        result = repeat["results"] if repeat is not None else frame["prev"]
        task = current_task(run, token, frame)
        frame["attempt"] = block["attempt"]
        on_outcome(run, token, frame, task, tasks.ok(frame, result))


# -- outcomes and policies (spec/11 §3.3) -----------------------------------------------------


def on_outcome(
    run: Run,
    token: dict[str, Any],
    frame: dict[str, Any],
    task: dict[str, Any],
    outcome: dict[str, Any],
) -> None:
    """Scan the task's rules, apply set_ctx / set_iter, then the action; no rule matched:
    a call's branch for the outcome, else continue on ok and fail on error."""
    try:
        then = _matching_rule(run, token, frame, task, outcome)
    except ExprError as error:
        _record_end(run, token, frame, task, outcome)
        end(frame, error_value("expression", "policy.set", error.message))
        return
    action = then["do"] if then is not None else None
    if action == "retry" and _retry(run, token, frame, task, outcome, then):
        return
    _record_end(run, token, frame, task, outcome)
    if action in (None, "retry"):
        _default(run, token, frame, task, outcome)
    elif action == "continue":
        if outcome["status"] != "ok":  # a loop counts the iteration as failed (its stats)
            frame["errors_continued"] = frame.get("errors_continued", 0) + 1
        _keep(frame, task, outcome)
        _advance(frame)
    elif action == "jump":
        _keep(frame, task, outcome)
        _jump(run, token, frame, then["to"])
    elif action == "break":
        _keep(frame, task, outcome)
        end(frame)
    else:
        end(frame, _failure(task, outcome))


def _matching_rule(
    run: Run,
    token: dict[str, Any],
    frame: dict[str, Any],
    task: dict[str, Any],
    outcome: dict[str, Any],
) -> dict[str, Any] | None:
    rules = task["policy"]
    if not rules:
        return None
    scope = run.scope(token, frame, outcome=outcome, _task=task["name"], _attempt=frame["attempt"])
    where = {"step": token["step"], "task": task["name"], "token": token["id"]}
    for position, rule in enumerate(rules):
        if rule["when"] is None or run.check(rule["when"], scope, **where):
            then = rule["then"]
            run.history.add("policy.task.evaluated", rule=position, do=then["do"], **where)
            for path, value in then["set_ctx"].items():
                run.set_ctx(path, run.render(value, scope))
            if then["set_ctx"]:  # set_iter sees the ctx that set_ctx wrote
                scope = run.scope(
                    token, frame, outcome=outcome, _task=task["name"], _attempt=frame["attempt"]
                )
            for path, value in then["set_iter"].items():
                set_iter(frame, path, run.render(value, scope))
            return then
    run.history.add("policy.task.evaluated", rule=None, **where)
    return None


def _retry(
    run: Run,
    token: dict[str, Any],
    frame: dict[str, Any],
    task: dict[str, Any],
    outcome: dict[str, Any],
    then: dict[str, Any],
) -> bool:
    """Arm the backoff timer and wait, while attempts remain (past them: False, and the
    outcome is handled as if no rule had matched)."""
    attempt = frame["attempt"]
    if attempt >= then["attempts"]:
        return False
    run.history.add(
        "task.attempt.failed",
        step=token["step"],
        task=task["name"],
        token=token["id"],
        attempt=attempt,
        status=outcome["status"],
        error=outcome.get("error"),
    )
    waits.arm_retry(run, token, frame, task, backoff_ms(then, attempt))
    frame["attempt"] = attempt + 1
    frame["status"] = "waiting"
    return True


def backoff_ms(then: dict[str, Any], attempt: int) -> int:
    """The delay before the next run: `none` 0, `linear` delay x n, `exponential`
    delay x 2^(n-1), n the attempt that failed."""
    delay = then["delay_ms"]
    if then["backoff"] == "linear":
        return delay * attempt
    if then["backoff"] == "exponential":
        return delay * 2 ** (attempt - 1)
    return 0


def _default(
    run: Run,
    token: dict[str, Any],
    frame: dict[str, Any],
    task: dict[str, Any],
    outcome: dict[str, Any],
) -> None:
    if task["do"] == "call":
        branch = _branch_for(task, outcome)
        if task["branches"][branch]:
            _keep(frame, task, outcome)
            push(frame, ["branches", branch], "advance")
            return
    if outcome["status"] == "ok":
        _keep(frame, task, outcome)
        _advance(frame)
    else:
        end(frame, outcome["error"])


def _branch_for(task: dict[str, Any], outcome: dict[str, Any]) -> str:
    """ok | error | timeout; a timeout without its own branch takes the error branch."""
    if outcome["status"] == "ok":
        return "ok"
    error = outcome["error"]
    if error.get("category", error["kind"]) == "timeout" and task["branches"]["timeout"]:
        return "timeout"
    return "error"


def _jump(run: Run, token: dict[str, Any], frame: dict[str, Any], target: Any) -> None:
    block = frame["stack"][-1]
    positions = run.defn.jumps.get((token["step"], *block["list"]), {})
    if target not in positions:
        raise EngineFailure("engine.jump_unknown", f"no task {target!r} to jump to")
    block["pos"] = positions[target]
    frame["attempt"] = 1


def _keep(frame: dict[str, Any], task: dict[str, Any], outcome: dict[str, Any]) -> None:
    """The task's result becomes `_prev` and `results[task]` (an error that a rule
    continued past is kept as `{error: ...}`)."""
    value = outcome["result"] if outcome["status"] == "ok" else _failed_result(outcome)
    frame["prev"] = value
    frame["results"] = {**frame["results"], task["name"]: value}


def _record_end(
    run: Run,
    token: dict[str, Any],
    frame: dict[str, Any],
    task: dict[str, Any],
    outcome: dict[str, Any],
) -> None:
    where = {
        "step": token["step"],
        "task": task["name"],
        "token": token["id"],
        "attempt": outcome["meta"]["attempt"],
        "index": frame["index"],
    }
    if outcome["status"] == "ok":
        run.history.add("task.done", **where)
    else:
        run.history.add("task.failed", error=outcome["error"], **where)


def _failure(task: dict[str, Any], outcome: dict[str, Any]) -> dict[str, Any]:
    if outcome["status"] == "error":
        return outcome["error"]
    return error_value("expression", "policy.fail", f"task {task['name']} failed by its policy")


def _failed_result(outcome: dict[str, Any]) -> dict[str, Any]:
    """What a failed task leaves as its result: the error and the tool's own details."""
    return {"error": outcome["error"], **{k: outcome[k] for k in PROTOCOL_FIELDS if k in outcome}}
