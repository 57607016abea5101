"""The stored engine state (spec/11 §3.1): records leave out their default fields, the engine
reads them back in full, and nothing is lost either way."""

from __future__ import annotations

from typing import Any

import pytest
from aos_flow import compact
from hypothesis import given
from hypothesis import strategies as st

from aos.kernel import cbor
from tests.flow_interpreter.harness import Execution, effects, flow, step, task

TABLES = {
    "wait": compact.WAIT_DEFAULTS,
    "token": compact.TOKEN_DEFAULTS,
    "frame": compact.FRAME_DEFAULTS,
    "block": compact.BLOCK_DEFAULTS,
    "engine": compact.ENGINE_DEFAULTS,
    "summary": compact.SUMMARY_DEFAULTS,
    "counters": compact.COUNTER_DEFAULTS,
}
# Near misses of every default: equal under ==, or empty, but another type or value.
NEAR = [None, False, True, 0, 1, 2, 0.0, 1.0, "", "x", {}, [], {"a": 1}, [None]]


def _records(state: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    engine = state["engine"]
    found: list[tuple[str, dict[str, Any]]] = [("wait", w) for w in engine["waits"].values()]
    for token in engine["tokens"].values():
        found.append(("token", token))
        for frame in token.get("frames", []):
            found.append(("frame", frame))
            found += [("block", block) for block in frame.get("stack", [])]
    return found


def _state(wait: dict[str, Any], token: dict[str, Any]) -> dict[str, Any]:
    return {"status": "running", "engine": {"waits": {"w1": wait}, "tokens": {"k1": token}}}


def _two_calls() -> dict[str, Any]:
    return flow(
        [
            step("a", [task("pay", "call", args={"n": 1})], arcs=[{"to": "b"}]),
            step("b", [task("ship", "call", args={"n": 2})]),
        ]
    )


def test_a_waiting_call_is_stored_without_its_defaults() -> None:
    ex = Execution()
    out = ex.start(_two_calls())
    stored = ex.state
    for kind, record in _records(stored):
        defaults = TABLES[kind]
        assert not [k for k, v in record.items() if k in defaults and _is(v, defaults[k])]
    # The engine (and every test reading `ex.engine`) sees every field.
    frame = ex.engine["tokens"]["k1"]["frames"][0]
    assert set(compact.FRAME_DEFAULTS) <= set(frame)
    assert frame["wait"] == "w1" and frame["resume"] is None and frame["results"] == {}
    assert ex.engine["waits"]["w1"]["paired"] is None
    wait = stored["engine"]["waits"]["w1"]
    assert wait == {
        "kind": "call",
        "token": "k1",
        "step": "a",
        "task": "pay",
        "version": 1,
        "effect": "aos/tool.echo@1",
        "started_ns": ex.now_ns,
    }
    ex.receipt(effects(out)[0], {"paid": True})
    assert ex.business["steps"]["a"] == {"paid": True}


def test_a_state_stored_in_full_reads_the_same() -> None:
    """An older state, every field present, resumes exactly as its compacted form does."""
    compacted = Execution()
    out = compacted.start(_two_calls())
    full = Execution(blobs=dict(compacted.blobs), state=compact.expanded(compacted.state))
    assert cbor.encode(full.state) != cbor.encode(compacted.state)
    after = [ex.receipt(effects(out)[0], {"paid": True}) for ex in (compacted, full)]
    assert after[0] == after[1]
    assert cbor.encode(compacted.state) == cbor.encode(full.state)


def test_a_stale_input_returns_the_state_exactly_as_it_came() -> None:
    ex = Execution()
    ex.start(_two_calls())
    full = compact.expanded(ex.state)
    ex.state = full
    before = cbor.encode(full)
    out = ex.signal("nobody.waits")
    assert out.ann["events"][0]["event"] == "signal.dropped"
    assert cbor.encode(ex.state) == before  # still in full: a stale input changes nothing


def _is(value: Any, default: Any) -> bool:
    return type(value) is type(default) and value == default


FIELDS = sorted({key for table in TABLES.values() for key in table} | {"id", "x"})


@given(
    st.sampled_from(sorted(TABLES)),
    st.dictionaries(st.sampled_from(FIELDS), st.sampled_from(NEAR), max_size=12),
)
def test_compaction_is_lossless(kind: str, record: dict[str, Any]) -> None:
    """expanded(compacted(s)) is expanded(s) for any record, compacted(expanded(s)) is
    compacted(s), and a field is left out only when it is exactly its default."""
    state = _placed(kind, record)
    small = compact.compacted(state)
    assert cbor.encode(compact.expanded(small)) == cbor.encode(compact.expanded(state))
    assert cbor.encode(compact.compacted(compact.expanded(state))) == cbor.encode(small)
    kept = _found(small, kind)
    for key, value in record.items():
        default = TABLES[kind].get(key, object())
        assert (key in kept) == (not _is(value, default))


def _placed(kind: str, record: dict[str, Any]) -> dict[str, Any]:
    """A state holding `record` as a record of `kind`."""
    inner = {"wait": {}, "token": record, "frame": {"frames": [record]}}
    token = inner.get(kind, {"frames": [{"stack": [record]}]})
    state = _state(record if kind == "wait" else {"kind": "call"}, token)
    if kind in ("summary", "counters"):
        state["engine"][kind] = record
    elif kind == "engine":
        state["engine"] = {**record, "waits": {}, "tokens": {}}
    return state


def _found(state: dict[str, Any], kind: str) -> dict[str, Any]:
    engine = state["engine"]
    if kind == "engine":
        return {k: v for k, v in engine.items() if k not in ("waits", "tokens")}
    if kind in ("summary", "counters"):
        return dict(engine[kind])
    if kind == "wait":
        return dict(engine["waits"]["w1"])
    token = engine["tokens"]["k1"]
    if kind == "token":
        return dict(token)
    frame = token["frames"][0]
    return dict(frame if kind == "frame" else frame["stack"][0])


@pytest.mark.parametrize("engine", [None, [], "x"])
def test_a_state_without_an_engine_map_is_left_as_it_is(engine: Any) -> None:
    state = {"status": "failed", "engine": engine}
    assert compact.expanded(state) == state
    assert compact.compacted(state) == state


def test_malformed_waits_and_tokens_are_left_as_they_are() -> None:
    state = {"status": "failed", "engine": {"waits": [], "tokens": 3, "summary": "x"}}
    full = compact.expanded(state)
    assert (full["engine"]["waits"], full["engine"]["tokens"]) == ([], 3)
    assert full["engine"]["summary"] == "x" and full["engine"]["error"] is None
    assert compact.compacted(full) == state
