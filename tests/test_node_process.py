"""`aos node up` as a real process, driven over HTTP: concurrent keyed traffic with receipts
resuming exactly their origin cells, an adapter killed mid-lease, shutdown during a long-poll,
and the `aos task` commands against a live node."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner

from aos.cli.main import main
from aos.kernel import cbor
from aos.kernel.signing.keys import write_seed
from aos.kernel.signing.request_auth import AdapterAuth
from aos.kernel.signing.signatures import signed_receipt
from tests.auth_fixtures import admin_headers, announced, node_http
from tests.test_receipts import ADAPTER_SEED
from tests.test_world import SCRIPTED, create, ping, reopen

ADAPTER = "demo/adapter@1"
KEYED = "demo/keyed@1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
_AOS = [sys.executable, "-c", "from aos.cli.main import main; main()"]


@contextmanager
def node_process(world: Path, *options: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start `aos node up` on a free loopback port; yield its URL; stop it with SIGTERM and
    check it closed the world and exited 0."""
    command = [*_AOS, "node", "up", "--world", str(world), "--bind", "127.0.0.1:0"]
    command += ["--no-sync", "--json", *options]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = _readline(process, START_TIMEOUT_S)
        found = json.loads(line)
        with announced(found):
            yield str(found["url"]), process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        stderr = process.stderr.read() if process.stderr else ""
        assert code == 0, stderr


def _readline(process: subprocess.Popen[str], timeout_s: float) -> str:
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(process.stdout.readline()))  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout_s)
    if not found or not found[0]:
        process.kill()
        stderr = process.stderr.read() if process.stderr else ""
        raise AssertionError(f"the process printed nothing: {stderr}")
    return found[0]


def make_world(path: Path) -> Path:
    create(path, SCRIPTED).close()
    return path


def adapter_http(url: str) -> httpx.Client:
    """A client that signs its requests as ADAPTER (kernel/signing/request_auth.py)."""
    world_id = httpx.get(f"{url}/v1/health").json()["world_id"]  # public: what adapters sign for
    auth = AdapterAuth(ADAPTER, ADAPTER_SEED, world_id)  # its events go with the admin's token
    return httpx.Client(base_url=url, timeout=30, auth=auth, headers=admin_headers(url))


def receipt(world_id: str, intent: str) -> Any:
    body = {
        "world": world_id,
        "intent": intent,
        "status": "ok",
        "payload": {"ok": True},
        "adapter": ADAPTER,
        "started_ns": 1,
        "finished_ns": 2,
    }
    return {"receipt": cbor.to_json(signed_receipt(ADAPTER_SEED, body))}


def lease(http: httpx.Client, count: int = 10, wait_ms: int = 0) -> list[dict[str, Any]]:
    response = http.post("/v1/leases", json={"adapter": ADAPTER, "max": count, "wait_ms": wait_ms})
    assert response.status_code == 200, response.text
    return list(response.json()["leases"])


def settle(http: httpx.Client, world_id: str, intent: str) -> dict[str, Any]:
    response = http.post("/v1/receipts", json=receipt(world_id, intent))
    assert response.status_code == 200, response.text
    return dict(response.json())


def whole_journal(http: httpx.Client) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while True:
        page = http.get("/v1/journal", params={"from": len(found) + 1, "limit": 1000}).json()
        found += page["records"]
        if not page["records"]:
            return found


def test_receipts_resume_exactly_their_origin_cells_under_concurrent_traffic(
    tmp_path: Path,
) -> None:
    keys = [f"k{i}" for i in range(6)]
    rounds, effects = 4, 2
    with node_process(make_world(tmp_path / "w")) as (url, _):
        world_id = node_http.get(f"{url}/v1/world").json()["world_id"]
        failures: list[BaseException] = []

        def client_of(key: str) -> None:
            try:
                with adapter_http(url) as http:
                    for _ in range(rounds):
                        sent = http.post(
                            "/v1/events",
                            json={"schema": "demo/Ping@1", "value": ping(key, "effect", effects)},
                        )
                        assert sent.status_code == 200, sent.text
                        # Settle whatever this thread is handed, whichever cell it is for.
                        for leased in lease(http, count=3, wait_ms=100):
                            settle(http, world_id, leased["intent"])
            except BaseException as error:
                failures.append(error)

        threads = [threading.Thread(target=client_of, args=(key,)) for key in keys]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not failures, failures
        with adapter_http(url) as http:
            for _ in range(100):
                leases = lease(http, count=50)
                if not leases:
                    break
                for leased in leases:
                    settle(http, world_id, leased["intent"])
            assert http.get("/v1/world").json()["open_intents"] == 0
            records = whole_journal(http)
            states = {
                key: http.get(f"/v1/state/{KEYED}", params={"key": json.dumps(key)}).json()
                for key in keys
            }
    origins = {
        r["record"]["intent"]: r["record"]["origin"]
        for r in records
        if r["record"]["kind"] == "effect_intent"
    }
    receipts = {
        r["seq"]: r["record"]["intent"] for r in records if r["record"]["kind"] == "effect_receipt"
    }
    assert len(origins) == len(keys) * rounds * effects
    assert sorted(receipts.values()) == sorted(origins)  # each intent settled exactly once
    steps_by_input: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        if r["record"]["kind"] in ("step", "step_fault", "delivery_dropped"):
            steps_by_input.setdefault(r["record"]["input"], []).append(r["record"])
    for seq, intent in receipts.items():
        [step] = steps_by_input[seq]  # delivered once, to one cell ...
        assert step["kind"] == "step"
        origin = origins[intent]
        assert (step["workflow"], step["key"]) == (origin["workflow"], origin["key"])  # ... its own
    for key, state in states.items():
        assert state["state"]["count"] == rounds * (1 + effects), key
        last = cbor.decode(bytes.fromhex(state["state"]["last_value"]["$bytes"]))
        assert last["$value"]["origin_key"] == cbor.encode(key)


ADAPTER_SCRIPT = """
import json, sys, time, httpx
from tests.test_node_process import adapter_http
response = adapter_http(sys.argv[1]).post(
    "/v1/leases",
    json={"adapter": "demo/adapter@1", "max": 1, "wait_ms": 20000},
    timeout=60,
)
print(json.dumps(response.json()), flush=True)
time.sleep(600)  # holds the lease until it is killed
"""


def test_an_intent_leased_by_a_killed_adapter_is_leased_again_and_settled_once(
    tmp_path: Path,
) -> None:
    with node_process(make_world(tmp_path / "w"), "--lease-ms", "1000") as (url, _):
        adapter = subprocess.Popen(
            [sys.executable, "-c", ADAPTER_SCRIPT, url], stdout=subprocess.PIPE, text=True
        )
        try:
            with adapter_http(url) as http:
                world_id = http.get("/v1/world").json()["world_id"]
                time.sleep(0.3)  # the adapter is long-polling by now, or soon will be
                http.post(
                    "/v1/events", json={"schema": "demo/Ping@1", "value": ping("x", "effect", 1)}
                )
                [held] = json.loads(_readline(adapter, 30))["leases"]
                adapter.send_signal(signal.SIGKILL)
                adapter.wait(timeout=10)
                assert lease(http) == []  # still held by the dead adapter's lease
                started = time.monotonic()
                [again] = lease(http, wait_ms=10_000)  # wakes when the lease expires
                assert again["intent"] == held["intent"]
                assert again["lease_id"] != held["lease_id"]
                assert time.monotonic() - started < 5
                first = settle(http, world_id, again["intent"])
                assert first["duplicate"] is False and first["delivered"] is True
                assert settle(http, world_id, again["intent"])["duplicate"] is True
                settled = [
                    r
                    for r in whole_journal(http)
                    if r["record"]["kind"] == "effect_receipt"
                    and r["record"]["intent"] == held["intent"]
                ]
                assert len(settled) == 1
                state = http.get(f"/v1/state/{KEYED}", params={"key": '"x"'}).json()
                assert state["state"]["count"] == 2 and state["status"] == "completed"
        finally:
            if adapter.poll() is None:
                adapter.kill()
                adapter.wait()


def test_shutdown_during_a_long_poll_is_prompt_and_closes_the_world(tmp_path: Path) -> None:
    path = make_world(tmp_path / "w")
    answers: list[Any] = []
    with node_process(path) as (url, process):

        def poll() -> None:
            try:
                answers.append(lease(adapter_http(url), wait_ms=20_000))
            except httpx.HTTPError as error:
                answers.append(error)

        poller = threading.Thread(target=poll)
        poller.start()
        time.sleep(0.5)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=STOP_TIMEOUT_S)
        poller.join(timeout=STOP_TIMEOUT_S)
        assert time.monotonic() - started < 5
    assert answers == [[]]
    with reopen(path) as world:  # the node let go of the world
        assert world.height == 1


def test_task_commands_against_a_live_node(tmp_path: Path) -> None:
    key_file = tmp_path / "human.key"
    write_seed(key_file, ADAPTER_SEED)
    options = ["--human-adapter", ADAPTER, "--human-key", str(key_file)]
    runner = CliRunner()
    with node_process(make_world(tmp_path / "w"), *options) as (url, _):
        node_http.post(
            f"{url}/v1/events", json={"schema": "demo/Ping@1", "value": ping("x", "effect", 1)}
        )
        listed = runner.invoke(main, ["task", "ls", "--node", url, "--json"])
        assert listed.exit_code == 0, listed.output
        [task] = json.loads(listed.output)["tasks"]
        table = runner.invoke(main, ["task", "ls", "--node", url])
        assert task["intent"] in table.output and "demo/keyed@1[x]" in table.output
        shown = runner.invoke(main, ["task", "show", task["intent"], "--node", url])
        assert shown.exit_code == 0 and '"n": 0' in shown.output
        done = runner.invoke(
            main,
            ["task", "complete", task["intent"], "--payload-json", '{"ok": true}', "--node", url],
        )
        assert done.exit_code == 0, done.output
        assert json.loads(runner.invoke(main, ["task", "ls", "--node", url, "--json"]).output) == {
            "adapter": ADAPTER,
            "tasks": [],
        }
        again = runner.invoke(main, ["task", "complete", task["intent"], "--node", url, "--json"])
        assert again.exit_code == 1
        assert json.loads(again.output)["error"]["code"] == "node.task_unknown"
        state = node_http.get(f"{url}/v1/state/{KEYED}", params={"key": '"x"'}).json()
        assert state["state"]["count"] == 2
    unreachable = runner.invoke(main, ["task", "ls", "--node", url, "--json"])
    assert unreachable.exit_code == 1
    assert json.loads(unreachable.output)["error"]["code"] == "node.unreachable"


def test_node_up_refuses_a_missing_world_and_a_bad_bind(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["node", "up", "--world", str(tmp_path / "none"), "--json"])
    assert missing.exit_code == 1
    assert json.loads(missing.output)["error"]["code"] == "world.missing"
    bad = runner.invoke(main, ["node", "up", "--world", str(tmp_path), "--bind", "nope", "--json"])
    assert bad.exit_code == 1
    assert json.loads(bad.output)["error"]["code"] == "node.config_invalid"
    halves = runner.invoke(main, ["node", "up", "--human-adapter", ADAPTER])
    assert halves.exit_code == 2
