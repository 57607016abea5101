"""Signals on a real world (spec/11 §3.2): one sent before its wait is journaled, kept by the
execution and taken in order when the wait opens; one that could never be delivered is
refused before ingress (a typed error, nothing journaled); one sent around that check is
recorded as dropped with the state untouched; a cancel drops the buffer, recorded; and a
world that did all of it replays byte for byte. On an embedded world, through the node's HTTP
route and through `aos flow signal`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aos.cli.main import main
from aos.flows.serve import flow_operations as ops
from aos.flows.serve import signals
from aos.flows.serve.flow_world import SIGNAL_EVENT, START_EVENT
from aos.flows.serve.routes import add_flow_routes
from aos.kernel import cbor
from aos.kernel.audit import replay
from aos.kernel.node import Node
from aos.kernel.node.app import create_app
from tests.auth_fixtures import authorize
from tests.flows_world.support import FlowWorld, make_flow_world
from tests.flows_world.test_flow_requests import TestClient, ok, refused
from tests.test_world import engine

LATER = """
name: t/later
limits: {signals_buffered_max: 2}
steps:
  - name: first
    tasks: [{name: pause, do: wait_timer, duration_s: 60}]
    next: take
  - name: take
    tasks:
      - {name: one, do: wait_signal, signal: go}
      - {name: keep_one, do: assign, set: {one: "{{ _prev }}"}}
      - {name: two, do: wait_signal, signal: go}
      - {name: keep_two, do: assign, set: {two: "{{ _prev }}"}}
"""
MINUTE_NS = 61 * 10**9


def _start(flows: FlowWorld, exec_id: str = "e1", text: str = LATER) -> None:
    """Deploy and start, without draining: the local adapters would skip the pause."""
    ops.start(flows.world, flows.deploy(text).name, exec_id=exec_id)
    assert flows.state(exec_id)["status"] == "running"


@pytest.fixture
def flows(tmp_path: Path) -> Iterator[FlowWorld]:
    made = make_flow_world(tmp_path / "w")
    try:
        _start(made)
        yield made
    finally:
        made.world.close()


def _signal_events(flows: FlowWorld, exec_id: str = "e1") -> list[dict[str, Any]]:
    return [
        {"seq": e.seq, **e.event}
        for e in ops.history(flows.world, exec_id)
        if str(e.event["event"]).startswith("signal.")
    ]


def test_signals_before_their_wait_are_kept_and_taken_in_order(flows: FlowWorld) -> None:
    first = ops.signal(flows.world, "e1", "go", {"n": 1})
    second = ops.signal(flows.world, "e1", "go", {"n": 2})
    assert (first.outcome, second.outcome) == ("buffered", "buffered")
    assert first.model_dump() == {
        "exec": "e1",
        "name": "go",
        "seq": first.seq,
        "outcome": "buffered",
        "status": "running",
    }
    # The limit is 2: a third is refused, and nothing is journaled.
    refused(flows, "flow.signal_buffer_full", lambda: ops.signal(flows.world, "e1", "go", 3))
    flows.world.advance_time(MINUTE_NS)
    assert flows.state()["status"] == "completed"
    assert flows.state()["business"]["ctx"] == {"one": {"n": 1}, "two": {"n": 2}}
    story = [(e["event"], e.get("task"), e["signal_seq"]) for e in _signal_events(flows)]
    assert story == [
        ("signal.buffered", None, first.seq),
        ("signal.buffered", None, second.seq),
        ("signal.received", "one", first.seq),
        ("signal.received", "two", second.seq),
    ]


def test_a_signal_for_an_open_wait_is_delivered(flows: FlowWorld) -> None:
    flows.world.advance_time(MINUTE_NS)
    taken = ops.signal(flows.world, "e1", "go", 1)
    assert (taken.outcome, taken.status) == ("delivered", "running")
    [received] = _signal_events(flows)
    assert received["signal_seq"] == taken.seq and received["wait"]


def test_signals_that_could_never_be_delivered_are_refused(flows: FlowWorld) -> None:
    world = flows.world
    refused(flows, "flow.signal_unknown", lambda: ops.signal(world, "e1", "nobody.waits"))
    refused(
        flows, "flow.signal_unknown", lambda: ops.signal(world, "e1", "other", expect_version=1)
    )
    # A versioned signal is for the wait open at that version: none is open yet.
    refused(flows, "flow.signal_stale", lambda: ops.signal(world, "e1", "go", expect_version=1))
    world.advance_time(MINUTE_NS)
    [wait] = flows.waits().values()
    wrong = int(wait["version"]) + 1
    refused(flows, "flow.signal_stale", lambda: ops.signal(world, "e1", "go", expect_version=wrong))
    right = ops.signal(world, "e1", "go", 1, expect_version=int(wait["version"]))
    assert right.outcome == "delivered"
    assert not [e for e in _signal_events(flows) if e["event"] != "signal.received"]


def test_an_execution_without_a_buffer_refuses_what_no_wait_takes(flows: FlowWorld) -> None:
    """An execution an interpreter before buffering started keeps its rules: the host
    refuses a signal no open wait takes instead of journaling one that would be stale."""
    state = flows.state()
    engine = {k: v for k, v in state["engine"].items() if k != signals.BUFFER_FIELD}
    with pytest.raises(signals.SignalStaleError) as stale:
        signals.check(flows.world, {**state, "engine": engine}, "go", None)
    assert "before signals were buffered" in str(stale.value)
    signals.check(flows.world, state, "go", None)  # this one buffers


def test_signals_sent_around_the_check_are_dropped_and_change_nothing(flows: FlowWorld) -> None:
    def raw(name: str) -> None:
        value = {"exec": "e1", "name": name, "payload": None, "expect_version": None}
        flows.world.send(SIGNAL_EVENT, value)

    before = flows.state_bytes()
    raw("nobody.waits")
    assert flows.state_bytes() == before
    ops.signal(flows.world, "e1", "go", 1)
    ops.signal(flows.world, "e1", "go", 2)
    before = flows.state_bytes()
    raw("go")
    assert flows.state_bytes() == before
    dropped = [(e["event"], e["reason"]) for e in _signal_events(flows) if "reason" in e]
    assert dropped == [
        ("signal.dropped", "no step waits for it"),
        ("signal.dropped", "the buffer is full"),
    ]


def test_a_cancel_drops_the_buffer_and_records_it(flows: FlowWorld) -> None:
    sent = ops.signal(flows.world, "e1", "go", {"n": 1})
    ops.cancel(flows.world, "e1", "not needed")
    [*_, dropped, finished] = [e for e in ops.history(flows.world, "e1")]
    assert dropped.event == {
        "event": "signal.dropped",
        "name": "go",
        "signal_seq": sent.seq,
        "reason": "the execution is cancelled",
    }
    assert finished.event["event"] == "playbook.finished"
    state = flows.state()
    assert state["status"] == "cancelled" and state["engine"][signals.BUFFER_FIELD] == []


def test_a_world_that_buffered_refused_and_dropped_signals_replays(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    with flows.world:
        _start(flows)
        _start(flows, "e2")
        ops.signal(flows.world, "e1", "go", {"big": "x" * 500})  # kept in the CAS
        ops.signal(flows.world, "e1", "go", 2)
        refused(flows, "flow.signal_unknown", lambda: ops.signal(flows.world, "e1", "nope"))
        ops.signal(flows.world, "e2", "go", 3)
        ops.cancel(flows.world, "e2")
        flows.world.advance_time(MINUTE_NS)
        assert flows.state("e1")["business"]["ctx"] == {"one": {"big": "x" * 500}, "two": 2}
        assert "signal.dropped" in flows.names("e2")
    report = replay.verify_replay(tmp_path / "w")
    assert report.ok, report.divergence
    assert report.steps >= 7  # two starts, three signals, a cancel, the timer
    replayed = _aos("world", "replay", "--verify", "--world", tmp_path / "w")
    assert replayed.exit_code == 0, replayed.output
    assert "ok: every record and the head match" in replayed.stdout


# --------------------------------------------------------------------------------------------
# Over the node's HTTP API


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    made = make_flow_world(tmp_path / "w")
    _start(made)
    made.world.close()
    with Node.open_path(made.path, sync=False, engine=engine()) as node:
        app = create_app(node)
        add_flow_routes(app, node)
        yield authorize(TestClient(app), node)


def test_the_signal_route_buffers_and_refuses(client: TestClient) -> None:
    def journal() -> Any:
        return ok(client.get("/v1/journal", params={"from": 1, "limit": 1000}))["records"]

    kept = ok(client.post("/v1/executions/e1/signal", json={"name": "go", "payload": [1]}))
    assert (kept["outcome"], kept["status"], kept["name"]) == ("buffered", "running", "go")
    before = journal()
    for body, code in [
        ({"name": "nobody.waits"}, "flow.signal_unknown"),
        ({"name": "go", "expect_version": 1}, "flow.signal_stale"),
    ]:
        answer = client.post("/v1/executions/e1/signal", json=body)
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["code"] == code
    ok(client.post("/v1/executions/e1/signal", json={"name": "go"}))
    full = client.post("/v1/executions/e1/signal", json={"name": "go"})
    assert (full.status_code, full.json()["error"]["code"]) == (409, "flow.signal_buffer_full")
    assert len(journal()) == len(before) + 2  # the second kept signal and its step only


# --------------------------------------------------------------------------------------------
# aos flow signal


def _aos(*args: str | Path) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


def test_aos_flow_signal_says_what_became_of_the_signal(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    _start(flows)
    flows.world.close()
    at = ["--world", str(tmp_path / "w")]
    kept = _aos("flow", "signal", "e1", "go", "--payload", '{"n": 1}', *at)
    assert kept.exit_code == 0, kept.output
    assert "signalled e1 go: buffered (seq " in kept.stdout and "status running" in kept.stdout
    never = _aos("flow", "signal", "e1", "nobody.waits", *at)
    assert never.exit_code == 1 and "error[flow.signal_unknown]" in never.stderr
    as_json = _aos("flow", "signal", "e1", "nobody.waits", "--json", *at)
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["error"]["code"] == "flow.signal_unknown"


def test_aos_flow_signal_exits_1_when_the_interpreter_drops_it(tmp_path: Path) -> None:
    """A definition this host cannot read back (not its canonical form) leaves the check to
    the interpreter, which drops a signal no step waits for: journaled, not delivered."""
    flows = make_flow_world(tmp_path / "w")
    with flows.world:
        definition = {
            "format": "aos.flow/1",
            "name": "t/raw",
            "steps": [{"name": "a", "tasks": [{"do": "wait_signal", "signal": "go"}]}],
        }
        digest = str(flows.world.put_blob(cbor.encode(definition)))
        start = {"exec": "r1", "flow": "t/raw", "version": 1, "definition": digest}
        flows.world.send(START_EVENT, {**start, "workload": {}, "parent": None})
        assert flows.state("r1")["status"] == "running"
    at = ["--world", str(tmp_path / "w")]
    dropped = _aos("flow", "signal", "r1", "nobody.waits", "--json", *at)
    assert dropped.exit_code == 1, dropped.output
    body = json.loads(dropped.stdout)
    assert (body["outcome"], body["status"]) == ("dropped", "running")
    text = _aos("flow", "signal", "r1", "go", *at)
    assert text.exit_code == 0 and "signalled r1 go: delivered" in text.stdout


def test_the_default_limit_is_refused_at_its_edge(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    with flows.world:
        _start(flows, text=LATER.replace("limits: {signals_buffered_max: 2}\n", ""))
        for n in range(100):
            assert ops.signal(flows.world, "e1", "go", n).outcome == "buffered"
        full = refused(
            flows, "flow.signal_buffer_full", lambda: ops.signal(flows.world, "e1", "go")
        )
        assert full.detail["signals_buffered_max"] == 100
