"""The owner registry of PostgreSQL worlds (kernel/store/pg_owner.py, spec/07 §11.5) in
process, against a real server: who may take a world while its owner's lease is live or
lapsed, what a refusal leaves unchanged, renewal and its loss, and the adapter's route that
follows a world (kernel/adapters/sdk.py `NodeRoute`) over a real HTTP transport layer.

A lapse is made by moving `lease_until` into the past in SQL (the database's clock is the one
that judges leases), so no test waits for one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from aos.kernel.adapters.sdk import NodeClient, NodeRoute, RetryPolicy
from aos.kernel.store import pg_owner
from aos.kernel.store.errors import StoreError, StoreOwnedError, StoreUsageError
from aos.kernel.store.limits import OWNER_LEASE_MS_MIN
from aos.kernel.store.pg_store import PgStore, open_pg_store
from tests.store_backends import world_id


@pytest.fixture
def world(pg_store_dsn: str, tmp_path: Path) -> Iterator[str]:
    name = world_id(tmp_path)
    yield name
    pg_owner.stop_serving(name)


def take(dsn: str, world: str, claim: pg_owner.OwnerClaim | None) -> PgStore:
    """Open `world` for writing as `claim` (None: a one-shot writer)."""
    if claim is None:
        pg_owner.stop_serving(world)
    else:
        pg_owner.serve_as(world, claim)
    return open_pg_store(dsn, world, sync=False)


def lapse(dsn: str, world: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE aos_owners SET lease_until = now() - interval '1 second' WHERE world = %s",
            (world,),
        )


def epoch_of(dsn: str, world: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT epoch FROM aos_worlds WHERE world = %s", (world,)).fetchone()
    assert row is not None
    return int(row[0])


def refused(dsn: str, world: str, claim: pg_owner.OwnerClaim | None) -> StoreOwnedError:
    """The take is refused and changes nothing."""
    before = epoch_of(dsn, world)
    with pytest.raises(StoreOwnedError) as caught:
        take(dsn, world, claim)
    assert epoch_of(dsn, world) == before
    return caught.value


def test_owner_lease_ms_is_bounded_below() -> None:
    assert pg_owner.OwnerClaim("n", lease_ms=OWNER_LEASE_MS_MIN).lease_ms == OWNER_LEASE_MS_MIN
    with pytest.raises(StoreUsageError):
        pg_owner.OwnerClaim("n", lease_ms=OWNER_LEASE_MS_MIN - 1)


def test_who_may_take_a_registered_world(pg_store_dsn: str, world: str) -> None:
    node_a = pg_owner.OwnerClaim("node-a")
    take(pg_store_dsn, world, node_a).close()
    # Live: nobody else, not even with --takeover or the same node id in another process.
    for other in (
        None,
        pg_owner.OwnerClaim("node-b", takeover=True),
        pg_owner.OwnerClaim("node-a"),
    ):
        error = refused(pg_store_dsn, world, other)
        assert error.detail["live"] is True and error.detail["node_id"] == "node-a"
    # Its own process reopening it (same token) may, and the claim learns the new epoch.
    take(pg_store_dsn, world, node_a).close()
    assert node_a.epoch == epoch_of(pg_store_dsn, world)
    lapse(pg_store_dsn, world)
    # Lapsed: another node only with --takeover ...
    error = refused(pg_store_dsn, world, pg_owner.OwnerClaim("node-b"))
    assert error.detail["live"] is False
    take(pg_store_dsn, world, pg_owner.OwnerClaim("node-b", takeover=True)).close()
    owner = pg_owner.lookup(pg_store_dsn, world)
    assert owner is not None and owner.node_id == "node-b" and owner.live
    # ... the same node restarted without it ...
    lapse(pg_store_dsn, world)
    take(pg_store_dsn, world, pg_owner.OwnerClaim("node-b")).close()
    # ... and a one-shot writer, whose take voids the registration.
    lapse(pg_store_dsn, world)
    take(pg_store_dsn, world, None).close()
    owner = pg_owner.lookup(pg_store_dsn, world)
    assert owner is not None and not owner.live
    take(pg_store_dsn, world, pg_owner.OwnerClaim("node-c")).close()


def test_a_renewing_owner_keeps_the_world_until_it_is_taken_over(
    pg_store_dsn: str, world: str
) -> None:
    node_a = pg_owner.OwnerClaim("node-a", lease_ms=OWNER_LEASE_MS_MIN)
    lost: list[StoreError] = []
    store = take(pg_store_dsn, world, node_a)
    keeper = pg_owner.OwnerLease(pg_store_dsn, world, node_a, lost.append)
    try:
        keeper.announce("http://127.0.0.1:1", "blake3:kernel-id")
        owner = pg_owner.lookup(pg_store_dsn, "blake3:kernel-id")
        assert owner is not None and owner.node_url == "http://127.0.0.1:1" and owner.live
        assert owner.to_json()["url"] == "http://127.0.0.1:1"
        lapse(pg_store_dsn, world)
        assert keeper.renew()  # late, but nobody took it: still the owner
        assert pg_owner.lookup(pg_store_dsn, world).live  # type: ignore[union-attr]
        lapse(pg_store_dsn, world)
        take(pg_store_dsn, world, pg_owner.OwnerClaim("node-b", takeover=True)).close()
        assert not keeper.renew()
        assert [e.code for e in lost] == ["store.lease_lost"]
        assert not keeper.renew() and len(lost) == 1  # reported once
        with pytest.raises(StoreError) as caught, store.batch() as batch:
            batch.meta_put("k", 1)
        assert caught.value.code == "store.fenced"
    finally:
        keeper.stop(release=True)
        store.close()
    # A lost owner's release does not remove the new owner's registration.
    owner = pg_owner.lookup(pg_store_dsn, world)
    assert owner is not None and owner.node_id == "node-b"


def test_a_stopping_owner_releases_the_world(pg_store_dsn: str, world: str) -> None:
    node_a = pg_owner.OwnerClaim("node-a")
    take(pg_store_dsn, world, node_a).close()
    keeper = pg_owner.OwnerLease(pg_store_dsn, world, node_a, lambda _: None).start()
    keeper.stop(release=True)
    assert pg_owner.lookup(pg_store_dsn, world) is None
    take(pg_store_dsn, world, pg_owner.OwnerClaim("node-b")).close()


# --------------------------------------------------------------------------------------------
# The adapter's route


def nodes(moved_to: str) -> httpx.MockTransport:
    """Node `old` is fenced (409 store.fenced) and `other` says the world is at `moved_to`,
    which serves the request."""

    def handle(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if request.url.path.endswith("/node"):
            if host == "old":
                raise httpx.ConnectError("gone", request=request)
            return httpx.Response(200, json={"url": moved_to, "live": True})
        if host == "old":
            error = {"code": "store.fenced", "message": "taken"}
            return httpx.Response(409, json={"error": error})
        return httpx.Response(200, json={"served_by": host})

    return httpx.MockTransport(handle)


def test_the_route_follows_the_world_to_where_the_registry_says() -> None:
    transport = nodes("http://new")
    route = NodeRoute("http://old", ["http://other"], world=lambda: "w", transport=transport)
    client = NodeClient(
        "http://old", retry=RetryPolicy(attempts_max=2), transport=transport, route=route
    )
    try:
        assert client.request("GET", "/v1/world") == {"served_by": "new"}
    finally:
        client.close()
    assert route.url == "http://new" and route.moves == 1
    assert route.follow("http://old") == "http://new"  # another thread already moved
    assert route.moves == 1


def test_without_a_known_world_the_route_stays() -> None:
    route = NodeRoute("http://old", ["http://other"], transport=nodes("http://new"))
    assert route.follow("http://old") == "http://old" and route.moves == 0
