"""The marking and the run-to-wait loop (spec/11 §3.2, §3.4).

Tokens (`k1`, `k2`, ...) each target a step: `ready` (to start), `pending` (admission
denied, re-evaluated after a ctx change) or `running` (its frames run the pipeline, or its
loop's iterations). On each input the loop runs every runnable token until it finishes or
waits, then settles: at quiescence the final step runs once and the execution ends."""

from __future__ import annotations

from typing import Any

from aos_flow import frames, results, signals, step_ctx, waits
from aos_flow.errors import EngineFailure, ExprError
from aos_flow.run import ENDED_EVENT, ITER_PARENT_KEY, START_EVENT, Run, error_value, iter_depth
from aos_flow.tasks import items_of, iteration, start_event

Token = dict[str, Any]


def new_engine(parent: Any) -> dict[str, Any]:
    return {
        "tokens": {},
        "waits": {},
        signals.SIGNALS: [],
        "joins": {},
        "children": {},
        "counters": {"token": 0, "wait": 0, "child": 0, "continue": 0},
        "summary": {
            "steps_started": 0,
            "steps_done": 0,
            "steps_failed": 0,
            "branches_completed": 0,
            "branches_failed": 0,
            "failures": [],
        },
        "parent": parent,
        "outer": None,
        "iteration": None,
        "final_ran": False,
        "final_failed": False,
        "result": None,
        "error": None,
    }


def run_to_wait(run: Run) -> None:
    while run.state["status"] == "running":
        token = _next_runnable(run)
        if token is not None:
            _advance(run, token)
        elif not _requeue_pending(run) and not _settle(run):
            return


def _ordered_tokens(run: Run) -> list[Token]:
    tokens = run.engine["tokens"]
    return [tokens[key] for key in sorted(tokens, key=lambda token_id: int(token_id[1:]))]


def _next_runnable(run: Run) -> Token | None:
    for token in _ordered_tokens(run):
        if token["status"] == "ready":
            return token
        if token["status"] == "running" and any(f["status"] == "running" for f in token["frames"]):
            return token
    return None


def _requeue_pending(run: Run) -> bool:
    """After a ctx change, denied tokens are evaluated again."""
    if not run.ctx_changed:
        return False
    run.ctx_changed = False
    pending = [token for token in _ordered_tokens(run) if token["status"] == "pending"]
    for token in pending:
        token["status"] = "ready"
    return bool(pending)


# -- tokens and arrivals ----------------------------------------------------------------------


def new_token(run: Run, step: str, args: Any, inputs: Any = None) -> Token:
    token_id = run.next_id("token", "k")
    if run.engine["counters"]["token"] > run.limits["tokens_max"]:
        raise EngineFailure(
            "limit.tokens_max", f"more than {run.limits['tokens_max']} tokens in one execution"
        )
    token = {
        "id": token_id,
        "step": step,
        "args": args,
        "inputs": inputs,
        "status": "ready",
        "frames": [],
        "loop": None,
        "single": None,
        "final": False,
    }
    run.engine["tokens"][token_id] = token
    return token


def arrive(run: Run, step: str, args: Any, source: str | None) -> None:
    """A token for `step`; a `join: all` step collects one from every source step first,
    then runs once with `args` `{source: args}` and `inputs` in source order."""
    if run.defn.step(step)["join"] != "all" or source is None:
        new_token(run, step, args)
        return
    sources = run.defn.sources[step]
    arrived = dict(run.engine["joins"].get(step, {}))
    if source in arrived:
        run.history.add("join.duplicate", step=step, source=source)
        return
    arrived[source] = args
    if all(name in arrived for name in sources):
        run.engine["joins"].pop(step, None)
        run.history.add("join.completed", step=step, sources=list(sources))
        new_token(
            run,
            step,
            {name: arrived[name] for name in sources},
            [arrived[name] for name in sources],
        )
    else:
        run.engine["joins"][step] = arrived
        run.history.add(
            "join.waiting", step=step, source=source, arrived=len(arrived), expected=len(sources)
        )


# -- running a token --------------------------------------------------------------------------


def _advance(run: Run, token: Token) -> None:
    if token["status"] == "ready" and not _begin(run, token):
        return
    while token["id"] in run.engine["tokens"]:
        if token["loop"] is not None:
            _spawn_iterations(run, token)
        frame = next((f for f in token["frames"] if f["status"] == "running"), None)
        if frame is None:
            break
        frames.run_frame(run, token, frame)
        if frame["status"] in ("done", "failed"):
            _frame_ended(run, token, frame)
    if token["id"] in run.engine["tokens"] and _loop_finished(token):
        _loop_done(run, token)


def _begin(run: Run, token: Token) -> bool:
    """Merge, admit, then start the step (False: the token does not run now)."""
    step = run.defn.step(token["step"])
    where = {"step": token["step"], "token": token["id"]}
    if token["single"] is None and not token["final"]:
        if step["loop"] is None and _running_token(run, token) is not None:
            run.history.add("token.merged", into=_running_token(run, token)["id"], **where)
            del run.engine["tokens"][token["id"]]
            return False
        if step["admit"] is not None and not _admitted(run, token, step, where):
            return False
    token["status"] = "running"
    run.engine["summary"]["steps_started"] += 1
    run.history.add("step.started", **where)
    if token["single"] is not None:
        single = token["single"]
        token["frames"] = [frames.new_frame(single["index"], single["iter"])]
    elif step["loop"] is not None:
        return _start_loop(run, token, step)
    else:
        token["frames"] = [frames.new_frame(None, run.step_iter())]
    return True


def _running_token(run: Run, token: Token) -> Token | None:
    """The implicit join: another run of the same step already under way."""
    for other in _ordered_tokens(run):
        if other is not token and other["step"] == token["step"] and other["status"] == "running":
            return other
    return None


def _admitted(run: Run, token: Token, step: dict[str, Any], where: dict[str, Any]) -> bool:
    admitted = run.check_routing(step["admit"], run.scope(token), **where)
    run.history.add("policy.admit.evaluated", admitted=admitted, **where)
    if admitted:
        return True
    if run.defn.policy["on_deny"] == "discard":
        run.history.add("token.discarded", reason="denied", **where)
        del run.engine["tokens"][token["id"]]
    else:
        token["status"] = "pending"
    return False


def _frame_ended(run: Run, token: Token, frame: dict[str, Any]) -> None:
    if token["loop"] is None:
        if frame["status"] == "done":
            complete_step(run, token, True, frame["prev"], frame)
        else:
            complete_step(run, token, False, frame["error"], frame)
        return
    loop = token["loop"]
    index = frame["index"]
    token["frames"] = [f for f in token["frames"] if f is not frame]
    loop["in_flight"] -= 1
    where = {"step": token["step"], "token": token["id"], "index": index}
    ok = frame["status"] == "done"
    value = frame["prev"] if ok else frame["error"]
    if not frame["remote"]:  # a distributed iteration applied it in its own execution
        ok, value = step_ctx.apply(run, token, frame, ok, value)
    if ok:
        results.keep(loop, index, value)
        # An error a rule continued past ends the iteration, but is not a success (issue 32).
        continued = frame.get("errors_continued", 0)
        loop["stats"]["failed" if continued else "success"] += 1
        if continued:
            where["errors_continued"] = continued
        run.history.add("loop.iteration.done", **where)
    else:
        results.keep(loop, index, {"error": value})
        loop["stats"]["failed"] += 1
        run.history.add("loop.iteration.failed", error=value, **where)


# -- loops ------------------------------------------------------------------------------------


def keep_loops_small(run: Run) -> None:
    """After an input, every running loop keeps its results within the inline limit."""
    for token in _ordered_tokens(run):
        if token["loop"] is not None:
            results.spill(run, token["loop"])


def _start_loop(run: Run, token: Token, step: dict[str, Any]) -> bool:
    loop = step["loop"]
    try:
        items = items_of(run, run.render_routing(loop["in"], run.scope(token)))
    except ExprError as error:
        complete_step(run, token, False, error_value("expression", "loop.in", error.message))
        return False
    if len(items) > run.limits["loop_items_max"]:
        message = f"{len(items)} items; the limit is {run.limits['loop_items_max']}"
        complete_step(run, token, False, error_value("engine", "limit.loop_items_max", message))
        return False
    if iter_depth(run.engine["outer"]) + 1 > run.limits["iter_depth_max"]:
        message = f"iter.parent would be {run.limits['iter_depth_max']} levels deep or more"
        complete_step(run, token, False, error_value("engine", "limit.iter_depth_max", message))
        return False
    ceiling = run.limits["in_flight_max"]
    window = 1 if loop["mode"] == "sequential" else min(loop["max_in_flight"] or ceiling, ceiling)
    token["loop"] = {
        "items": items,
        "next": 0,
        "in_flight": 0,
        "window": max(1, window),
        results.RESULTS_CBOR: [None] * len(items),
        "stats": {"total": len(items), "success": 0, "failed": 0},
        "distributed": loop["exec"] == "distributed",
        "iterator": loop["iterator"],
    }
    started = {"step": token["step"], "token": token["id"], "total": len(items)}
    if loop["max_in_flight"] is not None and loop["max_in_flight"] > ceiling:
        # Asked for more than the ceiling: runs clamped to it, and says so (spec/12 §5).
        started.update(max_in_flight=loop["max_in_flight"], window=window)
    run.history.add("loop.started", **started)
    return True


def _spawn_iterations(run: Run, token: Token) -> None:
    loop = token["loop"]
    while loop["next"] < len(loop["items"]) and loop["in_flight"] < loop["window"]:
        index = loop["next"]
        loop["next"] += 1
        loop["in_flight"] += 1
        outer = run.engine["outer"]
        frame = frames.new_frame(index, iteration(loop["iterator"], loop["items"], index, outer))
        token["frames"].append(frame)
        run.history.add(
            "loop.iteration.started", step=token["step"], token=token["id"], index=index
        )
        if loop["distributed"]:
            _start_iteration_child(run, token, frame)


def _start_iteration_child(run: Run, token: Token, frame: dict[str, Any]) -> None:
    """`exec: distributed`: the iteration is a child execution of this same definition,
    told by the reserved workload key `$iteration` to run this step's pipeline once."""
    loop = token["loop"]
    index = frame["index"]
    child = f"{run.exec_id}:{token['step']}:{run.next_id('child', '')}"
    wait_id = waits.open_wait(run, token, frame, None, "child", child=child)
    run.engine["children"][child] = wait_id
    frame["remote"] = True
    frame["status"] = "waiting"
    marker = {
        "step": token["step"],
        "index": index,
        "total": len(loop["items"]),
        "item": loop["items"][index],
        "iterator": loop["iterator"],
        "args": token["args"],
        "ctx": run.business["ctx"],
    }
    workload = {**run.business["workload"], "$iteration": marker}
    if run.engine["outer"] is not None:  # the iteration's own `iter.parent`
        workload[ITER_PARENT_KEY] = run.engine["outer"]
    target = {
        "flow": run.state["flow"],
        "version": run.state["version"],
        "definition": run.state["definition"],
    }
    parent = {"exec": run.exec_id, "token": wait_id}
    run.emit(START_EVENT, start_event(run, child, target, workload, parent))
    run.history.add(
        "child.started",
        step=token["step"],
        token=token["id"],
        index=index,
        child=child,
        wait=wait_id,
    )


def _loop_finished(token: Token) -> bool:
    loop = token["loop"]
    return loop is not None and loop["next"] >= len(loop["items"]) and loop["in_flight"] == 0


def _loop_done(run: Run, token: Token) -> None:
    loop = token["loop"]
    result = {"results": results.aggregate_results(run, loop), "stats": loop["stats"]}
    run.history.add("loop.done", step=token["step"], token=token["id"], stats=loop["stats"])
    complete_step(run, token, True, result, None, "loop.done")


# -- step ends and arcs -----------------------------------------------------------------------


def complete_step(
    run: Run,
    token: Token,
    ok: bool,
    value: Any,
    frame: dict[str, Any] | None = None,
    event: str | None = None,
) -> None:
    """The step's result (its `result` template, else the last task's) or its error;
    then its arcs."""
    step = run.defn.step(token["step"])
    rendered = ok and step["result"] is not None and token["single"] is None
    if rendered:
        try:
            value = run.render(step["result"], run.scope(token, frame, _prev=value))
        except ExprError as error:
            ok, value = False, error_value("expression", "step.result", error.message)
    if step["loop"] is None or token["single"] is not None:  # a loop's: after each iteration
        ok, value = step_ctx.apply(run, token, frame, ok, value)
    if ok and (rendered or event != "loop.done"):  # a loop's aggregate keeps its own
        value = results.step_result(run, value)
    run.engine["tokens"].pop(token["id"], None)
    summary = run.engine["summary"]
    where = {"step": token["step"], "token": token["id"]}
    if ok:
        run.business["steps"] = {**run.business["steps"], token["step"]: value}
        run.engine["result"] = value
        summary["steps_done"] += 1
        run.history.add("step.done", **where)
    else:
        summary["steps_failed"] += 1
        run.history.add("step.failed", error=value, **where)
    if token["final"]:
        if not ok:
            summary["failures"] = [*summary["failures"], {"step": token["step"], "error": value}]
            run.engine["final_failed"] = True
        return
    if token["single"] is not None:
        _branch_ended(run, token["step"], None if ok else value)
        return
    name = event or ("step.done" if ok else "step.failed")
    _route(run, token, ok, value, name)


def _route(run: Run, token: Token, ok: bool, payload: Any, event: str) -> None:
    """Arcs, evaluated once: exclusive takes the first match, inclusive every match. After
    a failure only arcs with a `when` can match (an unconditional arc is for success)."""
    step = run.defn.step(token["step"])
    scope = run.scope(token, None, event={"name": event, "step": token["step"], "payload": payload})
    matched = []
    for arc in step["next"]["arcs"]:
        if not ok and arc["when"] is None:
            continue
        if run.check_routing(
            arc["when"], scope, step=token["step"], token=token["id"], to=arc["to"]
        ):
            matched.append(arc)
            if step["next"]["mode"] == "exclusive":
                break
    run.history.add(
        "next.evaluated",
        step=token["step"],
        token=token["id"],
        on=event,
        to=[arc["to"] for arc in matched],
    )
    if not matched:
        _no_match(run, token, step, ok, payload)
        return
    for arc in matched:
        try:
            args = run.render_routing(arc["args"], scope)
        except ExprError as error:
            _branch_ended(run, token["step"], error_value("expression", "next.args", error.message))
            continue
        arrive(run, arc["to"], args, token["step"])


def _no_match(run: Run, token: Token, step: dict[str, Any], ok: bool, payload: Any) -> None:
    if not ok:
        _branch_ended(run, token["step"], payload)
    elif step["next"]["arcs"] and run.defn.policy["no_next_is_error"]:
        message = f"no arc of {token['step']} matched"
        _branch_ended(run, token["step"], error_value("expression", "next.no_match", message))
    else:
        _branch_ended(run, token["step"], None)


def _branch_ended(run: Run, step: str, error: dict[str, Any] | None) -> None:
    summary = run.engine["summary"]
    if error is None:
        summary["branches_completed"] += 1
        return
    summary["branches_failed"] += 1
    summary["failures"] = [*summary["failures"], {"step": step, "error": error}]
    if run.defn.policy["failure_mode"] == "fail_fast":
        _abort(run)


def _abort(run: Run) -> None:
    """fail_fast: a branch failed, so every other wait and token ends now."""
    run.aborted = True
    waits.cancel_all(run, "fail_fast")
    for token in _ordered_tokens(run):
        run.history.add(
            "token.discarded", step=token["step"], token=token["id"], reason="fail_fast"
        )
    run.engine["tokens"] = {}
    run.engine["joins"] = {}


# -- quiescence and the end -------------------------------------------------------------------


def _settle(run: Run) -> bool:
    """At quiescence: drop what can never run, run `final_step` once, else finish. True
    when there is something to run again."""
    if run.engine["waits"] or any(t["status"] != "pending" for t in run.engine["tokens"].values()):
        return False
    for token in _ordered_tokens(run):
        run.history.add(
            "token.discarded", step=token["step"], token=token["id"], reason="quiescent"
        )
    run.engine["tokens"] = {}
    joins, run.engine["joins"] = run.engine["joins"], {}
    for step in sorted(joins):
        message = f"{step} waited for {', '.join(run.defn.sources[step])}; only {', '.join(joins[step])} came"
        _branch_ended(run, step, error_value("engine", "join.incomplete", message))
    final = run.defn.policy["final_step"]
    if final is not None and not run.engine["final_ran"] and run.engine["iteration"] is None:
        run.engine["final_ran"] = True
        new_token(run, final, _summary(run))["final"] = True
        return True
    finish(run)
    return False


def _summary(run: Run) -> dict[str, Any]:
    """`final_step`'s args: what happened, for a closing report."""
    summary = run.engine["summary"]
    return {
        "execution": run.execution(),
        "steps": {
            "started": summary["steps_started"],
            "done": summary["steps_done"],
            "failed": summary["steps_failed"],
        },
        "branches": {
            "completed": summary["branches_completed"],
            "failed": summary["branches_failed"],
        },
        "failures": list(summary["failures"]),
        "results": dict(run.business["steps"]),
    }


def finish(run: Run) -> None:
    summary = run.engine["summary"]
    failed = summary["branches_failed"] > 0 or run.engine["final_failed"]
    status = "completed"
    if failed:
        partial = (
            run.defn.policy["failure_mode"] == "best_effort" and summary["branches_completed"] > 0
        )
        status = "partial" if partial and not run.engine["final_failed"] else "failed"
    error = summary["failures"][0]["error"] if failed else None
    _end(run, status, error)


def fail_execution(run: Run, code: str, message: str, kind: str = "engine") -> None:
    """An engine invariant or limit (kind `engine`), or a start that cannot go on (a
    keychain refused: `authorization`): the execution fails."""
    error = error_value(kind, code, message)
    waits.cancel_all(run, code)
    run.engine["tokens"] = {}
    run.engine["joins"] = {}
    run.engine["error"] = error
    summary = run.engine["summary"]
    summary["failures"] = [*summary["failures"], {"step": None, "error": error}]
    _end(run, "failed", error)


def cancel(run: Run, reason: str | None) -> None:
    waits.cancel_all(run, reason)
    run.engine["tokens"] = {}
    run.engine["joins"] = {}
    run.history.add("execution.cancelled", reason=reason)
    _end(run, "cancelled", error_value("engine", "execution.cancelled", reason or "cancelled"))


def _end(run: Run, status: str, error: dict[str, Any] | None) -> None:
    run.state["status"] = status
    signals.drop(run, f"the execution is {status}")
    run.history.add("playbook.finished", status=status, error=error)
    parent = run.engine["parent"]
    if parent is not None:
        run.emit(
            ENDED_EVENT,
            {
                "exec": parent["exec"],
                "child": run.exec_id,
                "token": parent["token"],
                "status": status,
                "result": run.engine["result"],
                "error": error,
            },
        )
