"""The world host's HTTP API, in process (FastAPI's TestClient over a real world): every
endpoint's happy path, adversarial receipts and requests, leases, long-polls, human tasks,
time, and the limits at their edges."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning

from aos.kernel import cbor
from aos.kernel.audit import replay
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.node import Node, NodeLimits
from aos.kernel.node.app import create_app
from aos.kernel.node.errors import HumanAdapterError, NodeConfigError
from aos.kernel.node.human import HumanAdapter
from aos.kernel.node.leases import LeaseManager, PublishedIntent
from aos.kernel.node.node import LeaseAsk
from aos.kernel.signing.keys import KeyFileError, read_seed, write_seed
from aos.kernel.signing.request_auth import AdapterAuth
from aos.kernel.signing.signatures import signed_receipt
from aos.kernel.world.errors import TimeBackwardsError
from aos.kernel.world.world import World
from tests.auth_fixtures import authorize
from tests.test_receipts import ADAPTER_SEED, STRANGER_SEED
from tests.test_world import SCRIPTED, create, engine, ping

with warnings.catch_warnings():
    # Starlette's test client warns that it will move to another HTTP library; not ours to fix.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

ADAPTER = "demo/adapter@1"
KEYED = "demo/keyed@1"
OTHER_WORLD = "blake3:" + "1" * 64


def make_world(path: Path, clock: str = "manual") -> Path:
    create(path, SCRIPTED, clock=clock).close()
    return path


def open_node(path: Path, **options: Any) -> Node:
    return Node.open_path(path, sync=False, engine=engine(), **options)


@pytest.fixture
def world_path(tmp_path: Path) -> Path:
    return make_world(tmp_path / "w")


@pytest.fixture
def node(world_path: Path) -> Iterator[Node]:
    with open_node(world_path) as opened:
        yield opened


def signed_client(node: Node, adapter: str = ADAPTER, seed: bytes = ADAPTER_SEED) -> TestClient:
    """A client whose every request is signed as `adapter` (reads ignore the signature)."""
    client = authorize(TestClient(create_app(node)), node)
    client.auth = AdapterAuth(adapter, seed, node.world_id)
    return client


@pytest.fixture
def client(node: Node) -> TestClient:
    return signed_client(node)


def send(client: TestClient, key: str, action: str = "effect", n: int = 1) -> dict[str, Any]:
    response = client.post(
        "/v1/events", json={"schema": "demo/Ping@1", "value": ping(key, action, n)}
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def lease(client: TestClient, **request: Any) -> list[dict[str, Any]]:
    request.setdefault("adapter", ADAPTER)
    request.setdefault("max", 10)
    response = client.post("/v1/leases", json=request)
    assert response.status_code == 200, response.text
    return list(response.json()["leases"])


def receipt(
    world_id: str, intent: str, seed: bytes = ADAPTER_SEED, **changes: Any
) -> dict[str, Any]:
    body = {
        "world": world_id,
        "intent": intent,
        "status": "ok",
        "payload": {"ok": True},
        "adapter": ADAPTER,
        "started_ns": 10,
        "finished_ns": 20,
    }
    body.update(changes)
    return signed_receipt(seed, body)


def post_receipt(client: TestClient, value: Any) -> Any:
    return client.post("/v1/receipts", json={"receipt": cbor.to_json(value)})


def journal(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    params.setdefault("limit", 1000)
    response = client.get("/v1/journal", params=params)
    assert response.status_code == 200, response.text
    return list(response.json()["records"])


def cells(client: TestClient, workflow: str = KEYED) -> Any:
    return client.get(f"/v1/cells/{workflow}").json()


def last_value(client: TestClient, key: str) -> Any:
    state = client.get(f"/v1/state/{KEYED}", params={"key": f'"{key}"'}).json()["state"]
    return cbor.decode(bytes.fromhex(state["last_value"]["$bytes"]))


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return dict(response.json()["error"])


# --------------------------------------------------------------------------------------------
# Reading and writing the world


def test_world_info(client: TestClient, node: Node) -> None:
    info = client.get("/v1/world").json()
    assert info["world_id"] == node.world_id and info["world_id"].startswith("blake3:")
    assert info["height"] == 1 and info["clock"] == "manual"
    assert info["workflows"][KEYED] == {"cells": 0, "failed": 0}
    assert info["open_intents"] == 0 and info["queued"] == 0
    assert info["leases"] == {"published": 0, "leased": 0}


def test_openapi_describes_every_endpoint(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    paths = document["paths"]
    for path, method in [
        ("/v1/world", "get"),
        ("/v1/events", "post"),
        ("/v1/state/{workflow}", "get"),
        ("/v1/cells/{workflow}", "get"),
        ("/v1/journal", "get"),
        ("/v1/leases", "post"),
        ("/v1/receipts", "post"),
        ("/v1/tasks", "get"),
        ("/v1/tasks/{intent}", "get"),
        ("/v1/tasks/{intent}/complete", "post"),
        ("/v1/time/advance", "post"),
        ("/v1/time/jump-next", "post"),
        ("/v1/blobs", "post"),
    ]:
        assert method in paths[path], path
    schemas = document["components"]["schemas"]
    for name in (
        "EventRequest",
        "LeaseRequest",
        "LeaseResponse",
        "ReceiptRequest",
        "ErrorResponse",
    ):
        assert name in schemas
    receipt_body = paths["/v1/receipts"]["post"]["requestBody"]["content"]
    assert set(receipt_body) == {"application/json", "application/cbor"}
    assert "signature" in schemas["SignedReceipt"]["properties"]
    blob_body = paths["/v1/blobs"]["post"]["requestBody"]["content"]
    assert set(blob_body) == {"application/octet-stream"}


def test_events_state_cells_and_journal(client: TestClient) -> None:
    sent = send(client, "x", "none")
    assert sent["seq"] == 2 and sent["deliveries"] == 2
    assert sent["event_hash"].startswith("blake3:")
    assert sent["report"]["steps"] == 2 and sent["report"]["last_seq"] >= sent["seq"]
    state = client.get(f"/v1/state/{KEYED}", params={"key": '"x"'}).json()
    assert state["status"] == "completed" and state["state"]["count"] == 1
    unkeyed = client.get("/v1/state/demo/global@1").json()
    assert unkeyed["key"] is None and unkeyed["state"]["count"] == 1
    [cell] = cells(client)["cells"]
    assert cell["key"] == "x" and cell["status"] == "completed"
    records = journal(client)
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert records[1]["record"]["kind"] == "domain_event"
    assert records[1]["record"]["stamp"]["entropy"]["$bytes"]  # bytes as {"$bytes": hex}
    steps = journal(client, kind="step", limit=1)
    assert len(steps) == 1 and steps[0]["record"]["kind"] == "step"
    page = client.get("/v1/journal", params={"from": 2, "limit": 1}).json()
    assert [r["seq"] for r in page["records"]] == [2] and page["next_seq"] == 3


def test_bad_reads_and_events_are_refused_with_their_codes(client: TestClient) -> None:
    send(client, "x", "none")
    before = journal(client)
    cases = [
        (client.get(f"/v1/state/{KEYED}", params={"key": '"nobody"'}), 404, "world.cell_missing"),
        (client.get(f"/v1/state/{KEYED}"), 400, "world.key_required"),
        (client.get(f"/v1/state/{KEYED}", params={"key": "{nope"}), 400, "input.invalid_json"),
        (client.get("/v1/state/demo/global@1", params={"key": '"x"'}), 400, "world.key_unexpected"),
        (client.get("/v1/state/demo/none@1"), 404, "world.workflow_unknown"),
        (client.get("/v1/cells/demo/none@1"), 404, "world.workflow_unknown"),
        (client.get("/v1/journal", params={"kind": "nope"}), 400, "query.invalid"),
        (client.get("/v1/journal", params={"from": 0}), 400, "query.invalid"),
        (
            client.post("/v1/events", json={"schema": "demo/Nope@1", "value": {}}),
            422,
            "world.schema_unknown",
        ),
        (
            client.post("/v1/events", json={"schema": "sys/EffectReceiptEnvelope@1", "value": {}}),
            422,
            "world.schema_reserved",
        ),
        (client.post("/v1/events", json={"schema": "demo/Ping@1"}), 422, "request.invalid"),
        (
            client.post("/v1/events", content=b"{", headers={"content-type": "application/json"}),
            400,
            "input.invalid_json",
        ),
        (client.get("/v1/nowhere"), 404, "http.not_found"),
    ]
    for response, status, code in cases:
        assert error_of(response, status)["code"] == code, response.text
    bad_value = client.post("/v1/events", json={"schema": "demo/Ping@1", "value": ping("x", n=-1)})
    assert error_of(bad_value, 400)["code"].startswith("air.value")
    assert journal(client) == before  # none of these entered the world
    unroutable = client.post(
        "/v1/events", json={"schema": "demo/Ping@1", "value": ping("k" * 2000, "none")}
    )
    error = error_of(unroutable, 422)
    assert error["code"] == "route.key_too_large"
    [rejected] = journal(client, **{"from": len(before) + 1})
    assert rejected["record"]["kind"] == "ingress_rejected"
    assert error["detail"]["rejected_seq"] == rejected["seq"]
    assert client.get("/v1/world").status_code == 200


# --------------------------------------------------------------------------------------------
# Leases and receipts


def test_a_leased_intent_settled_by_a_receipt_resumes_its_cell(
    client: TestClient, node: Node
) -> None:
    send(client, "x", "effect", 2)
    leases = lease(client)
    assert [le["params"] for le in leases] == [{"n": 0}, {"n": 1}]
    first = leases[0]
    assert first["idempotency_key"] == first["intent"]
    assert first["origin"] == {"workflow": KEYED, "key": "x"}
    assert first["issuer_ref"] == "ref-0" and first["effect"] == "demo/noop@1"
    assert first["expires_unix_ms"] > time.time() * 1000
    assert lease(client) == []  # both are held
    settled = post_receipt(client, receipt(node.world_id, first["intent"]))
    assert settled.status_code == 200, settled.text
    body = settled.json()
    assert body["duplicate"] is False and body["delivered"] is True
    assert body["report"]["steps"] == 1
    envelope = last_value(client, "x")
    assert envelope["$tag"] == "Receipt" and envelope["$value"]["intent_hash"] == first["intent"]
    info = client.get("/v1/world").json()
    assert info["open_intents"] == 1 and info["leases"] == {"published": 1, "leased": 1}
    height = info["height"]
    again = post_receipt(client, receipt(node.world_id, first["intent"]))
    assert again.json()["duplicate"] is True and again.json()["seq"] is None
    assert client.get("/v1/world").json()["height"] == height  # a duplicate writes nothing


def test_a_receipt_may_be_sent_as_cbor(client: TestClient, node: Node) -> None:
    send(client, "x")
    [leased] = lease(client)
    data = cbor.encode({"receipt": receipt(node.world_id, leased["intent"])})
    response = client.post(
        "/v1/receipts", content=data, headers={"content-type": "application/cbor"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["delivered"] is True


def post_receipt_leasing(client: TestClient, value: Any, ask: Any) -> Any:
    return client.post("/v1/receipts", json={"receipt": cbor.to_json(value), "lease": ask})


def test_a_receipt_may_ask_for_its_adapters_next_lease(client: TestClient, node: Node) -> None:
    send(client, "x", "effect", 3)
    [first] = lease(client, max=1)
    answer = post_receipt_leasing(client, receipt(node.world_id, first["intent"]), {"max": 1})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["delivered"] is True and body["seq"] is not None
    [second] = body["leases"]
    assert second["params"] == {"n": 1} and second["origin"] == {"workflow": KEYED, "key": "x"}
    assert second["idempotency_key"] == second["intent"] != first["intent"]
    # Held like any lease: a long-poll gets the third, and the second can be settled.
    assert [le["params"] for le in lease(client)] == [{"n": 2}]
    ask = {"effects": ["demo/noop@1"], "max": 5}
    settled = post_receipt_leasing(client, receipt(node.world_id, second["intent"]), ask)
    assert settled.json()["delivered"] is True and settled.json()["leases"] == []
    # Without `lease` the answer leases nothing; a duplicate may still lease.
    assert post_receipt(client, receipt(node.world_id, first["intent"])).json()["leases"] == []


def test_a_receipt_sent_as_cbor_may_ask_for_leases(client: TestClient, node: Node) -> None:
    send(client, "x", "effect", 2)
    [first] = lease(client, max=1)
    data = cbor.encode({"receipt": receipt(node.world_id, first["intent"]), "lease": {"max": 2}})
    response = client.post(
        "/v1/receipts", content=data, headers={"content-type": "application/cbor"}
    )
    assert response.status_code == 200, response.text
    assert [le["params"] for le in response.json()["leases"]] == [{"n": 1}]


BAD_LEASE_ASKS = [
    ("not a map", [1], 422, "request.invalid", "$.lease"),
    ("no max", {"effects": []}, 422, "request.invalid", "$.lease"),
    ("unknown member", {"max": 1, "wait_ms": 10}, 422, "request.invalid", "$.lease"),
    ("max not an integer", {"max": "1"}, 422, "request.invalid", "$.lease.max"),
    ("max a boolean", {"max": True}, 422, "request.invalid", "$.lease.max"),
    ("max zero", {"max": 0}, 422, "request.invalid", "$.lease.max"),
    ("max over the limit", {"max": 101}, 400, "node.limit_exceeded", "$.lease.max"),
    ("effects not a list", {"max": 1, "effects": "x"}, 422, "request.invalid", "$.lease.effects"),
    ("effect not text", {"max": 1, "effects": [1]}, 422, "request.invalid", "$.lease.effects"),
    (
        "unknown effect",
        {"max": 1, "effects": ["demo/nope@1"]},
        422,
        "lease.effect_unknown",
        "$.lease.effects[0]",
    ),
]


@pytest.mark.parametrize(
    ("ask", "status", "code", "path"),
    [b[1:] for b in BAD_LEASE_ASKS],
    ids=[b[0] for b in BAD_LEASE_ASKS],
)
def test_a_bad_lease_ask_refuses_the_receipt_and_changes_nothing(
    client: TestClient, node: Node, ask: Any, status: int, code: str, path: str
) -> None:
    send(client, "x", "effect", 2)
    [leased] = lease(client, max=1)
    before = (journal(client), cells(client), client.get("/v1/world").json())
    response = post_receipt_leasing(client, receipt(node.world_id, leased["intent"]), ask)
    error = error_of(response, status)
    assert (error["code"], error["path"]) == (code, path)
    assert (journal(client), cells(client), client.get("/v1/world").json()) == before
    # The receipt was not settled, and the other intent is still free.
    assert [le["params"] for le in lease(client)] == [{"n": 1}]
    assert post_receipt(client, receipt(node.world_id, leased["intent"])).json()["delivered"]


def test_an_adapter_may_not_ask_for_effects_it_cannot_settle(
    client: TestClient, node: Node
) -> None:
    stranger = signed_client(node, "demo/stranger@1", STRANGER_SEED)
    send(client, "x")
    before = journal(client)
    value = receipt(
        node.world_id, "blake3:" + "0" * 64, seed=STRANGER_SEED, adapter="demo/stranger@1"
    )
    ask = {"effects": ["demo/noop@1"], "max": 1}
    response = post_receipt_leasing(stranger, value, ask)
    assert error_of(response, 403)["code"] == "lease.adapter_not_allowed"
    assert journal(client) == before  # refused before the world saw the receipt


def test_a_refused_receipt_leases_nothing(client: TestClient, node: Node) -> None:
    send(client, "x", "effect", 2)
    [leased] = lease(client, max=1)
    response = post_receipt_leasing(client, _forged(node.world_id, leased["intent"]), {"max": 1})
    assert error_of(response, 403)["code"] == "receipt.signature_invalid"
    assert [le["params"] for le in lease(client)] == [{"n": 1}]  # still free


def _forged(world_id: str, intent: str) -> Any:
    forged = receipt(world_id, intent)
    forged["body"]["payload"] = {"ok": False}  # altered after signing
    return forged


REFUSED = [
    ("forged", _forged, 403, "receipt.signature_invalid"),
    (
        "wrong key",
        lambda w, i: receipt(w, i, seed=STRANGER_SEED),
        403,
        "receipt.signature_invalid",
    ),
    (
        "adapter not allowed",
        lambda w, i: receipt(w, i, seed=STRANGER_SEED, adapter="demo/stranger@1"),
        403,
        "receipt.adapter_not_allowed",
    ),
    (
        "unknown intent",
        lambda w, i: receipt(w, "blake3:" + "0" * 64),
        409,
        "receipt.unknown_intent",
    ),
    ("another world", lambda w, i: receipt(OTHER_WORLD, i), 409, "receipt.wrong_world"),
    (
        "bad status",
        lambda w, i: {**receipt(w, i), "body": {**receipt(w, i)["body"], "status": "maybe"}},
        400,
        "receipt.malformed",
    ),
    ("no signature", lambda w, i: {"body": receipt(w, i)["body"]}, 400, "receipt.malformed"),
    ("not a map", lambda w, i: [receipt(w, i)], 400, "receipt.malformed"),
]


@pytest.mark.parametrize(
    ("make", "status", "code"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_refused_receipts_change_nothing_but_the_journal(
    client: TestClient, node: Node, make: Any, status: int, code: str
) -> None:
    send(client, "x")
    [leased] = lease(client)
    before_records = journal(client)
    before_cells = cells(client)
    value = make(node.world_id, leased["intent"])
    # Posted by the adapter the receipt names (anyone else is `adapter.forbidden`, unjournaled:
    # tests/test_adapters_auth.py).
    named = value["body"]["adapter"] if isinstance(value, dict) else ADAPTER
    poster = client if named == ADAPTER else signed_client(node, named, STRANGER_SEED)
    response = post_receipt(poster, value)
    assert error_of(response, status)["code"] == code
    after = journal(client)
    assert after[: len(before_records)] == before_records
    [rejected] = after[len(before_records) :]
    assert rejected["record"]["kind"] == "receipt_rejected"
    assert rejected["record"]["code"] == code
    assert cells(client) == before_cells
    assert client.get("/v1/world").json()["open_intents"] == 1
    # The node still serves, and the intent can still be settled by its adapter.
    settled = post_receipt(client, receipt(node.world_id, leased["intent"]))
    assert settled.status_code == 200 and settled.json()["delivered"] is True


BAD_BODIES = [
    ("broken json", b'{"receipt": ', "application/json", 400, "input.invalid_json"),
    (
        "duplicate keys",
        b'{"receipt": 1, "receipt": 2}',
        "application/json",
        400,
        "input.invalid_json",
    ),
    ("nan", b'{"receipt": NaN}', "application/json", 400, "input.invalid_json"),
    ("not utf-8", b"\xff\xfe", "application/json", 400, "input.invalid_json"),
    ("deep json", b"[" * 100_000 + b"]" * 100_000, "application/json", 400, "input.json_too_deep"),
    (
        "bad $bytes",
        b'{"receipt": {"$bytes": "zz"}}',
        "application/json",
        400,
        "cbor.unsupported_value",
    ),
    ("no receipt", b'{"body": {}}', "application/json", 422, "request.invalid"),
    ("broken cbor", b"\xd9\xd9\xf7\xa1", "application/cbor", 400, "cbor.truncated"),
    (
        "cbor trailing",
        cbor.encode({"receipt": 1}) + b"\x00",
        "application/cbor",
        400,
        "cbor.trailing_bytes",
    ),
]


@pytest.mark.parametrize(
    ("data", "media_type", "status", "code"),
    [b[1:] for b in BAD_BODIES],
    ids=[b[0] for b in BAD_BODIES],
)
def test_undecodable_receipt_requests_leave_no_trace(
    client: TestClient, data: bytes, media_type: str, status: int, code: str
) -> None:
    send(client, "x")
    before = journal(client)
    response = client.post("/v1/receipts", content=data, headers={"content-type": media_type})
    assert error_of(response, status)["code"] == code
    assert journal(client) == before
    assert client.get("/v1/world").status_code == 200


def test_request_bytes_max_at_the_edge(world_path: Path) -> None:
    bytes_max = 2000
    with open_node(world_path, limits=NodeLimits(request_bytes_max=bytes_max)) as node:
        client = signed_client(node)
        send(client, "x")
        before = journal(client)
        padding = b" " * (bytes_max - len(b'{"body": {}}'))
        at_limit = client.post("/v1/receipts", content=b'{"body": {}}' + padding)
        assert error_of(at_limit, 422)["code"] == "request.invalid"  # read, then refused
        over = client.post("/v1/receipts", content=b'{"body": {}}' + padding + b" ")
        assert error_of(over, 413)["code"] == "request.too_large"

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            for _ in range(bytes_max // 100 + 1):
                yield b" " * 100

        streamed = client.post("/v1/receipts", content=chunks())
        assert error_of(streamed, 413)["code"] == "request.too_large"
        assert journal(client) == before
        assert client.get("/v1/world").status_code == 200


OCTETS = {"content-type": "application/octet-stream"}


def test_blobs_are_stored_by_hash_within_their_own_limit(world_path: Path) -> None:
    limits = NodeLimits(request_bytes_max=2000, blob_bytes_max=10_000)
    with open_node(world_path, limits=limits) as node:
        client = signed_client(node)
        height = client.get("/v1/world").json()["height"]
        data = bytes(range(256)) * 39 + b"0123456789abcdef"  # 10 000 bytes: at the limit
        stored = client.post("/v1/blobs", content=data, headers=OCTETS)
        assert stored.status_code == 200, stored.text
        assert stored.json() == {"hash": str(hash_bytes(data))}
        kept = node.host.call(lambda world: world.store.cas.get(Hash(stored.json()["hash"])))
        assert kept == data  # flushed: in the store itself
        over = client.post("/v1/blobs", content=data + b"!", headers=OCTETS)
        error = error_of(over, 413)
        assert error["code"] == "request.too_large"
        assert error["detail"] == {"limit": 10_000, "limit_name": "blob_bytes_max"}
        as_json = client.post("/v1/blobs", json={"data": "x"})
        assert error_of(as_json, 415)["code"] == "request.media_type_unsupported"
        # Every other endpoint keeps request_bytes_max.
        big_event = client.post("/v1/events", content=b" " * 2001)
        assert error_of(big_event, 413)["detail"]["limit_name"] == "request_bytes_max"
        assert client.post("/v1/blobs", content=b"", headers=OCTETS).status_code == 200
        assert client.get("/v1/world").json()["height"] == height  # blobs are not journaled


# --------------------------------------------------------------------------------------------
# Group commit


def _queued_behind_a_held_host(node: Node, calls: list[Any]) -> list[Any]:
    """Hold the host thread, queue `calls` (coroutine factories) in order, release the host,
    and return their results (or errors), in order."""
    gate = threading.Event()
    held = node.host.submit(lambda _: gate.wait(10))
    found: list[Any] = []

    async def queue_all() -> list[Any]:
        return list(await asyncio.gather(*(call() for call in calls), return_exceptions=True))

    thread = threading.Thread(target=lambda: found.extend(asyncio.run(queue_all())))
    thread.start()
    deadline = time.monotonic() + 10
    while node.host._jobs.qsize() < len(calls):
        assert time.monotonic() < deadline, "the calls were not queued"
        time.sleep(0.005)
    gate.set()
    thread.join(10)
    assert held.result() is True
    return found


def test_queued_receipts_share_one_run_and_each_gets_its_own_answer(world_path: Path) -> None:
    with open_node(world_path) as node:
        client = signed_client(node)
        for key in ("a", "b", "c"):
            send(client, key, "effect", 2)
        leases = lease(client)
        assert len(leases) == 6
        good = [receipt(node.world_id, le["intent"]) for le in leases[:5]]
        forged = _forged(node.world_id, leases[5]["intent"])
        batch = [*good[:3], forged, *good[3:], good[0]]  # the last one: a duplicate
        before = (node.host.batches, node.host.batched)
        answers = _queued_behind_a_held_host(
            node, [lambda value=value: node.settle(value, ADAPTER) for value in batch]
        )
        assert (node.host.batches - before[0], node.host.batched - before[1]) == (1, 7)
        settled = [answers[i] for i in (0, 1, 2, 4, 5)]
        assert [a.intent for a in settled] == [le["intent"] for le in leases[:5]]
        assert all(a.delivered and not a.duplicate for a in settled)
        assert len({a.seq for a in settled}) == 5
        reports = {(a.report.first_seq, a.report.last_seq) for a in settled if a.report}
        assert len(reports) == 1 and settled[0].report.steps == 5  # one run for all
        assert getattr(answers[3], "code", None) == "receipt.signature_invalid"
        assert answers[6].duplicate is True and answers[6].report is None
        # Published after the flush: the forged receipt's intent is still open for leasing.
        info = client.get("/v1/world").json()
        assert info["open_intents"] == 1 and info["leases"]["published"] == 1
        kinds = [r["record"]["kind"] for r in journal(client)]
        assert kinds.count("effect_receipt") == 5 and kinds.count("receipt_rejected") == 1
        envelope = last_value(client, "c")
        assert envelope["$value"]["intent_hash"] in {le["intent"] for le in leases[4:5]}


def test_a_receipts_lease_is_taken_before_a_waiting_long_poll_wakes(world_path: Path) -> None:
    with open_node(world_path) as node:
        client = signed_client(node)
        send(client, "a")
        [first] = lease(client)
        polled: list[Any] = []
        poller = threading.Thread(target=lambda: polled.append(lease(client, wait_ms=1000)))
        poller.start()
        time.sleep(0.2)  # the long-poll is waiting
        # One batch: an event that opens an intent, and a receipt that asks for a lease.
        opened, settled = _queued_behind_a_held_host(
            node,
            [
                lambda: node.send("demo/Ping@1", ping("b", "effect", 1)),
                lambda: node.settle(
                    receipt(node.world_id, first["intent"]), ADAPTER, LeaseAsk([], 1)
                ),
            ],
        )
        poller.join(10)
        assert opened.report.intents == 1 and settled.delivered is True
        [chained] = settled.leases
        assert chained.origin.model_dump() == {"workflow": KEYED, "key": "b"}
        assert polled == [[]]  # woken after the answers were made: nothing left for it


def test_queued_events_share_one_run_and_a_batch_is_bounded(world_path: Path) -> None:
    with open_node(world_path, limits=NodeLimits(host_batch_max=3)) as node:
        client = signed_client(node)
        calls = [
            lambda key=key: node.send("demo/Ping@1", ping(key, "effect", 1))
            for key in ("a", "b", "c", "d")
        ]
        calls.insert(1, lambda: node.send("demo/Nope@1", {}))
        answers = _queued_behind_a_held_host(node, calls)
        assert getattr(answers[1], "code", None) == "world.schema_unknown"
        sent = [answers[i] for i in (0, 2, 3, 4)]
        assert len({a.seq for a in sent}) == 4
        # At most 3 operations per batch: a, Nope, b in one run; c and d in the next.
        first, second = sent[0].report, sent[2].report
        assert sent[1].report == first and sent[3].report == second
        assert first.first_seq < second.first_seq and first.intents == 2
        assert len(lease(client)) == 4  # every intent published


def test_lease_requests_are_checked(world_path: Path) -> None:
    limits = NodeLimits(leases_per_request_max=3, long_poll_ms_max=50)
    with open_node(world_path, limits=limits) as node:
        client = signed_client(node)
        send(client, "x", "effect", 5)
        assert len(lease(client, max=3, wait_ms=50)) == 3
        cases = [
            ({"adapter": ADAPTER, "max": 4}, 400, "node.limit_exceeded"),
            ({"adapter": ADAPTER, "wait_ms": 51}, 400, "node.limit_exceeded"),
            ({"adapter": ADAPTER, "max": 0}, 422, "request.invalid"),
            ({"adapter": ADAPTER, "wait_ms": -1}, 422, "request.invalid"),
            # Signed as ADAPTER: acting as anyone else is refused before anything else.
            ({"adapter": "demo/nobody@1"}, 403, "adapter.forbidden"),
            ({"adapter": "sys/timer@1"}, 403, "adapter.forbidden"),
            (
                {"adapter": "demo/stranger@1", "effects": ["demo/noop@1"]},
                403,
                "lease.adapter_not_allowed",
            ),
            ({"adapter": ADAPTER, "effects": ["demo/nope@1"]}, 422, "lease.effect_unknown"),
            ({"adapter": ADAPTER, "extra": 1}, 422, "request.invalid"),
        ]
        stranger = signed_client(node, "demo/stranger@1", STRANGER_SEED)
        for request, status, code in cases:
            poster = stranger if request["adapter"] == "demo/stranger@1" else client
            response = poster.post("/v1/leases", json=request)
            assert error_of(response, status)["code"] == code, request
        error = error_of(client.post("/v1/leases", json=cases[0][0]), 400)
        assert error["detail"] == {"limit": 3, "value": 4}
        assert lease(stranger, adapter="demo/stranger@1", max=3) == []  # it may settle nothing
        assert len(lease(client, effects=["demo/noop@1"], max=3)) == 2


BAD_LEASE_BODIES = [
    ("not a map", [ADAPTER], "$"),
    ("no adapter", {"max": 1}, "$"),
    ("adapter not text", {"adapter": 1}, "$.adapter"),
    ("max as text", {"adapter": ADAPTER, "max": "2"}, "$.max"),
    ("max a float", {"adapter": ADAPTER, "max": 2.0}, "$.max"),
    ("wait_ms a boolean", {"adapter": ADAPTER, "wait_ms": True}, "$.wait_ms"),
    ("effects not a list", {"adapter": ADAPTER, "effects": "demo/noop@1"}, "$.effects"),
    ("effect not text", {"adapter": ADAPTER, "effects": [None]}, "$.effects"),
]


@pytest.mark.parametrize(
    ("body", "path"), [b[1:] for b in BAD_LEASE_BODIES], ids=[b[0] for b in BAD_LEASE_BODIES]
)
def test_lease_bodies_are_strictly_typed(
    client: TestClient, node: Node, body: Any, path: str
) -> None:
    send(client, "x")
    before = client.get("/v1/world").json()
    error = error_of(client.post("/v1/leases", json=body), 422)
    assert (error["code"], error["path"]) == ("request.invalid", path)
    assert client.get("/v1/world").json() == before  # nothing leased
    assert len(lease(client)) == 1


def test_the_adapter_fast_path_keeps_the_request_guard(world_path: Path) -> None:
    limits = NodeLimits(request_bytes_max=2000, json_depth_max=8)
    with open_node(world_path, limits=limits) as node:
        client = signed_client(node)
        send(client, "x")
        before = client.get("/v1/world").json()
        deep = {"adapter": ADAPTER, "effects": [[[[[[[["x"]]]]]]]]}
        assert error_of(client.post("/v1/leases", json=deep), 400)["code"] == "input.json_too_deep"
        padded = {"adapter": ADAPTER, "effects": ["x" * 2000]}
        for path in ("/v1/leases", "/v1/receipts"):
            refused = error_of(client.post(path, json=padded), 413)
            assert refused["detail"]["limit_name"] == "request_bytes_max"
        broken = client.post(
            "/v1/leases", content=b'{"adapter": ', headers={"content-type": "application/json"}
        )
        assert error_of(broken, 400)["code"] == "input.invalid_json"
        assert client.get("/v1/world").json() == before
        # Other methods on these paths are still the framework's.
        assert error_of(client.get("/v1/leases"), 405)["code"] == "http.method_not_allowed"


class _BuggyNode(Node):
    """A node whose receipt handling has a bug (not a refusal)."""

    async def settle(self, receipt_value: Any, identity: str, then_lease: Any = None) -> Any:
        raise RuntimeError("a bug in the route")


def test_a_bug_behind_the_adapter_fast_path_is_a_500_and_the_node_serves_on(
    world_path: Path,
) -> None:
    node = _BuggyNode(lambda: World.open(world_path, sync=False, engine=engine()))
    with node:
        client = signed_client(node)
        send(client, "x")
        [leased] = lease(client)
        answer = post_receipt(client, receipt(node.world_id, leased["intent"]))
        error = error_of(answer, 500)
        assert error["code"] == "node.internal" and "a bug in the route" in error["message"]
        assert client.get("/v1/world").json()["open_intents"] == 1


def test_read_limits_at_the_edge(world_path: Path) -> None:
    limits = NodeLimits(journal_records_per_request_max=2, cells_per_request_max=1)
    with open_node(world_path, limits=limits) as node:
        client = signed_client(node)
        send(client, "a", "none")
        send(client, "b", "none")
        assert len(client.get("/v1/journal", params={"limit": 2}).json()["records"]) == 2
        over = client.get("/v1/journal", params={"limit": 3})
        assert error_of(over, 400)["detail"] == {"limit": 2, "value": 3}
        page = client.get(f"/v1/cells/{KEYED}", params={"limit": 1}).json()
        assert page["count"] == 2 and page["truncated"] is True and len(page["cells"]) == 1
        assert error_of(client.get(f"/v1/cells/{KEYED}", params={"limit": 2}), 400)["code"] == (
            "node.limit_exceeded"
        )


def test_an_expired_lease_is_handed_out_again(world_path: Path) -> None:
    with open_node(world_path, limits=NodeLimits(lease_ms=150)) as node:
        client = signed_client(node)
        send(client, "x")
        [first] = lease(client)
        assert lease(client) == []
        time.sleep(0.2)
        [second] = lease(client)
        assert second["intent"] == first["intent"] and second["lease_id"] != first["lease_id"]
        # The first holder's receipt still counts: leases schedule work, receipts settle it.
        assert post_receipt(client, receipt(node.world_id, first["intent"])).status_code == 200
        time.sleep(0.2)
        assert lease(client) == []
        late = post_receipt(client, receipt(node.world_id, second["intent"]))
        assert late.json()["duplicate"] is True


def test_a_long_poll_wakes_on_a_new_intent(client: TestClient) -> None:
    found: list[Any] = []
    started = time.monotonic()

    def poll() -> None:
        found.append((lease(client, wait_ms=10_000), time.monotonic() - started))

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.3)
    send(client, "x")
    poller.join(timeout=10)
    [(leases, waited)] = found
    assert len(leases) == 1 and leases[0]["origin"]["key"] == "x"
    assert 0.3 <= waited < 5


def test_a_long_poll_returns_empty_at_its_deadline(client: TestClient) -> None:
    started = time.monotonic()
    assert lease(client, wait_ms=200) == []
    assert 0.2 <= time.monotonic() - started < 2


def test_a_long_poll_wakes_when_a_lease_expires(world_path: Path) -> None:
    with open_node(world_path, limits=NodeLimits(lease_ms=200)) as node:
        client = signed_client(node)
        send(client, "x")
        [first] = lease(client)
        started = time.monotonic()
        [again] = lease(client, wait_ms=5000)
        assert again["intent"] == first["intent"]
        assert time.monotonic() - started < 2


def test_open_intents_are_published_again_when_the_node_restarts(world_path: Path) -> None:
    with open_node(world_path) as node:
        send(signed_client(node), "x", "effect", 2)
    with open_node(world_path) as node:
        client = signed_client(node)
        leases = lease(client)
        assert sorted(le["params"]["n"] for le in leases) == [0, 1]


def test_an_unexpected_failure_is_a_500_and_stops_the_world(world_path: Path) -> None:
    with open_node(world_path) as node:
        client = signed_client(node)
        send(client, "x")
        before = client.get("/v1/world").json()

        def broken(world: Any) -> None:
            world.ingress("demo/Ping@1", {"id": "y", "n": 1, "action": "none"})
            raise RuntimeError("a bug")

        with pytest.raises(Exception) as caught:
            node.host.call(broken)
        assert getattr(caught.value, "code", None) == "node.internal"
        # What the bug left in memory is unknown: the world is closed, nothing more is served.
        assert error_of(client.get("/v1/world"), 503)["code"] == "world.closed"
    with World.open(world_path) as reopened:
        assert reopened.height == before["height"]
    assert replay.verify_replay(world_path).ok


def test_a_refusal_after_an_append_discards_the_unflushed_work(
    client: TestClient, node: Node, world_path: Path
) -> None:
    send(client, "x")
    before = client.get("/v1/world").json()

    def refused_late(world: Any) -> None:
        world.ingress("demo/Ping@1", {"id": "y", "n": 1, "action": "none"})
        raise TimeBackwardsError("refused after an append")

    with pytest.raises(TimeBackwardsError):
        node.host.call(refused_late)
    assert client.get("/v1/world").json() == before
    send(client, "z")  # the next input is journaled right after the last durable one
    found = journal(client)
    assert [entry["seq"] for entry in found] == list(range(1, len(found) + 1))
    ingressed = [e["record"]["value"] for e in found if e["record"]["kind"] == "domain_event"]
    assert [value["id"] for value in ingressed] == ["x", "z"]  # never the discarded "y"
    node.close()
    assert replay.verify_replay(world_path).ok


# --------------------------------------------------------------------------------------------
# Human tasks


def test_human_tasks_are_listed_and_completed(world_path: Path) -> None:
    human = HumanAdapter(ADAPTER, ADAPTER_SEED)
    with open_node(world_path, human=human) as node:
        client = signed_client(node)
        send(client, "x", "effect", 2)
        tasks = client.get("/v1/tasks").json()
        assert tasks["adapter"] == ADAPTER
        first, second = tasks["tasks"]
        assert first["origin"] == {"workflow": KEYED, "key": "x"} and first["params"] == {"n": 0}
        assert client.get(f"/v1/tasks/{second['intent']}").json() == second
        done = client.post(
            f"/v1/tasks/{first['intent']}/complete", json={"status": "ok", "payload": {"ok": True}}
        )
        assert done.status_code == 200, done.text
        assert done.json()["delivered"] is True and done.json()["report"]["steps"] == 1
        assert last_value(client, "x")["$value"]["adapter"] == ADAPTER
        [record] = journal(client, kind="effect_receipt")
        assert record["record"]["signature"]["$bytes"]  # signed with the human key
        assert [t["intent"] for t in client.get("/v1/tasks").json()["tasks"]] == [second["intent"]]
        gone = client.post(f"/v1/tasks/{first['intent']}/complete", json={"status": "ok"})
        assert error_of(gone, 404)["code"] == "node.task_unknown"
        assert (
            error_of(client.get(f"/v1/tasks/{first['intent']}"), 404)["code"] == "node.task_unknown"
        )
        bad = client.post(f"/v1/tasks/{second['intent']}/complete", json={"status": "maybe"})
        assert error_of(bad, 422)["code"] == "request.invalid"
        failed = client.post(
            f"/v1/tasks/{second['intent']}/complete",
            json={"status": "error", "payload": {"reason": "declined"}},
        )
        assert failed.status_code == 200
        assert last_value(client, "x")["$value"]["status"] == {"$tag": "error"}


def test_human_tasks_need_a_human_adapter(client: TestClient, tmp_path: Path) -> None:
    assert error_of(client.get("/v1/tasks"), 409)["code"] == "node.human_disabled"
    world_path = make_world(tmp_path / "other")
    node = open_node(world_path, human=HumanAdapter(ADAPTER, STRANGER_SEED))
    with pytest.raises(HumanAdapterError):
        node.start()
    node = open_node(world_path, human=HumanAdapter("demo/nobody@1", ADAPTER_SEED))
    with pytest.raises(HumanAdapterError):
        node.start()


# --------------------------------------------------------------------------------------------
# Time


def test_manual_time_advances_and_jumps(client: TestClient) -> None:
    send(client, "t", "timer", 1000)
    assert error_of(client.post("/v1/time/advance", json={"by_ns": -1}), 400)["code"] == (
        "world.time_backwards"
    )
    moved = client.post("/v1/time/advance", json={"by_ns": 999}).json()
    assert moved["report"]["steps"] == 0 and moved["logical_ns"] == 999
    jumped = client.post("/v1/time/jump-next").json()
    assert jumped["logical_ns"] == 1000 and jumped["report"]["steps"] == 1
    assert last_value(client, "t")["$value"]["adapter"] == "sys/timer@1"
    assert client.post("/v1/time/jump-next").json() == {"logical_ns": 1000, "report": None}
    assert lease(client) == []  # kernel timers are never leased


def test_a_wall_clock_world_fires_timers_by_itself(tmp_path: Path) -> None:
    path = make_world(tmp_path / "wall", clock="wall")
    with open_node(path, limits=NodeLimits(timer_tick_ms=20)) as node:
        client = signed_client(node)
        refused = client.post("/v1/time/advance", json={"by_ns": 1})
        assert error_of(refused, 409)["code"] == "world.clock_manual_only"
        send(client, "t", "timer", 100_000_000)  # due in 100 ms
        deadline = time.monotonic() + 5
        while client.get("/v1/world").json()["open_intents"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert last_value(client, "t")["$value"]["adapter"] == "sys/timer@1"


# --------------------------------------------------------------------------------------------
# Parts


def test_node_limits_must_be_positive() -> None:
    with pytest.raises(NodeConfigError):
        NodeLimits(lease_ms=0)


def test_lease_manager_hands_out_expired_work_first() -> None:
    now = [0.0]
    manager = LeaseManager(lease_ms=100, clock_ms=lambda: now[0])

    def published(name: str) -> PublishedIntent:
        return PublishedIntent(name, "e", frozenset({"a"}), {}, None, "w", None, 1, 0)

    manager.publish([published("i1"), published("i2")])
    [first] = manager.lease("a", ["e"], 1)
    assert first.intent.intent == "i1"
    now[0] = 100.0
    assert [le.intent.intent for le in manager.lease("a", ["e"], 5)] == ["i1", "i2"]
    manager.withdraw(["i1"])
    now[0] = 1000.0
    assert [le.intent.intent for le in manager.lease("a", ["e"], 5)] == ["i2"]
    assert manager.counts() == {"published": 1, "leased": 1}


def test_publishing_with_wakes_held_wakes_long_polls_once_at_the_end() -> None:
    manager = LeaseManager(lease_ms=100)
    woken: list[int] = []
    manager.add_waiter(lambda: woken.append(1))
    published = PublishedIntent("i1", "e", frozenset({"a"}), {}, None, "w", None, 1, 0)
    second = PublishedIntent("i2", "e", frozenset({"a"}), {}, None, "w", None, 2, 0)
    with manager.wakes_held():
        manager.publish([published, second])
        manager.publish([published])  # already open: no wake due for it
        assert woken == []
        [held] = manager.lease("a", ["e"], 1)
    assert held.intent.intent == "i1" and woken == [1]  # i2 is left for the long-poll
    with manager.wakes_held():
        manager.withdraw(["i1"])  # nothing published: nobody is woken
    assert woken == [1]
    with manager.wakes_held():
        manager.publish([PublishedIntent("i3", "e", frozenset({"a"}), {}, None, "w", None, 3, 0)])
        manager.lease("a", ["e"], 2)
    assert woken == [1]  # the leases took everything: waking a long-poll is pointless
    manager.publish([PublishedIntent("i4", "e", frozenset({"a"}), {}, None, "w", None, 4, 0)])
    assert woken == [1, 1]


def test_key_files(tmp_path: Path) -> None:
    path = tmp_path / "adapter.key"
    write_seed(path, ADAPTER_SEED)
    assert path.read_text() == ADAPTER_SEED.hex() + "\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_seed(path) == ADAPTER_SEED
    with pytest.raises(KeyFileError):
        write_seed(path, STRANGER_SEED)  # never replaces a key by accident
    write_seed(path, STRANGER_SEED, overwrite=True)
    assert read_seed(path) == STRANGER_SEED
    for text in ["", "00" * 31, "zz" * 32, "00" * 33, ADAPTER_SEED.hex() + " extra"]:
        path.write_text(text)
        with pytest.raises(KeyFileError) as caught:
            read_seed(path)
        assert caught.value.code == "adapter.key_invalid"
    with pytest.raises(KeyFileError):
        read_seed(tmp_path / "missing.key")
    with pytest.raises(KeyFileError):
        write_seed(tmp_path / "short.key", b"\x00" * 31)
