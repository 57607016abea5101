"""An execution's history over the node's HTTP API a page at a time, and followed as it is
journaled (spec/11-flows.md §9.1): `GET /v1/executions/{exec}/events?after=SEQ&limit=N&wait_ms=N`
answers `{events, status, last_seq, more}`; pages put end to end give the whole history once;
a waiting page is answered by the execution's next durable step; bad queries are typed
refusals that change nothing; `aos flow events --follow` prints each event once and ends with
the execution."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_client import NodeFlows
from aos.flows.serve.flow_world import create_flow_world
from aos.flows.serve.pages import add_flow_pages
from aos.flows.serve.routes import add_flow_routes
from aos.kernel import cbor
from aos.kernel.node import Node, NodeLimits
from aos.kernel.node.app import create_app
from aos.kernel.node.inspector import add_inspector
from tests.auth_fixtures import admin_token, authorize
from tests.flows_world.support import make_flow_world
from tests.flows_world.test_execution_wait import in_thread, wait_for_waiters
from tests.flows_world.test_flow_requests import QUICK_FLOW, TestClient, ok
from tests.flows_world.test_flow_requests import WAIT_FLOW as HOLD_FLOW
from tests.test_node_process import _AOS, node_process
from tests.test_world import engine

LONG_WAIT_MS = 20_000  # a missed wake-up would show as an empty answer after this long
SHORT_WAIT_MS = 30
FOLLOW_TIMEOUT_S = 60.0

# Three steps of the execution (its start and two signals), each recording several events,
# so that pages can end inside the history.
LONG_FLOW = """
name: t/long
steps:
  - name: a
    tasks:
      - {name: one, do: wait_signal, signal: one}
    next: b
  - name: b
    tasks:
      - {name: two, do: wait_signal, signal: two}
    next: c
  - name: c
    tasks:
      - {do: noop, result: 3}
"""


def run_long(client: TestClient, exec_id: str) -> None:
    ok(client.post("/v1/flows/t%2Flong/run", json={"exec": exec_id}))
    for name in ("one", "two"):
        ok(client.post(f"/v1/executions/{exec_id}/signal", json={"name": name}))


def serve(node: Node) -> TestClient:
    app = create_app(node)
    add_flow_routes(app, node)
    add_flow_pages(app, add_inspector(app, node))
    return authorize(TestClient(app), node)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = make_flow_world(tmp_path / "w")
    made.world.close()
    limits = NodeLimits(long_poll_ms_max=LONG_WAIT_MS, events_per_request_max=50)
    with Node.open_path(made.path, sync=False, engine=engine(), limits=limits) as opened:
        yield opened


@pytest.fixture
def client(node: Node) -> Iterator[TestClient]:
    with serve(node) as made:
        for text in (HOLD_FLOW, QUICK_FLOW, LONG_FLOW):
            ok(made.post("/v1/flows", json={"text": text}))
        yield made


def history(node: Node, exec_id: str) -> list[dict[str, Any]]:
    """The whole history as the world reads it (`aos flow events` on an opened world)."""
    found = node.host.call(lambda world: ops.history(world, exec_id))
    return [{"seq": e.seq, **cbor.to_json(e.event)} for e in found]


def pages(client: TestClient, exec_id: str, query: str = "") -> list[dict[str, Any]]:
    """Every page from the start, each asked after the last one's `last_seq`."""
    found: list[dict[str, Any]] = []
    after = 0
    while True:
        page = ok(client.get(f"/v1/executions/{exec_id}/events?after={after}{query}"))
        assert all(after < e["seq"] <= page["last_seq"] for e in page["events"])
        found.append(page)
        if not page["more"]:
            return found
        after = page["last_seq"]


def test_pages_end_to_end_are_the_whole_history(node: Node, client: TestClient) -> None:
    run_long(client, "l1")
    whole = history(node, "l1")
    assert len({e["seq"] for e in whole}) >= 3  # events of several step records
    plain = ok(client.get("/v1/executions/l1/events"))
    assert plain["events"] == whole
    assert (plain["status"], plain["more"]) == ("completed", False)
    # One event a page: each page holds whole records, the one that reaches the limit last.
    one = pages(client, "l1", "&limit=1")
    assert [e for page in one for e in page["events"]] == whole
    assert len(one) == len({e["seq"] for e in whole})  # a page per record: limit 1 < events
    assert [page["more"] for page in one] == [True] * (len(one) - 1) + [False]
    by_seq = {e["seq"]: [x for x in whole if x["seq"] == e["seq"]] for e in whole}
    for page in one:
        if page["events"]:
            assert page["events"] == by_seq[page["events"][0]["seq"]]
    assert node.host.call(lambda world: world.height) == ok(client.get("/v1/world"))["height"]


def test_a_page_looks_at_a_bounded_number_of_records(tmp_path: Path) -> None:
    """With `journal_scan_records_per_turn` at 2, a page stops after two records (`more`), and
    the pages still give the whole history once."""
    made = make_flow_world(tmp_path / "w")
    made.world.close()
    limits = NodeLimits(journal_scan_records_per_turn=2)
    opening = Node.open_path(made.path, sync=False, engine=engine(), limits=limits)
    with opening as opened, serve(opened) as client:
        ok(client.post("/v1/flows", json={"text": LONG_FLOW}))
        run_long(client, "l1")
        found = pages(client, "l1")
        assert [e for page in found for e in page["events"]] == history(opened, "l1")
        assert all(
            page["last_seq"] - after <= 2
            for page, after in zip(found, [0, *(p["last_seq"] for p in found)], strict=False)
            if after
        )
        assert sum(page["more"] for page in found) >= 2


def test_a_waiting_page_is_answered_by_the_next_step(node: Node, client: TestClient) -> None:
    ok(client.post("/v1/flows/t%2Fwait/run", json={"exec": "h1"}))
    first = ok(client.get("/v1/executions/h1/events"))
    assert first["status"] == "running" and first["events"]
    after = first["last_seq"]
    query = f"after={after}&wait_ms={LONG_WAIT_MS}"
    thread, answers = in_thread(lambda: client.get(f"/v1/executions/h1/events?{query}"))
    wait_for_waiters(node, 1)
    ok(client.post("/v1/executions/h1/signal", json={"name": "go"}))
    thread.join()
    [answer] = answers
    page = ok(answer)
    assert page["events"] and all(e["seq"] > after for e in page["events"])
    assert (
        first["events"] + page["events"]
        == history(node, "h1")[: len(first["events"]) + len(page["events"])]
    )
    assert node.host.cells.waiters == 0


def test_an_empty_page_after_the_wait_or_at_the_end(node: Node, client: TestClient) -> None:
    ok(client.post("/v1/flows/t%2Fwait/run", json={"exec": "h1"}))
    last = ok(client.get("/v1/executions/h1/events"))["last_seq"]
    page = ok(client.get(f"/v1/executions/h1/events?after={last}&wait_ms={SHORT_WAIT_MS}"))
    assert (page["events"], page["status"], page["more"]) == ([], "running", False)
    assert page["last_seq"] >= last
    # An ended execution is answered at once, whatever the wait.
    ok(client.post("/v1/flows/t%2Fquick/run", json={"exec": "q1"}))
    end = ok(client.get("/v1/executions/q1/events"))["last_seq"]
    page = ok(client.get(f"/v1/executions/q1/events?after={end}&wait_ms={LONG_WAIT_MS}"))
    assert (page["events"], page["status"], page["more"]) == ([], "completed", False)
    assert node.host.cells.waiters == 0


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ("after=-1", 422, "request.invalid"),
        ("after=x", 422, "request.invalid"),
        ("after=", 422, "request.invalid"),
        ("after=1234567890123456789", 422, "request.invalid"),
        ("limit=0", 422, "request.invalid"),
        ("limit=51", 400, "node.limit_exceeded"),
        ("limit=1.5", 422, "request.invalid"),
        (f"wait_ms={LONG_WAIT_MS + 1}", 400, "node.limit_exceeded"),
        ("after=1&after=2", 422, "request.invalid"),
        ("follow=1", 422, "request.invalid"),
        ("after=1&limit=1&wait_ms=1&x=1", 422, "request.invalid"),
        ("%zz", 422, "request.invalid"),
    ],
)
def test_bad_queries_are_refused_and_change_nothing(
    client: TestClient, query: str, status: int, code: str
) -> None:
    ok(client.post("/v1/flows/t%2Fwait/run", json={"exec": "h1"}))
    before = ok(client.get("/v1/world")), ok(client.get("/v1/flows"))
    response = client.get(f"/v1/executions/h1/events?{query}")
    assert (response.status_code, response.json()["error"]["code"]) == (status, code), query
    assert (ok(client.get("/v1/world")), ok(client.get("/v1/flows"))) == before


def test_queries_at_their_edges_are_served(client: TestClient) -> None:
    """`limit` at `events_per_request_max` (50 here) and 1, `after` at 18 digits (past the
    head: an empty page, not a refusal)."""
    run_long(client, "l1")
    whole = ok(client.get("/v1/executions/l1/events"))
    assert ok(client.get("/v1/executions/l1/events?limit=50")) == whole
    assert ok(client.get("/v1/executions/l1/events?limit=1"))["more"]
    far = ok(client.get(f"/v1/executions/l1/events?after={'9' * 18}"))
    assert (far["events"], far["last_seq"], far["more"]) == ([], int("9" * 18), False)


def test_an_unknown_execution_is_refused_without_waiting(client: TestClient) -> None:
    response = client.get(f"/v1/executions/nope/events?wait_ms={LONG_WAIT_MS}")
    assert (response.status_code, response.json()["error"]["code"]) == (
        404,
        "flow.execution_unknown",
    )


def test_the_history_tail_is_the_newest_events_within_its_scan(
    node: Node, client: TestClient
) -> None:
    """`ops.history_tail` (the inspector's execution page): the newest events in journal
    order, complete when the scan reached the execution's start with nothing cut."""
    run_long(client, "l1")
    ok(client.post("/v1/flows/t%2Fquick/run", json={"exec": "q1"}))  # records after l1's
    whole = history(node, "l1")

    def tail(events_max: int, scan_records_max: int) -> tuple[list[dict[str, Any]], bool]:
        found = node.host.call(
            lambda world: ops.history_tail(
                world, "l1", events_max=events_max, scan_records_max=scan_records_max
            )
        )
        return [{"seq": e.seq, **cbor.to_json(e.event)} for e in found.events], found.complete

    assert tail(len(whole), 10_000) == (whole, True)
    assert tail(len(whole) + 1, 10_000) == (whole, True)
    assert tail(2, 10_000) == (whole[-2:], False)
    height = node.host.call(lambda world: world.height)
    started = whole[0]["seq"] - 1  # the start event's record, before its step's
    events, complete = tail(1000, height - whole[-1]["seq"] + 1)  # back to l1's last step only
    assert events == [e for e in whole if e["seq"] == whole[-1]["seq"]] and not complete
    assert tail(1000, height - started + 1) == (whole, True)


def test_the_execution_page_shows_the_newest_events(node: Node, client: TestClient) -> None:
    run_long(client, "l1")
    page = client.get("/ui/flows/executions/l1")
    assert page.status_code == 200
    seqs = [f"#{e['seq']}" for e in history(node, "l1")]
    assert all(seq in page.text for seq in seqs)
    assert "history-older" not in page.text


def test_follow_prints_each_event_once_and_ends_with_the_execution(tmp_path: Path) -> None:
    """`aos flow events EXEC --node URL --follow --json` against a real node process: the
    events so far at once, the rest as they are journaled, then it exits with the execution."""
    world_path = tmp_path / "w"
    world, _ = create_flow_world(world_path, keys_dir=tmp_path / "w.keys", sync=False)
    world.close()
    with (
        node_process(world_path) as (url, _node),
        NodeFlows(url, token=admin_token(url)) as flows,
    ):
        flows.deploy_text(HOLD_FLOW)
        flows.run("t/wait", None, exec_id="h1")
        before = [event.model_dump() for event in flows.events("h1")]
        command = [*_AOS, "flow", "events", "h1", "--node", url, "--follow", "--json"]
        follower = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        try:
            assert follower.stdout is not None
            shown = [json.loads(follower.stdout.readline()) for _ in before]
            assert shown == before  # what was journaled, before anything else happened
            flows.signal("h1", "go", None, None)
            rest, _ = follower.communicate(timeout=FOLLOW_TIMEOUT_S)
        finally:
            if follower.poll() is None:
                follower.kill()
        assert follower.returncode == 0
        shown += [json.loads(line) for line in rest.splitlines()]
        assert shown == [event.model_dump() for event in flows.events("h1")]
        assert flows.status("h1").status == "completed"
