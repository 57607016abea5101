"""Adapters as real processes against a real node: `aos node up` serving the orders world,
`aos adapter run http` as a separate process, and a local payment server. Receipts resume
exactly their origin cells under concurrent keyed traffic; a killed adapter's lease is handed
out again and settled once; SIGTERM stops an idle adapter at once."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from aos.cli.demo_orders import (
    ADAPTER,
    EFFECT,
    ORDER_EVENT,
    PAYMENT_SERVICE,
    WORKFLOW,
    PaymentServer,
    aos_command,
    orders_manifest,
)
from aos.kernel import cbor
from aos.kernel.audit import gc
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.signing.keys import read_seed, write_seed
from aos.kernel.signing.request_auth import AdapterAuth
from aos.kernel.signing.signatures import generate_seed, public_key_of, verify_body
from aos.kernel.store import open_store
from aos.kernel.world.world import World
from tests.auth_fixtures import admin_headers, announced

START_S_MAX = 30.0
SETTLE_S_MAX = 60.0
ORDERS_CONCURRENT = 24
SENDERS = 8
OCTET_STREAM = {"content-type": "application/octet-stream"}


@dataclass
class Setup:
    world: Path
    key_file: Path
    public_key: bytes


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    seed = generate_seed()
    key_file = tmp_path / "http.key"
    write_seed(key_file, seed)
    manifest = orders_manifest(tmp_path / "orders", public_key_of(seed).hex())
    world = tmp_path / "world"
    World.create(world, manifest, sync=False, clock="manual").close()
    return Setup(world, key_file, public_key_of(seed))


class Child:
    """A child process with its output collected by threads (so pipes never fill)."""

    def __init__(self, args: list[str]) -> None:
        self.popen = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, sink in ((self.popen.stdout, self.out), (self.popen.stderr, self.err)):
            threading.Thread(target=self._read, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _read(stream: Any, sink: list[str]) -> None:
        for line in stream:
            sink.append(line)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        try:
            return self.popen.wait(15)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            raise

    def outcomes(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in list(self.out) if '"intent"' in line]


def wait_until(what: str, check: Any, timeout_s: float = SETTLE_S_MAX) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@contextmanager
def node(world: Path, *options: str) -> Iterator[str]:
    fixed = ["node", "up", "--bind", "127.0.0.1:0", "--no-sync", "--json"]
    child = Child([*aos_command(), *fixed, "--world", str(world), *options])
    try:
        wait_until("the node", lambda: child.out or child.popen.poll() is not None, START_S_MAX)
        assert child.out, "".join(child.err)
        found = json.loads(child.out[0])
        with announced(found):
            yield found["url"]
    finally:
        assert child.stop() == 0, "".join(child.err)


def adapter(url: str, setup: Setup, payments: PaymentServer, *options: str) -> Child:
    return adapter_for(url, setup, payments.url, *options)


def adapter_for(url: str, setup: Setup, service_url: str, *options: str) -> Child:
    fixed = f"adapter run http --name {ADAPTER} --effect {EFFECT} --json".split()
    where = ["--node", url, "--key", str(setup.key_file)]
    url_map = ["--url-map", f"{PAYMENT_SERVICE}={service_url}"]
    return Child([*aos_command(), *fixed, *where, *url_map, *options])


def order_state(client: httpx.Client, order_id: str) -> dict[str, Any]:
    answer = client.get(f"/v1/state/{WORKFLOW}", params={"key": json.dumps(order_id)}).json()
    state: dict[str, Any] = answer["state"]
    return state


def receipts(client: httpx.Client) -> list[dict[str, Any]]:
    answer = client.get("/v1/journal", params={"kind": "effect_receipt", "limit": 1000}).json()
    return [cbor.from_json(item["record"]) for item in answer["records"]]


def intents_by_order(client: httpx.Client) -> dict[str, str]:
    """The HTTP intent of each order, from the journal's effect_intent records."""
    answer = client.get("/v1/journal", params={"kind": "effect_intent", "limit": 1000}).json()
    found = {}
    for item in answer["records"]:
        record = cbor.from_json(item["record"])
        if record["effect"] == EFFECT:
            found[cbor.decode(record["origin"]["key"])] = record["intent"]
    return found


def place(client: httpx.Client, order_id: str, amount: int) -> None:
    value = {"order_id": order_id, "amount_cents": amount, "currency": "EUR"}
    answer = client.post("/v1/events", json={"schema": ORDER_EVENT, "value": value})
    assert answer.status_code == 200, answer.text


def declined_status(order: dict[str, Any]) -> int:
    """Odd orders are declined, each with its own status code, so a receipt delivered to the
    wrong cell would show in that cell's reason."""
    number = int(str(order["order_id"]).removeprefix("o-"))
    return 200 if number % 2 == 0 else 460 + number


def test_receipts_resume_exactly_their_cells_under_concurrent_traffic(setup: Setup) -> None:
    with (
        PaymentServer(status_for=declined_status) as payments,
        node(setup.world) as url,
        httpx.Client(base_url=url, timeout=30, headers=admin_headers(url)) as client,
    ):
        runner = adapter(url, setup, payments, "--concurrency", "4")
        try:
            orders = [f"o-{n}" for n in range(ORDERS_CONCURRENT)]

            def send(chunk: list[str]) -> None:
                with httpx.Client(base_url=url, timeout=30, headers=admin_headers(url)) as own:
                    for order_id in chunk:
                        place(own, order_id, 100 + int(order_id[2:]))

            senders = [
                threading.Thread(target=send, args=(orders[i::SENDERS],)) for i in range(SENDERS)
            ]
            for thread in senders:
                thread.start()
            for thread in senders:
                thread.join()
            wait_until(
                "every order to settle",
                lambda: all(order_state(client, o)["status"] != "awaiting_payment" for o in orders),
            )
        finally:
            assert runner.stop() == 0, "".join(runner.err)
        for order_id in orders:
            state = order_state(client, order_id)
            number = int(order_id[2:])
            assert state["order_id"] == order_id and state["receipts"] == 1
            assert state["amount_cents"] == 100 + number
            if number % 2 == 0:
                assert (state["status"], state["reason"]) == ("paid", None)
            else:
                assert state["status"] == "failed"
                assert state["reason"] == f"payment declined (HTTP {460 + number})"
        intents = intents_by_order(client)
        settled = [r for r in receipts(client) if r["body"]["adapter"] == ADAPTER]
        assert sorted(r["intent"] for r in settled) == sorted(intents.values())
        for record in settled:
            assert verify_body(setup.public_key, record["body"], record["signature"])
        assert set(payments.answers) == set(intents.values())  # Idempotency-Key = intent
        assert payments.requests == ORDERS_CONCURRENT
        assert len(runner.outcomes()) == ORDERS_CONCURRENT


def test_a_killed_adapter_lease_is_leased_again_and_settled_once(setup: Setup) -> None:
    with (
        PaymentServer(held=frozenset({"o-2"})) as payments,
        node(setup.world, "--lease-ms", "1000") as url,
        httpx.Client(base_url=url, timeout=30, headers=admin_headers(url)) as client,
    ):
        first = adapter(url, setup, payments)
        place(client, "o-2", 500)
        wait_until("the first adapter's request", lambda: payments.waiting == 1)
        first.stop(signal.SIGKILL)  # mid-lease: its request is in flight, no receipt posted
        second = adapter(url, setup, payments)
        try:
            wait_until("the lease to be handed out again", lambda: payments.waiting == 2)
            payments.release()
            wait_until(
                "the order to be paid", lambda: order_state(client, "o-2")["status"] == "paid"
            )
        finally:
            assert second.stop() == 0, "".join(second.err)
        intent = intents_by_order(client)["o-2"]
        settled = [r for r in receipts(client) if r["intent"] == intent]
        assert len(settled) == 1
        assert payments.charges == 1 and list(payments.answers) == [intent]
        assert first.outcomes() == [] and len(second.outcomes()) == 1


def test_sigterm_stops_an_idle_adapter_at_once(setup: Setup) -> None:
    with PaymentServer() as payments, node(setup.world) as url:
        runner = adapter(url, setup, payments, "--lease-wait-ms", "30000")
        wait_until("the adapter to start", lambda: any("serving" in e for e in runner.err))
        time.sleep(0.3)  # well inside its long-poll now
        started = time.monotonic()
        assert runner.stop(signal.SIGTERM) == 0
        assert time.monotonic() - started < 5
        assert json.loads(runner.out[-1])["summary"]["leases"] == 0


class LargeAnswer:
    """A payment service whose every answer is 200 with one large body (a receipt document,
    say), over the http adapter's inline limit."""

    def __init__(self, body: bytes) -> None:
        answer = body

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.send_header("content-type", "application/pdf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> LargeAnswer:
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def test_a_large_response_body_goes_to_the_cas_by_hash_and_gc_keeps_it(setup: Setup) -> None:
    body = bytes(range(256)) * 1200  # 307 200 bytes: over the 64 KiB inline limit
    with (
        LargeAnswer(body) as service,
        node(setup.world) as url,
        httpx.Client(base_url=url, timeout=30, headers=admin_headers(url)) as client,
    ):
        runner = adapter_for(url, setup, service.url)
        try:
            place(client, "o-big", 700)
            wait_until("the order", lambda: order_state(client, "o-big")["status"] == "paid")
        finally:
            assert runner.stop() == 0, "".join(runner.err)
        [record] = [r for r in receipts(client) if r["body"]["adapter"] == ADAPTER]
        payload = record["body"]["payload"]
        ref = str(hash_bytes(body))
        assert payload["status"] == 200 and payload["body"] == b"" and payload["body_ref"] == ref
        assert payload["headers"]["content-type"] == "application/pdf"
        assert "payload_error" not in record  # it fits demo/HttpResponse@1
        assert verify_body(setup.public_key, record["body"], record["signature"])
        world_id = client.get("/v1/world").json()["world_id"]
        signed = AdapterAuth(ADAPTER, read_seed(setup.key_file), world_id)
        unsigned = client.post("/v1/blobs", content=b"named by no receipt", headers=OCTET_STREAM)
        assert unsigned.json()["error"]["code"] == "auth.forbidden"  # a token, not a signature
        orphan = client.post(
            "/v1/blobs", content=b"named by no receipt", headers=OCTET_STREAM, auth=signed
        ).json()["hash"]
    with open_store(setup.world) as store:
        stored = store.cas.get(Hash(ref))
        assert stored == body and str(hash_bytes(stored)) == ref
        assert store.cas.has(Hash(orphan))
    report = gc.collect(setup.world, apply=True)
    assert report.garbage_objects >= 1
    with open_store(setup.world) as store:
        assert store.cas.get(Hash(ref)) == body  # a receipt payload names it: kept
        assert not store.cas.has(Hash(orphan))
