"""Which node serves a PostgreSQL world: an ownership lease in the database (spec/07 §11.5).

`aos_owners` holds one row per served world: the writer `epoch` the owner took, its `node_id`
(stable across restarts of the same node), a `token` (one per process), the `node_url` it
serves at, the kernel's `world_id`, and `lease_until`. Liveness is judged by the **database's
clock** (`now()`), never a node's, so node clocks do not matter.

- A node says it serves a world before opening it (`serve_as(world, claim)`); every take of
  that world in this process (`pg_store._take`, through `admit` and `register`) then checks
  and renews the registration in the take's own transaction.
- `admit` refuses a take (`store.owned`, nothing changed, no epoch taken) while another
  owner's lease is live; a lapsed lease of another node only with `claim.takeover` (a one-shot
  writer, with no claim, may take a world whose node is dead, which voids the registration).
- `OwnerLease` renews the lease every `lease_ms / 3` on its own connection, only while the
  row still names this process's token and the world's current epoch; when it cannot (the
  world was taken, or the database stayed away for a whole lease) it reports the loss once.
- `lookup` answers "where is this world served now" for any node and the CLI.

The epoch fence of every commit (pg_store) stays the guard of the data: a lease only keeps
live nodes from taking worlds from each other.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, LiteralString

import psycopg

from aos.kernel.store.errors import (
    StoreError,
    StoreLeaseLostError,
    StoreOwnedError,
    StoreUnavailableError,
    StoreUsageError,
)
from aos.kernel.store.limits import OWNER_LEASE_MS_DEFAULT, OWNER_LEASE_MS_MIN

CONNECT_TIMEOUT_S = 5
LAPSE_MARGIN_MS = 250
"""A takeover waits one lease and this much more: a lease renewed just before the owner died
lapses a little after one lease from when the waiting began."""

log = logging.getLogger("aos.node")

SCHEMA: Final[LiteralString] = """CREATE TABLE IF NOT EXISTS aos_owners (
    world text PRIMARY KEY, epoch bigint NOT NULL, node_id text NOT NULL, token text NOT NULL,
    node_url text, world_id text, lease_until timestamptz NOT NULL)"""

# The world's row is locked first: takes of one world are serialized on it.
_ADMIT: Final = """SELECT w.epoch, o.epoch, o.node_id, o.token, o.node_url,
        o.lease_until > now(),
        greatest(0, ceil(extract(epoch FROM o.lease_until - now()) * 1000))::bigint
    FROM aos_worlds w LEFT JOIN aos_owners o ON o.world = w.world
    WHERE w.world = %s FOR UPDATE OF w"""
_REGISTER: Final = """INSERT INTO aos_owners
        (world, epoch, node_id, token, node_url, world_id, lease_until)
    VALUES (%s, %s, %s, %s, %s, %s, now() + %s * interval '1 millisecond')
    ON CONFLICT (world) DO UPDATE SET epoch = EXCLUDED.epoch, node_id = EXCLUDED.node_id,
        token = EXCLUDED.token, node_url = EXCLUDED.node_url, world_id = EXCLUDED.world_id,
        lease_until = EXCLUDED.lease_until"""
_RENEW: Final = """UPDATE aos_owners o
    SET lease_until = now() + %s * interval '1 millisecond', node_url = %s, world_id = %s
    FROM aos_worlds w
    WHERE o.world = %s AND o.token = %s AND o.epoch = %s AND w.world = o.world
        AND w.epoch = o.epoch"""
_RELEASE: Final = "DELETE FROM aos_owners WHERE world = %s AND token = %s"
_LOOKUP: Final = """SELECT o.world, o.world_id, o.node_url, o.node_id, o.epoch,
        o.lease_until > now() AND o.epoch = w.epoch,
        greatest(0, ceil(extract(epoch FROM o.lease_until - now()) * 1000))::bigint
    FROM aos_owners o JOIN aos_worlds w ON w.world = o.world
    WHERE o.world = %s OR o.world_id = %s"""


@dataclass
class OwnerClaim:
    """This process serves a world as `node_id`: what its takes register."""

    node_id: str
    lease_ms: int = OWNER_LEASE_MS_DEFAULT
    takeover: bool = False
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    epoch: int = 0  # the epoch of this process's last take
    url: str | None = None
    world_id: str | None = None

    def __post_init__(self) -> None:
        if self.lease_ms < OWNER_LEASE_MS_MIN:
            raise StoreUsageError(
                f"owner_lease_ms is {self.lease_ms}; it is at least {OWNER_LEASE_MS_MIN}"
            )


@dataclass(frozen=True)
class Owner:
    """A world's registration as the database sees it now."""

    world: str
    world_id: str | None
    node_url: str | None
    node_id: str
    epoch: int
    live: bool
    lease_ms_left: int

    def to_json(self) -> dict[str, Any]:
        return {
            "world": self.world,
            "world_id": self.world_id,
            "url": self.node_url if self.live else None,
            "node_id": self.node_id,
            "epoch": self.epoch,
            "live": self.live,
            "lease_ms_left": self.lease_ms_left if self.live else 0,
        }


_claims: dict[str, OwnerClaim] = {}
_claims_lock = threading.Lock()


def serve_as(world: str, claim: OwnerClaim) -> None:
    """From now on this process's takes of `world` register (and are admitted) as `claim`."""
    with _claims_lock:
        _claims[world] = claim


def stop_serving(world: str) -> None:
    with _claims_lock:
        _claims.pop(world, None)


def claim_of(world: str) -> OwnerClaim | None:
    with _claims_lock:
        return _claims.get(world)


def default_node_id(world_dir: str | os.PathLike[str]) -> str:
    """The same node on the same machine serving the same directory keeps its id across
    restarts (so it takes back its own lapsed world without --takeover)."""
    return f"{socket.gethostname()}:{Path(world_dir).resolve()}"


# --------------------------------------------------------------------------------------------
# Inside the take's transaction (pg_store._take)


def admit(conn: psycopg.Connection, world: str) -> None:
    """Lock the world's row and refuse the take (`store.owned`) if its registration forbids
    it for this process (module doc)."""
    row = conn.execute(_ADMIT, (world,)).fetchone()
    if row is None or row[1] is None:
        return  # a new world, or no registration
    world_epoch, epoch, node_id, token, url, live, left = row
    if int(epoch) != int(world_epoch):
        return  # the registered owner was fenced since: its registration is void
    refusal = refusal_of(
        Owner(world, None, url, str(node_id), int(epoch), bool(live), int(left)),
        str(token),
        claim_of(world),
    )
    if refusal is not None:
        raise refusal


def refusal_of(owner: Owner, token: str, claim: OwnerClaim | None) -> StoreOwnedError | None:
    """Why `claim` (None: a one-shot writer) may not take a world `owner` holds, or None."""
    if claim is not None and token == claim.token:
        return None  # this process reopening its own world
    where = owner.node_url or "a node that is starting"
    if owner.live:
        return StoreOwnedError(
            f"world {owner.world!r} is served by node {owner.node_id!r} at {where} (its lease "
            f"runs {owner.lease_ms_left} ms more): write through it",
            **_detail(owner),
        )
    if claim is None or claim.takeover or claim.node_id == owner.node_id:
        return None
    return StoreOwnedError(
        f"world {owner.world!r} is registered to node {owner.node_id!r}, whose lease lapsed: "
        "if that node is dead, take the world with `aos node up --takeover`",
        **_detail(owner),
    )


def _detail(owner: Owner) -> dict[str, Any]:
    return {
        "world": owner.world,
        "node_url": owner.node_url,
        "node_id": owner.node_id,
        "live": owner.live,
        "lease_ms_left": owner.lease_ms_left,
    }


def register(conn: psycopg.Connection, world: str, epoch: int) -> None:
    """After the take: register this process as the world's owner, if it serves the world."""
    claim = claim_of(world)
    if claim is None:
        return
    params = (world, epoch, claim.node_id, claim.token, claim.url, claim.world_id)
    conn.execute(_REGISTER, (*params, claim.lease_ms))
    claim.epoch = epoch


# --------------------------------------------------------------------------------------------
# Looking up and waiting


def lookup(conninfo: str, world: str) -> Owner | None:
    """The registration of `world` (its database key or its kernel world id), or None.
    `store.unavailable` when the database cannot be reached."""
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            return _lookup(conn, world)
    except psycopg.OperationalError as exc:
        raise StoreUnavailableError(f"cannot look up world {world!r}: {exc}") from exc


def _lookup(conn: psycopg.Connection, world: str) -> Owner | None:
    exists = conn.execute("SELECT to_regclass('aos_owners') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return None
    row = conn.execute(_LOOKUP, (world, world)).fetchone()
    if row is None:
        return None
    key, world_id, url, node_id, epoch, live, left = row
    return Owner(key, world_id, url, str(node_id), int(epoch), bool(live), int(left))


def wait_for_lapse(conninfo: str, world: str, claim: OwnerClaim) -> None:
    """For a takeover: wait while another process's lease of `world` is live, at most one
    `claim.lease_ms` (and `LAPSE_MARGIN_MS`); the open after it refuses (`store.owned`) if the
    owner is still live."""
    deadline = time.monotonic() + (claim.lease_ms + LAPSE_MARGIN_MS) / 1000
    while True:
        owner = lookup(conninfo, world)
        if owner is None or not owner.live:
            return
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return
        log.info("world %s: waiting for the lease of node %s to lapse", world, owner.node_id)
        # A little past the lapse, so the database's clock has passed it too.
        time.sleep(min(left_s, owner.lease_ms_left / 1000 + 0.05))


# --------------------------------------------------------------------------------------------
# Keeping the lease


class OwnerLease:
    """Renews this process's lease of a world on its own connection, every lease_ms / 3.
    `on_lost` is called once (from the renewing thread) when the lease is lost."""

    def __init__(
        self,
        conninfo: str,
        world: str,
        claim: OwnerClaim,
        on_lost: Callable[[StoreError], None],
    ) -> None:
        self._conninfo = conninfo
        self._world = world
        self._claim = claim
        self._on_lost = on_lost
        self._conn: psycopg.Connection | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._renewed_s = time.monotonic()
        self._thread = threading.Thread(target=self._main, name="aos-owner-lease", daemon=True)
        self.lost: StoreError | None = None

    def start(self) -> OwnerLease:
        self._renewed_s = time.monotonic()
        self._thread.start()
        return self

    def announce(self, url: str, world_id: str) -> None:
        """Where the node serves the world: written with the next renewal, which is now."""
        self._claim.url, self._claim.world_id = url, world_id
        self.renew()

    def renew(self) -> bool:
        """Renew once; False (and `on_lost` called) if the lease is lost."""
        with self._lock:
            if self.lost is not None:
                return False
            try:
                renewed = self._renew()
            except psycopg.Error as exc:
                self._drop()
                if time.monotonic() - self._renewed_s < self._claim.lease_ms / 1000:
                    log.warning("renewing the lease of world %s failed: %s", self._world, exc)
                    return True
                return self._lose(
                    StoreLeaseLostError(
                        f"the lease of world {self._world!r} could not be renewed for "
                        f"{self._claim.lease_ms} ms: {exc}",
                        world=self._world,
                    )
                )
            if not renewed:
                return self._lose(
                    StoreLeaseLostError(
                        f"world {self._world!r} was taken by another writer: this node "
                        "stops serving it",
                        world=self._world,
                        epoch=self._claim.epoch,
                    )
                )
            self._renewed_s = time.monotonic()
            return True

    def stop(self, *, release: bool) -> None:
        """Stop renewing; with `release`, give the world up (another node may take it now)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        with self._lock:
            if release and self.lost is None:
                try:
                    self._connection().execute(_RELEASE, (self._world, self._claim.token))
                except psycopg.Error as exc:
                    log.warning(
                        "releasing world %s failed (its lease lapses): %s", self._world, exc
                    )
            self._drop()

    def _main(self) -> None:
        interval_s = self._claim.lease_ms / 3000
        while not self._stop.wait(interval_s):
            if not self.renew():
                return

    def _renew(self) -> bool:
        claim = self._claim
        if claim.epoch == 0:
            return True  # the world is not taken yet (the node is opening it)
        params = (claim.lease_ms, claim.url, claim.world_id, self._world, claim.token, claim.epoch)
        return self._connection().execute(_RENEW, params).rowcount == 1

    def _lose(self, error: StoreError) -> bool:
        self.lost = error
        log.error("%s", error.message)
        self._on_lost(error)
        return False

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self._conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
            )
            # A renewal need not wait for the WAL flush: one lost in a server crash makes the
            # lease look shorter (a takeover may come early; the fence keeps it safe).
            self._conn.execute("SET synchronous_commit = off")
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
