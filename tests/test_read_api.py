"""The node's HTTP read API (spec/04 §9.4) over a real world, in process: cells with status
filters and keyset paging, a cell's timeline with receipts and their signature status, the
state at a step, journal pages both ways with kind, cell and failure filters, traces, open
intents with their leases, proposals, the live tail; and every bad parameter refused with its
code while the journal stays exactly as it was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.kernel.hashing import hash_value
from aos.kernel.node import Node, NodeLimits
from aos.kernel.node.app import create_app
from aos.kernel.node.errors import NodeBusyError
from aos.kernel.node.read_api import Tail, Tails, bounds_of
from tests.auth_fixtures import authorize
from tests.test_node import (
    KEYED,
    TestClient,
    error_of,
    lease,
    make_world,
    open_node,
    post_receipt,
    receipt,
    send,
    signed_client,
)
from tests.test_world import COUNTER_C, create, inc

GLOBAL = "demo/global@1"
COUNTER_EVENT = "demo/CounterEvent@1"


@pytest.fixture
def world_path(tmp_path: Path) -> Path:
    return make_world(tmp_path / "w")


@pytest.fixture
def node(world_path: Path) -> Iterator[Node]:
    with open_node(world_path) as opened:
        yield opened


@pytest.fixture
def client(node: Node) -> TestClient:
    return signed_client(node)  # its leases and receipts are an adapter's, signed


def get(client: TestClient, path: str, **params: Any) -> Any:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def head(client: TestClient) -> int:
    return int(get(client, "/v1/overview")["height"])


def settle_one(client: TestClient, key: str) -> str:
    """Send an effect to `key`'s cell, lease it and settle it with a signed receipt."""
    send(client, key, "effect")
    [held] = lease(client)
    world_id = get(client, "/v1/overview")["world_id"]
    assert post_receipt(client, receipt(world_id, held["intent"])).status_code == 200
    return str(held["intent"])


def test_overview_counts_cells_failures_and_intents(client: TestClient) -> None:
    for key in ("a", "b"):
        send(client, key, "none")
    send(client, "c", "trap")
    send(client, "d", "effect")
    found = get(client, "/v1/overview")
    assert found["workflows"][KEYED] == {"cells": 4, "failed": 1}
    assert found["open_intents"] == 1 and found["leases"] == {"published": 1, "leased": 0}
    assert found["proposals"] == {} and found["height"] > 1


def test_cells_filter_by_status_and_page_by_key_hash(client: TestClient) -> None:
    keys = [f"k{n}" for n in range(7)]
    for key in keys:
        send(client, key, "none")
    send(client, "bad", "trap")
    failed = get(client, f"/v1/cells/{KEYED}", status="failed")
    assert [c["key"] for c in failed["cells"]] == ["bad"] and failed["next_after"] is None
    seen: list[str] = []
    after = None
    while True:
        params = {"status": "completed", "limit": 3} | ({"after": after} if after else {})
        page = get(client, f"/v1/cells/{KEYED}", **params)
        assert len(page["cells"]) <= 3 and page["count"] == 8
        seen += [c["key"] for c in page["cells"]]
        after = page["next_after"]
        if after is None:
            break
    assert sorted(seen) == sorted(keys) and len(seen) == len(set(seen))
    hashes = [c["key_hash"] for c in get(client, f"/v1/cells/{KEYED}")["cells"]]
    assert hashes == sorted(hashes)


def test_a_cells_timeline_shows_its_receipt_with_its_signature_status(client: TestClient) -> None:
    send(client, "other", "none")
    intent = settle_one(client, "x")
    send(client, "x", "none")
    found = get(client, "/v1/timeline", workflow=KEYED, key='"x"')
    kinds = [e["kind"] for e in found["entries"]]
    assert kinds == ["step", "step", "effect_intent", "step"]  # newest first
    seqs = [e["seq"] for e in found["entries"]]
    assert seqs == sorted(seqs, reverse=True)
    receipt_step = found["entries"][1]
    assert receipt_step["input"]["kind"] == "effect_receipt"
    assert receipt_step["input"]["record"]["intent"] == intent
    assert receipt_step["input"]["signature"] == "verified"
    assert found["entries"][3]["input"]["kind"] == "domain_event"
    assert all(e["record"].get("workflow", KEYED) == KEYED for e in found["entries"])
    first = get(client, "/v1/timeline", workflow=KEYED, key='"x"', limit=2)
    rest = get(client, "/v1/timeline", workflow=KEYED, key='"x"', before=first["next_before"])
    assert [e["seq"] for e in first["entries"] + rest["entries"]] == seqs
    one = get(client, "/v1/cell", workflow=KEYED, key='"x"')
    assert one["status"] == "completed" and one["state"]["value"]["count"] == 3
    assert one["last_active_seq"] == seqs[0]


def test_the_state_a_step_left_is_shown_while_stored(client: TestClient) -> None:
    send(client, "x", "none")
    last_step = get(client, "/v1/journal", kind="step", workflow=KEYED, key='"x"')["records"][-1]
    shown = get(client, f"/v1/steps/{last_step['seq']}/state")
    assert shown["stored"] is True and shown["key"] == "x"
    assert shown["state"]["value"]["count"] == 1 and shown["state"]["cut"] is False
    assert shown["state_hash"] == last_step["record"]["state"]
    error = error_of(client.get("/v1/steps/1/state"), 400)
    assert error["code"] == "query.invalid" and "manifest" in error["message"]


def test_a_reclaimed_state_is_rebuilt_by_a_bounded_replay(tmp_path: Path) -> None:
    path = tmp_path / "counter"
    with create(path, COUNTER_C) as world:  # one cell whose every state differs: 1, 3, 6, 10
        for by in (1, 2, 3, 4):
            world.send(COUNTER_EVENT, inc("a", by))
    limits = NodeLimits(state_replay_records_max=5)
    with open_node(path, limits=limits) as node:
        client = authorize(TestClient(create_app(node)), node)
        steps = get(client, "/v1/journal", kind="step")["records"]
        assert [s["seq"] for s in steps] == [3, 5, 7, 9]
        before = get(client, "/v1/journal", limit=1000)
        kept = get(client, "/v1/steps/9/state")
        assert kept["stored"] is True and kept["state"]["value"] == {"count": 10, "resets": 0}
        rebuilt = get(client, "/v1/steps/5/state")
        assert rebuilt["stored"] is False and rebuilt["replayed"] == 4  # records 2 to 5
        assert rebuilt["state"]["value"] == {"count": 3, "resets": 0}
        assert rebuilt["state_hash"] == steps[1]["record"]["state"]
        # Records 2 to 6 are five: at the limit. The step at 7 would replay six: refused.
        assert get(client, "/v1/steps/3/state")["state"]["value"]["count"] == 1
        error = error_of(client.get("/v1/steps/7/state"), 400)
        assert error["code"] == "replay.too_long" and error["detail"] == {"limit": 5}
        # A replay only reads: the journal is as it was, and the world goes on.
        assert get(client, "/v1/journal", limit=1000) == before
        sent = client.post("/v1/events", json={"schema": COUNTER_EVENT, "value": inc("a", 5)})
        assert sent.status_code == 200 and sent.json()["report"]["steps"] == 1


def test_a_large_state_is_shown_by_size_and_hash(tmp_path: Path) -> None:
    def shown_with(bytes_max: int) -> Any:
        path = make_world(tmp_path / f"w{bytes_max}")
        with open_node(path, limits=NodeLimits(value_bytes_shown_max=bytes_max)) as node:
            client = authorize(TestClient(create_app(node)), node)
            send(client, "x", "none")
            return get(client, "/v1/cell", workflow=KEYED, key='"x"')["state"]

    cut = shown_with(8)
    assert cut["cut"] is True and cut["value"] is None and cut["hash"].startswith("blake3:")
    size = cut["bytes"]
    at_limit = shown_with(size)
    assert at_limit["cut"] is False and at_limit["value"]["count"] == 1
    assert at_limit["bytes"] == size
    assert shown_with(size - 1)["cut"] is True


def test_journal_pages_both_ways_with_kind_cell_and_failure_filters(client: TestClient) -> None:
    for n in range(5):
        send(client, f"k{n}", "none")
    send(client, "bad", "trap")
    top = head(client)
    newest = get(client, "/v1/journal", before=top + 1, limit=4)
    assert [r["seq"] for r in newest["records"]] == [top, top - 1, top - 2, top - 3]
    below = get(client, "/v1/journal", before=newest["next_before"], limit=4)
    assert below["records"][0]["seq"] == top - 4
    everything = get(client, "/v1/journal", limit=1000)["records"]
    assert [r["seq"] for r in everything] == list(range(1, top + 1))
    both = get(client, "/v1/journal", kind=["step_fault", "domain_event"], limit=1000)
    assert {r["record"]["kind"] for r in both["records"]} == {"step_fault", "domain_event"}
    faults = [r for r in everything if r["record"]["kind"] == "step_fault"]
    assert len(faults) == 2  # the trap faults the keyed cell and the global one
    assert len(both["records"]) == 6 + 2
    failed = get(client, "/v1/journal", failed="true", before=top + 1)["records"]
    assert failed == faults[::-1]
    mine = get(client, "/v1/journal", workflow=KEYED, key='"k2"', limit=1000)["records"]
    assert [r["record"]["kind"] for r in mine] == ["step"]
    any_key = get(client, "/v1/journal", workflow=KEYED, kind="step", limit=1000)["records"]
    assert [r["record"]["key"] for r in any_key] == [
        r["record"]["key"]
        for r in everything
        if r["record"]["kind"] == "step" and r["record"]["workflow"] == KEYED
    ]
    assert len(any_key) == 5  # every keyed cell's step, not the faulted one
    unkeyed = get(client, "/v1/journal", workflow=GLOBAL, limit=1000)["records"]
    assert [r["record"]["kind"] for r in unkeyed] == ["step"] * 5 + ["step_fault"]


def test_a_filtered_scan_stops_at_its_limit_and_says_where(world_path: Path) -> None:
    with open_node(world_path, limits=NodeLimits(journal_scan_records_max=3)) as node:
        client = authorize(TestClient(create_app(node)), node)
        for n in range(4):
            send(client, f"k{n}", "none")
        page = get(client, "/v1/journal", failed="true", before=head(client) + 1)
        assert page["records"] == [] and page["scanned"] == 3
        assert page["next_before"] == head(client) - 2
        forward = get(client, "/v1/journal", kind="step_fault", **{"from": 1})
        assert forward["scanned"] == 3 and forward["next_seq"] == 4


def test_trace_intents_and_records(client: TestClient) -> None:
    event = send(client, "x", "effect")
    traced = get(client, f"/v1/trace/{event['event_hash']}")
    assert traced["match"] == "record" and traced["seq"] == event["seq"]
    assert "effect_intent" in [e["record"]["kind"] for e in traced["entries"]]
    intents = get(client, "/v1/intents")
    assert intents["count"] == 1 and intents["intents"][0]["leased"] is False
    assert intents["intents"][0]["key"] == "x" and intents["intents"][0]["workflow"] == KEYED
    lease(client)
    assert get(client, "/v1/intents")["intents"][0]["leased"] is True
    send(client, "y", "effect")
    first = get(client, "/v1/intents", limit=1)
    second = get(client, "/v1/intents", limit=1, after=first["next_after"])
    assert second["next_after"] is None
    assert first["intents"][0]["intent"] < second["intents"][0]["intent"]
    record = get(client, f"/v1/records/{event['seq']}")
    assert str(hash_value(_from_json(record["record"]))) == event["event_hash"]
    assert get(client, "/v1/proposals")["proposals"] == []


def _from_json(value: Any) -> Any:
    from aos.kernel import cbor

    return cbor.from_json(value)


def test_bad_parameters_are_refused_and_change_nothing(client: TestClient) -> None:
    send(client, "x", "effect")
    before = get(client, "/v1/journal", limit=1000)
    cases = [
        (client.get("/v1/journal", params={"from": 1, "before": 3}), 400, "query.invalid"),
        (client.get("/v1/journal", params={"limit": 0}), 400, "query.invalid"),
        (client.get("/v1/journal", params={"limit": 1001}), 400, "node.limit_exceeded"),
        (client.get("/v1/journal", params={"before": 0}), 400, "query.invalid"),
        (client.get("/v1/journal", params={"kind": ["step", "nope"]}), 400, "query.invalid"),
        (client.get("/v1/journal", params={"key": '"x"'}), 400, "query.invalid"),
        (
            client.get("/v1/journal", params={"workflow": "demo/none@1"}),
            404,
            "world.workflow_unknown",
        ),
        (
            client.get("/v1/journal", params={"workflow": KEYED, "key": "{nope"}),
            400,
            "query.invalid",
        ),
        (
            client.get("/v1/journal", params={"workflow": GLOBAL, "key": '"x"'}),
            400,
            "query.invalid",
        ),
        (client.get(f"/v1/cells/{KEYED}", params={"status": "odd"}), 400, "query.invalid"),
        (client.get(f"/v1/cells/{KEYED}", params={"after": "zz"}), 400, "query.invalid"),
        (
            client.get("/v1/cell", params={"workflow": KEYED, "key": '"nobody"'}),
            404,
            "world.cell_missing",
        ),
        (client.get("/v1/timeline", params={"workflow": KEYED}), 400, "query.invalid"),
        (
            client.get("/v1/timeline", params={"workflow": KEYED, "key": '"x"', "before": -1}),
            400,
            "query.invalid",
        ),
        (client.get("/v1/steps/99999/state"), 400, "query.invalid"),
        (client.get("/v1/records/0"), 400, "query.invalid"),
        (client.get("/v1/trace/nothash"), 400, "query.invalid"),
        (client.get(f"/v1/trace/blake3:{'0' * 64}"), 404, "world.not_found"),
        (client.get("/v1/intents", params={"after": "x"}), 400, "query.invalid"),
        (client.get(f"/v1/proposals/blake3:{'0' * 64}"), 404, "gov.unknown_proposal"),
        (client.get("/v1/journal/stream", params={"after": -1}), 400, "query.invalid"),
        (client.get("/v1/journal", params={"before": "soon"}), 400, "query.invalid"),
        (client.get("/v1/journal", params={"failed": "maybe"}), 400, "query.invalid"),
        (client.get("/v1/steps/last/state"), 400, "query.invalid"),
    ]
    for response, status, code in cases:
        assert error_of(response, status)["code"] == code, response.request.url
    malformed = error_of(client.get("/v1/journal", params={"before": "soon"}), 400)
    assert malformed["path"] == "$.before" and "integer" in malformed["message"]
    assert get(client, "/v1/journal", limit=1000) == before


def test_the_live_tail_streams_records_as_they_are_written(world_path: Path) -> None:
    limits = NodeLimits(tail_stream_ms_max=600, tail_poll_ms=20)
    with open_node(world_path, limits=limits) as node:
        client = authorize(TestClient(create_app(node)), node)
        start = head(client)
        sent = send(client, "x", "none")
        with client.stream("GET", "/v1/journal/stream", params={"after": start}) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            text = "".join(stream.iter_text())
        events = [_sse(block) for block in text.split("\n\n") if "data:" in block]
        assert [e["id"] for e in events] == [str(s) for s in range(start + 1, head(client) + 1)]
        assert events[0]["data"]["seq"] == sent["seq"] == start + 1
        assert events[0]["data"]["record"]["kind"] == "domain_event"
        resumed = client.stream("GET", "/v1/journal/stream", headers={"Last-Event-ID": "1"})
        with resumed as stream:
            first = next(b for b in "".join(stream.iter_text()).split("\n\n") if "data:" in b)
        assert _sse(first)["id"] == "2"


def test_live_tails_are_bounded(node: Node) -> None:
    tails = Tails()
    tails.count = node.limits.tail_streams_max
    with pytest.raises(NodeBusyError):
        Tail(node, None, bounds_of(node), tails)
    tails.count -= 1
    Tail(node, None, bounds_of(node), tails)


def _sse(block: str) -> dict[str, Any]:
    fields = dict(line.split(": ", 1) for line in block.strip().splitlines())
    return {"id": fields["id"], "event": fields["event"], "data": json.loads(fields["data"])}


@pytest.mark.parametrize("per_turn", [1, 3, 7])
def test_a_scan_in_turns_gives_the_page_one_scan_gives(world_path: Path, per_turn: int) -> None:
    """Long scans run in turns on the writer thread (writes go on between them); the pages
    are those of a single turn, both ways, filtered or not, and bounded the same."""
    with open_node(world_path) as node:
        one = authorize(TestClient(create_app(node)), node)
        for n in range(6):
            send(one, f"k{n}", "trap" if n == 4 else "none")
        queries = [
            {"limit": 1000},
            {"before": head(one) + 1, "limit": 5},
            {"failed": "true", "before": head(one) + 1},
            {"kind": "step", "from": 2, "limit": 4},
            {"workflow": KEYED, "key": '"k2"'},
        ]
        whole = [get(one, "/v1/journal", **q) for q in queries]
    limits = NodeLimits(journal_scan_records_per_turn=per_turn)
    with open_node(world_path, limits=limits) as node:
        turns = authorize(TestClient(create_app(node)), node)
        assert [get(turns, "/v1/journal", **q) for q in queries] == whole
    bounded = NodeLimits(journal_scan_records_per_turn=per_turn, journal_scan_records_max=4)
    with open_node(world_path, limits=bounded) as node:
        page = get(
            authorize(TestClient(create_app(node)), node),
            "/v1/journal",
            failed="true",
            **{"from": 1},
        )
        assert page["scanned"] == 4 and page["next_seq"] == 5 and page["records"] == []


def test_a_filtered_cell_page_looks_at_most_at_its_scan_bound(world_path: Path) -> None:
    """A status filter that matches few cells stops after `journal_scan_records_max` cells
    looked at, says so, and goes on from the last one looked at: every cell is found once."""
    with open_node(world_path, limits=NodeLimits(journal_scan_records_max=3)) as node:
        client = authorize(TestClient(create_app(node)), node)
        for n in range(7):
            send(client, f"k{n}", "none")
        send(client, "bad", "trap")
        found: list[str] = []
        after: str | None = None
        pages = 0
        while True:
            params = {"status": "failed"} | ({"after": after} if after else {})
            page = get(client, f"/v1/cells/{KEYED}", **params)
            pages += 1
            found += [c["key"] for c in page["cells"]]
            assert page["truncated"] == (page["next_after"] is not None)
            after = page["next_after"]
            if after is None:
                break
        assert found == ["bad"] and pages == 3  # 8 cells, 3 looked at per page
