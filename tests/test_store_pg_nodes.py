"""Many nodes on one PostgreSQL database (spec/07 §11.5), with real `aos node up` processes
and a real server: two nodes serve two worlds and answer where each is served; a live owner
refuses a second writer (its epoch, head and journal unchanged) and one-shot CLI writes go
through it; a node killed with SIGKILL is taken over by `aos node up --takeover` on another
process at the same height, and an adapter started against the first node follows the world
to the second with every intent settled exactly once.

Leases are short here (`--owner-lease-ms 1000`) so that takeovers are quick."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from aos.cli.main import main
from aos.kernel.node.identities import IDENTITIES_FILE_NAME
from aos.kernel.signing.keys import write_seed
from aos.kernel.store import pg_owner
from aos.kernel.store.errors import StoreOwnedError
from aos.kernel.store.limits import OWNER_LEASE_MS_MIN
from aos.kernel.store.pg_store import PgStore, open_pg_store
from aos.kernel.store.url import write_store_url
from aos.kernel.world_store import create_world
from tests.auth_fixtures import admin_headers, admin_token, announced, node_http, remember_node
from tests.pg_cluster import free_port
from tests.store_backends import world_id
from tests.test_node_process import _AOS, _readline, make_world, node_process
from tests.test_receipts import ADAPTER_SEED
from tests.test_world import COUNTER_C, SCRIPTED, ping

AOS = _AOS
LEASE_MS = "1000"
START_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 120.0
COUNTER = "demo/CounterEvent@1"
ADAPTER = "demo/adapter@1"


def increment(key: str, by: int) -> dict[str, object]:
    return {"$tag": "Increment", "$value": {"id": key, "by": by}}


def pg_world(dsn: str, directory: Path, manifest: Path = COUNTER_C) -> str:
    """A new world on the server, `directory` pointing at it; its id in the database."""
    world = world_id(directory)
    create_world(directory, manifest, store_url=f"{dsn}?world={world}", sync=False).close()
    return world


def second_directory(dsn: str, world: str, directory: Path) -> Path:
    """Another directory (as on another machine) pointing at the same server world."""
    directory.mkdir(parents=True)
    write_store_url(directory, f"{dsn}?world={world}")
    return directory


def row_of(dsn: str, world: str) -> tuple[int, int, list[bytes]]:
    """The world's epoch, head and journal as the database holds them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT epoch, head FROM aos_worlds WHERE world = %s", (world,))
        epoch, head = found.fetchone() or (None, None)
        journal = conn.execute(
            "SELECT record FROM aos_journal WHERE world = %s ORDER BY seq", (world,)
        ).fetchall()
    return int(epoch), int(head), [bytes(r[0]) for r in journal]


def node_command(directory: Path, *options: str) -> list[str]:
    command = [*AOS, "node", "up", "--world", str(directory), "--no-sync", "--json"]
    return [*command, "--owner-lease-ms", LEASE_MS, *options]


@contextmanager
def killable_node(directory: Path, *options: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`aos node up` that the test may SIGKILL; stopped (SIGTERM, then SIGKILL) at the end."""
    options = options if "--bind" in options else (*options, "--bind", "127.0.0.1:0")
    with announced_process(node_command(directory, *options)) as (announced, process):
        yield str(announced["url"]), process


@contextmanager
def announced_process(
    command: list[str],
) -> Iterator[tuple[dict[str, Any], subprocess.Popen[str]]]:
    """A process whose first line of output is a JSON announcement (`aos node up --json`);
    stopped (SIGTERM, then SIGKILL) at the end unless it is gone already."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        found = json.loads(_readline(process, START_TIMEOUT_S))
        with announced(found):
            yield found, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def refused_node(directory: Path, *options: str) -> dict[str, Any]:
    """Run `aos node up` expecting it to refuse the world; its error."""
    done = subprocess.run(
        node_command(directory, "--bind", "127.0.0.1:0", *options),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    error: dict[str, Any] = json.loads(done.stdout)["error"]
    return error


def where(node_url: str, world: str) -> dict[str, Any]:
    answer = node_http.get(f"{node_url}/v1/worlds/{world}/node", timeout=30)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def test_two_nodes_on_one_database_serve_two_worlds_and_say_where_each_is(
    pg_store_dsn: str, tmp_path: Path
) -> None:
    first = pg_world(pg_store_dsn, tmp_path / "one")
    second = pg_world(pg_store_dsn, tmp_path / "two")
    with (
        node_process(tmp_path / "one", "--owner-lease-ms", LEASE_MS) as (one, _),
        node_process(tmp_path / "two", "--owner-lease-ms", LEASE_MS) as (two, _),
    ):
        for url, by in ((one, 3), (two, 4)):
            sent = node_http.post(
                f"{url}/v1/events", json={"schema": COUNTER, "value": increment("a", by)}
            )
            assert sent.status_code == 200, sent.text
        counts = [
            node_http.get(f"{url}/v1/state/demo/counter@1", params={"key": '"a"'}).json()
            for url in (one, two)
        ]
        assert [c["state"]["count"] for c in counts] == [3, 4]
        kernel_id = node_http.get(f"{two}/v1/world").json()["world_id"]
        # Either node answers for both worlds, by database key or by kernel world id.
        for asked in (one, two):
            assert where(asked, first)["url"] == one
            assert where(asked, second)["url"] == two
            assert where(asked, kernel_id)["url"] == two
            assert where(asked, second)["live"] is True
        unknown = where(one, "no-such-world")
        assert unknown["url"] is None and unknown["live"] is False
    # Stopped nodes give their worlds up: nobody is registered, so any node may take them.
    with psycopg.connect(pg_store_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT count(*) FROM aos_owners WHERE world IN (%s, %s)", (first, second)
        ).fetchone()
    assert rows == (0,)


def test_a_live_owner_refuses_every_other_writer_and_cli_writes_go_through_it(
    pg_store_dsn: str, tmp_path: Path
) -> None:
    world = pg_world(pg_store_dsn, tmp_path / "a")
    elsewhere = second_directory(pg_store_dsn, world, tmp_path / "b")
    with node_process(tmp_path / "a", "--owner-lease-ms", LEASE_MS) as (url, _):
        sent = node_http.post(
            f"{url}/v1/events", json={"schema": COUNTER, "value": increment("a", 1)}
        )
        assert sent.status_code == 200, sent.text
        before = row_of(pg_store_dsn, world)
        with pytest.raises(StoreOwnedError) as caught:
            open_pg_store(pg_store_dsn, world, sync=False)
        assert caught.value.detail["node_url"] == url
        assert caught.value.detail["live"] is True
        assert refused_node(elsewhere)["code"] == "store.owned"
        # A takeover waits at most one lease for a live owner, then refuses too.
        refused = refused_node(elsewhere, "--takeover")
        assert refused["code"] == "store.owned" and refused["detail"]["live"] is True
        assert row_of(pg_store_dsn, world) == before
        # A one-shot write from the other directory finds the node in the registry.
        done = subprocess.run(
            [*AOS, "world", "send", COUNTER, "--world", str(elsewhere), "--json",
             "--value-json", json.dumps(increment("a", 10))],
            capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (done.stdout, done.stderr)
        state = node_http.get(f"{url}/v1/state/demo/counter@1", params={"key": '"a"'}).json()
        assert state["state"]["count"] == 11
        epoch, head, _ = row_of(pg_store_dsn, world)
        assert epoch == before[0] and head > before[1]


FUNCTIONS = """
def answer(params):
    return {"ok": True}
"""


def test_a_killed_node_is_taken_over_and_the_adapter_follows_the_world(
    pg_store_dsn: str, tmp_path: Path, module_folder: Path
) -> None:
    world = pg_world(pg_store_dsn, tmp_path / "a", SCRIPTED)
    elsewhere = second_directory(pg_store_dsn, world, tmp_path / "b")
    key = tmp_path / "adapter.key"
    write_seed(key, ADAPTER_SEED)
    (module_folder / "fns.py").write_text(FUNCTIONS)
    port = free_port()
    second_url = f"http://127.0.0.1:{port}"
    # The nodes of one PostgreSQL world share its identities (spec/04 §9.8): the first
    # node makes the first admin there, whose token the second node then accepts.
    door = ("--identities", str(tmp_path / "identities.json"))
    with killable_node(tmp_path / "a", *door) as (first_url, first):
        adapter = subprocess.Popen(
            [*AOS, "adapter", "run", "python", "--node", first_url, "--node", second_url,
             "--key", str(key), "--name", ADAPTER, "--effect", "demo/noop@1",
             "--function", "fns:answer", "--module-path", str(module_folder), "--retries", "40",
             "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            send_pings(first_url, "before", 3)
            settled(first_url)
            height = node_http.get(f"{first_url}/v1/world").json()["height"]
            # Intents opened just before the kill: the adapter settles them on the new node.
            send_pings(first_url, "around", 3)
            first.send_signal(signal.SIGKILL)
            first.wait()
            _, killed_at, journal_at_kill = row_of(pg_store_dsn, world)
            assert killed_at >= height
            # Registered to another node: a node without --takeover refuses it, and makes
            # nobody at its door (no first admin whose token no one would see).
            assert refused_node(elsewhere)["code"] == "store.owned"
            assert not (elsewhere / IDENTITIES_FILE_NAME).exists()
            remember_node(second_url, admin_token(first_url))
            with killable_node(elsewhere, "--takeover", "--bind", f"127.0.0.1:{port}", *door) as (
                url,
                second,
            ):
                assert url == second_url
                send_pings(url, "after", 3)
                records = settled(url)
                assert second.poll() is None
            assert adapter.poll() is None  # it followed; it did not give up
        finally:
            adapter.send_signal(signal.SIGTERM)
            _, adapter_err = adapter.communicate(timeout=START_TIMEOUT_S)
    assert "following it" in adapter_err
    # The new node continued the journal the killed one left, record for record.
    _, head, journal = row_of(pg_store_dsn, world)
    assert head > killed_at and journal[:killed_at] == journal_at_kill
    intents = [r["record"]["intent"] for r in records if r["record"]["kind"] == "effect_intent"]
    receipts = [r["record"]["intent"] for r in records if r["record"]["kind"] == "effect_receipt"]
    assert len(intents) == 3 * 3 * 2
    assert sorted(receipts) == sorted(intents)  # every intent settled, exactly once
    counts = [r["record"] for r in records if r["record"]["kind"] == "effect_receipt"]
    assert all(r["body"]["adapter"] == ADAPTER for r in counts)


def send_pings(url: str, prefix: str, keys: int) -> None:
    for n in range(keys):
        value = ping(f"{prefix}-{n}", "effect", 2)
        sent = node_http.post(f"{url}/v1/events", json={"schema": "demo/Ping@1", "value": value})
        assert sent.status_code == 200, sent.text


def settled(url: str) -> list[dict[str, Any]]:
    """Wait until no intent is open (the adapter settled them all); the whole journal."""
    with httpx.Client(base_url=url, timeout=30, headers=admin_headers(url)) as http:
        deadline = SETTLE_TIMEOUT_S * 10
        for _ in range(int(deadline)):
            if http.get("/v1/world").json()["open_intents"] == 0:
                break
            time.sleep(0.1)
        assert http.get("/v1/world").json()["open_intents"] == 0
        found: list[dict[str, Any]] = []
        while True:
            page = http.get("/v1/journal", params={"from": len(found) + 1, "limit": 1000})
            records = page.json()["records"]
            if not records:
                return found
            found += records


def test_a_node_whose_world_was_taken_stops_serving_it(pg_store_dsn: str, tmp_path: Path) -> None:
    world = pg_world(pg_store_dsn, tmp_path / "a")
    with killable_node(tmp_path / "a") as (url, process):
        before = where(url, world)
        # Paused past its lease (a partition, a stalled VM), then taken over ...
        taker = take_while_paused(process, pg_store_dsn, world)
        try:
            # ... it finds out at its next renewal and stops, saying why.
            assert process.wait(timeout=START_TIMEOUT_S) == 1
            error = json.loads(process.stdout.read())["error"]  # type: ignore[union-attr]
            assert error["code"] == "store.lease_lost"
            assert taker.epoch > before["epoch"]
        finally:
            taker.close()
    owner = pg_owner.lookup(pg_store_dsn, world)
    assert owner is not None and owner.node_id == "taker"  # the stopped node removed nothing


def take_while_paused(process: subprocess.Popen[str], dsn: str, world: str) -> PgStore:
    """Pause the node process past its lease, take `world` as node "taker", resume it."""
    process.send_signal(signal.SIGSTOP)
    try:
        claim = pg_owner.OwnerClaim("taker", lease_ms=int(LEASE_MS), takeover=True)
        pg_owner.wait_for_lapse(dsn, world, claim)
        pg_owner.serve_as(world, claim)
        return open_pg_store(dsn, world, sync=False)
    finally:
        pg_owner.stop_serving(world)
        process.send_signal(signal.SIGCONT)


def test_a_node_on_an_embedded_world_answers_for_its_own_world_only(tmp_path: Path) -> None:
    with node_process(make_world(tmp_path / "w")) as (url, _):
        kernel_id = node_http.get(f"{url}/v1/world").json()["world_id"]
        own = where(url, kernel_id)
        assert own["url"] == url and own["live"] is True
        assert where(url, "another")["url"] is None


def test_owner_lease_ms_below_its_minimum_is_bad_usage(tmp_path: Path) -> None:
    low = str(OWNER_LEASE_MS_MIN - 1)
    result = CliRunner().invoke(
        main, ["node", "up", "--world", str(tmp_path), "--owner-lease-ms", low]
    )
    assert result.exit_code == 2 and "owner-lease-ms" in result.output
