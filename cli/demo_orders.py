"""`python -m aos.cli.demo_orders`: the orders world end to end, every part its own process.

1. a local payment server (a tiny HTTP endpoint on a free loopback port);
2. `aos adapter keygen`: a fresh Ed25519 identity for the HTTP adapter `demo/http@1`;
3. a copy of `manifests/orders` whose `defadapter` carries that public key;
4. `aos world create --clock manual`, then `aos node up` serving it;
5. `aos adapter run http`, pointed at the payment server with `--url-map`: order_py names
   the service `https://payments.example/charges` (a constant in the workflow), and the
   adapter, like any deployment's service mapping, sends that URL prefix to the local server;
6. four orders: two are paid, one is declined (HTTP 402), and one is held by the payment
   server until the demo has moved logical time past the order's 30 s timer, so the timer
   fails it and the late HTTP receipt is only counted;
7. the cells' states and the signed `effect_receipt` records from the journal.

Every process is stopped with SIGTERM at the end and the scratch folder removed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import click
import httpx

from aos.cli.common import table
from aos.kernel import cbor
from aos.kernel.air import TIMER_ADAPTER

REPO = Path(__file__).resolve().parent.parent
ORDERS_MANIFEST = REPO / "manifests" / "orders"
ORDER_MODULE = REPO / "modules" / "examples" / "order_py"
PAYMENT_SERVICE = "https://payments.example"  # the prefix of order_py's PAYMENT_URL
ADAPTER = "demo/http@1"
EFFECT = "demo/http.request@1"
WORKFLOW = "demo/Order@1"
ORDER_EVENT = "demo/OrderPlaced@1"
ORDERS = [  # (order id, amount in cents, currency)
    ("o-1001", 1250, "EUR"),
    ("o-1002", 4200, "USD"),
    ("o-1003", 990_000, "USD"),
    ("o-1004", 800, "GBP"),
]
HELD_ORDER = "o-1004"
DECLINE_OVER_CENTS = 500_000
ORDER_TIMER_NS = 30 * 1_000_000_000  # order_py's PAYMENT_TIMEOUT_NS
ADVANCE_NS = ORDER_TIMER_NS + 1_000_000_000
CREATE_S_MAX = 600.0  # the first run builds order_py into a component
START_S_MAX = 30.0
SETTLE_S_MAX = 30.0
HOLD_S_MAX = 20.0
STOP_S_MAX = 15.0
POLL_S = 0.05
SIGNATURE_HEX_SHOWN = 16


# --------------------------------------------------------------------------------------------
# The payment server


class PaymentServer:
    """POST /charges with a CBOR body {order_id, amount_cents}: 200 and a JSON charge, or 402
    over `DECLINE_OVER_CENTS` (or what `status_for` says). A repeated Idempotency-Key gets the first answer again and
    charges nothing. Orders in `held` wait until `release()`."""

    def __init__(
        self,
        held: frozenset[str] = frozenset(),
        status_for: Callable[[dict[str, Any]], int] | None = None,
    ) -> None:
        self.held = held
        self.status_for = status_for
        self.answers: dict[str, tuple[int, dict[str, Any]]] = {}  # by Idempotency-Key
        self.charges = 0
        self.requests = 0
        self.waiting = 0  # requests that reached a hold
        self.released = threading.Event()
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> PaymentServer:
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self.released.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def release(self) -> None:
        self.released.set()

    def charge(self, key: str, body: bytes) -> tuple[int, dict[str, Any]]:
        order: Any = cbor.decode(body)
        assert isinstance(order, dict)
        if order["order_id"] in self.held:
            with self._lock:
                self.waiting += 1
            self.released.wait(HOLD_S_MAX)
        with self._lock:
            self.requests += 1
            if key in self.answers:
                return self.answers[key]
            status = 402 if int(order["amount_cents"]) > DECLINE_OVER_CENTS else 200
            if self.status_for is not None:
                status = self.status_for(order)
            if status == 200:
                self.charges += 1
                answer = {
                    "charge_id": f"ch_{self.charges:04d}",
                    "order_id": order["order_id"],
                    "amount_cents": order["amount_cents"],
                    "status": "succeeded",
                }
            else:
                answer = {"order_id": order["order_id"], "error": "declined"}
            self.answers[key] = (status, answer)
            return status, answer

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path != "/charges":
                    status, answer = 404, {"error": "no such endpoint"}
                else:
                    key = self.headers.get("idempotency-key", "")
                    status, answer = server.charge(key, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                """The demo's payment server does not print a line per request."""

        return Handler


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away (a killed adapter) is the client's problem


# --------------------------------------------------------------------------------------------
# Setting up


def aos_command() -> list[str]:
    """The `aos` command of this interpreter's environment."""
    script = Path(sys.executable).with_name("aos")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from aos.cli.main import main; main()"]


def run_json(*args: str, timeout_s: float) -> Any:
    done = subprocess.run(
        [*aos_command(), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"aos {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout)


def orders_manifest(target: Path, public_key: str) -> Path:
    """A copy of `manifests/orders` with the adapter's public key in its defadapter and the
    module's source path pointing back at `modules/examples/order_py` (artifact paths are
    relative to the file that names them)."""
    shutil.copytree(ORDERS_MANIFEST, target)
    effects = target / "defs" / "effects.yaml"
    text, count = re.subn(
        r"(?m)^public_key: [0-9a-f]{64}$", f"public_key: {public_key}", effects.read_text()
    )
    if count != 1:
        raise RuntimeError(f"{effects}: expected one defadapter public_key, found {count}")
    effects.write_text(text)
    order = target / "defs" / "order.yaml"
    module = os.path.relpath(ORDER_MODULE, order.parent)
    text, count = re.subn(r"(?m)^  path: .*order_py$", f"  path: {module}", order.read_text())
    if count != 1:
        raise RuntimeError(f"{order}: expected one artifact path, found {count}")
    order.write_text(text)
    return target


@contextmanager
def process(
    args: list[str], *, name: str, on_line: Callable[[str], None] | None = None
) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """Start a process whose stdout is read line by line (kept, and passed to `on_line`);
    stop it with SIGTERM on the way out (SIGKILL if it does not stop)."""
    child = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    lines: list[str] = []
    errors: list[str] = []
    readers = [
        threading.Thread(target=_read, args=(child.stdout, lines, on_line), daemon=True),
        threading.Thread(target=_read, args=(child.stderr, errors, None), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        yield child, lines
    finally:
        stop(child, name)
        for reader in readers:
            reader.join(timeout=STOP_S_MAX)
        if child.returncode not in (0, None):
            click.echo(f"  {name} exited {child.returncode}:\n    " + "    ".join(errors[-10:]))


def _read(stream: IO[str] | None, lines: list[str], on_line: Callable[[str], None] | None) -> None:
    assert stream is not None
    for line in stream:
        lines.append(line)
        if on_line is not None:
            on_line(line.rstrip("\n"))


def stop(child: subprocess.Popen[str], name: str) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(STOP_S_MAX)
        except subprocess.TimeoutExpired:
            click.echo(f"  {name} did not stop on SIGTERM; killing it")
            child.kill()
            child.wait()


def wait_until(what: str, check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(POLL_S)


def first_line(lines: list[str], child: subprocess.Popen[str], name: str) -> Any:
    wait_until(f"{name} to start", lambda: bool(lines) or child.poll() is not None, START_S_MAX)
    if not lines:
        raise RuntimeError(f"{name} exited {child.returncode} before it started")
    return json.loads(lines[0])


# --------------------------------------------------------------------------------------------
# Talking to the node


class NodeApi:
    def __init__(self, url: str, token: str) -> None:
        """A client of the node, as the identity of `token` (the world's first admin)."""
        headers = {"authorization": f"Bearer {token}"}
        self.client = httpx.Client(base_url=url, timeout=30, trust_env=False, headers=headers)

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        response = self.client.request(method, path, json=body, params=params or None)
        answer = response.json()
        if response.is_error:
            raise RuntimeError(f"{method} {path}: {answer}")
        return answer

    def order(self, order_id: str) -> dict[str, Any]:
        answer = self.call("GET", f"/v1/state/{WORKFLOW}", key=json.dumps(order_id))
        state: dict[str, Any] = answer["state"]
        return state


# --------------------------------------------------------------------------------------------
# The demo


def main() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="aos-demo-orders-") as scratch,
        PaymentServer(frozenset({HELD_ORDER})) as payments,
    ):
        demo(Path(scratch), payments)


def demo(scratch: Path, payments: PaymentServer) -> None:
    aos = aos_command()
    click.echo(f"payment server: {payments.url}/charges (holds {HELD_ORDER} until released)")
    key_file = scratch / "http-adapter.key"
    keygen = run_json("adapter", "keygen", ADAPTER, "--out", str(key_file), timeout_s=START_S_MAX)
    public_key = keygen["public_key"]
    click.echo(f"adapter key:    {ADAPTER} public key {public_key[:16]}... ({key_file.name}, 0600)")
    manifest = orders_manifest(scratch / "orders", public_key)
    world = scratch / "world"
    started = time.perf_counter()
    created = run_json(
        "world", "create", str(world), "--manifest", str(manifest), "--clock", "manual",
        timeout_s=CREATE_S_MAX,
    )  # fmt: skip
    click.echo(
        f"world:          manifest {created['manifest'][:19]}... with that key in its "
        f"defadapter ({time.perf_counter() - started:.1f} s, manual clock)"
    )
    token = str(created["admin_token"])
    click.echo(
        f"identity:       admin, token {token[:8]}... (printed once by `aos world create`; "
        "the node lets in no one without a token, the adapter signs its requests)"
    )
    node_args = [*aos, "node", "up", "--world", str(world), "--bind", "127.0.0.1:0", "--json"]
    with process(node_args, name="node") as (node, node_lines):
        url = first_line(node_lines, node, "aos node up")["url"]
        click.echo(f"node:           {url} (pid {node.pid})")
        adapter_args = [
            *aos, "adapter", "run", "http", "--node", url, "--key", str(key_file),
            "--name", ADAPTER, "--effect", EFFECT,
            "--url-map", f"{PAYMENT_SERVICE}={payments.url}", "--json",
        ]  # fmt: skip
        with process(adapter_args, name="adapter", on_line=_adapter_line) as (adapter, _):
            click.echo(
                f"adapter:        aos adapter run http (pid {adapter.pid}), "
                f"{PAYMENT_SERVICE} -> {payments.url}\n"
            )
            _orders(NodeApi(url, token), payments)
        click.echo(f"\nadapter stopped (exit {adapter.returncode}); stopping the node")
    click.echo(f"node stopped (exit {node.returncode})")


def _adapter_line(line: str) -> None:
    try:
        outcome = json.loads(line)
    except ValueError:
        return
    if "intent" in outcome:
        state = "duplicate" if outcome["duplicate"] else f"seq {outcome['seq']}"
        click.echo(
            f"  adapter: {outcome['issuer_ref']} settled {outcome['intent'][:19]}... "
            f"{outcome['status']} ({state})"
        )


def _orders(api: NodeApi, payments: PaymentServer) -> None:
    for order_id, amount, currency in ORDERS:
        value = {"order_id": order_id, "amount_cents": amount, "currency": currency}
        sent = api.call("POST", "/v1/events", {"schema": ORDER_EVENT, "value": value})
        report = sent["report"]
        click.echo(
            f"sent {order_id} {amount / 100:>9.2f} {currency}: seq {sent['seq']}, "
            f"{report['steps']} step, {report['intents']} intents (http charge, timer)"
        )
    decided = [o for o, _, _ in ORDERS if o != HELD_ORDER]
    wait_until(
        "the payments to settle",
        lambda: all(api.order(o)["status"] != "awaiting_payment" for o in decided),
        SETTLE_S_MAX,
    )
    click.echo("\nafter the HTTP receipts:")
    click.echo(_cells(api))
    advanced = api.call("POST", "/v1/time/advance", {"by_ns": ADVANCE_NS})
    click.echo(
        f"\nlogical time advanced by {ADVANCE_NS // 1_000_000_000} s to "
        f"{advanced['logical_ns']}: {advanced['report']['steps']} steps (timer receipts)"
    )
    payments.release()
    wait_until("the held payment's late receipt", lambda: _late_receipt_in(api), SETTLE_S_MAX)
    click.echo(f"released the held charge of {HELD_ORDER}; its late receipt is counted:\n")
    click.echo(_cells(api))
    click.echo(
        f"\npayment server: {payments.requests} requests, {payments.charges} charges, "
        "each under Idempotency-Key = its intent hash"
    )
    click.echo("\njournal, effect_receipt records:")
    for line in _receipt_lines(api):
        click.echo(line)


def _late_receipt_in(api: NodeApi) -> bool:
    return int(api.order(HELD_ORDER)["receipts"]) >= 2


def _cells(api: NodeApi) -> str:
    rows = []
    for order_id, _, _ in ORDERS:
        state = api.order(order_id)
        rows.append(
            [
                order_id,
                f"{state['amount_cents'] / 100:.2f} {state['currency']}",
                state["status"],
                state["reason"] or "",
                state["receipts"],
            ]
        )
    return table(["order", "amount", "status", "reason", "receipts"], rows)


def _receipt_lines(api: NodeApi) -> list[str]:
    found = api.call("GET", "/v1/journal", kind="effect_receipt", limit=100)["records"]
    lines = []
    for item in found:
        record: Any = cbor.from_json(item["record"])
        body = record["body"]
        signature = record["signature"]
        if body["adapter"] == TIMER_ADAPTER:
            signed = "kernel timer, no signature"
        else:
            signed = f"signature {signature.hex()[:SIGNATURE_HEX_SHOWN]}... ({len(signature)} B)"
        payload = body["payload"]
        detail = (
            f"HTTP {payload['status']}" if isinstance(payload, dict) and "status" in payload else ""
        )
        lines.append(
            f"  #{item['seq']:<3} {body['intent'][:19]}... {body['adapter']:<12} "
            f"{body['status']:<7} {detail:<8} {signed}"
        )
    return lines


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
