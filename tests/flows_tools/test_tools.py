"""The flow tool adapters (`flows/tools/dispatch.py`, spec/11-flows.md §1.2, §3.3, §7).

Each handler in process: echo; http against a real HTTP server on loopback (JSON, text and
binary bodies, status errors and their kinds, timeouts, refused connections, size limits);
python in a child process (allowlist, raising, crashing, hanging). Results over the call's
`result_inline_bytes_max` go to `put_blob` as `{"$ref", "size"}`. Then each kind as a real
`aos adapter run tool-KIND --once` process against a real `aos node up`, settling an intent of
a small probe world (`fixtures/world`: the flow world's tool effects, no interpreter)."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner

from aos.cli.adapter_cmd import adapter_group
from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import (
    TOOL_EFFECTS,
    Renewer,
    handlers_for,
    make_adapter,
    renewing,
    run_tool,
)
from aos.flows.tools.outcomes import ToolOutcome
from aos.kernel import cbor
from aos.kernel.adapters.sdk import Adapter, AdapterConfigInvalidError, Lease, Result
from aos.kernel.hashing import hash_bytes
from aos.kernel.signing.keys import write_seed
from aos.kernel.signing.signatures import public_key_of, verify_body
from aos.kernel.world.world import World
from tests.auth_fixtures import node_http
from tests.test_node_process import _AOS, node_process

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PROBE_WORLD = FIXTURES / "world"
PY_FUNCTIONS = FIXTURES / "pyfns"
INTENT = "blake3:" + "ab" * 32
ECHO, HTTP, PYTHON = "aos/tool.echo@1", "aos/tool.http@1", "aos/tool.python@1"
# The probe world's adapter keys (fixtures/world/defs/workflows.yaml).
SEEDS = {"echo": bytes([0x11]) * 32, "http": bytes([0x22]) * 32, "python": bytes([0x33]) * 32}
PROBE = "test/ToolProbeCall@1"
PROBE_WORKFLOW = "test/ToolProbe@1"
PROCESS_TIMEOUT_S = 60.0


@dataclass
class Blobs:
    """A put_blob that keeps what it was given."""

    stored: dict[str, bytes] = field(default_factory=dict)
    refuse: bool = False

    def put(self, data: bytes) -> str:
        if self.refuse:
            raise AdapterConfigInvalidError("no room")
        key = str(hash_bytes(data))
        self.stored[key] = data
        return key


@pytest.fixture
def blobs() -> Blobs:
    return Blobs()


def context(blobs: Blobs, **overrides: Any) -> ToolContext:
    settings: dict[str, Any] = {
        "python_allow": ("flowtool_fns",),
        "python_paths": (PY_FUNCTIONS,),
        **overrides,
    }
    return ToolContext(intent=INTENT, put_blob=blobs.put, **settings)


def call(kind: str, args: Any = None, inline_max: int = 64 * 1024, **tool: Any) -> Any:
    return {
        "exec": "x-1",
        "step": "s",
        "task": "t",
        "attempt": 1,
        "tool": {"kind": kind, **tool},
        "args": args,
        "result_inline_bytes_max": inline_max,
    }


def run(effect: str, params: Any, ctx: ToolContext) -> ToolOutcome:
    outcome = run_tool(effect, params, context=ctx)
    cbor.encode(outcome.payload)  # every payload is plain data
    json.dumps(cbor.to_json(outcome.payload), allow_nan=False)
    return outcome


def error_of(outcome: ToolOutcome, status: str = "error") -> dict[str, Any]:
    assert outcome.status == status, outcome
    payload = cast(dict[str, Any], outcome.payload)
    assert {"kind", "code", "message", "retryable"} <= set(payload)
    assert len(cbor.encode(payload)) < 4096  # error payloads stay small
    return payload


# --------------------------------------------------------------------------------------------
# echo, params, results by reference


def test_echo_returns_args_unchanged(blobs: Blobs) -> None:
    args = {"n": 1, "list": [True, None, "x", -5, 2.5], "raw": b"\x00\xff", "map": {"a": {}}}
    assert run(ECHO, call("echo", args), context(blobs)) == ToolOutcome("ok", args)
    assert run(ECHO, call("echo", None), context(blobs)) == ToolOutcome("ok", None)
    assert not blobs.stored


def test_a_result_over_the_inline_limit_is_stored_and_named_by_hash(blobs: Blobs) -> None:
    args = {"rows": [f"row {n}" for n in range(200)]}
    data = cbor.encode(args)
    inline = run(ECHO, call("echo", args, inline_max=len(data)), context(blobs))
    assert inline == ToolOutcome("ok", args) and not blobs.stored
    outcome = run(ECHO, call("echo", args, inline_max=len(data) - 1), context(blobs))
    ref = str(hash_bytes(data))
    assert outcome == ToolOutcome("ok", {"$ref": ref, "size": len(data)})
    assert cbor.decode(blobs.stored[ref]) == args


def test_a_result_that_cannot_be_stored_is_a_retryable_error(blobs: Blobs) -> None:
    blobs.refuse = True
    error = error_of(run(ECHO, call("echo", "x" * 100, inline_max=10), context(blobs)))
    assert (error["code"], error["retryable"]) == ("tool.result_store", True)
    assert error["store_code"] == "adapter.config_invalid"


def test_malformed_calls_are_errors_not_exceptions(blobs: Blobs) -> None:
    ctx = context(blobs)
    assert error_of(run("aos/tool.ftp@1", call("ftp"), ctx))["code"] == "tool.unknown"
    for params in (
        "not a map",
        call("http"),  # the kind does not match the effect
        call("echo", color="red"),  # a field echo does not have
        {**call("echo"), "result_inline_bytes_max": -1},
    ):
        error = error_of(run(ECHO, params, ctx))
        assert (error["kind"], error["code"], error["retryable"]) == (
            "transport",
            "tool.invalid",
            False,
        )
    nan = run(ECHO, call("echo", {"x": float("nan")}), ctx)
    assert error_of(nan)["code"] == "tool.result_invalid"


def test_tool_context_checks_its_settings(tmp_path: Path) -> None:
    for bad in (
        {"python_allow": ("not a module",)},
        {"python_allow": ("",)},
        {"python_paths": (tmp_path / "absent",)},
        {"http_timeout_s_max": 0},
        {"python_timeout_s_max": 10**6},
        {"http_response_bytes_max": -1},
    ):
        with pytest.raises(AdapterConfigInvalidError):
            ToolContext(intent=INTENT, **bad)


# --------------------------------------------------------------------------------------------
# http


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:
        pass

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if url.path == "/echo":
            seen = {
                "method": self.command,
                "query": query,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode(),
            }
            self._send(200, json.dumps(seen).encode(), "application/json; charset=utf-8")
        elif url.path.startswith("/status/"):
            self._send(int(url.path[8:]), b'{"error": "nope"}', "application/json")
        elif url.path == "/slow":
            time.sleep(float(query["s"]))
            self._send(200, b"late", "text/plain")
        elif url.path == "/big":
            self._send(200, b"x" * int(query["n"]), "text/plain")
        elif url.path == "/binary":
            self._send(200, bytes(range(256)), "application/octet-stream")
        elif url.path == "/badjson":
            self._send(200, b"{not json", "application/json")
        elif url.path == "/nan":
            self._send(200, b'{"x": NaN}', "application/problem+json")
        else:
            self._send(404, b"no such page", "text/plain")

    def do_POST(self) -> None:
        self.do_GET()

    def do_PUT(self) -> None:
        self.do_GET()

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A test HTTP server on loopback (a request still sleeping at the end is abandoned)."""
    with ThreadingHTTPServer(("127.0.0.1", 0), _Handler) as httpd:
        httpd.daemon_threads, httpd.block_on_close = True, False
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
        httpd.shutdown()


def test_http_get_json(server: str, blobs: Blobs) -> None:
    params = call(
        "http", url=f"{server}/echo?a=1", query={"b": 2, "c": ["x", "y"]}, headers={"X-Tag": "t"}
    )
    outcome = run(HTTP, params, context(blobs))
    assert outcome.status == "ok"
    result = outcome.payload
    assert result["status"] == 200
    assert result["headers"]["content-type"] == "application/json; charset=utf-8"
    seen = result["json"]
    assert (seen["method"], seen["query"]) == ("GET", {"a": "1", "b": "2", "c": "x"})
    assert seen["headers"]["x-tag"] == "t"
    assert "idempotency-key" not in seen["headers"]  # a GET is idempotent by itself


def test_http_upstream_names_and_the_data_of_a_result(server: str, blobs: Blobs) -> None:
    params = call("http", endpoint=f"{server}/echo", params={"p": 1}, query={"q": 2})
    result = run(HTTP, params, context(blobs)).payload
    assert result["json"]["query"] == {"p": "1", "q": "2"}
    assert result["data"] == result["json"]
    assert result["http"] == {"status": 200, "headers": result["headers"]}
    both = call("http", endpoint=f"{server}/echo", url=f"{server}/echo")
    assert error_of(run(HTTP, both, context(blobs)))["code"] == "tool.invalid"


def test_http_post_sends_json_and_the_idempotency_key(server: str, blobs: Blobs) -> None:
    body = {"amount": 5, "raw": b"\x01"}
    tool: dict[str, Any] = {"method": "post", "url": f"{server}/echo", "json": body}
    tool["headers"] = {"Idempotency-Key": "mine"}  # replaced by the intent
    seen = run(HTTP, call("http", **tool), context(blobs)).payload["json"]
    assert seen["method"] == "POST" and seen["headers"]["idempotency-key"] == INTENT
    assert seen["headers"]["content-type"] == "application/json"
    assert json.loads(seen["body"]) == {"amount": 5, "raw": {"$bytes": "01"}}
    tool = {"method": "PUT", "url": f"{server}/echo", "body": "plain words"}
    seen = run(HTTP, call("http", **tool), context(blobs)).payload["json"]
    assert (seen["method"], seen["body"]) == ("PUT", "plain words")


def test_http_sends_a_body_map_as_json_as_noetl_does(server: str, blobs: Blobs) -> None:
    # NoETL's http tool sends a map `body` (or its `payload`) as JSON (`request.py`).
    for name in ("body", "payload"):
        tool = {"method": "POST", "url": f"{server}/echo", name: {"test": "x", "n": [1]}}
        outcome = run(HTTP, call("http", **tool), context(blobs))
        seen = outcome.payload["json"]
        assert seen["headers"]["content-type"] == "application/json"
        assert json.loads(seen["body"]) == {"test": "x", "n": [1]}
        # NoETL's result beside aos's: the status as `status_code`, the final `url`
        assert (outcome.payload["status_code"], outcome.payload["url"]) == (200, f"{server}/echo")


def test_http_bodies_as_json_text_or_bytes(server: str, blobs: Blobs) -> None:
    def result(path: str) -> dict[str, Any]:
        outcome = run(HTTP, call("http", url=server + path), context(blobs))
        assert outcome.status == "ok", outcome
        return cast(dict[str, Any], outcome.payload)

    assert result("/big?n=3")["text"] == "xxx"
    assert result("/binary")["body"] == bytes(range(256))
    assert result("/badjson")["text"] == "{not json"  # JSON by its type, but it does not parse
    assert result("/nan")["text"] == '{"x": NaN}'  # not plain data
    assert result("/status/200")["json"] == {"error": "nope"}


def test_http_status_errors_and_their_kinds(server: str, blobs: Blobs) -> None:
    expected = {  # the category, NoETL's kind (noetl/core/errors.py), retryable
        404: ("transport", "not_found", False),
        401: ("authorization", "auth", False),
        403: ("authorization", "auth", False),
        409: ("transport", "client_error", False),
        429: ("transport", "rate_limit", True),
        500: ("transport", "server_error", True),
        503: ("transport", "server_error", True),
    }
    for status, (kind, noetl_kind, retryable) in expected.items():
        outcome = run(HTTP, call("http", url=f"{server}/status/{status}"), context(blobs))
        error = error_of(outcome)
        assert (error["kind"], error["error_kind"], error["code"], error["retryable"]) == (
            kind,
            noetl_kind,
            "http.status",
            retryable,
        )
        assert error["http"]["status"] == status
        assert error["http"]["headers"]["content-type"] == "application/json"
        assert error["http"]["body"] == '{"error": "nope"}'
        assert f"HTTP {status}" in error["message"]
    accepted = call("http", url=f"{server}/status/404", expect=[200, 404])
    assert run(HTTP, accepted, context(blobs)).payload["status"] == 404
    refused = call("http", url=f"{server}/big?n=1", expect=[201])
    assert error_of(run(HTTP, refused, context(blobs)))["code"] == "http.status"


def test_http_timeout_is_a_timeout_outcome(server: str, blobs: Blobs) -> None:
    started = time.monotonic()
    outcome = run(HTTP, call("http", url=f"{server}/slow?s=1", timeout_ms=200), context(blobs))
    error = error_of(outcome, status="timeout")
    assert (error["kind"], error["code"], error["retryable"]) == ("timeout", "http.timeout", True)
    # A tool's timeout_ms is bounded by the adapter's maximum.
    bounded = context(blobs, http_timeout_s_max=0.2)
    outcome = run(HTTP, call("http", url=f"{server}/slow?s=1", timeout_ms=60_000), bounded)
    assert outcome.status == "timeout"
    assert time.monotonic() - started < 1.5


def test_http_refused_connection_is_a_retryable_transport_error(blobs: Blobs) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    error = error_of(run(HTTP, call("http", url=f"http://127.0.0.1:{port}/"), context(blobs)))
    assert (error["kind"], error["code"], error["retryable"]) == ("transport", "http.connect", True)


def test_http_response_size_limit_and_results_by_reference(server: str, blobs: Blobs) -> None:
    small = context(blobs, http_response_bytes_max=1000)
    error = error_of(run(HTTP, call("http", url=f"{server}/big?n=1001"), small))
    assert (error["code"], error["http"]["status"]) == ("http.too_large", 200)
    assert run(HTTP, call("http", url=f"{server}/big?n=1000"), small).status == "ok"
    outcome = run(HTTP, call("http", url=f"{server}/big?n=5000", inline_max=1024), context(blobs))
    ref = outcome.payload["$ref"]
    assert outcome.status == "ok" and set(outcome.payload) == {"$ref", "size"}
    stored = cast(dict[str, Any], cbor.decode(blobs.stored[ref]))
    assert stored["status"] == 200 and stored["text"] == "x" * 5000
    assert outcome.payload["size"] == len(blobs.stored[ref])


def test_http_invalid_requests(server: str, blobs: Blobs) -> None:
    for tool in (
        {"url": "ftp://example.org/"},
        {"url": f"{server}/", "method": "FETCH"},
        {"url": f"{server}/", "json": {}, "body": "x"},
        {"url": f"{server}/", "body": "x", "payload": {"a": 1}},
        {"url": f"{server}/", "data": {"a": 1}},  # refused by name, with the fields to use
        {"url": f"{server}/", "headers": ["x"]},
        {"url": f"{server}/", "timeout_ms": 0},
        {"url": f"{server}/", "expect": []},
        {"url": f"{server}/", "timeout": 5},  # not a field
    ):
        assert error_of(run(HTTP, call("http", **tool), context(blobs)))["code"] == "tool.invalid"


# --------------------------------------------------------------------------------------------
# python


def test_python_calls_an_allowed_function_with_the_args(blobs: Blobs) -> None:
    args = {"numbers": [1, 2, 3], "raw": b"\x02"}
    outcome = run(PYTHON, call("python", args, function="flowtool_fns:describe"), context(blobs))
    assert outcome == ToolOutcome("ok", {"args": args, "intent": INTENT})
    outcome = run(PYTHON, call("python", args, function="flowtool_fns:total"), context(blobs))
    assert outcome == ToolOutcome("ok", 6)


def test_python_refuses_modules_outside_the_allowlist(blobs: Blobs) -> None:
    for allow, function in (
        ((), "flowtool_fns:total"),  # nothing is allowed
        (("flowtool",), "flowtool_fns:total"),  # a prefix is a whole module name
        (("flowtool_fns",), "os:getcwd"),
    ):
        outcome = run(
            PYTHON, call("python", {}, function=function), context(blobs, python_allow=allow)
        )
        error = error_of(outcome)
        assert (error["kind"], error["code"]) == ("authorization", "python.not_allowed")
    allowed = context(blobs, python_allow=("json",))
    outcome = run(PYTHON, call("python", "[1]", function="json.decoder:scanstring"), allowed)
    assert error_of(outcome)["code"] == "python.raised"  # admitted: json is a prefix of it


def test_python_raising_crashing_and_invalid(blobs: Blobs) -> None:
    raised = run(PYTHON, call("python", {}, function="flowtool_fns:fail"), context(blobs))
    error = error_of(raised)
    assert (error["kind"], error["code"], error["retryable"]) == (
        "expression",
        "python.raised",
        False,
    )
    assert error["py"] == {"exception": "KeyError"} and "nothing" in error["message"]
    assert error["error_kind"] == "schema"  # NoETL's word for a KeyError
    crashed = error_of(
        run(PYTHON, call("python", {}, function="flowtool_fns:crash"), context(blobs))
    )
    assert crashed["code"] == "python.crashed" and crashed["py"]["exit_code"] == 7
    missing = run(PYTHON, call("python", {}, function="flowtool_fns:absent"), context(blobs))
    assert error_of(missing)["py"] == {"exception": "AttributeError"}
    for function in ("flowtool_fns", "flowtool_fns:", "bad name:f", None):
        outcome = run(PYTHON, call("python", {}, function=function), context(blobs))
        assert error_of(outcome)["code"] == "tool.invalid"


def test_python_timeout_kills_the_child(blobs: Blobs) -> None:
    started = time.monotonic()
    params = call("python", {"seconds": 30}, function="flowtool_fns:sleep", timeout_ms=300)
    error = error_of(run(PYTHON, params, context(blobs)), status="timeout")
    assert (error["kind"], error["code"], error["retryable"]) == ("timeout", "python.timeout", True)
    assert time.monotonic() - started < 10


# --------------------------------------------------------------------------------------------
# adapters: handlers, lease renewal, the CLI's options


def lease(effect: str, params: Any, expires_in_ms: int = 30_000) -> Lease:
    return Lease(
        lease_id="l-1",
        intent=INTENT,
        effect=effect,
        params=params,
        idempotency_key=INTENT,
        issuer_ref="w1",
        origin_workflow="aos/FlowExec@1",
        origin_key=None,
        expires_unix_ms=time.time_ns() // 1_000_000 + expires_in_ms,
    )


def test_handlers_use_the_lease_intent(blobs: Blobs) -> None:
    ctx = replace(context(blobs), intent="")
    [(effect, handler)] = handlers_for("python", ctx).items()
    assert effect == PYTHON and TOOL_EFFECTS[effect] == "aos/python@1"
    params = call("python", 1, function="flowtool_fns:describe")
    assert handler(params, lease(effect, params)) == Result("ok", {"args": 1, "intent": INTENT})
    with pytest.raises(AdapterConfigInvalidError):
        handlers_for("ftp", ctx)


def test_make_adapter_names_and_effects() -> None:
    with make_adapter("http", seed=SEEDS["http"], node="http://127.0.0.1:9") as adapter:
        assert (adapter.name, adapter.effects) == ("aos/http@1", [HTTP])
    with make_adapter("echo", seed=SEEDS["echo"], node="http://x:1", name="acme/echo@2") as other:
        assert (other.name, other.effects) == ("acme/echo@2", [ECHO])


class Renewals:
    """What the renewer calls in place of an adapter: it notes each renewal, and answers that
    the lease `revoked` was cancelled."""

    def __init__(self, revoked: str = "") -> None:
        self.renewed: list[str] = []
        self.revoked = revoked

    def renew(self, held: Lease) -> bool:
        self.renewed.append(held.lease_id)
        return held.lease_id != self.revoked


def test_a_running_call_keeps_its_lease() -> None:
    renewals = Renewals()
    renewed = renewals.renewed

    def slow(params: Any, held: Lease) -> Result:
        time.sleep(0.45)
        return Result("ok", params)

    handler = renewing(cast(Adapter, renewals), slow)
    assert handler(7, lease(ECHO, 7, expires_in_ms=300)) == Result("ok", 7)
    count = len(renewed)
    assert count >= 2  # every 0.1 s (a third of the 300 ms left)
    time.sleep(0.25)
    assert len(renewed) == count  # and no more once it returned


def test_calls_share_one_renewer_thread_and_each_keeps_its_own_lease() -> None:
    renewals = Renewals(revoked="cancelled")  # the node revoked that one
    renewed = renewals.renewed

    def slow(params: Any, held: Lease) -> Result:
        time.sleep(params)
        return Result("ok", params)

    handler = renewing(cast(Adapter, renewals), slow)
    before = threading.active_count()
    for _ in range(20):  # quick calls: no renewal, no thread each
        assert handler(0, lease(ECHO, 0)) == Result("ok", 0)
    assert threading.active_count() <= before + 1 and renewed == []
    calls = [
        threading.Thread(target=handler, args=(0.45, replace(lease(ECHO, 0, 300), lease_id=name)))
        for name in ("a", "b", "cancelled")
    ]
    for call in calls:
        call.start()
    for call in calls:
        call.join()
    assert renewed.count("a") >= 2 and renewed.count("b") >= 2
    assert renewed.count("cancelled") == 1  # revoked: never renewed again


def test_quick_calls_leave_the_renewer_thread_asleep() -> None:
    renewals = Renewals()
    renewed = renewals.renewed

    release = threading.Event()

    def work(params: Any, held: Lease) -> Result:
        if params == "wait":
            release.wait()
        elif params:
            time.sleep(params)
        return Result("ok", params)

    renewer = Renewer(cast(Adapter, renewals))
    handler = renewing(cast(Adapter, renewals), work, renewer)
    # A long call: its first renewal is due in 200 s, and the thread sleeps until then.
    running = threading.Thread(
        target=handler, args=("wait", replace(lease(ECHO, "wait", 600_000), lease_id="long"))
    )
    running.start()
    deadline = time.monotonic() + 30
    while not math.isfinite(renewer.wake_at) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert math.isfinite(renewer.wake_at)
    wakes = renewer.wakes
    for _ in range(50):  # each due after the thread's wake-up: none wakes it
        assert handler(0, lease(ECHO, 0, 600_000)) == Result("ok", 0)
    assert renewer.wakes == wakes and renewed == []
    # One due before it (a third of 300 ms) wakes it, and is renewed while it runs.
    assert handler(0.45, replace(lease(ECHO, 0.45, 300), lease_id="short")) == Result("ok", 0.45)
    assert renewer.wakes > wakes and renewed.count("short") >= 2 and "long" not in renewed
    release.set()
    running.join()


def test_a_call_context_is_the_context_with_its_intent(tmp_path: Path, blobs: Blobs) -> None:
    folder = tmp_path / "modules"
    folder.mkdir()
    ctx = context(blobs, python_paths=(folder,))
    folder.rmdir()  # checked when the context was made, not again for each call
    with pytest.raises(AdapterConfigInvalidError):
        replace(ctx, intent="blake3:" + "0" * 64)
    call_ctx = ctx.for_intent("blake3:" + "0" * 64)
    assert call_ctx.intent == "blake3:" + "0" * 64 and ctx.intent == INTENT
    assert {k: v for k, v in vars(call_ctx).items() if k != "intent"} == {
        k: v for k, v in vars(ctx).items() if k != "intent"
    }


@pytest.mark.parametrize(
    "args",
    [
        ["tool-echo", "--effect", "demo/x@1"],  # a tool adapter serves its own effect
        ["tool-echo", "--allow", "acme"],
        ["tool-http", "--allow", "acme"],
        ["tool-http", "--no-code"],
        ["tool-http", "--url-map", "a=http://b"],
        ["tool-python", "--function", "m:f"],
        ["http", "--allow", "acme"],
        ["http", "--effect", "demo/x@1"],  # http and python still need --name
        ["python", "--name", "demo/p@1", "--function", "m:f"],  # and --effect
    ],
)
def test_cli_kind_options(args: list[str], tmp_path: Path) -> None:
    key = tmp_path / "k.key"
    write_seed(key, SEEDS["echo"])
    where = ["--node", "http://127.0.0.1:9", "--key", str(key)]
    result = CliRunner().invoke(adapter_group, ["run", *args, *where])
    assert result.exit_code == 2, result.output


# --------------------------------------------------------------------------------------------
# adapter processes against a node


@dataclass
class Node:
    url: str
    keys: dict[str, Path]
    server: str


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, server: str) -> Iterator[Node]:
    root = tmp_path_factory.mktemp("tools-node")
    World.create(root / "world", PROBE_WORLD, sync=False).close()
    keys = {}
    for kind, seed in SEEDS.items():
        keys[kind] = root / f"{kind}.key"
        write_seed(keys[kind], seed)
    with node_process(root / "world") as (url, _):
        yield Node(url, keys, server)


def probe(
    node: Node, probe_id: str, kind: str, tool: dict[str, Any], args: Any, **more: Any
) -> None:
    value = {
        "id": probe_id,
        "effect": f"aos/tool.{kind}@1",
        "tool": {"kind": kind, **tool},
        "args": cbor.to_json(args),
        "result_inline_bytes_max": more.get("inline_max", 64 * 1024),
    }
    answer = node_http.post(
        f"{node.url}/v1/events", json={"schema": PROBE, "value": value}, timeout=30
    )
    assert answer.status_code == 200, answer.text


def state(node: Node, probe_id: str) -> dict[str, Any]:
    answer = node_http.get(
        f"{node.url}/v1/state/{PROBE_WORKFLOW}", params={"key": json.dumps(probe_id)}, timeout=30
    )
    return cast(dict[str, Any], cbor.from_json(answer.json()["state"]))


def run_adapter(node: Node, kind: str, *options: str) -> list[dict[str, Any]]:
    """`aos adapter run tool-KIND --once --json` as a process; its outcome lines."""
    command = [*_AOS, "adapter", "run", f"tool-{kind}", "--node", node.url]
    command += ["--key", str(node.keys[kind]), "--once", "--json", *options]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if '"intent"' in line]


def journaled_receipt(node: Node, intent: str) -> dict[str, Any]:
    answer = node_http.get(
        f"{node.url}/v1/journal", params={"kind": "effect_receipt", "limit": 1000}, timeout=30
    ).json()
    records = [cast(dict[str, Any], cbor.from_json(item["record"])) for item in answer["records"]]
    [record] = [r for r in records if r["body"]["intent"] == intent]
    return record


def settled(node: Node, kind: str, outcomes: list[dict[str, Any]], probe_id: str) -> Any:
    """The probe cell's receipt: ok, from the kind's adapter, journaled and signed."""
    cell = state(node, probe_id)
    assert (cell["status"], cell["adapter"]) == ("ok", f"aos/{kind}@1"), cell
    [outcome] = [o for o in outcomes if o["issuer_ref"] == probe_id]
    assert outcome["status"] == "ok" and outcome["seq"] is not None
    record = journaled_receipt(node, outcome["intent"])
    assert record["body"]["adapter"] == f"aos/{kind}@1"
    assert verify_body(public_key_of(SEEDS[kind]), record["body"], record["signature"])
    return cell["result"]


def test_echo_adapter_process_settles_intents(node: Node) -> None:
    big = {"rows": [f"row {n}" for n in range(100)]}
    probe(node, "e-small", "echo", {}, {"hello": [1, b"\x03"]})
    probe(node, "e-big", "echo", {}, big, inline_max=256)
    outcomes = run_adapter(node, "echo")
    assert len(outcomes) == 2
    assert settled(node, "echo", outcomes, "e-small") == {"hello": [1, b"\x03"]}
    data = cbor.encode(big)
    assert settled(node, "echo", outcomes, "e-big") == {
        "$ref": str(hash_bytes(data)),  # stored in the world's CAS through the node
        "size": len(data),
    }


def test_http_adapter_process_settles_an_intent(node: Node) -> None:
    probe(node, "h-1", "http", {"method": "POST", "url": f"{node.server}/echo", "json": [1]}, None)
    result = settled(node, "http", run_adapter(node, "http"), "h-1")
    assert result["status"] == 200
    assert result["json"]["method"] == "POST" and result["json"]["body"] == "[1]"
    assert result["json"]["headers"]["idempotency-key"].startswith("blake3:")


def test_python_adapter_process_settles_an_intent(node: Node) -> None:
    probe(node, "p-1", "python", {"function": "flowtool_fns:total"}, {"numbers": [4, 5]})
    options = ["--allow", "flowtool_fns", "--module-path", str(PY_FUNCTIONS)]
    assert settled(node, "python", run_adapter(node, "python", *options), "p-1") == 9


def test_python_code_adapter_process_reuses_one_worker(node: Node) -> None:
    code = "import os\nresult = {'pid': os.getpid(), 'twice': n * 2}"
    for number in (1, 2, 3):
        probe(node, f"c-{number}", "python", {"code": code}, {"n": number})
    command = [*_AOS, "adapter", "run", "tool-python", "--node", node.url, "--json"]
    command += ["--key", str(node.keys["python"]), "--concurrency", "1"]
    adapter = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + PROCESS_TIMEOUT_S
        while time.monotonic() < deadline:
            if all(state(node, f"c-{n}")["status"] == "ok" for n in (1, 2, 3)):
                break
            time.sleep(0.1)
    finally:
        adapter.terminate()
        output, _ = adapter.communicate(timeout=PROCESS_TIMEOUT_S)
    outcomes = [json.loads(line) for line in output.splitlines() if '"intent"' in line]
    results = [settled(node, "python", outcomes, f"c-{number}") for number in (1, 2, 3)]
    assert [r["twice"] for r in results] == [2, 4, 6]
    assert len({r["pid"] for r in results}) == 1  # one worker served every call in turn
