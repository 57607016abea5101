"""Waits (spec/11 §3.2): each has a waiting token `wN` (the intent's issuer_ref, or the id
of a signal or child wait) and the engine version that created it. An input resumes the
frame its wait names, or is stale when no open wait matches it."""

from __future__ import annotations

from typing import Any

from aos_flow import signals
from aos_flow.errors import EngineFailure
from aos_flow.run import (
    CANCEL_EVENT,
    NS_PER_MS,
    TIMER_EFFECT,
    Run,
    error_outcome,
    error_value,
    ok_outcome,
)
from aos_sdk import cbor

INTENT_KINDS = ("call", "human", "timer", "timeout", "retry", "keychain")
TIMER_KINDS = ("timer", "timeout", "retry")
ERROR_KINDS = ("expression", "transport", "timeout", "authorization", "engine")


def open_wait(
    run: Run,
    token: dict[str, Any],
    frame: dict[str, Any],
    task: dict[str, Any] | None,
    kind: str,
    **fields: Any,
) -> str:
    wait_id = run.next_id("wait", "w")
    wait = {
        "kind": kind,
        "token": token["id"],
        "frame": frame["index"],
        "version": run.version,
        "step": token["step"],
        "task": task["name"] if task is not None else None,
        "attempt": frame["attempt"],
        "started_ns": run.now,
        "paired": None,
        "effect": None,
        "signal": None,
        "child": None,
        "into": None,
        "timeout_ms": None,
    }
    wait.update(fields)
    run.engine["waits"][wait_id] = wait
    frame["wait"] = wait_id
    return wait_id


def arm_timeout(run: Run, main_id: str, timeout_ms: int) -> None:
    """A timer racing the wait `main_id`: the first to end wins, the other is cancelled."""
    main = run.engine["waits"][main_id]
    timer_id = run.next_id("wait", "w")
    run.engine["waits"][timer_id] = {
        **main,
        "kind": "timeout",
        "paired": main_id,
        "effect": TIMER_EFFECT,
        "signal": None,
        "child": None,
        "into": None,
        "timeout_ms": timeout_ms,
    }
    main["paired"] = timer_id
    run.arm_timer(timer_id, run.now + timeout_ms * NS_PER_MS)


def arm_retry(
    run: Run, token: dict[str, Any], frame: dict[str, Any], task: dict[str, Any], delay_ms: int
) -> None:
    """A retry is a timer and then the task again (never a sleep)."""
    wait_id = open_wait(run, token, frame, task, "retry", effect=TIMER_EFFECT)
    run.arm_timer(wait_id, run.now + delay_ms * NS_PER_MS)


def ordered(waits: dict[str, Any]) -> list[str]:
    """Wait ids in creation order (`w2` before `w10`)."""
    return sorted(waits, key=lambda wait_id: int(wait_id[1:]))


# -- staleness (pure: a stale input must leave the state untouched) ----------------------------


def receipt_wait(state: dict[str, Any], envelope: dict[str, Any]) -> str | None:
    """The open wait a receipt settles, or None (stale)."""
    ref = envelope.get("issuer_ref")
    wait = state["engine"]["waits"].get(ref) if type(ref) is str else None
    if state["status"] != "running" or wait is None or wait["kind"] not in INTENT_KINDS:
        return None
    return ref if wait["effect"] == envelope.get("effect") else None


def signal_wait(state: dict[str, Any], signal: dict[str, Any]) -> tuple[str | None, str]:
    """The oldest open wait for this signal's name (created at `expect_version`, when the
    signal names one), and why there is none."""
    if state["status"] != "running":
        return None, "not running"
    waits = state["engine"]["waits"]
    expected = signal.get("expect_version")
    named = [
        wait_id
        for wait_id in ordered(waits)
        if waits[wait_id]["kind"] == "signal" and waits[wait_id]["signal"] == signal.get("name")
    ]
    for wait_id in named:
        if expected is None or expected == waits[wait_id]["version"]:
            return wait_id, ""
    return None, "version" if named else "no wait"


def child_wait(state: dict[str, Any], ended: dict[str, Any]) -> str | None:
    wait = state["engine"]["waits"].get(ended.get("token"))
    if state["status"] != "running" or wait is None or wait["kind"] != "child":
        return None
    return ended["token"] if wait["child"] == ended.get("child") else None


# -- resuming ---------------------------------------------------------------------------------


def on_receipt(run: Run, wait_id: str, envelope: dict[str, Any]) -> None:
    wait = run.engine["waits"].pop(wait_id)
    if wait["kind"] == "timeout":
        _timed_out(run, wait)
        return
    _close_pair(run, wait)
    if wait["kind"] == "retry":
        _resume(run, wait, {"retry": True})
        return
    outcome = _receipt_outcome(run, wait, envelope)
    if wait["kind"] == "human":
        run.history.add(
            "human.task.completed",
            step=wait["step"],
            task=wait["task"],
            token=wait["token"],
            wait=wait_id,
            status=outcome["status"],
        )
    _resume(run, wait, {"outcome": outcome})


def on_signal(run: Run, wait_id: str, signal: dict[str, Any]) -> None:
    wait = run.engine["waits"].pop(wait_id)
    _close_pair(run, wait)
    run.history.add(
        "signal.received",
        name=signal.get("name"),
        signal_seq=run.input_seq if signals.buffers(run.state) else None,  # old rules: none
        wait=wait_id,
        step=wait["step"],
        task=wait["task"],
        token=wait["token"],
    )
    _resume(
        run, wait, {"outcome": ok_outcome(signal.get("payload"), wait["attempt"], _ms(run, wait))}
    )


def on_ended(run: Run, wait_id: str, ended: dict[str, Any]) -> None:
    """A child's end: `completed` is the task's (or iteration's) result, any other status
    its error."""
    wait = run.engine["waits"].pop(wait_id)
    run.engine["children"].pop(wait["child"], None)
    _close_pair(run, wait)
    status = ended.get("status")
    run.history.add(
        "child.ended",
        child=wait["child"],
        status=status,
        wait=wait_id,
        step=wait["step"],
        token=wait["token"],
    )
    if status == "completed":
        outcome = ok_outcome(ended.get("result"), wait["attempt"], _ms(run, wait))
        if wait["into"] is not None:
            run.set_ctx(wait["into"], ended.get("result"))
    else:
        error = normalize_error(ended.get("error"), "engine", f"child.{status}", run.noetl)
        outcome = error_outcome(error, wait["attempt"], _ms(run, wait))
    _resume(run, wait, {"outcome": outcome})


def cancel_all(run: Run, reason: str | None) -> None:
    """End every open wait: intents are cancelled (their late receipts are refused by the
    kernel), children are told to cancel, signal waits simply end."""
    waits = run.engine["waits"]
    for wait_id in ordered(waits):
        wait = waits[wait_id]
        if wait["kind"] in INTENT_KINDS:
            run.ctx.cancel(wait_id)
        elif wait["kind"] == "child" and wait["child"] is not None:
            run.emit(CANCEL_EVENT, {"exec": wait["child"], "reason": reason})
    run.engine["waits"] = {}
    run.engine["children"] = {}


def _timed_out(run: Run, timer: dict[str, Any]) -> None:
    """The timeout won: the raced wait ends with a `timeout` error."""
    main_id = timer["paired"]
    main = run.engine["waits"].pop(main_id, None)
    if main is None:
        raise EngineFailure("engine.wait_pair", f"the timeout's wait {main_id} is not open")
    if main["kind"] in INTENT_KINDS:
        run.ctx.cancel(main_id)
    error = error_value("timeout", "timeout", f"no answer within {timer['timeout_ms']} ms", True)
    _resume(run, main, {"outcome": error_outcome(error, main["attempt"], _ms(run, main))})


def _close_pair(run: Run, wait: dict[str, Any]) -> None:
    """The wait won its race: its timeout timer is cancelled."""
    paired = wait["paired"]
    if paired is not None and run.engine["waits"].pop(paired, None) is not None:
        run.ctx.cancel(paired)


def _receipt_outcome(run: Run, wait: dict[str, Any], envelope: dict[str, Any]) -> dict[str, Any]:
    attempt, duration = wait["attempt"], _ms(run, wait)
    try:
        payload = cbor.decode(bytes(envelope.get("payload") or b""))
    except (cbor.CborError, TypeError) as undecodable:
        bad = error_value(
            "transport", "receipt.payload", f"the receipt payload is not CBOR: {undecodable}"
        )
        return error_outcome(bad, attempt, duration)
    status = (envelope.get("status") or {}).get("$tag")
    if status == "ok":
        # An ok outcome carries the tool's protocol details too (`outcome.http.status`).
        return _with_protocol(ok_outcome(payload, attempt, duration), payload)
    if status == "timeout":
        error = normalize_error(payload, "timeout", "receipt.timeout", run.noetl)
        error["category"] = "timeout"
        if not run.noetl or error["kind"] not in ("timeout", "db_timeout"):
            error["kind"] = "timeout"
        error["retryable"] = type(payload) is not dict or payload.get("retryable") is not False
    else:
        error = normalize_error(payload, "transport", "tool.error", run.noetl)
    if run.noetl:
        _noetl_details(error, payload, wait["effect"])
    return _with_protocol(error_outcome(error, attempt, duration), payload)


def _noetl_details(error: dict[str, Any], payload: Any, effect: Any) -> None:
    """A playbook's tool error also carries what NoETL's error holds (`noetl/core/errors.py`,
    `ErrorInfo`; `noetl/worker/task_sequence_executor.py`): the tool kind as `source`, an
    http status as `status`, `status_code` and `http_status`, a SQLSTATE as `pg_code`, a
    python exception's type as `exception_type`."""
    kind = effect[len("aos/tool.") : -len("@1")] if type(effect) is str else None
    error["source"] = kind if kind and effect == f"aos/tool.{kind}@1" else "unknown"
    details = payload if type(payload) is dict else {}
    http, pg, py = details.get("http"), details.get("pg"), details.get("py")
    if type(http) is dict and type(http.get("status")) is int:
        error["status"] = error["status_code"] = error["http_status"] = http["status"]
    if type(pg) is dict and type(pg.get("sqlstate")) is str:
        error["pg_code"] = pg["sqlstate"]
    if type(py) is dict and type(py.get("exception")) is str:
        error["exception_type"] = py["exception"]


def _with_protocol(outcome: dict[str, Any], payload: Any) -> dict[str, Any]:
    """The tool's own details beside the result or error (spec/11 §3.3): `http {status,
    headers}`, `pg {code, sqlstate}`, `py {exception}`, `shell {exit_code, ...}`, `duckdb
    {error}`, as the adapter reported them."""
    if type(payload) is dict:
        for name in PROTOCOL_FIELDS:
            if name in payload:
                outcome[name] = payload[name]
    return outcome


PROTOCOL_FIELDS = ("http", "pg", "py", "shell", "duckdb")


TRACEBACK_CHARS_MAX = 4000
"""Most of a tool's python traceback an error keeps (its end: where it raised)."""


def normalize_error(value: Any, kind: str, code: str, noetl: bool = False) -> dict[str, Any]:
    """`{kind, category, code, message, retryable[, traceback]}` from whatever an adapter or a
    child sent:
    the category is the sender's (its `category`, else its `kind` when that is a category),
    else `kind`. In a playbook (`noetl`) `kind` says what failed in NoETL's words: a tool's
    `error_kind`, a child's `kind` (spec/11 §3.3)."""
    if type(value) is not dict:
        message = "" if value is None else value if type(value) is str else repr(value)
        return error_value(kind, code, message)
    given = value.get("category") if value.get("category") in ERROR_KINDS else value.get("kind")
    error = error_value(
        given if given in ERROR_KINDS else kind,
        value["code"] if type(value.get("code")) is str else code,
        value["message"] if type(value.get("message")) is str else "",
        value.get("retryable") is True,
    )
    named = value.get("error_kind") if "error_kind" in value else value.get("kind")
    if noetl and type(named) is str and named:
        error["kind"] = named
    if type(value.get("traceback")) is str:  # where a python task raised (flows/tools/pyworker.py)
        error["traceback"] = value["traceback"][-TRACEBACK_CHARS_MAX:]
    return error


def _resume(run: Run, wait: dict[str, Any], resume: dict[str, Any]) -> None:
    token = run.engine["tokens"].get(wait["token"])
    frame = None
    if token is not None:
        frame = next((f for f in token["frames"] if f["index"] == wait["frame"]), None)
    if frame is None:
        raise EngineFailure(
            "engine.wait_orphan", f"no frame waits on {wait['token']}/{wait['frame']}"
        )
    frame["resume"] = resume
    frame["status"] = "running"
    frame["wait"] = None


def _ms(run: Run, wait: dict[str, Any]) -> int:
    return max(0, (run.now - wait["started_ns"]) // NS_PER_MS)
