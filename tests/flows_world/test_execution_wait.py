"""Waiting for a flow execution to end over the node's HTTP API (spec/11-flows.md §9.1):
`GET /v1/executions/{exec}?wait_ms=N` and `POST /v1/flows/{name}/run` with `wait_ms` answer once
the execution ended, woken by the step that ended it (kernel/node/cell_watch.py), or after N ms
with the state then; bad waits are typed refusals that change nothing; waiters are bounded."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.flows.errors import FlowError
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.routes import add_flow_routes
from aos.kernel.node import Node, NodeLimits
from aos.kernel.node.app import create_app
from aos.kernel.node.cell_watch import CellWatch
from aos.kernel.node.errors import NodeBusyError
from aos.kernel.world.errors import WorldClosedError
from tests.auth_fixtures import authorize
from tests.flows_world.support import make_flow_world
from tests.flows_world.test_flow_requests import QUICK_FLOW, TestClient, ok
from tests.flows_world.test_flow_requests import WAIT_FLOW as HOLD_FLOW
from tests.test_world import engine

LONG_WAIT_MS = 20_000  # a missed wake-up would show as a "running" answer after this long
SHORT_WAIT_MS = 30


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = make_flow_world(tmp_path / "w")
    made.world.close()
    limits = NodeLimits(long_poll_ms_max=LONG_WAIT_MS, cell_waiters_max=2)
    with Node.open_path(made.path, sync=False, engine=engine(), limits=limits) as opened:
        yield opened


@pytest.fixture
def client(node: Node) -> Iterator[TestClient]:
    app = create_app(node)
    add_flow_routes(app, node)
    with authorize(TestClient(app), node) as made:
        ok(made.post("/v1/flows", json={"text": HOLD_FLOW}))
        ok(made.post("/v1/flows", json={"text": QUICK_FLOW}))
        yield made


def in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    """Run `call` on its own thread (a request that waits); its result lands in the list."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    return thread, out


def wait_for_waiters(node: Node, count: int) -> None:
    """Until `count` requests are registered as waiting (the watch says so, not a clock)."""
    while node.host.cells.waiters != count:
        threading.Event().wait(0.001)


def test_a_waiting_read_answers_when_the_execution_ends(node: Node, client: TestClient) -> None:
    ok(client.post("/v1/flows/t%2Fwait/run", json={"exec": "h1"}))
    thread, answers = in_thread(lambda: client.get(f"/v1/executions/h1?wait_ms={LONG_WAIT_MS}"))
    wait_for_waiters(node, 1)
    ok(client.post("/v1/executions/h1/signal", json={"name": "go"}))
    thread.join()
    [answer] = answers
    state = ok(answer)
    assert state["status"] == "completed"
    assert state == ok(client.get("/v1/executions/h1"))  # what was answered is what is stored
    assert node.host.cells.waiters == 0


def test_a_wait_that_runs_out_answers_the_state_then(client: TestClient) -> None:
    ok(client.post("/v1/flows/t%2Fwait/run", json={"exec": "h1"}))
    state = ok(client.get(f"/v1/executions/h1?wait_ms={SHORT_WAIT_MS}"))
    assert state == ok(client.get("/v1/executions/h1"))
    assert state["status"] == "running"
    # An execution that already ended is answered at once, whatever the wait.
    ok(client.post("/v1/flows/t%2Fquick/run", json={"exec": "q1"}))
    assert ok(client.get(f"/v1/executions/q1?wait_ms={LONG_WAIT_MS}"))["status"] == "completed"


def test_run_with_wait_answers_the_end(node: Node, client: TestClient) -> None:
    quick = ok(client.post("/v1/flows/t%2Fquick/run", json={"exec": "q1", "wait_ms": 1000}))
    assert (quick["exec"], quick["status"]) == ("q1", "completed")
    body = {"exec": "h1", "wait_ms": LONG_WAIT_MS}
    thread, answers = in_thread(lambda: client.post("/v1/flows/t%2Fwait/run", json=body))
    wait_for_waiters(node, 1)
    ok(client.post("/v1/executions/h1/signal", json={"name": "go"}))
    thread.join()
    [answer] = answers
    assert (ok(answer)["exec"], ok(answer)["status"]) == ("h1", "completed")
    short = {"exec": "h2", "wait_ms": SHORT_WAIT_MS}
    assert ok(client.post("/v1/flows/t%2Fwait/run", json=short))["status"] == "running"


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ("wait_ms=-1", 422, "request.invalid"),
        ("wait_ms=1.5", 422, "request.invalid"),
        ("wait_ms=abc", 422, "request.invalid"),
        ("wait_ms=", 422, "request.invalid"),
        ("wait_ms=1234567890", 422, "request.invalid"),
        (f"wait_ms={LONG_WAIT_MS + 1}", 400, "node.limit_exceeded"),
        ("wait=5", 422, "request.invalid"),
        ("wait_ms=5&wait_ms=6", 422, "request.invalid"),
        ("wait_ms=5&x=1", 422, "request.invalid"),
        ("%zz", 422, "request.invalid"),
    ],
)
def test_bad_waits_are_refused_and_change_nothing(
    client: TestClient, query: str, status: int, code: str
) -> None:
    ok(client.post("/v1/flows/t%2Fwait/run", json={"exec": "h1"}))
    before = ok(client.get("/v1/world")), ok(client.get("/v1/flows"))
    response = client.get(f"/v1/executions/h1?{query}")
    assert (response.status_code, response.json()["error"]["code"]) == (status, code), query
    assert (ok(client.get("/v1/world")), ok(client.get("/v1/flows"))) == before


def test_bad_run_waits_start_nothing(client: TestClient) -> None:
    before = ok(client.get("/v1/world")), ok(client.get("/v1/flows"))
    over = {"exec": "h1", "wait_ms": LONG_WAIT_MS + 1}
    response = client.post("/v1/flows/t%2Fwait/run", json=over)
    assert (response.status_code, response.json()["error"]["code"]) == (
        400,
        "node.limit_exceeded",
    )
    negative = client.post("/v1/flows/t%2Fwait/run", json={"exec": "h1", "wait_ms": -1})
    assert (negative.status_code, negative.json()["error"]["code"]) == (422, "request.invalid")
    unknown = client.get(f"/v1/executions/nope?wait_ms={LONG_WAIT_MS}")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (
        404,
        "flow.execution_unknown",
    )
    assert (ok(client.get("/v1/world")), ok(client.get("/v1/flows"))) == before


def test_waiters_are_bounded(node: Node, client: TestClient) -> None:
    """At `cell_waiters_max` (2 here) a third wait is `node.busy`; a freed place is reusable."""
    ok(client.post("/v1/flows/t%2Fwait/run", json={"exec": "h1"}))
    ok(client.post("/v1/flows/t%2Fwait/run", json={"exec": "h2"}))
    waiting = [
        in_thread(lambda e=e: client.get(f"/v1/executions/{e}?wait_ms={LONG_WAIT_MS}"))
        for e in ("h1", "h2")
    ]
    wait_for_waiters(node, 2)
    busy = client.get(f"/v1/executions/h1?wait_ms={LONG_WAIT_MS}")
    assert (busy.status_code, busy.json()["error"]["code"]) == (503, "node.busy")
    assert ok(client.get("/v1/executions/h1"))["status"] == "running"  # a plain read still is
    for exec_id, (thread, answers) in zip(("h1", "h2"), waiting, strict=True):
        ok(client.post(f"/v1/executions/{exec_id}/signal", json={"name": "go"}))
        thread.join()
        assert ok(answers[0])["status"] == "completed"
    assert node.host.cells.waiters == 0
    assert ok(client.get(f"/v1/executions/h1?wait_ms={SHORT_WAIT_MS}"))["status"] == "completed"


# --------------------------------------------------------------------------------------------
# The watch itself


def test_the_watch_looks_again_only_for_the_cells_that_stepped(tmp_path: Path) -> None:
    made = make_flow_world(tmp_path / "w")
    watch = CellWatch(waiters_max=3)
    looked: list[str] = []
    delivered: dict[str, Any] = {}

    def waiter(name: str, done_at: int) -> tuple[Any, Any]:
        def look(_: Any) -> tuple[bool, int]:
            looked.append(name)
            return looked.count(name) >= done_at, looked.count(name)

        return look, lambda value: delivered.setdefault(name, value)

    try:
        a = watch.add(("w", b"a"), *waiter("a", 1))
        watch.add(("w", b"b"), *waiter("b", 2))
        watch.add(("v", None), *waiter("singleton", 9))
        with pytest.raises(NodeBusyError) as caught:
            watch.add(("w", b"c"), *waiter("c", 1))
        assert caught.value.detail["limit"] == 3
        watch.stepped(made.world, [("w", b"b"), ("w", b"b"), ("x", b"a"), ("v", None)])
        assert looked == ["b", "singleton"]  # once each; another workflow's key a is not a
        assert delivered == {}
        watch.stepped(made.world, [("w", b"a"), ("w", b"b")])
        assert delivered == {"a": 1, "b": 2}  # each wait over: delivered and forgotten
        assert not watch.remove(a)
        assert watch.waiters == 1
        watch.stop()
        assert isinstance(delivered["singleton"], WorldClosedError)
        assert watch.waiters == 0
    finally:
        made.world.close()


def test_a_look_that_is_refused_delivers_the_refusal(tmp_path: Path) -> None:
    made = make_flow_world(tmp_path / "w")
    watch = CellWatch(waiters_max=1)
    delivered: list[Any] = []

    def look(world: Any) -> tuple[bool, Any]:
        return True, ops.status(world, "nope")  # refused: flow.execution_unknown

    try:
        watch.add(("w", b"a"), look, delivered.append)
        watch.stepped(made.world, [("w", b"a")])
        [error] = delivered
        assert isinstance(error, FlowError) and error.code == "flow.execution_unknown"
        assert watch.waiters == 0
    finally:
        made.world.close()


def test_a_stopping_node_answers_its_waiters(tmp_path: Path) -> None:
    """A request waiting for an execution's end when the node stops is answered (503
    `world.closed`), not left hanging until its wait runs out."""
    made = make_flow_world(tmp_path / "w")
    made.world.close()
    limits = NodeLimits(long_poll_ms_max=LONG_WAIT_MS)
    node = Node.open_path(made.path, sync=False, engine=engine(), limits=limits)
    node.start()
    app = create_app(node)
    add_flow_routes(app, node)
    with authorize(TestClient(app), node) as client:
        ok(client.post("/v1/flows", json={"text": HOLD_FLOW}))
        ok(client.post("/v1/flows/t%2Fwait/run", json={"exec": "h1"}))
        thread, answers = in_thread(lambda: client.get(f"/v1/executions/h1?wait_ms={LONG_WAIT_MS}"))
        wait_for_waiters(node, 1)
        node.close()
        thread.join()
    [answer] = answers
    assert (answer.status_code, answer.json()["error"]["code"]) == (503, "world.closed")
    assert node.host.cells.waiters == 0
