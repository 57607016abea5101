"""The built-in adapters: `http` against a local server (status, headers, Idempotency-Key,
timeouts, large bodies) and `python` (ok, raised, timeout, crash), each also once through the
SDK and a fake node."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from aos.kernel.adapters.builtin.http import (
    IDEMPOTENCY_HEADER,
    HttpEffect,
    HttpOptions,
    parse_url_map,
)
from aos.kernel.adapters.builtin.python_fn import (
    PythonFunctionEffect,
    PythonOptions,
    parse_functions,
)
from aos.kernel.adapters.sdk import AdapterConfigInvalidError, AdapterNodeRefusedError, Lease
from aos.kernel.hashing import hash_bytes
from tests.conftest import readable_folder
from tests.test_adapters_sdk import EFFECT, FakeNode, intent_hash, make_adapter


def lease(n: int = 1, effect: str = EFFECT) -> Lease:
    return Lease(
        lease_id=f"lease-{n}",
        intent=intent_hash(n),
        effect=effect,
        params=None,
        idempotency_key=intent_hash(n),
        issuer_ref=None,
        origin_workflow="demo/Order@1",
        origin_key=None,
        expires_unix_ms=0,
    )


class Server:
    """A local HTTP server that records what it was sent."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.url = ""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._handle()

            def do_POST(self) -> None:
                self._handle()

            def _handle(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = self.rfile.read(length)
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                server.requests.append(
                    {
                        "method": self.command,
                        "path": url.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                    }
                )
                if url.path == "/slow":
                    time.sleep(float(query["s"]))
                if url.path == "/trickle":
                    self._trickle(int(query["chunks"]))
                    return
                data = b"x" * int(query["n"]) if url.path == "/big" else b'{"charged": true}'
                self.send_response(int(query.get("status", 200)))
                self.send_header("content-type", "application/json")
                self.send_header("x-tag", "a")
                self.send_header("x-tag", "b")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _trickle(self, chunks: int) -> None:
                self.send_response(200)
                self.send_header("content-length", str(chunks))
                self.end_headers()
                for _ in range(chunks):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.1)

            def log_message(self, *_: Any) -> None:
                pass

        return Handler


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    state = Server()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), state.handler())
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield state
    httpd.shutdown()
    httpd.server_close()


def request(url: str, **changes: Any) -> dict[str, Any]:
    params = {"method": "POST", "url": url, "headers": {"x-from": "test"}, "body": b"{}"}
    params.update(changes)
    return params


# --------------------------------------------------------------------------------------------
# http


def test_http_response_becomes_the_receipt_payload(server: Server) -> None:
    with HttpEffect() as http:
        result = http(request(f"{server.url}/charges?status=201"), lease(1))
    assert result.status == "ok"
    assert result.payload["status"] == 201
    assert result.payload["body"] == b'{"charged": true}'
    headers = result.payload["headers"]
    assert headers["content-type"] == "application/json" and headers["x-tag"] == "a, b"
    sent = server.requests[-1]
    assert sent["method"] == "POST" and sent["path"] == "/charges" and sent["body"] == b"{}"
    assert sent["headers"]["x-from"] == "test"
    assert sent["headers"]["idempotency-key"] == intent_hash(1)


def test_the_intent_hash_replaces_an_idempotency_key_in_the_params(server: Server) -> None:
    with HttpEffect() as http:
        http(request(f"{server.url}/x", headers={"idempotency-KEY": "mine"}), lease(2))
    headers = server.requests[-1]["headers"]
    assert headers["idempotency-key"] == intent_hash(2)
    assert IDEMPOTENCY_HEADER.lower() in headers


def test_a_non_2xx_answer_is_still_an_ok_receipt(server: Server) -> None:
    with HttpEffect() as http:
        result = http(request(f"{server.url}/charges?status=402", method="get"), lease())
    assert result.status == "ok" and result.payload["status"] == 402
    assert server.requests[-1]["method"] == "GET"


def test_a_slow_server_gives_a_timeout_receipt(server: Server) -> None:
    with HttpEffect(HttpOptions(timeout_s=0.2)) as http:
        result = http(request(f"{server.url}/slow?s=1"), lease())
    assert result.status == "timeout" and "0.2 s" in result.payload["message"]


def test_a_trickling_body_cannot_outlast_the_timeout(server: Server) -> None:
    with HttpEffect(HttpOptions(timeout_s=0.3)) as http:
        started = time.monotonic()
        result = http(request(f"{server.url}/trickle?chunks=20"), lease())
    assert result.status == "timeout" and time.monotonic() - started < 1.5


def test_a_body_over_the_inline_limit_is_stored_by_hash(server: Server) -> None:
    stored: dict[str, bytes] = {}

    def put_blob(data: bytes) -> str:
        stored[str(hash_bytes(data))] = data
        return str(hash_bytes(data))

    options = HttpOptions(body_bytes_inline_max=1000, body_bytes_max=5000)
    with HttpEffect(options, put_blob=put_blob) as http:
        at_limit = http(request(f"{server.url}/big?n=1000"), lease())
        over = http(request(f"{server.url}/big?n=1001"), lease())
        at_max = http(request(f"{server.url}/big?n=5000"), lease())
        too_big = http(request(f"{server.url}/big?n=5001"), lease())
    assert at_limit.status == "ok" and len(at_limit.payload["body"]) == 1000
    assert "body_ref" not in at_limit.payload  # fits schemas without the field
    for result, size in ((over, 1001), (at_max, 5000)):
        assert result.status == "ok" and result.payload["status"] == 200
        assert result.payload["body"] == b""
        assert stored[result.payload["body_ref"]] == b"x" * size
    assert too_big.status == "error" and too_big.payload["body_bytes_max"] == 5000
    assert too_big.payload["status"] == 200 and len(stored) == 2


def test_a_large_body_without_a_blob_store_is_an_error_receipt(server: Server) -> None:
    def refuse(data: bytes) -> str:
        raise AdapterNodeRefusedError("no", node_code="request.too_large")

    with HttpEffect(HttpOptions(body_bytes_inline_max=1000)) as http:
        alone = http(request(f"{server.url}/big?n=1001"), lease())
    assert alone.status == "error" and alone.payload["body_bytes_inline_max"] == 1000
    assert "cannot upload" in alone.payload["message"]
    with HttpEffect(HttpOptions(body_bytes_inline_max=1000), put_blob=refuse) as http:
        refused = http(request(f"{server.url}/big?n=1001"), lease())
    assert refused.status == "error" and refused.payload["code"] == "request.too_large"
    with pytest.raises(AdapterConfigInvalidError):
        HttpOptions(body_bytes_inline_max=1000, body_bytes_max=999)


def test_transport_failures_and_bad_params_are_error_receipts() -> None:
    with HttpEffect(HttpOptions(timeout_s=2)) as http:
        refused = http(request("http://127.0.0.1:9/charges"), lease())
        assert refused.status == "error" and "ConnectError" in refused.payload["message"]
        for bad in (
            "not a map",
            request("ftp://example/x"),
            request("http://x", method="BREW"),
            request("http://x", headers={"a": 1}),
            request("http://x", body="text"),
        ):
            result = http(bad, lease())
            assert result.status == "error", bad


def test_url_map_sends_a_service_url_to_a_local_host(server: Server) -> None:
    options = HttpOptions(url_map=parse_url_map([f"https://payments.example={server.url}"]))
    with HttpEffect(options) as http:
        result = http(request("https://payments.example/charges?status=200"), lease())
    assert result.status == "ok" and server.requests[-1]["path"] == "/charges"
    with pytest.raises(AdapterConfigInvalidError):
        parse_url_map(["no-equals-sign"])
    with pytest.raises(AdapterConfigInvalidError):
        HttpOptions(url_map=(("https://a", "ftp://b"),))
    with pytest.raises(AdapterConfigInvalidError):
        HttpOptions(timeout_s=0)


def test_http_through_the_sdk(server: Server) -> None:
    node = FakeNode()
    intent = node.add(1, params=request(f"{server.url}/charges"))
    large = node.add(2, params=request(f"{server.url}/big?n=70000"))
    with make_adapter(node) as adapter, HttpEffect(put_blob=adapter.put_blob) as http:
        adapter.effect(EFFECT)(http)
        outcomes = adapter.run_once()
    assert all(outcome.settled for outcome in outcomes) and len(outcomes) == 2
    body = node.settled[intent]
    assert body["status"] == "ok" and body["payload"]["status"] == 200
    assert server.requests[-1]["headers"]["idempotency-key"] in (intent, large)
    payload = node.settled[large]["payload"]
    assert payload["body"] == b"" and node.blobs[payload["body_ref"]] == b"x" * 70000


# --------------------------------------------------------------------------------------------
# python

FUNCTIONS = """
import os, signal, sys, time

def double(params):
    print("printed output does not reach the result")
    return {"n": params["n"] * 2, "intent": os.environ["AOS_INTENT"], "raw": {"$bytes": "00ff"}}

def fails(params):
    raise ValueError("no such customer")

def sleeps(params):
    time.sleep(10)

def crashes(params):
    sys.stderr.write("about to die\\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)

def exits(params):
    os._exit(7)

def unjsonable(params):
    return {1, 2}
"""


@pytest.fixture(scope="module")
def functions() -> Iterator[Path]:
    with readable_folder() as folder:
        (folder / "fns.py").write_text(FUNCTIONS)
        yield folder


def run_python(folder: Path, name: str, params: Any, timeout_s: float = 5) -> Any:
    options = PythonOptions(
        functions={"*": f"fns:{name}"}, module_paths=[folder], timeout_s=timeout_s
    )
    return PythonFunctionEffect(options)(params, lease(3))


def test_python_function_result_is_the_payload(functions: Path) -> None:
    result = run_python(functions, "double", {"n": 21})
    assert result.status == "ok"
    assert result.payload == {"n": 42, "intent": intent_hash(3), "raw": b"\x00\xff"}


def test_python_function_that_raises_is_an_error_receipt(functions: Path) -> None:
    result = run_python(functions, "fails", {})
    assert result.status == "error"
    assert result.payload["type"] == "ValueError"
    assert "no such customer" in result.payload["message"]


def test_python_function_over_its_timeout_is_a_timeout_receipt(functions: Path) -> None:
    started = time.monotonic()
    result = run_python(functions, "sleeps", {}, timeout_s=0.5)
    assert result.status == "timeout" and time.monotonic() - started < 3


@pytest.mark.parametrize(("name", "expected"), [("crashes", "signal 9"), ("exits", "exit code 7")])
def test_python_function_that_crashes_is_an_error_receipt(
    functions: Path, name: str, expected: str
) -> None:
    result = run_python(functions, name, {})
    assert result.status == "error" and expected in result.payload["message"]
    if name == "crashes":
        assert "about to die" in result.payload["stderr"]


def test_python_function_errors_of_configuration(functions: Path) -> None:
    missing = run_python(functions, "nowhere", {})
    assert missing.status == "error" and missing.payload["type"] == "AttributeError"
    unjsonable = run_python(functions, "unjsonable", {})
    assert unjsonable.status == "error" and unjsonable.payload["type"] == "TypeError"
    options = PythonOptions(functions={"demo/other@1": "fns:double"}, module_paths=[functions])
    unmapped = PythonFunctionEffect(options)({}, lease())
    assert unmapped.status == "error" and "no function" in unmapped.payload["message"]
    for bad in (
        {"functions": {}},
        {"functions": {"*": "no_colon"}},
        {"functions": {"*": "m:f"}, "module_paths": [functions / "absent"]},
        {"functions": {"*": "m:f"}, "timeout_s": 0},
    ):
        with pytest.raises(AdapterConfigInvalidError):
            PythonOptions(**bad)
    assert parse_functions(["m:f", "demo/x@1=n:g"]) == {"*": "m:f", "demo/x@1": "n:g"}


def test_python_through_the_sdk(functions: Path) -> None:
    node = FakeNode()
    intent = node.add(4, params={"n": 4})
    options = PythonOptions(functions={EFFECT: "fns:double"}, module_paths=[functions])
    with make_adapter(node) as adapter:
        adapter.effect(EFFECT)(PythonFunctionEffect(options))
        [outcome] = adapter.run_once()
    assert outcome.settled
    assert node.settled[intent]["payload"]["n"] == 8
    assert json.dumps(node.receipts[0]["body"]["payload"], default=str)
