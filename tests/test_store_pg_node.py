"""`aos node up` serving a world whose store is on PostgreSQL (a real server and a real node
process): it serves events from the database, and once another writer takes the world its
next flush is fenced: the event is refused with `store.fenced` and nothing reaches the
journal. The other writer here ignores the owner registry (it bumps the epoch in SQL, as a
writer that does not honour leases would): the fence alone guards the data."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from aos.kernel.store.pg_store import open_pg_store
from aos.kernel.world_store import create_world
from tests.auth_fixtures import node_http
from tests.store_backends import world_id
from tests.test_node_process import node_process

COUNTER_C = Path(__file__).resolve().parent.parent / "manifests" / "counter-c"
COUNTER = "demo/CounterEvent@1"


def increment(key: str, by: int) -> dict[str, object]:
    return {"$tag": "Increment", "$value": {"id": key, "by": by}}


def test_a_node_serves_a_postgresql_world_until_another_writer_takes_it(
    pg_store_dsn: str, tmp_path: Path
) -> None:
    world = world_id(tmp_path)
    directory = tmp_path / "counter"
    create_world(
        directory, COUNTER_C, store_url=f"{pg_store_dsn}?world={world}", sync=False
    ).close()
    # A lease far longer than the test: the node does not notice the take by itself first.
    with node_process(directory, "--owner-lease-ms", "600000") as (url, process):
        sent = node_http.post(
            f"{url}/v1/events", json={"schema": COUNTER, "value": increment("a", 7)}
        )
        assert sent.status_code == 200, sent.text
        state = node_http.get(f"{url}/v1/state/demo/counter@1", params={"key": '"a"'}).json()
        assert state["state"]["count"] == 7
        with psycopg.connect(pg_store_dsn, autocommit=True) as conn:
            conn.execute("UPDATE aos_worlds SET epoch = epoch + 1 WHERE world = %s", (world,))
        with open_pg_store(pg_store_dsn, world, sync=False, readonly=True) as taker:
            head = taker.journal.head()
            refused = node_http.post(
                f"{url}/v1/events", json={"schema": COUNTER, "value": increment("a", 5)}
            )
            assert refused.status_code == 409
            assert json.loads(refused.text)["error"]["code"] == "store.fenced"
            assert taker.journal.head() == head
            assert process.poll() is None  # the node lives on, and stops cleanly below
