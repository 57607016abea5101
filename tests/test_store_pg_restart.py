"""The PostgreSQL store when its server restarts or is down: the commit a restart cuts off
fails with `store.unavailable` and leaves the store refusing batches; a reopen continues from
what is durable; a reader reconnects; opening waits (bounded) for a server that is starting;
`connect_wait_ms_max` at its edges. And `aos node up` rides out a restart: the request in
flight gets 503 `store.unavailable`, the node reopens its world and serves the next one.

These restart their server, so they have a cluster of their own (not the session's), and a
crash-safe one: the session's runs with `synchronous_commit` off, where an immediate restart
may lose commits that returned."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.kernel.audit.integrity import verify_integrity
from aos.kernel.audit.replay import verify_replay
from aos.kernel.store import StoreUnavailableError, StoreUsageError
from aos.kernel.store.pg_store import PgStore, open_pg_store
from aos.kernel.wasm import WasmEngine
from aos.kernel.world_store import create_world
from tests.auth_fixtures import node_http
from tests.pg_cluster import RESTART_MODES, PgCluster
from tests.store_backends import world_id
from tests.test_node_process import node_process
from tests.test_store_pg_node import COUNTER, COUNTER_C, increment

WAIT_MS_MAX = 60_000  # generous: a loaded machine may take seconds to start a server


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    with PgCluster.start(crash_safe=True) as started:
        yield started


def event(n: int) -> dict[str, Any]:
    return {"kind": "domain_event", "n": n}


def opened(cluster: PgCluster, world: str, **options: Any) -> PgStore:
    return open_pg_store(cluster.dsn(), world, connect_wait_ms_max=WAIT_MS_MAX, **options)


@pytest.mark.parametrize("mode", RESTART_MODES)
def test_a_restart_fails_the_next_commit_and_a_reopen_continues_from_the_durable_head(
    cluster: PgCluster, tmp_path: Path, mode: str
) -> None:
    world = world_id(tmp_path)
    with opened(cluster, world) as writer:
        writer.journal.append([event(1)])
        cluster.restart(mode)
        with pytest.raises(StoreUnavailableError):
            writer.journal.append([event(2)])
        with pytest.raises(StoreUnavailableError):
            writer.journal.append([event(2)])  # cut off: refused until reopened
    with opened(cluster, world) as again:
        assert list(again.journal.read()) == [(1, event(1))]
        again.journal.append([event(2)])
        assert again.journal.head() == 2


def test_a_reader_reconnects_after_a_restart(cluster: PgCluster, tmp_path: Path) -> None:
    world = world_id(tmp_path)
    with opened(cluster, world) as writer:
        writer.journal.append([event(1)])
    with opened(cluster, world, readonly=True) as reader:
        assert reader.journal.head() == 1
        cluster.restart("immediate")
        with pytest.raises(StoreUnavailableError):
            reader.journal.head()  # the lost connection surfaces once
        assert list(reader.journal.read()) == [(1, event(1))]


def test_opening_waits_for_a_server_that_is_starting(cluster: PgCluster, tmp_path: Path) -> None:
    world = world_id(tmp_path)
    cluster.stop_server()
    starter = threading.Thread(target=cluster.start_server)
    starter.start()
    try:
        with opened(cluster, world) as writer:  # refused until the server listens
            writer.journal.append([event(1)])
            assert writer.journal.head() == 1
    finally:
        starter.join()


@pytest.mark.parametrize("wait_ms_max", [0, 300])
def test_a_server_still_down_after_the_wait_is_unavailable(
    cluster: PgCluster, tmp_path: Path, wait_ms_max: int
) -> None:
    cluster.stop_server()
    try:
        with pytest.raises(StoreUnavailableError) as refused:
            open_pg_store(cluster.dsn(), world_id(tmp_path), connect_wait_ms_max=wait_ms_max)
        assert "connect" in refused.value.message
    finally:
        cluster.start_server()


@pytest.mark.parametrize(("wait_ms_max", "backoff_ms_max"), [(-1, 1_000), (1_000, 24)])
def test_connect_limits_below_their_floor_are_refused(
    cluster: PgCluster, tmp_path: Path, wait_ms_max: int, backoff_ms_max: int
) -> None:
    with pytest.raises(StoreUsageError):
        open_pg_store(
            cluster.dsn(),
            world_id(tmp_path),
            connect_wait_ms_max=wait_ms_max,
            connect_backoff_ms_max=backoff_ms_max,
        )


def test_a_node_answers_503_for_the_cut_off_event_and_serves_on_after_a_restart(
    cluster: PgCluster, tmp_path: Path
) -> None:
    world = world_id(tmp_path)
    directory = tmp_path / "counter"
    store_url = f"{cluster.dsn()}?world={world}"
    create_world(directory, COUNTER_C, store_url=store_url, sync=False).close()
    state_url = "/v1/state/demo/counter@1"
    with node_process(directory) as (url, _):
        sent = node_http.post(
            f"{url}/v1/events", json={"schema": COUNTER, "value": increment("a", 7)}
        )
        assert sent.status_code == 200, sent.text
        # Fast: a shutdown checkpoint keeps what the node committed with --no-sync
        # (`synchronous_commit` off), which an immediate restart may lose (spec/07 §11.2).
        cluster.restart("fast")
        cut = node_http.post(
            f"{url}/v1/events", json={"schema": COUNTER, "value": increment("a", 5)}
        )
        assert cut.status_code == 503, cut.text
        assert cut.json()["error"]["code"] == "store.unavailable"
        served = node_http.post(
            f"{url}/v1/events", json={"schema": COUNTER, "value": increment("a", 3)}
        )
        assert served.status_code == 200, served.text
        state = node_http.get(f"{url}{state_url}", params={"key": '"a"'}).json()
        # The cut-off event never reached the server (its connection was dead before BEGIN).
        assert state["state"]["count"] == 10
    verify_integrity(directory)
    assert verify_replay(directory, engine=WasmEngine()).ok
