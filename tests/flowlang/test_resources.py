"""Resources `<uri>` through effects: a source feeds its content, a sink receives the input
(a local file inside the file tool's base, and a local HTTP server); the file tool refuses a
path that escapes its base."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from aos.cli.adapter_cmd import adapter_group
from aos.cli.main import main
from aos.flows.define import flowlang
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.local import LocalAdapters
from aos.flows.tools.file import FileToolError, parse_content, read_resource, write_resource
from aos.kernel.audit import replay
from aos.kernel.signing.keys import write_seed
from aos.kernel.signing.signatures import generate_seed
from tests.flows_world.support import FlowWorld, make_flow_world

ECHO = [{"name": name, "tool": {"kind": "echo"}} for name in "ABC"]


class _Store(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, Any]]] = []

    def do_GET(self) -> None:
        body = json.dumps([{"x": 1}, {"x": 2}]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self) -> None:
        length = int(self.headers["Content-Length"])
        _Store.received.append(("PUT", json.loads(self.rfile.read(length))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Store.received = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Store)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def flows(tmp_path: Path) -> Iterator[FlowWorld]:
    made = make_flow_world(tmp_path / "w")
    made.adapters = LocalAdapters(made.world, made.keys, file_base=tmp_path / "data")
    (tmp_path / "data").mkdir()
    try:
        yield made
    finally:
        made.world.close()


def run(flows: FlowWorld, text: str, exec_id: str) -> dict[str, Any]:
    definition = flowlang.load_flow(text, source=f"{exec_id}.flow", workbook=ECHO)
    ops.start(flows.world, ops.deploy(flows.world, definition).name, workload={}, exec_id=exec_id)
    flows.adapters.drain()
    return flows.state(exec_id)


def test_a_file_source_feeds_its_content_and_a_file_sink_receives_the_input(
    flows: FlowWorld, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    (data / "sequence.json").write_text('{"x":12,"y":24}\n{"x":3,"y":96}\n{"x":7,"y":12}\n')
    state = run(flows, "<sequence.json> → * A → <out/result.json>", "f1")
    assert state["status"] == "completed"
    expected = [{"x": 12, "y": 24}, {"x": 3, "y": 96}, {"x": 7, "y": 12}]
    assert state["engine"]["result"] == expected  # a sink passes its input on
    assert json.loads((data / "out" / "result.json").read_text()) == expected
    (data / "config.yaml").write_text("fruit: banana\n")
    state = run(flows, "<config.yaml> → ? `$[?(@.fruit='banana')]` A → * B", "f2")
    assert state["engine"]["result"] == [{"fruit": "banana"}]
    flows.world.close()
    replayed = CliRunner().invoke(
        main, ["world", "replay", "--verify", "--world", str(tmp_path / "w")]
    )
    assert replayed.exit_code == 0, replayed.output
    assert "ok: every record and the head match" in replayed.output


def test_an_escaping_path_fails_the_task_and_writes_nothing(
    flows: FlowWorld, tmp_path: Path
) -> None:
    state = run(flows, "A → <../outside.json>", "f3")
    assert state["status"] == "failed"
    assert not (tmp_path / "outside.json").exists()
    failed = [e for e in flows.events("f3") if e["event"] == "task.failed"]
    assert failed and failed[0]["error"]["code"] == "file.escape"


def test_an_http_source_and_sink(flows: FlowWorld, server: str, tmp_path: Path) -> None:
    text = f"<{server}/items.json> → * A → <{server}/store>(- method: PUT -)"
    state = run(flows, text, "h1")
    assert state["status"] == "completed", flows.events("h1")
    assert state["engine"]["result"] == [{"x": 1}, {"x": 2}]
    assert _Store.received == [("PUT", [{"x": 1}, {"x": 2}])]
    flows.world.close()
    report = replay.verify_replay(tmp_path / "w")
    assert report.ok, report.divergence


def test_the_file_tool_reads_by_content_within_bounds(tmp_path: Path) -> None:
    assert parse_content('\x1e{"a":1}\n\x1e{"a":2}\n', "s", 100) == [{"a": 1}, {"a": 2}]
    assert parse_content('{"a": [1, 2]}', "s", 100) == {"a": [1, 2]}
    assert parse_content("- 1\n- 2\n", "s", 100) == [1, 2]
    (tmp_path / "f.json").write_text('{"a": 1}')
    assert read_resource(tmp_path, "f.json", bytes_max=8) == {"a": 1}
    with pytest.raises(FileToolError, match="limit is 7"):
        read_resource(tmp_path, "f.json", bytes_max=7)
    with pytest.raises(FileToolError) as raised:
        write_resource(tmp_path, "g.json", {"a": "x" * 10}, bytes_max=10)
    assert raised.value.code == "file.too_large" and not (tmp_path / "g.json").exists()
    for bad in ("/etc/passwd", "../x", "a/../../x", "", None):
        with pytest.raises(FileToolError):
            read_resource(tmp_path, bad)
    (tmp_path / "link").symlink_to("/etc")
    with pytest.raises(FileToolError, match="outside"):
        read_resource(tmp_path, "link/hostname")
    with pytest.raises(FileToolError, match="no base"):
        read_resource(None, "f.json")


@pytest.mark.parametrize(
    "args",
    [
        ["tool-file"],  # --file-base is required
        ["tool-http", "--file-base", "."],  # and only for tool-file
    ],
)
def test_the_file_adapter_needs_its_base(args: list[str], tmp_path: Path) -> None:
    key = tmp_path / "k.key"
    write_seed(key, generate_seed())
    where = ["--node", "http://127.0.0.1:9", "--key", str(key)]
    result = CliRunner().invoke(adapter_group, ["run", *args, *where])
    assert result.exit_code == 2, result.output
    assert "--file-base" in result.output
