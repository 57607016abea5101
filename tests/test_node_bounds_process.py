"""The node's transport bounds against a real `aos node up` (spec/04 §9.8), each an attack of
issue 31: a 60 MB JSON proposal is 413 within a second and the node's resident memory hardly
moves; 5,000 half-open request heads leave a normal client answered within a second and are
closed at the head timeout; past the connection cap the oldest half-open sockets are closed;
an endless head is 431; bodies over request_bytes_max wait their turn; the node lifts its own
open-files limit; a YAML bomb and a templated shell command sent to deploy are refused; an
idle connection is closed at `idle_connection_s`, never before aos's clients let go of it."""

from __future__ import annotations

import contextlib
import json
import re
import resource
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aos.flows.serve.flow_world import create_flow_world
from aos.kernel.client import NodeConnection
from aos.kernel.node.errors import NodeConfigError
from aos.kernel.node.limits import (
    CLIENT_IDLE_CONNECTION_S,
    IDLE_CONNECTION_S_MAX,
    IDLE_CONNECTION_S_MIN,
    NodeLimits,
)
from aos.kernel.signing.request_auth import HEADER_ADAPTER, HEADER_SIGNATURE
from tests.auth_fixtures import admin_headers, node_http
from tests.flows_tools.test_shell_check import INJECTED
from tests.test_node_process import ADAPTER, make_world, node_process
from tests.test_yamltext import laughs

ANSWER_WITHIN_S = 1.0
HALF_OPEN = 5000
HEAD_TIMEOUT_MS = 8000
"""Long enough that the sockets are all open, and the node idle, while a normal client asks:
closing thousands at once is a burst of work for the node, which is not what is measured."""
HALF_HEAD = b"GET /v1/world HTTP/1.1\r\nHost: node\r\nX-Slow: "


# --------------------------------------------------------------------------------------------
# Helpers


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def reset_peak_rss(pid: int) -> None:
    """Linux: writing 5 to clear_refs resets the process's peak resident size (VmHWM)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def open_files(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def host_port(url: str) -> tuple[str, int]:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    return host, int(port)


def timed_get(url: str) -> tuple[float, int]:
    started = time.monotonic()
    status = node_http.get(f"{url}/v1/world", timeout=30).status_code
    return time.monotonic() - started, status


@contextlib.contextmanager
def files_for(count: int) -> Iterator[None]:
    """This process's open-files soft limit raised for `count` more sockets (the node inherits
    it too); restored after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = count + 1024
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise AssertionError(f"the test needs {needed} open files; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.contextmanager
def half_open(url: str, count: int) -> Iterator[list[socket.socket]]:
    """`count` sockets, each having sent half a request head and nothing more."""
    address = host_port(url)
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(address, timeout=10)
            sock.sendall(HALF_HEAD)
            sockets.append(sock)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def accepted(pid: int, count: int, timeout_s: float = 30.0) -> None:
    """Wait until the node holds `count` more descriptors (it accepted the sockets)."""
    deadline = time.monotonic() + timeout_s
    while open_files(pid) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def closed_by_peer(sockets: list[socket.socket], timeout_s: float) -> int:
    """How many of `sockets` the node closed (they read end-of-file) within `timeout_s`."""
    pending = {sock.fileno(): sock for sock in sockets}
    closed = 0
    poller = select.poll()
    for fd in pending:
        poller.register(fd, select.POLLIN | select.POLLHUP)
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        for fd, _ in poller.poll(max(0, int((deadline - time.monotonic()) * 1000))):
            sock = pending.pop(fd, None)
            if sock is None:
                continue
            poller.unregister(fd)
            try:
                closed += sock.recv(1) == b""
            except OSError:  # reset: closed with our bytes unread
                closed += 1
    return closed


# --------------------------------------------------------------------------------------------
# Bodies


def test_a_60_mb_json_proposal_is_413_within_a_second_and_costs_no_memory(tmp_path: Path) -> None:
    body = b'{"patch": {"x": [' + b"1," * 30_000_000 + b"1]}}"
    with node_process(make_world(tmp_path / "w")) as (url, process):
        height = node_http.get(f"{url}/v1/world").json()["height"]
        before_kb = rss_kb(process.pid)
        reset_peak_rss(process.pid)
        started = time.monotonic()
        answer = node_http.post(
            f"{url}/v1/gov/proposals",
            content=body,
            headers={"content-type": "application/json"},
            timeout=60,
        )
        took_s = time.monotonic() - started
        grew_kb = rss_kb(process.pid, "VmHWM") - before_kb
        assert answer.status_code == 413, answer.text
        assert answer.json()["error"]["detail"]["limit_name"] == "request_bytes_max"
        assert took_s < ANSWER_WITHIN_S
        assert grew_kb < 100 * 1024
        # Without a Content-Length, the streaming cap refuses it as it arrives.
        chunks = (body[i : i + (1 << 20)] for i in range(0, len(body), 1 << 20))
        streamed = node_http.post(f"{url}/v1/gov/proposals", content=chunks, timeout=60)
        assert streamed.status_code == 413
        assert rss_kb(process.pid, "VmHWM") - before_kb < 100 * 1024
        assert node_http.get(f"{url}/v1/world").json()["height"] == height


def stalled_body(url: str, path: str, media_type: str, credentials: str) -> socket.socket:
    """A request over request_bytes_max whose body stops after a few bytes. It carries
    `credentials` (header lines): an anonymous one is refused before its body is read."""
    sock = socket.create_connection(host_port(url))
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: n\r\nContent-Type: {media_type}\r\n".encode()
        + credentials.encode()
        + b"Content-Length: 2000000\r\n\r\npartial"
    )
    return sock


def test_large_bodies_are_read_one_at_a_time_and_a_third_is_told_the_node_is_busy(
    tmp_path: Path,
) -> None:
    options = ["--large-bodies-max", "1", "--request-body-ms-max", "1000"]
    with node_process(make_world(tmp_path / "w"), *options) as (url, _):
        # The one turn for a body over request_bytes_max: a blob stalls in it until its body
        # times out (1 s), then a stalled proposal takes it for another second ...
        # (A blob's signature covers its body, so the route checks it once the body is in.)
        signed = f"{HEADER_ADAPTER}: {ADAPTER}\r\n{HEADER_SIGNATURE}: unchecked\r\n"
        first = stalled_body(url, "/v1/blobs", "application/octet-stream", signed)
        time.sleep(0.2)
        token = f"Authorization: {admin_headers(url)['authorization']}\r\n"
        second = stalled_body(url, "/v1/gov/proposals", "application/cbor", token)
        time.sleep(0.2)
        # ... so a third, waiting at most request_body_ms_max for a turn, is turned away.
        third = node_http.post(
            f"{url}/v1/gov/proposals",
            content=b"\xa0" * 2_000_000,
            headers={"content-type": "application/cbor"},
            timeout=30,
        )
        assert third.status_code == 503, third.text
        assert third.json()["error"]["code"] == "node.busy"
        for sock in (first, second):
            assert sock.recv(4096).startswith(b"HTTP/1.1 408 ")
            sock.close()
        assert timed_get(url)[1] == 200


# --------------------------------------------------------------------------------------------
# Heads and connections


def test_half_open_heads_starve_nobody_and_are_closed_at_the_head_timeout(
    tmp_path: Path,
) -> None:
    options = ["--header-timeout-ms", str(HEAD_TIMEOUT_MS)]
    with (
        files_for(HALF_OPEN),
        node_process(make_world(tmp_path / "w"), *options) as (url, process),
        half_open(url, HALF_OPEN) as sockets,
    ):
        opened_at = time.monotonic()
        accepted(process.pid, HALF_OPEN)
        time.sleep(0.5)  # the node reads the last half heads
        for _ in range(3):
            took_s, status = timed_get(url)
            assert status == 200 and took_s < ANSWER_WITHIN_S
        left_s = HEAD_TIMEOUT_MS / 1000 - (time.monotonic() - opened_at)
        assert closed_by_peer(sockets, left_s + 5.0) == HALF_OPEN
        assert open_files(process.pid) < 100
        assert timed_get(url)[1] == 200


def test_past_the_connection_cap_the_oldest_half_open_sockets_are_closed(
    tmp_path: Path,
) -> None:
    cap = 500
    with (
        files_for(2000),
        node_process(make_world(tmp_path / "w"), "--connections-max", str(cap)) as (url, process),
        half_open(url, 2000) as sockets,
    ):
        assert closed_by_peer(sockets[:1000], 5.0) == 1000  # the oldest went first
        took_s, status = timed_get(url)
        assert status == 200 and took_s < ANSWER_WITHIN_S
        assert open_files(process.pid) < cap + 100


def test_an_endless_head_is_431(tmp_path: Path) -> None:
    with node_process(make_world(tmp_path / "w"), "--header-bytes-max", "4096") as (url, _):
        sock = socket.create_connection(host_port(url))
        sock.sendall(HALF_HEAD + b"x" * 8192)
        answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 431 ")
        assert b"request.header_too_large" in answer
        sock.close()
        # A head of the same size in bounds is served.
        big_but_fine = node_http.get(f"{url}/v1/world", headers={"X-Pad": "p" * 3000})
        assert big_but_fine.status_code == 200


def test_the_node_lifts_its_open_files_limit_to_the_hard_limit(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(512, hard), hard))
    restored = threading.Event()
    try:
        with node_process(make_world(tmp_path / "w")) as (_, process):
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            restored.set()
            limits = Path(f"/proc/{process.pid}/limits").read_text()
            [line] = [row for row in limits.splitlines() if row.startswith("Max open files")]
            node_soft, node_hard = line.split()[3:5]
            assert node_soft == node_hard == str(hard)
    finally:
        if not restored.is_set():
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# --------------------------------------------------------------------------------------------
# Flow documents a node is asked to deploy


def test_a_yaml_bomb_and_a_templated_shell_command_are_refused_by_a_node(
    tmp_path: Path,
) -> None:
    world_path = tmp_path / "w"
    world, _ = create_flow_world(world_path, keys_dir=tmp_path / "w.keys", sync=False)
    world.close()
    with node_process(world_path) as (url, _):
        height = node_http.get(f"{url}/v1/world").json()["height"]
        started = time.monotonic()
        bomb = node_http.post(f"{url}/v1/flows", json={"text": laughs(), "source": "bomb.yaml"})
        assert time.monotonic() - started < ANSWER_WITHIN_S
        assert bomb.status_code == 400, bomb.text
        refused = bomb.json()["error"]
        assert refused["code"] == "flow.invalid" and "yaml_nodes_max" in json.dumps(refused)
        injected = node_http.post(f"{url}/v1/flows", json={"text": INJECTED, "source": "i.yaml"})
        assert injected.status_code == 400, injected.text
        assert "flow.shell_templated" in injected.text
        assert node_http.get(f"{url}/v1/world").json()["height"] == height


# --------------------------------------------------------------------------------------------
# Idle connections (keep-alive)


LATE_S = 5.0
"""How late the node's keep-alive timer may fire on a loaded machine."""


def whole_response(sock: socket.socket) -> bytes:
    """One response read to its last byte (by its content-length), nothing left unread."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(4096)
    head, body = answer.split(b"\r\n\r\n", 1)
    length = re.search(rb"(?i)content-length: *(\d+)", head)
    assert length is not None
    while len(body) < int(length.group(1)):
        body += sock.recv(4096)
    return head + b"\r\n\r\n" + body


def test_an_idle_connection_outlives_the_clients_expiry_and_closes_at_idle_connection_s(
    tmp_path: Path,
) -> None:
    idle_s = IDLE_CONNECTION_S_MIN
    options = ["--idle-connection-s", str(idle_s)]
    with node_process(make_world(tmp_path / "w"), *options) as (url, _):
        sock = socket.create_connection(host_port(url), timeout=10)
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: node\r\n\r\n")
        assert whole_response(sock).startswith(b"HTTP/1.1 200 ")
        answered = time.monotonic()
        # aos's clients let an idle connection go first, so none meets a socket being closed.
        assert closed_by_peer([sock], CLIENT_IDLE_CONNECTION_S + 0.1) == 0
        assert closed_by_peer([sock], idle_s + LATE_S) == 1  # late only on a busy machine
        assert idle_s - 0.2 <= time.monotonic() - answered <= idle_s + LATE_S
        sock.close()
        # A client that kept its connection past its expiry opens a new one, and is answered.
        connection = NodeConnection(url)
        assert connection.call("GET", "/v1/health")["status"]
        time.sleep(CLIENT_IDLE_CONNECTION_S + 0.2)
        assert connection.call("GET", "/v1/health")["status"]
        connection.close()


def test_an_idle_connection_limit_at_or_under_the_clients_expiry_is_refused() -> None:
    with pytest.raises(NodeConfigError, match="idle_connection_s must be at least 3"):
        NodeLimits(idle_connection_s=IDLE_CONNECTION_S_MIN - 1)
    with pytest.raises(NodeConfigError, match="idle_connection_s must be at most 3600"):
        NodeLimits(idle_connection_s=IDLE_CONNECTION_S_MAX + 1)
    assert CLIENT_IDLE_CONNECTION_S < IDLE_CONNECTION_S_MIN <= NodeLimits().idle_connection_s
