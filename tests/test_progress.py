"""Progress frames: an adapter's signed heartbeat on a held lease. It extends the lease, is
kept (the newest few per intent, in the node), never journaled, never seen by a workflow;
`GET /v1/intents/{intent}` and `aos world intent show` show it; `lease.progress(...)` in the
adapter SDK posts it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from aos.kernel.adapters.sdk import Adapter, AdapterProgressInvalidError, Lease, Result
from aos.kernel.node.progress import (
    PROGRESS_FRAMES_KEPT_MAX,
    PROGRESS_MESSAGE_CHARS_MAX,
    Frame,
    ProgressLog,
)
from aos.kernel.signing.signatures import sign_body
from tests.auth_fixtures import admin_headers
from tests.node_fixtures import (  # noqa: F401 (fixtures)
    client_fixture,
    node_fixture,
    world_path_fixture,
)
from tests.test_cli_world import run
from tests.test_node import TestClient, lease, make_world, send
from tests.test_node_process import node_process
from tests.test_receipts import ADAPTER_SEED, STRANGER_SEED
from tests.test_world import ping

ADAPTER = "demo/adapter@1"


def frame(
    client: TestClient,
    held: dict[str, Any],
    *,
    seed: bytes = ADAPTER_SEED,
    **changes: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "world": client.get("/v1/world").json()["world_id"],
        "intent": held["intent"],
        "adapter": ADAPTER,
        "lease_id": held["lease_id"],
        "fraction": 0.5,
        "message": "halfway",
        "at_ns": 7,
    }
    body.update(changes)
    return {"body": body, "signature": {"$bytes": sign_body(seed, body).hex()}}


def post(client: TestClient, lease_id: str, value: Any, code: int = 200) -> dict[str, Any]:
    response = client.post(f"/v1/leases/{lease_id}/progress", json=value)
    assert response.status_code == code, response.text
    return dict(response.json())


def test_a_frame_extends_the_lease_and_is_shown_but_changes_nothing(client: TestClient) -> None:
    send(client, "z", "effect", 1)
    [held] = lease(client)
    world = client.get("/v1/world").json()
    state = client.get("/v1/state/demo/keyed@1", params={"key": '"z"'}).json()
    time.sleep(0.01)
    answer = post(client, held["lease_id"], frame(client, held))
    assert answer["intent"] == held["intent"]
    assert answer["expires_unix_ms"] > held["expires_unix_ms"]
    shown = client.get(f"/v1/intents/{held['intent']}").json()
    assert shown["status"] == "open" and shown["record"]["effect"] == "demo/noop@1"
    [kept] = shown["progress"]
    assert kept["body"]["fraction"] == 0.5 and kept["body"]["message"] == "halfway"
    assert client.get("/v1/world").json()["height"] == world["height"]
    assert client.get("/v1/state/demo/keyed@1", params={"key": '"z"'}).json() == state


def test_only_the_newest_frames_are_kept(client: TestClient) -> None:
    send(client, "z", "effect", 1)
    [held] = lease(client)
    for n in range(PROGRESS_FRAMES_KEPT_MAX + 3):
        post(client, held["lease_id"], frame(client, held, message=f"step {n}", at_ns=n))
    frames = client.get(f"/v1/intents/{held['intent']}").json()["progress"]
    assert [f["body"]["at_ns"] for f in frames] == list(range(3, PROGRESS_FRAMES_KEPT_MAX + 3))


def test_bad_frames_are_refused_and_keep_nothing(client: TestClient) -> None:
    send(client, "z", "effect", 1)
    [held] = lease(client)
    lid = held["lease_id"]
    ok_message = "m" * PROGRESS_MESSAGE_CHARS_MAX
    post(client, lid, frame(client, held, message=ok_message, fraction=None))
    cases: list[tuple[dict[str, Any], int, str]] = [
        (frame(client, held, fraction=1.5), 400, "progress.invalid"),
        (frame(client, held, fraction=1), 400, "progress.invalid"),
        (frame(client, held, message=ok_message + "m"), 400, "progress.invalid"),
        (frame(client, held, lease_id="other"), 400, "progress.invalid"),
        (frame(client, held, world="blake3:" + "1" * 64), 400, "progress.invalid"),
        (frame(client, held, at_ns=-1), 400, "progress.invalid"),
        (frame(client, held, seed=STRANGER_SEED), 403, "progress.signature_invalid"),
        (frame(client, held, adapter="demo/stranger@1", seed=STRANGER_SEED), 403, ""),
        ({"body": {}, "signature": {"$bytes": "00"}}, 400, "progress.invalid"),
    ]
    for value, code, error in cases:
        answer = post(client, lid, value, code)
        assert not error or answer["error"]["code"] == error, value
    assert (
        post(client, "nolease", frame(client, held, lease_id="nolease"), 404)["error"]["code"]
        == "lease.unknown"
    )
    [kept] = client.get(f"/v1/intents/{held['intent']}").json()["progress"]
    assert kept["body"]["message"] == ok_message


def test_intent_lookups_name_closed_and_unknown_intents(client: TestClient) -> None:
    assert client.get("/v1/intents/nope").json()["error"]["code"] == "world.intent_invalid"
    missing = client.get("/v1/intents/blake3:" + "0" * 64)
    assert missing.status_code == 404


def test_the_log_is_bounded_in_intents_too() -> None:
    log = ProgressLog(frames_max=2, intents_max=2)
    for n in range(3):
        log.add(Frame({"intent": f"i{n}", "n": n}, b""))
    assert log.frames("i0") == [] and len(log.frames("i2")) == 1


def test_the_sdk_reports_progress_and_the_cli_shows_it(tmp_path: Path) -> None:
    world = make_world(tmp_path / "w")
    reported: list[bool] = []
    with (
        node_process(world) as (url, _),
        httpx.Client(base_url=url, timeout=30, headers=admin_headers(url)) as http,
    ):
        sent = http.post(
            "/v1/events", json={"schema": "demo/Ping@1", "value": ping("z", "effect", 1)}
        )
        assert sent.status_code == 200
        adapter = Adapter(name=ADAPTER, seed=ADAPTER_SEED, node=url)

        @adapter.effect("demo/noop@1")
        def work(params: Any, held: Lease) -> Result:
            reported.append(held.progress(0.25, "started"))
            reported.append(held.progress(1.0, "done"))
            with pytest.raises(AdapterProgressInvalidError):
                held.progress(2.0)
            return Result("ok", {"ok": True})

        [outcome] = adapter.run_once(wait_ms=1000)
        adapter.close()
        assert outcome.seq is not None and reported == [True, True]
        intent = outcome.lease.intent
        shown = http.get(f"/v1/intents/{intent}").json()
        assert shown["status"] == "settled"
        assert [f["body"]["message"] for f in shown["progress"]] == ["started", "done"]
        code, out, _ = run("world", "intent", "show", intent, world=world)
        assert code == 0 and "status    settled" in out
        assert "    25%  started  (demo/adapter@1" in out and "   100%  done" in out
        body = json.loads(run("world", "intent", "show", intent, "--json", world=world)[1])
        assert len(body["progress"]) == 2
    code, out, _ = run("world", "intent", "show", intent, world=world)
    assert code == 0 and "none serves it now" in out
