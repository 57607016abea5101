"""The node's request bounds in process (spec/04 §9.8, §10): the write rate per caller
(kernel/node/rate.py), a proposal's body held to its media type's limit and its CBOR values
counted before it is decoded (kernel/node/proposal_body.py), and the transport's arithmetic
(kernel/node/transport.py). Each refusal changes nothing. The same bounds against a real
`aos node up`: tests/test_node_bounds_process.py."""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest

from aos.kernel import cbor
from aos.kernel.node import NodeLimits
from aos.kernel.node.access import PRINCIPAL_KEY
from aos.kernel.node.errors import NodeConfigError
from aos.kernel.node.identities import ADAPTER, Principal
from aos.kernel.node.proposal_body import count_cbor_values
from aos.kernel.node.rate import TokenBuckets, caller_key
from aos.kernel.node.transport import (
    FILES_RESERVED,
    LISTEN_BACKLOG,
    effective_connections_max,
    raise_open_files_limit,
)
from tests.auth_fixtures import authorize
from tests.test_node import TestClient, create_app, make_world, open_node, send


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


# --------------------------------------------------------------------------------------------
# The write rate


def test_a_bucket_spends_its_burst_then_refills_at_its_rate() -> None:
    clock = Clock()
    buckets = TokenBuckets(rate_per_s=16, burst_max=3, clock=clock)
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == 1 / 16  # nothing spent: a sixteenth of a second to go
    assert buckets.take("b") == 0.0  # every caller has its own
    clock.now_s += 1 / 32
    assert buckets.take("a") == 1 / 32
    clock.now_s += 1 / 32
    assert buckets.take("a") == 0.0
    clock.now_s += 3600  # a quiet hour refills to the burst, no further
    assert [buckets.take("a") for _ in range(4)][-1] > 0


def test_buckets_are_kept_for_at_most_callers_max_callers() -> None:
    buckets = TokenBuckets(rate_per_s=1, burst_max=1, callers_max=2, clock=Clock())
    for caller in ("a", "b", "c"):
        buckets.take(caller)
    assert len(buckets) == 2
    assert buckets.take("a") == 0.0  # the longest idle was forgotten: a full bucket again
    assert buckets.take("c") > 0


def test_the_caller_is_the_identity_else_the_peer_address() -> None:
    peer = {"client": ("10.0.0.7", 5123)}
    assert caller_key(peer) == "peer:10.0.0.7"
    assert caller_key({"client": None}) == "-"
    alice = Principal("alice", frozenset({"read"}), kind="identity")
    assert caller_key({**peer, PRINCIPAL_KEY: alice}) == "identity:alice"
    forged = Principal("ops/adapter@1", frozenset({ADAPTER}), kind="adapter")
    assert caller_key({**peer, PRINCIPAL_KEY: forged}) == "peer:10.0.0.7"  # not yet proved


def test_writes_past_the_rate_are_429_with_retry_after_and_change_nothing(
    tmp_path: Path,
) -> None:
    limits = NodeLimits(write_rate_per_s=1, write_burst_max=2)
    with open_node(make_world(tmp_path / "w"), limits=limits) as node:
        client = authorize(TestClient(create_app(node)), node)
        send(client, "a")
        height = client.get("/v1/world").json()["height"]
        # The bucket holds two; at one a second, quick requests soon find it empty.
        answers = [client.post("/v1/events", json={"schema": "demo/Ping@1"}) for _ in range(5)]
        assert {a.status_code for a in answers} == {422, 429}
        refused = next(a for a in answers if a.status_code == 429)
        assert refused.json()["error"]["code"] == "request.rate_limited"
        assert refused.json()["error"]["detail"]["limit_name"] == "write_rate_per_s"
        assert int(refused.headers["retry-after"]) >= 1
        for _ in range(5):  # reads are not rate limited
            assert client.get("/v1/world").json()["height"] == height


# --------------------------------------------------------------------------------------------
# Proposals


def test_a_json_proposal_is_held_to_request_bytes_max(tmp_path: Path) -> None:
    limits = NodeLimits(request_bytes_max=4096, proposal_bytes_max=1 << 20)
    with open_node(make_world(tmp_path / "w"), limits=limits) as node:
        client = authorize(TestClient(create_app(node)), node)
        height = client.get("/v1/world").json()["height"]
        body = b'{"patch": {"x": [' + b"1," * 4000 + b"1]}}"
        refused = client.post(
            "/v1/gov/proposals", content=body, headers={"content-type": "application/json"}
        )
        assert refused.status_code == 413
        assert refused.json()["error"]["detail"]["limit_name"] == "request_bytes_max"
        # The same size as CBOR is under proposal_bytes_max: read, then refused as no patch.
        as_cbor = client.post(
            "/v1/gov/proposals",
            content=cbor.encode({"patch": {"x": [1] * 4000}}),
            headers={"content-type": "application/cbor"},
        )
        assert as_cbor.status_code == 400 and as_cbor.json()["error"]["code"] == "gov.patch_invalid"
        assert client.get("/v1/world").json()["height"] == height


def test_a_cbor_proposal_of_too_many_values_is_refused_before_it_is_decoded(
    tmp_path: Path,
) -> None:
    limits = NodeLimits(proposal_values_max=1000)
    with open_node(make_world(tmp_path / "w"), limits=limits) as node:
        client = authorize(TestClient(create_app(node)), node)
        height = client.get("/v1/world").json()["height"]
        headers = {"content-type": "application/cbor"}
        # 1000 values exactly: the map, its key, the patch map, its key and 996 list items.
        edge = cbor.encode({"patch": {"x": [1] * 995}})
        assert count_cbor_values(edge, 1000) == 1000
        fits = client.post("/v1/gov/proposals", content=edge, headers=headers)
        assert fits.json()["error"]["code"] == "gov.patch_invalid"
        started = time.monotonic()
        bomb = cbor.encode({"patch": {"x": [1] * 996}})
        refused = client.post("/v1/gov/proposals", content=bomb, headers=headers)
        assert time.monotonic() - started < 1.0
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["code"] == "node.limit_exceeded" and error["detail"]["limit"] == 1000
        assert client.get("/v1/world").json()["height"] == height


def test_counting_cbor_values_skips_strings_and_stops_at_its_bound() -> None:
    value = {"patch": {"a": "x" * 10_000, "b": b"\x00" * 70_000, "c": [1.5, None, True, -3]}}
    assert count_cbor_values(cbor.encode(value), 100) == 13
    assert count_cbor_values(cbor.encode([0] * 10_000), 50) == 51  # stops one past
    assert count_cbor_values(b"\x9f\x01\xff", 10) == 0  # indefinite: the decoder says why
    assert count_cbor_values(b"\x5a\xff\xff\xff\xff", 10) == 1  # a string longer than the data


# --------------------------------------------------------------------------------------------
# The transport


def test_the_connection_cap_leaves_room_below_the_file_limit() -> None:
    assert effective_connections_max(10_000, 1_000_000) == 10_000
    assert effective_connections_max(10_000, 4096) == 4096 - LISTEN_BACKLOG - FILES_RESERVED
    assert effective_connections_max(10_000, 100) == 1
    assert effective_connections_max(10_000, resource.RLIM_INFINITY) == 10_000


def test_the_open_files_limit_is_raised_to_its_hard_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        assert raise_open_files_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize(
    "field", ["header_timeout_ms", "header_bytes_max", "connections_max", "write_rate_per_s"]
)
def test_transport_limits_are_positive(field: str) -> None:
    with pytest.raises(NodeConfigError):
        NodeLimits(**{field: 0})
