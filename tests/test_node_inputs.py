"""Bounded input handling at the node (issue 16, item 4): deep or duplicate-key JSON is a typed
400 before any handler runs, and a stalled body is timed out; none of it changes the world."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from aos.kernel.node.app import create_app
from tests.auth_fixtures import admin_headers, authorize, node_http
from tests.test_node import KEYED, make_world, open_node
from tests.test_node_process import node_process


def world_view(client: TestClient) -> tuple[Any, Any]:
    return client.get("/v1/world").json(), client.get("/v1/journal").json()


def read_until_closed(connection: socket.socket) -> str:
    """The whole answer: the node closes the connection after a refusal it sent early."""
    chunks = []
    while chunk := connection.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks).decode()


def event_body(value_text: str) -> bytes:
    return ('{"schema": "demo/Ping@1", "value": ' + value_text + "}").encode()


@pytest.mark.parametrize("depth", [63, 500, 980, 5_000])
def test_deep_json_is_refused_before_any_handler(tmp_path: Path, depth: int) -> None:
    with open_node(make_world(tmp_path / "w")) as node:
        client = authorize(TestClient(create_app(node)), node)
        before = world_view(client)
        deep = event_body(
            '{"id": "k", "n": 1, "action": "none", "x": ' + "[" * depth + "]" * depth + "}"
        )
        answer = client.post(
            "/v1/events", content=deep, headers={"content-type": "application/json"}
        )
        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "input.json_too_deep"
        assert world_view(client) == before


def test_duplicate_keys_and_constants_are_refused(tmp_path: Path) -> None:
    with open_node(make_world(tmp_path / "w")) as node:
        client = authorize(TestClient(create_app(node)), node)
        before = world_view(client)
        for value in ('{"id": "k", "id": "j", "n": 1, "action": "none"}', '{"id": "k", "n": NaN}'):
            answer = client.post("/v1/events", content=event_body(value))
            assert answer.status_code == 400
            assert answer.json()["error"]["code"] == "input.invalid_json"
        assert world_view(client) == before
        ok = client.post(
            "/v1/events",
            json={"schema": "demo/Ping@1", "value": {"id": "k", "n": 1, "action": "none"}},
        )
        assert ok.status_code == 200


def test_a_deep_cell_key_in_a_query_is_refused(tmp_path: Path) -> None:
    with open_node(make_world(tmp_path / "w")) as node:
        client = authorize(TestClient(create_app(node)), node)
        answer = client.get(f"/v1/state/{KEYED}", params={"key": "[" * 70 + "]" * 70})
        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "input.json_too_deep"


def test_a_stalled_body_is_timed_out_and_the_node_keeps_serving(tmp_path: Path) -> None:
    world = make_world(tmp_path / "w")
    with node_process(world, "--request-body-ms-max", "300") as (url, _):
        address = urlsplit(url)
        before = node_http.get(f"{url}/v1/world").json()
        stalled = []
        # Authorized, so the body is read (an unauthenticated one is refused before it).
        token = admin_headers(url)["authorization"].encode()
        for _ in range(3):  # several half-sent requests at once
            connection = socket.create_connection((address.hostname, address.port), timeout=10)
            connection.sendall(
                b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Authorization: " + token + b"\r\n"
                b"Content-Length: 100\r\n\r\n" + b'{"schema": '
            )
            stalled.append(connection)
        started = time.monotonic()
        for connection in stalled:
            answer = read_until_closed(connection)
            assert answer.startswith("HTTP/1.1 408"), answer
            assert json.loads(answer.split("\r\n\r\n", 1)[1])["error"]["code"] == "request.timeout"
            connection.close()
        assert time.monotonic() - started < 5
        assert node_http.get(f"{url}/v1/world").json() == before


def test_the_cli_refuses_deep_json_without_a_traceback(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from aos.cli.main import main
    from aos.kernel.world.world import World
    from tests.test_world import journal_bytes

    deep = "[" * 1_000 + "]" * 1_000
    result = CliRunner().invoke(main, ["cbor", "encode", deep])
    assert result.exit_code == 1 and result.stderr.startswith("error[input.json_too_deep]")
    world = make_world(tmp_path / "w")
    with World.open(world) as opened:
        before = journal_bytes(opened)
    value = '{"id": "k", "n": 1, "action": ' + deep + "}"
    result = CliRunner().invoke(
        main, ["world", "send", "demo/Ping@1", "--value-json", value, "--world", str(world)]
    )
    assert result.exit_code == 1 and result.stderr.startswith("error[input.json_too_deep]")
    assert "Traceback" not in result.output + result.stderr
    with World.open(world) as opened:
        assert journal_bytes(opened) == before
