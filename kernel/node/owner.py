"""The owner record: where a world's node serves it, so that the CLI's writes go through it.

`aos node up` writes `<world>/node.json` (`{"pid", "url", "world_id"}`) once it listens and
removes it when it stops. A record whose process is gone (a node killed with SIGKILL) is
stale and ignored; so is one that does not parse or is larger than `OWNER_BYTES_MAX`.
A world on PostgreSQL may be served by a node on another machine: then the database's owner
registry (aos.kernel.store.pg_owner) names it, and `WorldOwnership` is the node's side of it.

    url = owner_url(world_dir)      # None: no live node owns the world
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos.kernel.store.errors import StoreError
from aos.kernel.store.url import PgLocation, world_location

if TYPE_CHECKING:
    from aos.kernel.store.pg_owner import OwnerClaim, OwnerLease

OWNER_FILE_NAME = "node.json"
OWNER_BYTES_MAX = 4096
"""Largest owner record read; a larger file is not one this code wrote."""


def write_owner(world_dir: str | os.PathLike[str], url: str, world_id: str) -> Path:
    """Record (atomically) that this process serves the world at `url`."""
    path = Path(world_dir) / OWNER_FILE_NAME
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"pid": os.getpid(), "url": url, "world_id": world_id}))
    os.replace(temporary, path)
    return path


def remove_owner(world_dir: str | os.PathLike[str]) -> None:
    """Remove the record if this process wrote it."""
    path = Path(world_dir) / OWNER_FILE_NAME
    record = _read(path)
    if record is not None and record.get("pid") == os.getpid():
        path.unlink(missing_ok=True)


def owner_url(world_dir: str | os.PathLike[str]) -> str | None:
    """The URL of the live node that serves the world (on this machine, or for a PostgreSQL
    world wherever the database's registry says), or None."""
    record = _read(Path(world_dir) / OWNER_FILE_NAME)
    pid, url = (None, None) if record is None else (record.get("pid"), record.get("url"))
    if isinstance(pid, int) and isinstance(url, str) and _alive(pid):
        return url
    return _registered_url(world_dir)


def _registered_url(world_dir: str | os.PathLike[str]) -> str | None:
    try:
        location = world_location(world_dir)
        if location is None:
            return None
        from aos.kernel.store import pg_owner  # psycopg: PostgreSQL worlds only

        owner = pg_owner.lookup(location.conninfo, location.world)
    except StoreError:
        return None  # the open that follows says what is wrong
    return owner.node_url if owner is not None and owner.live else None


class WorldOwnership:
    """A node's ownership of a PostgreSQL world (spec/07 §11.5): `claim` before opening the
    world (waiting, for a takeover, for the old owner's lease to lapse), `keep` renewing it,
    `announce` where it is served, `release` it when the node stops."""

    def __init__(self, location: PgLocation, claim: OwnerClaim) -> None:
        self.location = location
        self.claim = claim
        self._lease: OwnerLease | None = None

    @classmethod
    def claim_world(
        cls,
        world_dir: str | os.PathLike[str],
        *,
        node_id: str | None,
        lease_ms: int,
        takeover: bool,
    ) -> WorldOwnership | None:
        """None for an embedded (LMDB) world: its writer lock is its ownership."""
        location = world_location(world_dir)
        if location is None:
            return None
        from aos.kernel.store import pg_owner

        claim = pg_owner.OwnerClaim(
            node_id=node_id or pg_owner.default_node_id(world_dir),
            lease_ms=lease_ms,
            takeover=takeover,
        )
        if takeover:
            pg_owner.wait_for_lapse(location.conninfo, location.world, claim)
        pg_owner.serve_as(location.world, claim)
        return cls(location, claim)

    def keep(self, on_lost: Callable[[StoreError], None]) -> None:
        """Renew the lease from now on (from before the world is opened: renewals start once
        the take gave the claim its epoch)."""
        from aos.kernel.store.pg_owner import OwnerLease

        self._lease = OwnerLease(self.location.conninfo, self.location.world, self.claim, on_lost)
        self._lease.start()

    @property
    def lost(self) -> StoreError | None:
        return None if self._lease is None else self._lease.lost

    def announce(self, url: str, world_id: str) -> None:
        if self._lease is not None:
            self._lease.announce(url, world_id)

    def release(self) -> None:
        """Stop renewing and give the world up (after the world is closed)."""
        from aos.kernel.store import pg_owner

        if self._lease is not None:
            self._lease.stop(release=True)
        pg_owner.stop_serving(self.location.world)

    def where(self, world: str) -> dict[str, Any]:
        """`GET /v1/worlds/{world}/node`: where the database says `world` is served now."""
        from aos.kernel.store import pg_owner

        owner = pg_owner.lookup(self.location.conninfo, world)
        return unserved(world) if owner is None else owner.to_json()


def unserved(world: str) -> dict[str, Any]:
    """The registry's answer for a world no node serves (or this registry does not know)."""
    return {
        "world": None,
        "world_id": world,
        "url": None,
        "node_id": None,
        "epoch": None,
        "live": False,
        "lease_ms_left": 0,
    }


def _read(path: Path) -> dict[str, object] | None:
    try:
        with path.open("rb") as file:
            data = file.read(OWNER_BYTES_MAX + 1)
    except OSError:
        return None
    if len(data) > OWNER_BYTES_MAX:
        return None
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True
