"""The adapter SDK against a fake node: signing, duplicates, handler errors, bounded retries,
bounded concurrency, stopping. `FakeNode` is shared with the other adapter tests; it speaks
the node's HTTP contract (spec/10-adapters.md) in memory or over a real loopback socket."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from aos.kernel import cbor
from aos.kernel.adapters.sdk import (
    URLS_CACHED_MAX,
    Adapter,
    AdapterConfigInvalidError,
    AdapterEffectDuplicateError,
    AdapterNodeProtocolError,
    AdapterNodeUnreachableError,
    AdapterNoHandlersError,
    Lease,
    NodeClient,
    NodeRoute,
    Result,
    RetryPolicy,
)
from aos.kernel.hashing import hash_bytes, hash_value
from aos.kernel.signing.signatures import public_key_of, verify_body

SEED = bytes(range(32))
OTHER_SEED = bytes(range(1, 33))
ADAPTER = "demo/adapter@1"
EFFECT = "demo/noop@1"
FAST_RETRY = RetryPolicy(attempts_max=3, backoff_ms_initial=1, backoff_ms_max=2)
WAIT_MS_MAX = 200


def intent_hash(n: int) -> str:
    return str(hash_value({"intent": n}))


class FakeNode:
    """A node's adapter-facing API in memory: open intents, leases (handed out once), and
    receipts verified against one adapter's public key, like the real node."""

    def __init__(self, public_key: bytes = public_key_of(SEED)) -> None:
        self.world_id = "blake3:" + "ab" * 32
        self.public_key = public_key
        # What GET /v1/adapters lists (the adapter's own key, unless a test says otherwise).
        self.listed = {
            "name": ADAPTER,
            "public_key": public_key_of(SEED).hex(),
            "effects": [EFFECT],
        }
        self.open: dict[str, dict[str, Any]] = {}
        self.leased: set[str] = set()
        self.settled: dict[str, dict[str, Any]] = {}
        self.receipts: list[Any] = []
        self.lease_requests: list[Any] = []
        self.polled: list[str] = []  # intents handed out by POST /v1/leases
        self.receipt_lease_asks: list[Any] = []  # each receipt request's `lease`, or None
        self.on_settle: Any = None  # called with the settled intent before the answer
        self.receipt_leases: Any = None  # answer receipts' `leases` with this instead
        self.failures = 0  # answer this many next requests with 503
        self.refuse_receipts: str | None = None  # answer receipts with this error code
        self.answer_duplicate = False
        self.blobs: dict[str, bytes] = {}
        self.blob_hash: str | None = None  # answer blob uploads with this hash instead
        self.seq = 100
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def add(self, n: int, params: Any = None, effect: str = EFFECT) -> str:
        intent = intent_hash(n)
        with self._changed:
            self.open[intent] = {
                "lease_id": f"lease-{n}",
                "intent": intent,
                "effect": effect,
                "params": cbor.to_json({"n": n} if params is None else params),
                "idempotency_key": intent,
                "issuer_ref": f"ref-{n}",
                "origin": {"workflow": "demo/keyed@1", "key": {"$bytes": "6161"}},
                "expires_unix_ms": int(time.time() * 1000) + 30_000,
            }
            self._changed.notify_all()
        return intent

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        with self._lock:
            if self.failures:
                self.failures -= 1
                return 503, {"error": {"code": "node.busy", "message": "busy"}}
        if method == "GET" and path == "/v1/health":
            return 200, {"world_id": self.world_id, "manifest": "blake3:00", "height": 1}
        if method == "GET" and path == "/v1/adapters":
            return 200, {"adapters": [self.listed]}
        if method == "POST" and path == "/v1/leases":
            return 200, self._lease(body)
        if method == "POST" and path == "/v1/receipts":
            status, answer = self._receipt(body["receipt"])
            return status, self._then_lease(status, answer, body)
        if method == "POST" and path == "/v1/blobs":
            hash_ = str(hash_bytes(body))
            with self._lock:
                self.blobs[hash_] = body
            return 200, {"hash": self.blob_hash or hash_}
        return 404, {"error": {"code": "request.not_found", "message": path}}

    def _lease(self, body: Any) -> Any:
        self.lease_requests.append(body)
        deadline = time.monotonic() + min(body["wait_ms"], WAIT_MS_MAX) / 1000
        with self._changed:
            while True:
                free = [
                    v
                    for k, v in self.open.items()
                    if k not in self.leased and v["effect"] in body["effects"]
                ][: body["max"]]
                left = deadline - time.monotonic()
                if free or left <= 0:
                    break
                self._changed.wait(left)
            self.leased.update(v["intent"] for v in free)
            self.polled.extend(v["intent"] for v in free)
        return {"world_id": self.world_id, "leases": free}

    def _then_lease(self, status: int, answer: Any, body: Any) -> Any:
        """A settled receipt's answer carries what its `lease` asks for, as the node's does."""
        ask = body.get("lease")
        self.receipt_lease_asks.append(ask)
        if status != 200 or ask is None:
            return answer
        if self.receipt_leases is not None:
            return {**answer, "leases": self.receipt_leases}
        with self._lock:
            free = [
                v
                for k, v in self.open.items()
                if k not in self.leased and v["effect"] in ask["effects"]
            ][: ask["max"]]
            self.leased.update(v["intent"] for v in free)
        return {**answer, "leases": free}

    def _receipt(self, value: Any) -> tuple[int, Any]:
        receipt = cbor.from_json(value)
        self.receipts.append(receipt)
        body, signature = receipt["body"], receipt["signature"]
        if self.refuse_receipts:
            return 400, {"error": {"code": self.refuse_receipts, "message": "refused"}}
        if body["world"] != self.world_id:
            return 400, {"error": {"code": "receipt.wrong_world", "message": "world"}}
        if not verify_body(self.public_key, body, signature):
            return 400, {"error": {"code": "receipt.signature_invalid", "message": "sig"}}
        intent = body["intent"]
        with self._lock:
            if intent in self.settled or self.answer_duplicate:
                return 200, {"intent": intent, "seq": None, "duplicate": True, "delivered": False}
            if intent not in self.open:
                return 400, {"error": {"code": "receipt.unknown_intent", "message": "unknown"}}
            del self.open[intent]
            self.settled[intent] = body
            self.seq += 1
            seq = self.seq
        if self.on_settle is not None:
            self.on_settle(intent)
        return 200, {"intent": intent, "seq": seq, "duplicate": False, "delivered": True}

    def transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            body = _body(request.url.path, request.content)
            status, answer = self.answer(request.method, request.url.path, body)
            return httpx.Response(status, json=answer)

        return httpx.MockTransport(handle)

    @contextmanager
    def serve(self) -> Iterator[str]:
        """Serve over a real loopback socket; yields the base URL."""
        node = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer(None)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                self._answer(_body(self.path, self.rfile.read(length)))

            def _answer(self, body: Any) -> None:
                status, answer = node.answer(self.command, self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()


def _body(path: str, content: bytes) -> Any:
    """A request body as the fake node reads it: raw bytes for a blob, else JSON."""
    if path == "/v1/blobs":
        return content
    return json.loads(content) if content else None


def make_adapter(node: FakeNode, **options: Any) -> Adapter:
    options.setdefault("retry", FAST_RETRY)
    options.setdefault("lease_wait_ms", 20)
    return Adapter(
        name=ADAPTER, seed=SEED, node="http://node.test", transport=node.transport(), **options
    )


def noop(params: Any, lease: Lease) -> Result:
    return Result("ok", {"ok": True, "n": params["n"], "key": lease.intent.encode()})


@pytest.fixture
def node() -> FakeNode:
    return FakeNode()


# --------------------------------------------------------------------------------------------
# Receipts


def test_a_receipt_is_signed_over_its_canonical_body(node: FakeNode) -> None:
    intent = node.add(1)
    clock = iter([1_000, 2_000])
    with make_adapter(node, clock_ns=lambda: next(clock)) as adapter:
        adapter.effect(EFFECT)(noop)
        [outcome] = adapter.run_once()
    assert outcome.settled and outcome.seq == 101 and outcome.delivered
    body = node.settled[intent]
    assert body == {
        "world": node.world_id,
        "intent": intent,
        "status": "ok",
        "payload": {"ok": True, "n": 1, "key": intent.encode()},
        "adapter": ADAPTER,
        "started_ns": 1_000,
        "finished_ns": 2_000,
    }
    assert verify_body(public_key_of(SEED), body, outcome.signature)
    assert node.lease_requests[0] == {
        "adapter": ADAPTER,
        "effects": [EFFECT],
        "max": adapter.concurrency,
        "wait_ms": 0,
    }


def test_the_lease_reaches_the_handler(node: FakeNode) -> None:
    intent = node.add(7, params={"blob": b"\x00\x01", "n": 7})
    seen: list[Lease] = []

    def handler(params: Any, lease: Lease) -> Result:
        seen.append(lease)
        return Result("ok", {"ok": params["blob"] == b"\x00\x01"})

    with make_adapter(node) as adapter:
        adapter.effect(EFFECT)(handler)
        adapter.run_once()
    [lease] = seen
    assert lease.intent == intent and lease.idempotency_key == intent
    assert lease.effect == EFFECT and lease.issuer_ref == "ref-7"
    assert lease.origin_workflow == "demo/keyed@1" and lease.origin_key == b"aa"
    assert node.settled[intent]["payload"] == {"ok": True}


def test_a_receipt_signed_by_another_key_is_refused_and_not_retried(node: FakeNode) -> None:
    node.public_key = public_key_of(OTHER_SEED)
    node.add(1)
    with make_adapter(node) as adapter:
        adapter.effect(EFFECT)(noop)
        [outcome] = adapter.run_once()
    assert outcome.refused == "receipt.signature_invalid" and not outcome.settled
    assert len(node.receipts) == 1
    assert adapter.summary.refused == 1


def test_a_duplicate_answer_counts_as_settled(node: FakeNode) -> None:
    node.add(1)
    node.answer_duplicate = True
    with make_adapter(node) as adapter:
        adapter.effect(EFFECT)(noop)
        [outcome] = adapter.run_once()
    assert outcome.duplicate and outcome.settled and outcome.seq is None
    assert adapter.summary.duplicates == 1 and adapter.summary.refused == 0


# --------------------------------------------------------------------------------------------
# Handler failures become error receipts


def _settle_with(node: FakeNode, handler: Any, **options: Any) -> dict[str, Any]:
    intent = node.add(1)
    with make_adapter(node, **options) as adapter:
        adapter.effect(EFFECT)(handler)
        [outcome] = adapter.run_once()
    assert outcome.settled
    return node.settled[intent]


def test_a_handler_exception_is_an_error_receipt(node: FakeNode) -> None:
    def boom(params: Any, lease: Lease) -> Result:
        raise ValueError("the card was declined " + "x" * 2000)

    body = _settle_with(node, boom)
    assert body["status"] == "error"
    message = body["payload"]["message"]
    assert message.startswith("ValueError: the card was declined") and len(message) <= 500


def test_a_handler_that_returns_no_result_is_an_error_receipt(node: FakeNode) -> None:
    body = _settle_with(node, lambda params, lease: {"status": 200})
    assert body["status"] == "error"
    assert "dict, not a Result" in body["payload"]["message"]


@pytest.mark.parametrize("payload", [{1, 2}, float("nan"), (1, 2), 2**70])
def test_a_payload_with_no_wire_form_is_an_error_receipt(node: FakeNode, payload: Any) -> None:
    body = _settle_with(node, lambda params, lease: Result("ok", {"value": payload}))
    assert body["status"] == "error"
    assert "cannot be sent" in body["payload"]["message"]


def test_a_payload_over_the_receipt_limit_is_an_error_receipt(node: FakeNode) -> None:
    big = Result("ok", {"blob": b"x" * 5000})
    body = _settle_with(node, lambda params, lease: big, receipt_bytes_max=4096)
    assert body["status"] == "error"
    assert "too large" in body["payload"]["message"]


@pytest.mark.parametrize("spare_bytes", [0, -1])
def test_the_receipt_limit_holds_to_the_byte(spare_bytes: int) -> None:
    # The size is checked before the signature is made, with a stand-in of its length.
    now_ns = 10**18
    payload = {"blob": b"x" * 3000}
    node = FakeNode()
    body = {
        "world": node.world_id,
        "intent": intent_hash(1),
        "status": "ok",
        "payload": payload,
        "adapter": ADAPTER,
        "started_ns": now_ns,
        "finished_ns": now_ns,
    }
    size = len(cbor.encode({"body": body, "signature": bytes(64)}))
    settled = _settle_with(
        node,
        lambda params, lease: Result("ok", payload),
        receipt_bytes_max=size + spare_bytes,
        clock_ns=lambda: now_ns,
    )
    assert settled["status"] == ("ok" if spare_bytes == 0 else "error")


def test_timeout_and_error_results_keep_their_status(node: FakeNode) -> None:
    body = _settle_with(node, lambda params, lease: Result.timeout("slow", after_s=3))
    assert body["status"] == "timeout"
    assert body["payload"] == {"message": "slow", "after_s": 3}


def test_a_result_status_is_checked() -> None:
    with pytest.raises(AdapterConfigInvalidError):
        Result("done", None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Retries


def test_request_urls_are_kept_parsed_per_node_and_path_up_to_a_limit() -> None:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.host == "old":
            raise httpx.ConnectError("gone", request=request)
        if request.url.path == "/v1/worlds/w/node":
            return httpx.Response(200, json={"url": "http://new", "live": True})
        return httpx.Response(200, json={"cookies": request.headers.get("cookie")},
                              headers={"set-cookie": "session=1"})  # fmt: skip

    transport = httpx.MockTransport(handle)
    client = NodeClient("http://node.test/", retry=FAST_RETRY, transport=transport)
    try:
        for n in range(URLS_CACHED_MAX):
            client.request("GET", f"/v1/x/{n}")
        client.request("GET", "/v1/x/0")  # kept: no second entry
        assert client.urls_cached == URLS_CACHED_MAX
        client.request("GET", "/v1/y", params={"a": "1"})  # one past the limit: kept afresh
        assert client.urls_cached == 1
        # The query is not part of what is kept, and no cookie the node sets comes back.
        assert client.request("GET", "/v1/y", params={"a": "2"}) == {"cookies": None}
    finally:
        client.close()
    assert seen[0] == "http://node.test/v1/x/0"
    assert seen[-2:] == ["http://node.test/v1/y?a=1", "http://node.test/v1/y?a=2"]
    # A path kept for one node is not used for another: the route's move is followed.
    route = NodeRoute("http://old", ["http://other"], world=lambda: "w", transport=transport)
    moving = NodeClient("http://old", retry=FAST_RETRY, transport=transport, route=route)
    try:
        assert moving.request("GET", "/v1/y") == {"cookies": None}
        assert moving.request("GET", "/v1/y") == {"cookies": None}
    finally:
        moving.close()
    assert seen[-5:] == [
        "http://old/v1/y",
        "http://old/v1/worlds/w/node",
        "http://other/v1/worlds/w/node",
        "http://new/v1/y",
        "http://new/v1/y",
    ]


def test_backoff_is_exponential_and_capped() -> None:
    policy = RetryPolicy(attempts_max=8, backoff_ms_initial=50, backoff_ms_max=1000)
    assert policy.delays_ms() == [50, 100, 200, 400, 800, 1000, 1000]
    assert RetryPolicy(attempts_max=1).delays_ms() == []
    for bad in ({"attempts_max": 0}, {"backoff_ms_initial": -1}, {"backoff_ms_max": 1}):
        with pytest.raises(AdapterConfigInvalidError):
            RetryPolicy(**bad)


def test_transient_node_failures_are_retried(node: FakeNode) -> None:
    first, second = node.add(1), node.add(2)

    def flaky_post(params: Any, lease: Lease) -> Result:
        node.failures = 2  # the receipt post fails twice, then gets through
        return Result("ok", {"ok": True})

    with make_adapter(node, concurrency=1) as adapter:
        adapter.effect(EFFECT)(noop)
        _ = adapter.world_id
        node.failures = 2  # the lease request fails twice, then gets through
        [outcome] = adapter.run_once()
        assert outcome.settled and first in node.settled
    with make_adapter(node) as adapter:
        adapter.effect(EFFECT)(flaky_post)
        [outcome] = adapter.run_once()
        assert outcome.settled and second in node.settled


def test_a_node_that_stays_down_gives_up_after_the_attempts(node: FakeNode) -> None:
    node.failures = 1_000
    with make_adapter(node) as adapter:
        adapter.effect(EFFECT)(noop)
        with pytest.raises(AdapterNodeUnreachableError) as raised:
            adapter.run_once()
    assert raised.value.code == "adapter.node_unreachable"
    assert node.failures == 1_000 - FAST_RETRY.attempts_max


def test_a_receipt_that_cannot_be_posted_is_reported_unposted(node: FakeNode) -> None:
    intent = node.add(1)

    def fail_later(params: Any, lease: Lease) -> Result:
        node.failures = 1_000  # the node goes away while the handler runs
        return Result("ok", {"ok": True})

    with make_adapter(node) as adapter:
        adapter.effect(EFFECT)(fail_later)
        [outcome] = adapter.run_once()
    assert outcome.unposted == "adapter.node_unreachable" and not outcome.settled
    assert intent not in node.settled and adapter.summary.unposted == 1


def test_a_connection_refused_is_retried_then_unreachable() -> None:
    adapter = Adapter(name=ADAPTER, seed=SEED, node="http://127.0.0.1:9", retry=FAST_RETRY)
    adapter.effect(EFFECT)(noop)
    with adapter, pytest.raises(AdapterNodeUnreachableError):
        _ = adapter.world_id


def test_a_node_answer_of_the_wrong_shape_is_a_protocol_error(node: FakeNode) -> None:
    node.open["x"] = {"intent": "x", "effect": EFFECT}  # a lease without its other fields
    with make_adapter(node) as adapter:
        adapter.effect(EFFECT)(noop)
        with pytest.raises(AdapterNodeProtocolError):
            adapter.run_once()


def test_put_blob_uploads_raw_bytes_and_checks_the_answered_hash(node: FakeNode) -> None:
    data = bytes(range(256)) * 10
    with make_adapter(node) as adapter:
        ref = adapter.put_blob(data)
        assert ref == str(hash_bytes(data)) and node.blobs[ref] == data
        node.failures = 1  # retried like any request: storing a blob twice is harmless
        assert adapter.put_blob(data) == ref
        node.blob_hash = str(hash_bytes(b"something else"))
        with pytest.raises(AdapterNodeProtocolError):
            adapter.put_blob(data)
        with pytest.raises(AdapterConfigInvalidError):
            adapter.put_blob("text")  # type: ignore[arg-type]


def test_a_lease_that_cannot_make_a_valid_receipt_is_not_posted(node: FakeNode) -> None:
    node.open["not-a-hash"] = {**node.open[node.add(1)], "intent": "not-a-hash"}
    with make_adapter(node) as adapter:
        adapter.effect(EFFECT)(noop)
        outcomes = adapter.run_once()
    assert [o.unposted for o in outcomes if o.lease.intent == "not-a-hash"] == ["receipt.malformed"]
    assert len(node.receipts) == 1  # only the valid one


# --------------------------------------------------------------------------------------------
# Running and stopping


def test_run_bounds_concurrency_and_settles_everything(node: FakeNode) -> None:
    for n in range(20):
        node.add(n)
    running = 0
    peak = 0
    lock = threading.Lock()

    def slow(params: Any, lease: Lease) -> Result:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01)
        with lock:
            running -= 1
        return Result("ok", {"ok": True})

    with make_adapter(node, concurrency=4) as adapter:
        adapter.effect(EFFECT)(slow)
        thread = threading.Thread(target=adapter.run, kwargs={"install_signals": False})
        thread.start()
        deadline = time.monotonic() + 10
        while len(node.settled) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        adapter.stop()
        thread.join(timeout=5)
    assert not thread.is_alive()
    assert len(node.settled) == 20 and 1 < peak <= 4
    assert all(r["max"] <= 4 for r in node.lease_requests)
    assert adapter.summary.settled == 20


def test_stop_lets_running_handlers_post_their_receipts(node: FakeNode) -> None:
    intent = node.add(1)
    started, release = threading.Event(), threading.Event()

    def blocked(params: Any, lease: Lease) -> Result:
        started.set()
        release.wait(5)
        return Result("ok", {"ok": True})

    with make_adapter(node) as adapter:
        adapter.effect(EFFECT)(blocked)
        thread = threading.Thread(target=adapter.run, kwargs={"install_signals": False})
        thread.start()
        assert started.wait(5)
        adapter.stop()
        time.sleep(0.05)
        assert thread.is_alive()  # draining: the handler still runs
        release.set()
        thread.join(timeout=5)
    assert not thread.is_alive() and intent in node.settled


def test_stop_abandons_handlers_after_the_drain_limit(node: FakeNode) -> None:
    node.add(1)
    started, release = threading.Event(), threading.Event()

    def stuck(params: Any, lease: Lease) -> Result:
        started.set()
        release.wait(5)
        return Result("ok", {"ok": True})

    with make_adapter(node, stop_drain_s=0.1) as adapter:
        adapter.effect(EFFECT)(stuck)
        thread = threading.Thread(target=adapter.run, kwargs={"install_signals": False})
        thread.start()
        assert started.wait(5)
        adapter.stop()
        thread.join(timeout=2)
        assert not thread.is_alive()
        release.set()


def test_configuration_is_checked(node: FakeNode) -> None:
    for bad in (
        {"seed": b"short"},
        {"node": "node.test:9010"},
        {"concurrency": 0},
        {"lease_wait_ms": 10**9},
        {"name": ""},
    ):
        options = {"name": ADAPTER, "seed": SEED, "node": "http://node.test", **bad}
        with pytest.raises(AdapterConfigInvalidError):
            Adapter(**options)
    with make_adapter(node) as adapter:
        with pytest.raises(AdapterNoHandlersError):
            adapter.run_once()
        adapter.effect(EFFECT)(noop)
        with pytest.raises(AdapterEffectDuplicateError):
            adapter.effect(EFFECT)(noop)


# --------------------------------------------------------------------------------------------
# Chained leases: a receipt's answer carries the handler's next lease


def _chain(node: FakeNode, length: int) -> list[str]:
    """Intents 0..length-1, each opened when the previous one is settled (a sequential flow)."""
    intents = [intent_hash(n) for n in range(length)]

    def open_next(intent: str) -> None:
        n = intents.index(intent)
        if n + 1 < length:
            node.add(n + 1)

    node.on_settle = open_next
    node.add(0)
    return intents


def _run_until_settled(adapter: Adapter, node: FakeNode, count: int) -> None:
    thread = threading.Thread(target=adapter.run, kwargs={"install_signals": False})
    thread.start()
    deadline = time.monotonic() + 10
    while len(node.settled) < count and time.monotonic() < deadline:
        time.sleep(0.005)
    adapter.stop()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_a_chain_goes_on_through_the_receipts_answers(node: FakeNode) -> None:
    intents = _chain(node, 12)
    # One slot: while the chain runs in it, the adapter does not long-poll, so every next
    # intent can only have come with a receipt's answer.
    with make_adapter(node, concurrency=1) as adapter:
        adapter.effect(EFFECT)(noop)
        _run_until_settled(adapter, node, len(intents))
    assert set(node.settled) == set(intents)
    assert node.polled == intents[:1]
    assert node.receipt_lease_asks[: len(intents)] == [{"effects": [EFFECT], "max": 1}] * 12
    assert adapter.summary.settled == 12 and adapter.summary.leases == 12


def test_without_chaining_receipts_ask_for_nothing(node: FakeNode) -> None:
    intents = _chain(node, 4)
    with make_adapter(node, concurrency=1, chain_leases=False) as adapter:
        adapter.effect(EFFECT)(noop)
        _run_until_settled(adapter, node, len(intents))
    assert set(node.settled) == set(intents)
    assert node.receipt_lease_asks == [None] * 4


def test_a_stopping_adapter_asks_its_receipts_for_no_more_work(node: FakeNode) -> None:
    intents = _chain(node, 3)
    adapter = make_adapter(node, concurrency=1)

    def last_one(params: Any, lease: Lease) -> Result:
        adapter.stop()
        return noop(params, lease)

    with adapter:
        adapter.effect(EFFECT)(last_one)
        _run_until_settled(adapter, node, 1)
    assert list(node.settled) == intents[:1] and node.receipt_lease_asks == [None]
    assert intents[1] in node.open and intents[1] not in node.leased  # left for the next run


def test_malformed_leases_in_a_receipts_answer_are_ignored(node: FakeNode) -> None:
    intent = node.add(1)
    node.receipt_leases = [{"lease_id": "x"}]  # no intent, effect, params...
    with make_adapter(node) as adapter:
        adapter.effect(EFFECT)(noop)
        outcome = adapter.handle(Lease.from_json(node.open[intent]), then_lease=True)
    assert outcome.settled and outcome.seq is not None and outcome.next_leases == ()
    assert intent in node.settled


def test_handler_threads_are_reused(node: FakeNode) -> None:
    for n in range(30):
        node.add(n)
    threads: set[int] = set()

    def noted(params: Any, lease: Lease) -> Result:
        threads.add(threading.get_ident())
        time.sleep(0.002)
        return noop(params, lease)

    with make_adapter(node, concurrency=3) as adapter:
        adapter.effect(EFFECT)(noted)
        _run_until_settled(adapter, node, 30)
    assert len(node.settled) == 30 and 1 <= len(threads) <= 3
