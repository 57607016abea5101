"""Signals sent before their wait opens (spec/11 §3.2): buffered per execution, in order,
bounded by `signals_buffered_max`, delivered when a matching wait opens; a signal no step waits
for, one over the limit and a versioned one with no wait are never buffered (state untouched);
the buffer is dropped, and recorded, when the execution ends. An execution started before
buffering keeps the old rules: a signal no wait takes is stale."""

from __future__ import annotations

from typing import Any

from tests.flow_interpreter.harness import (
    TIMER,
    Execution,
    arc,
    effects,
    events,
    flow,
    names,
    rule,
    step,
    task,
)

LIMIT = "signals_buffered_max"


def _later(*waits: dict[str, Any], limits: Any = None) -> dict[str, Any]:
    """A timer first (the signals come while it runs), then the signal waits, each keeping
    its payload in ctx under its task's name."""
    keep = [task(f"keep_{w['name']}", "assign", set={w["name"]: "{{ _prev }}"}) for w in waits]
    tasks = [task("first", "wait_timer", duration_ms=1000)]
    for wait, keeping in zip(waits, keep, strict=True):
        tasks += [wait, keeping]
    return flow([step("a", tasks)], limits=limits)


def _wait(name: str, signal: str = "go", **fields: Any) -> dict[str, Any]:
    return task(name, "wait_signal", signal=signal, **fields)


def _dropped(name: str, seq: int, reason: str) -> dict[str, Any]:
    return {"event": "signal.dropped", "name": name, "signal_seq": seq, "reason": reason}


def _signal_events(out: Any) -> list[dict[str, Any]]:
    return [e for e in events(out) if e["event"].startswith("signal.")]


def test_a_signal_before_its_wait_is_buffered_then_delivered_when_the_wait_opens() -> None:
    ex = Execution()
    timer = effects(ex.start(_later(_wait("w", timeout_ms=5000))))[0]
    sent_at = ex.height
    out = ex.signal("go", {"box": 7})
    assert events(out) == [
        {"event": "signal.buffered", "name": "go", "signal_seq": sent_at, "buffered": 1}
    ]
    assert ex.state["engine_version"] == 2  # buffering changes the state
    assert ex.engine["signals"] == [{"name": "go", "payload": {"box": 7}, "seq": sent_at}]
    out = ex.fire(timer)
    assert [e for e in events(out) if e["event"] == "signal.received"] == [
        {
            "event": "signal.received",
            "name": "go",
            "signal_seq": sent_at,
            "step": "a",
            "task": "w",
            "token": "k1",
        }
    ]
    assert effects(out, TIMER) == []  # taken at once: no wait, no timeout timer
    assert ex.engine["signals"] == [] and ex.engine["waits"] == {}
    assert ex.business["ctx"] == {"w": {"box": 7}} and ex.status == "completed"


def test_buffered_signals_are_delivered_in_order_by_name() -> None:
    ex = Execution()
    definition = _later(_wait("one"), _wait("other", signal="other"), _wait("two"))
    timer = effects(ex.start(definition))[0]
    seqs = []
    for name, payload in (("go", 1), ("other", "x"), ("go", 2)):
        seqs.append(ex.height)
        assert names(ex.signal(name, payload)) == ["signal.buffered"]
    assert [s["name"] for s in ex.engine["signals"]] == ["go", "other", "go"]
    out = ex.fire(timer)
    received = [(e["task"], e["signal_seq"]) for e in _signal_events(out)]
    assert received == [("one", seqs[0]), ("other", seqs[1]), ("two", seqs[2])]
    assert ex.business["ctx"] == {"one": 1, "other": "x", "two": 2}


def test_a_signal_for_an_open_wait_is_delivered_with_its_own_seq() -> None:
    ex = Execution()
    ex.start(flow([step("a", [_wait("w")])]))
    sent_at = ex.height
    (received,) = _signal_events(ex.signal("go", 1))
    assert received["event"] == "signal.received" and received["signal_seq"] == sent_at
    assert received["wait"] == "w1" and ex.status == "completed"


def test_a_signal_no_step_waits_for_is_dropped_and_changes_nothing() -> None:
    ex = Execution()
    ex.start(_later(_wait("w")))
    before = ex.state_bytes()
    out = ex.signal("nobody.waits", 1)
    assert ex.state_bytes() == before
    assert events(out) == [_dropped("nobody.waits", ex.height - 1, "no step waits for it")]


def test_the_buffer_holds_signals_buffered_max_and_drops_the_next() -> None:
    ex = Execution()
    definition = _later(_wait("one"), _wait("two"), _wait("three"), limits={LIMIT: 2})
    timer = effects(ex.start(definition))[0]
    ex.signal("go", 1)
    assert names(ex.signal("go", 2)) == ["signal.buffered"]  # at the limit: kept
    before = ex.state_bytes()
    out = ex.signal("go", 3)
    assert ex.state_bytes() == before
    assert events(out) == [_dropped("go", ex.height - 1, "the buffer is full")]
    ex.fire(timer)  # `one` and `two` take the buffered signals; `three` waits
    assert ex.business["ctx"] == {"one": 1, "two": 2}
    assert ex.engine["signals"] == [] and ex.status == "running"
    ex.signal("go", 4)
    assert ex.business["ctx"] == {"one": 1, "two": 2, "three": 4}


def test_the_default_limit_is_one_hundred() -> None:
    ex = Execution()
    ex.start(_later(_wait("w")))
    for n in range(100):
        assert names(ex.signal("go", n)) == ["signal.buffered"]
    assert names(ex.signal("go", 100)) == ["signal.dropped"]


def test_a_versioned_signal_is_never_buffered() -> None:
    ex = Execution()
    ex.start(_later(_wait("w")))
    before = ex.state_bytes()
    out = ex.signal("go", 1, expect_version=1)
    assert ex.state_bytes() == before
    assert events(out) == [
        {"event": "signal.stale", "name": "go", "expect_version": 1, "reason": "no wait"}
    ]


def test_cancelling_drops_the_buffer_and_records_each_signal() -> None:
    ex = Execution()
    ex.start(_later(_wait("w"), _wait("v", signal="other")))
    first = ex.height
    ex.signal("other", 1)
    ex.signal("go", 2)
    out = ex.cancel("no longer needed")
    dropped = [e for e in events(out) if e["event"] == "signal.dropped"]
    assert dropped == [
        _dropped(name, seq, "the execution is cancelled")
        for name, seq in (("other", first), ("go", first + 1))
    ]
    assert names(out)[-1] == "playbook.finished"
    assert ex.engine["signals"] == [] and ex.status == "cancelled"


def test_an_execution_that_ends_drops_what_it_never_took() -> None:
    ex = Execution()
    definition = flow(
        [
            step("a", [task("t", "wait_timer", duration_ms=10)], arcs=[arc("b", "{{ false }}")]),
            step("b", [_wait("w")]),
        ]
    )
    timer = effects(ex.start(definition))[0]
    ex.signal("go", 1)
    out = ex.fire(timer)
    assert ex.status == "completed"
    (dropped,) = [e for e in events(out) if e["event"] == "signal.dropped"]
    assert dropped["reason"] == "the execution is completed"
    assert ex.engine["signals"] == []


def test_a_large_payload_is_buffered_by_reference_and_delivered_as_itself() -> None:
    ex = Execution()
    timer = effects(ex.start(_later(_wait("w"))))[0]
    payload = {"text": "x" * 500}
    out = ex.signal("go", payload)
    assert len(out.writes) == 1  # the payload, in the CAS with the step
    (kept,) = ex.engine["signals"]
    assert "payload" not in kept and kept["stored"]["size"] == len(out.writes[0])
    ex.fire(timer)
    assert ex.business["ctx"] == {"w": payload}


def test_a_retried_wait_takes_a_signal_buffered_while_it_backed_off() -> None:
    again = rule("{{ outcome.status == 'error' }}", "retry", attempts=2, delay_ms=1000)
    ex = Execution()
    out = ex.start(flow([step("a", [_wait("w", timeout_ms=1000, rules=[again])])]))
    (timeout,) = effects(out)
    (backoff,) = effects(ex.fire(timeout))
    assert names(ex.signal("go", "late but kept")) == ["signal.buffered"]
    ex.fire(backoff)
    assert ex.status == "completed" and ex.business["steps"]["a"] == "late but kept"


# -- an execution an earlier interpreter started -------------------------------------------


def _before_buffering(ex: Execution) -> None:
    """The state as an interpreter before buffering left it: no `signals` in its engine."""
    state = dict(ex.state)
    state["engine"] = {k: v for k, v in state["engine"].items() if k != "signals"}
    ex.state = state


def test_an_execution_started_before_buffering_keeps_the_old_rules() -> None:
    ex = Execution()
    ex.start(_later(_wait("w")))
    _before_buffering(ex)
    before = ex.state_bytes()
    out = ex.signal("go", 1)
    assert ex.state_bytes() == before
    assert events(out) == [{"event": "signal.stale", "name": "go", "reason": "no wait"}]
    out = ex.fire(effects(ex.outputs[0])[0])
    assert "signals" not in ex.engine and ex.status == "running"
    (received,) = _signal_events(ex.signal("go", 2))
    assert "signal_seq" not in received  # the history it records is the old one
    assert ex.status == "completed"


def test_an_old_execution_ends_without_a_buffer_to_drop() -> None:
    ex = Execution()
    ex.start(_later(_wait("w")))
    _before_buffering(ex)
    out = ex.cancel()
    assert names(out) == ["execution.cancelled", "playbook.finished"]
    assert "signals" not in ex.engine
