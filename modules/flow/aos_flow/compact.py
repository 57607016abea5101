"""The engine state as a cell stores it (spec/11 §3.1): the engine's own fields, its summary
and counters, the records of the marking (tokens, their frames, the frames' blocks) and the
waits leave out every field that is at its default, and a step puts those fields back before
the engine reads the state.

Every step decodes and encodes the whole state, in the guest and again in the kernel, and
most of a record's fields are null or at their defaults most of the time (a waiting call's
frame is 11 fields, 3 of them set), so the stored state is about a third smaller.

It is lossless for any record: a field is left out only when its value is exactly the
table's default (the same type: `0` is not `False`), and put back as that default, so the
tables need not follow the constructors and an older state, stored in full, reads the same.
A record kind not named here, and any field not in its table, is stored as it is."""

from __future__ import annotations

from typing import Any

WAIT_DEFAULTS: dict[str, Any] = {
    "frame": None,
    "task": None,
    "attempt": 1,
    "started_ns": 0,
    "paired": None,
    "effect": None,
    "signal": None,
    "child": None,
    "into": None,
    "timeout_ms": None,
}
TOKEN_DEFAULTS: dict[str, Any] = {
    "args": {},
    "inputs": None,
    "frames": [],
    "loop": None,
    "single": None,
    "final": False,
}
FRAME_DEFAULTS: dict[str, Any] = {
    "index": None,
    "iter": {},
    "stack": [],
    "attempt": 1,
    "prev": None,
    "results": {},
    "wait": None,
    "resume": None,
    "remote": False,
    "error": None,
}
BLOCK_DEFAULTS: dict[str, Any] = {"pos": 0, "repeat": None, "attempt": 1}
# The engine's own fields (its `waits` and `tokens` maps are always stored), its summary and
# its id counters.
ENGINE_DEFAULTS: dict[str, Any] = {
    "joins": {},
    "children": {},
    "parent": None,
    "outer": None,
    "iteration": None,
    "final_ran": False,
    "final_failed": False,
    "result": None,
    "error": None,
}
SUMMARY_DEFAULTS: dict[str, Any] = {
    "steps_started": 0,
    "steps_done": 0,
    "steps_failed": 0,
    "branches_completed": 0,
    "branches_failed": 0,
    "failures": [],
}
COUNTER_DEFAULTS: dict[str, Any] = {"token": 0, "wait": 0, "child": 0, "continue": 0}
_TABLES = (
    WAIT_DEFAULTS,
    TOKEN_DEFAULTS,
    FRAME_DEFAULTS,
    BLOCK_DEFAULTS,
    ENGINE_DEFAULTS,
    SUMMARY_DEFAULTS,
    COUNTER_DEFAULTS,
)


def expanded(state: dict[str, Any]) -> dict[str, Any]:
    """A copy of `state` whose engine records have every field (what the engine reads). The
    state given is not changed: a stale input returns it exactly as it came."""
    return _with_engine(state, _fill)


def compacted(state: dict[str, Any]) -> dict[str, Any]:
    """`state` as it is stored: its engine records without the fields at their defaults."""
    return _with_engine(state, _strip)


def _with_engine(state: dict[str, Any], each: Any) -> dict[str, Any]:
    engine = state.get("engine")
    if type(engine) is not dict:
        return state
    engine = each(engine, ENGINE_DEFAULTS)
    for field, defaults in (("summary", SUMMARY_DEFAULTS), ("counters", COUNTER_DEFAULTS)):
        if field in engine:
            engine[field] = each(engine[field], defaults)
    waits, tokens = engine.get("waits"), engine.get("tokens")
    if type(waits) is dict:
        engine["waits"] = {key: each(wait, WAIT_DEFAULTS) for key, wait in waits.items()}
    if type(tokens) is dict:
        engine["tokens"] = {key: _token(token, each) for key, token in tokens.items()}
    return {**state, "engine": engine}


def _token(token: Any, each: Any) -> Any:
    token = each(token, TOKEN_DEFAULTS)
    if type(token) is dict and type(token.get("frames")) is list:
        token["frames"] = [_frame(frame, each) for frame in token["frames"]]
    return token


def _frame(frame: Any, each: Any) -> Any:
    frame = each(frame, FRAME_DEFAULTS)
    if type(frame) is dict and type(frame.get("stack")) is list:
        frame["stack"] = [each(block, BLOCK_DEFAULTS) for block in frame["stack"]]
    return frame


_ABSENT: Any = object()
# Per table: the defaults that are values, and the fields whose default is a fresh container
# (the engine changes those in place, so each record gets its own).
_VALUES = {id(t): {k: d for k, d in t.items() if type(d) not in (dict, list)} for t in _TABLES}
_CONTAINERS = {
    id(t): [(k, type(d)) for k, d in t.items() if type(d) in (dict, list)] for t in _TABLES
}


def _fill(record: Any, defaults: dict[str, Any]) -> Any:
    if type(record) is not dict:
        return record
    full = {**_VALUES[id(defaults)], **record}
    for key, make in _CONTAINERS[id(defaults)]:
        if key not in record:
            full[key] = make()
    return full


def _strip(record: Any, defaults: dict[str, Any]) -> Any:
    if type(record) is not dict:
        return record
    # A copy less the fields at their defaults, checked once per default (a table has fewer
    # fields than an expanded record, and most are null: no call per field, this runs over
    # every record of the state on every step).
    stripped = dict(record)
    for key in _NULLS[id(defaults)]:
        if key in stripped and stripped[key] is None:
            del stripped[key]
    for key, default, kind in _OTHERS[id(defaults)]:
        value = stripped.get(key, _ABSENT)
        if type(value) is kind and value == default:
            del stripped[key]
    return stripped


# Per table: the fields whose default is null, and the others with their default and its type.
_NULLS = {id(t): tuple(k for k, d in t.items() if d is None) for t in _TABLES}
_OTHERS = {id(t): tuple((k, d, type(d)) for k, d in t.items() if d is not None) for t in _TABLES}
