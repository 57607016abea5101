"""Signed adapter requests (spec/10-adapters.md §2.1, issue 16 item 3): only an adapter of the
manifest, holding its key, leases, renews, reports progress, posts receipts and uploads blobs;
a forged, stale, replayed or borrowed request is refused with its own code and changes
nothing; refused receipts are journaled small and rate-limited per identity; `aos adapter run`
checks its key against the world before it leases anything."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aos.cli.main import main
from aos.kernel import cbor
from aos.kernel.adapters.sdk import (
    Adapter,
    AdapterEffectNotAllowedError,
    AdapterIdentityUnknownError,
    AdapterKeyMismatchError,
    Lease,
    Result,
)
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.node import Node, NodeLimits
from aos.kernel.node.app import create_app
from aos.kernel.signing.keys import write_seed
from aos.kernel.signing.request_auth import (
    AdapterAuth,
    AdapterClockSkewedError,
    AdapterNoncesFullError,
    AdapterRateLimitedError,
    AdapterReplayedError,
    AdapterUnauthenticatedError,
    RefusalLimiter,
    RequestVerifier,
    request_headers,
)
from aos.kernel.signing.signatures import public_key_of
from aos.kernel.store import open_store
from tests.auth_fixtures import authorize, node_http
from tests.node_fixtures import node_fixture, world_path_fixture  # noqa: F401 (fixtures)
from tests.test_node import (
    ADAPTER,
    TestClient,
    error_of,
    journal,
    lease,
    make_world,
    open_node,
    post_receipt,
    receipt,
    send,
    signed_client,
)
from tests.test_node_process import node_process
from tests.test_progress import frame
from tests.test_receipts import ADAPTER_SEED, STRANGER_SEED
from tests.test_world import ping

STRANGER = "demo/stranger@1"
EFFECT = "demo/noop@1"
WRONG_SEED = bytes(range(2, 34))  # no adapter's key
OCTETS = {"content-type": "application/octet-stream"}


@pytest.fixture
def client(node: Node) -> TestClient:
    return signed_client(node)


def unsigned(node: Node) -> TestClient:
    return authorize(TestClient(create_app(node)), node)


def now_ms() -> int:
    """The wall clock, as the node's verifier reads it."""
    return time.time_ns() // 1_000_000


def snapshot(client: TestClient) -> tuple[Any, Any]:
    """What a refused request must leave as it was: the journal and the lease counts."""
    world = client.get("/v1/world").json()
    return journal(client), (world["height"], world["leases"], world["open_intents"])


def lease_body() -> dict[str, Any]:
    return {"adapter": ADAPTER, "max": 10}


# --------------------------------------------------------------------------------------------
# Refusals over HTTP: each with its code, each changing nothing


def test_an_unsigned_client_leases_nothing_and_sees_no_params(
    node: Node, client: TestClient
) -> None:
    send(client, "x")
    before = snapshot(client)
    plain, bare = unsigned(node), TestClient(create_app(node))
    answer = plain.post("/v1/leases", json=lease_body())
    assert error_of(answer, 403)["code"] == "auth.forbidden"  # an identity's token: wrong key
    assert "params" not in answer.text
    for path, body in [("/v1/leases/abc/renew", {}), ("/v1/leases/abc/progress", {})]:
        assert error_of(plain.post(path, json=body), 403)["code"] == "auth.forbidden"
        assert error_of(bare.post(path, json=body), 401)["code"] == "auth.unauthenticated"
    assert snapshot(client) == before
    [leased] = lease(client)  # the adapter itself still gets it, params and all
    assert leased["params"] is not None


@pytest.mark.parametrize(
    ("name", "seed"),
    [(ADAPTER, WRONG_SEED), (ADAPTER, STRANGER_SEED), ("demo/nobody@1", WRONG_SEED)],
    ids=["wrong key", "another adapter's key", "unknown adapter"],
)
def test_a_request_signed_with_the_wrong_key_is_unauthenticated(
    node: Node, client: TestClient, name: str, seed: bytes
) -> None:
    send(client, "x")
    before = snapshot(client)
    forged = signed_client(node, name, seed)
    answer = forged.post("/v1/leases", json={**lease_body(), "adapter": name})
    assert error_of(answer, 401)["code"] == "adapter.unauthenticated"
    assert snapshot(client) == before


def test_a_signature_covers_the_body_the_route_and_the_world(
    node: Node, client: TestClient
) -> None:
    send(client, "x")
    before = snapshot(client)
    plain = unsigned(node)
    body = json.dumps(lease_body()).encode()
    at_ms = now_ms()
    cases = {
        "another body": request_headers(
            ADAPTER_SEED, world=node.world_id, adapter=ADAPTER, method="POST",
            target="/v1/leases", body=body + b" ", at_ms=at_ms,
        ),
        "another route": request_headers(
            ADAPTER_SEED, world=node.world_id, adapter=ADAPTER, method="POST",
            target="/v1/blobs", body=body, at_ms=at_ms,
        ),
        "another world": request_headers(
            ADAPTER_SEED, world="blake3:" + "1" * 64, adapter=ADAPTER, method="POST",
            target="/v1/leases", body=body, at_ms=at_ms,
        ),
    }  # fmt: skip
    for name, headers in cases.items():
        answer = plain.post(
            "/v1/leases", content=body, headers={**headers, "content-type": "application/json"}
        )
        assert error_of(answer, 401)["code"] == "adapter.unauthenticated", name
    assert snapshot(client) == before


def test_a_replayed_request_is_refused(node: Node, client: TestClient) -> None:
    send(client, "x", "effect", 2)
    body = json.dumps({**lease_body(), "max": 1}).encode()
    headers = request_headers(
        ADAPTER_SEED, world=node.world_id, adapter=ADAPTER, method="POST", target="/v1/leases",
        body=body, at_ms=now_ms(),
    )  # fmt: skip
    headers["content-type"] = "application/json"
    plain = unsigned(node)
    first = plain.post("/v1/leases", content=body, headers=headers)
    assert first.status_code == 200 and len(first.json()["leases"]) == 1
    before = snapshot(client)
    again = plain.post("/v1/leases", content=body, headers=headers)
    assert error_of(again, 409)["code"] == "adapter.replayed"
    assert snapshot(client) == before  # the second intent is still free


def test_a_stale_request_is_refused(node: Node, client: TestClient) -> None:
    send(client, "x")
    before = snapshot(client)
    skew = node.limits.adapter_request_skew_ms_max
    for offset in (-skew - 60_000, skew + 60_000):
        late = unsigned(node)
        late.auth = AdapterAuth(
            ADAPTER, ADAPTER_SEED, node.world_id, clock_ms=lambda o=offset: now_ms() + o
        )
        answer = late.post("/v1/leases", json=lease_body())
        error = error_of(answer, 401)
        assert error["code"] == "adapter.clock_skewed" and error["detail"]["limit"] == skew
    assert snapshot(client) == before


def test_an_adapter_acts_only_as_itself_and_on_its_own_leases(
    node: Node, client: TestClient
) -> None:
    send(client, "x")
    stranger = signed_client(node, STRANGER, STRANGER_SEED)
    as_other = stranger.post("/v1/leases", json=lease_body())
    assert error_of(as_other, 403)["code"] == "adapter.forbidden"
    [held] = lease(client)
    before = snapshot(client)
    renew = stranger.post(f"/v1/leases/{held['lease_id']}/renew", json={})
    assert error_of(renew, 403)["code"] == "adapter.forbidden"
    # A receipt naming ADAPTER, posted by STRANGER: refused before the world sees it.
    posted = post_receipt(stranger, receipt(node.world_id, held["intent"]))
    assert error_of(posted, 403)["code"] == "adapter.forbidden"
    assert snapshot(client) == before  # nothing journaled, the lease still held
    assert client.post(f"/v1/leases/{held['lease_id']}/renew", json={}).status_code == 200
    settled = post_receipt(client, receipt(node.world_id, held["intent"]))
    assert settled.status_code == 200 and settled.json()["delivered"] is True


def test_progress_on_another_adapters_lease_is_forbidden(node: Node, client: TestClient) -> None:
    send(client, "x")
    [held] = lease(client)
    before = snapshot(client)
    stranger = signed_client(node, STRANGER, STRANGER_SEED)
    # A valid frame of ADAPTER's, relayed by STRANGER: the signer is not the frame's adapter.
    answer = stranger.post(f"/v1/leases/{held['lease_id']}/progress", json=frame(client, held))
    assert error_of(answer, 403)["code"] == "adapter.forbidden"
    assert snapshot(client) == before
    assert client.get(f"/v1/intents/{held['intent']}").json()["progress"] == []


def test_blob_uploads_are_signed(node: Node, client: TestClient, world_path: Path) -> None:
    data = b"uploaded by nobody"
    refused = unsigned(node).post("/v1/blobs", content=data, headers=OCTETS)
    assert error_of(refused, 403)["code"] == "auth.forbidden"  # a token is not a signature
    bare = TestClient(create_app(node)).post("/v1/blobs", content=data, headers=OCTETS)
    assert error_of(bare, 401)["code"] == "auth.unauthenticated"
    kept = b"uploaded by the adapter"
    assert client.post("/v1/blobs", content=kept, headers=OCTETS).json()["hash"] == str(
        hash_bytes(kept)
    )
    node.close()
    with open_store(world_path, readonly=True) as store:
        assert not store.cas.has(Hash(str(hash_bytes(data))))
        assert store.cas.has(Hash(str(hash_bytes(kept))))


def test_the_adapters_endpoint_lists_public_keys_and_effects(client: TestClient) -> None:
    listed = {a["name"]: a for a in client.get("/v1/adapters").json()["adapters"]}
    assert listed[ADAPTER]["public_key"] == public_key_of(ADAPTER_SEED).hex()
    assert EFFECT in listed[ADAPTER]["effects"]
    assert listed[STRANGER]["effects"] == []


# --------------------------------------------------------------------------------------------
# Refused receipts: rate-limited per identity


def test_refused_receipts_past_the_budget_are_not_journaled(tmp_path: Path) -> None:
    limits = NodeLimits(adapter_receipt_refusals_max=2)
    with open_node(make_world(tmp_path / "w"), limits=limits) as node:
        client = signed_client(node)
        send(client, "x")
        [held] = lease(client)
        forged = receipt(node.world_id, held["intent"], seed=STRANGER_SEED)
        for _ in range(2):  # each refusal is journaled, small
            assert (
                error_of(post_receipt(client, forged), 403)["code"] == "receipt.signature_invalid"
            )
        before = snapshot(client)
        limited = post_receipt(client, forged)
        error = error_of(limited, 429)
        assert error["code"] == "adapter.rate_limited" and error["detail"]["limit"] == 2
        # Also a valid receipt of that identity waits for the window; nothing changed.
        assert error_of(post_receipt(client, receipt(node.world_id, held["intent"])), 429)
        assert snapshot(client) == before
        rejected = [r for r in journal(client) if r["record"]["kind"] == "receipt_rejected"]
        assert len(rejected) == 2
        assert set(rejected[0]["record"]["receipt"]) == {
            "digest", "bytes", "intent", "adapter", "status"
        }  # fmt: skip


def test_the_refusal_window_slides() -> None:
    now = [0]
    limiter = RefusalLimiter(refusals_max=2, window_ms=1000, clock_ms=lambda: now[0])
    limiter.refused("a")
    now[0] = 500
    limiter.refused("a")
    limiter.check("b")  # per identity
    with pytest.raises(AdapterRateLimitedError) as raised:
        limiter.check("a")
    assert raised.value.detail["retry_after_ms"] == 500
    now[0] = 1000  # the first refusal left the window
    limiter.check("a")
    limiter.refused("a")
    with pytest.raises(AdapterRateLimitedError):
        limiter.check("a")


# --------------------------------------------------------------------------------------------
# The verifier at its edges (a clock the test moves)


def _verifier(now: list[int], **limits: int) -> RequestVerifier:
    keys = {ADAPTER: public_key_of(ADAPTER_SEED)}
    return RequestVerifier(world=lambda: "w", keys=lambda: keys, clock_ms=lambda: now[0], **limits)


def _signed(at_ms: int, body: bytes = b"{}") -> dict[str, str]:
    return request_headers(
        ADAPTER_SEED, world="w", adapter=ADAPTER, method="POST", target="/v1/leases",
        body=body, at_ms=at_ms,
    )  # fmt: skip


def _verify(verifier: RequestVerifier, headers: dict[str, str]) -> str:
    return verifier.verify(method="POST", target="/v1/leases", body=b"{}", headers=headers)


def test_the_skew_window_edge() -> None:
    now = [1_000_000]
    verifier = _verifier(now, skew_ms_max=100)
    assert _verify(verifier, _signed(now[0] - 100)) == ADAPTER
    assert _verify(verifier, _signed(now[0] + 100)) == ADAPTER
    for at_ms in (now[0] - 101, now[0] + 101):
        with pytest.raises(AdapterClockSkewedError):
            _verify(verifier, _signed(at_ms))


def test_nonces_are_remembered_for_the_window_and_bounded() -> None:
    now = [1_000_000]
    verifier = _verifier(now, skew_ms_max=100, nonces_max=2)
    first = _signed(now[0])
    _verify(verifier, first)
    with pytest.raises(AdapterReplayedError):
        _verify(verifier, first)
    _verify(verifier, _signed(now[0]))
    with pytest.raises(AdapterNoncesFullError):
        _verify(verifier, _signed(now[0]))  # the third within the window
    assert verifier.nonces_of(ADAPTER) == 2
    now[0] += 101  # the first two left the window: forgotten, and refused as stale anyway
    with pytest.raises(AdapterClockSkewedError):
        _verify(verifier, first)
    _verify(verifier, _signed(now[0]))
    assert verifier.nonces_of(ADAPTER) == 1


def test_malformed_auth_headers_are_unauthenticated() -> None:
    now = [1_000_000]
    verifier = _verifier(now)
    good = _signed(now[0])
    bad = [
        {k: v for k, v in good.items() if k != "aos-nonce"},
        {**good, "aos-timestamp-ms": "-5"},
        {**good, "aos-nonce": "xyz"},
        {**good, "aos-signature": "00"},
        {**good, "aos-adapter": ""},
    ]
    for headers in bad:
        with pytest.raises(AdapterUnauthenticatedError):
            _verify(verifier, headers)
    assert verifier.nonces_of(ADAPTER) == 0


# --------------------------------------------------------------------------------------------
# The adapter checks its identity before it leases anything (a real node process)


def _noop(params: Any, lease: Lease) -> Result:
    return Result("ok", {"ok": True})


def test_the_sdk_refuses_to_start_with_a_wrong_identity(tmp_path: Path) -> None:
    with node_process(make_world(tmp_path / "w")) as (url, _):
        node_http.post(
            f"{url}/v1/events", json={"schema": "demo/Ping@1", "value": ping("x", "effect", 1)}
        )
        cases: list[tuple[str, bytes, str, type[Exception]]] = [
            (ADAPTER, WRONG_SEED, EFFECT, AdapterKeyMismatchError),
            ("demo/nobody@1", ADAPTER_SEED, EFFECT, AdapterIdentityUnknownError),
            (STRANGER, STRANGER_SEED, EFFECT, AdapterEffectNotAllowedError),
        ]
        for name, seed, effect, error in cases:
            with Adapter(name=name, seed=seed, node=url) as adapter:
                adapter.effect(effect)(_noop)
                with pytest.raises(error):
                    adapter.run_once()
        leases = node_http.get(f"{url}/v1/world").json()["leases"]
        assert leases == {"published": 1, "leased": 0}


def test_adapter_run_with_the_wrong_key_exits_before_leasing(tmp_path: Path) -> None:
    key_file = tmp_path / "wrong.key"
    write_seed(key_file, WRONG_SEED)
    with node_process(make_world(tmp_path / "w")) as (url, _):
        node_http.post(
            f"{url}/v1/events", json={"schema": "demo/Ping@1", "value": ping("x", "effect", 1)}
        )
        args = ["adapter", "run", "http", "--node", url, "--key", str(key_file)]
        args += ["--name", ADAPTER, "--effect", EFFECT, "--once", "--json"]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, result.output
        error = json.loads(result.stdout)["error"]
        assert error["code"] == "adapter.key_mismatch"
        assert error["detail"]["public_key"] == public_key_of(WRONG_SEED).hex()
        assert error["detail"]["expected"] == public_key_of(ADAPTER_SEED).hex()
        assert node_http.get(f"{url}/v1/world").json()["leases"] == {"published": 1, "leased": 0}
        journal_kinds = [
            r["record"]["kind"] for r in node_http.get(f"{url}/v1/journal").json()["records"]
        ]
        assert "receipt_rejected" not in journal_kinds and "effect_receipt" not in journal_kinds


def test_a_signed_request_survives_the_cbor_round_trip_of_the_receipt(
    node: Node, client: TestClient
) -> None:
    """A receipt sent as application/cbor is signed over its raw bytes like any body."""
    send(client, "x")
    [held] = lease(client)
    data = cbor.encode({"receipt": receipt(node.world_id, held["intent"])})
    answer = client.post("/v1/receipts", content=data, headers={"content-type": "application/cbor"})
    assert answer.status_code == 200 and answer.json()["delivered"] is True


def test_node_up_takes_the_auth_limits(tmp_path: Path) -> None:
    options = ["--adapter-request-skew-ms-max", "1000", "--adapter-receipt-refusals-max", "1"]
    with node_process(make_world(tmp_path / "w"), *options) as (url, _):
        world_id = node_http.get(f"{url}/v1/world").json()["world_id"]
        late = AdapterAuth(ADAPTER, ADAPTER_SEED, world_id, clock_ms=lambda: now_ms() - 5_000)
        answer = node_http.post(f"{url}/v1/leases", json=lease_body(), auth=late).json()
        assert answer["error"]["code"] == "adapter.clock_skewed"
        assert answer["error"]["detail"]["limit"] == 1000
        signed = AdapterAuth(ADAPTER, ADAPTER_SEED, world_id)
        bogus = {"receipt": cbor.to_json(receipt(world_id, "blake3:" + "0" * 64))}
        first = node_http.post(f"{url}/v1/receipts", json=bogus, auth=signed).json()
        assert first["error"]["code"] == "receipt.unknown_intent"
        second = node_http.post(f"{url}/v1/receipts", json=bogus, auth=signed).json()
        assert second["error"]["code"] == "adapter.rate_limited"
