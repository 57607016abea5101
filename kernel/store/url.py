"""Where a world's store lives: the one resolver every opener goes through.

A world is always a directory (commands take `--world DIR`; a node keeps its files there).
Its store is either embedded, LMDB in `DIR/store/` (the default), or on a PostgreSQL server:
then `DIR/store/url` holds the store URL

    postgresql://[user[:password]@]host[:port]/database[?world=ID&other libpq parameters]

and `open_world_store(DIR)` opens that world in that database. `ID` defaults to the
directory's name. A password is better kept out of the file (libpq reads `PGPASSWORD` and
`~/.pgpass`); the file is written readable by its owner only either way.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from aos.kernel.store.errors import StoreUrlError
from aos.kernel.store.interface import Store
from aos.kernel.store.limits import StoreLimits

STORE_DIR_NAME = "store"
STORE_URL_FILE_NAME = "url"
URL_SCHEMES = ("postgresql", "postgres")
WORLD_PARAM = "world"
WORLD_ID_BYTES_MAX = 200
_WORLD_ID = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class PgLocation:
    """A world on a PostgreSQL server: the libpq URI (without `world`) and the world id."""

    conninfo: str
    world: str


def is_store_url(text: str) -> bool:
    """Whether `text` names a server store rather than a directory."""
    return urlsplit(text).scheme in URL_SCHEMES


def parse_store_url(url: str, default_world: str | None = None) -> PgLocation:
    """The database and world a store URL names (`store.url` if it names none)."""
    parts = urlsplit(url)
    if parts.scheme not in URL_SCHEMES:
        raise StoreUrlError(f"{_redacted(url)} is not a postgresql:// URL", url=_redacted(url))
    params = parse_qsl(parts.query, keep_blank_values=True)
    worlds = [value for name, value in params if name == WORLD_PARAM]
    world = worlds[-1] if worlds else default_world
    if world is None or not _WORLD_ID.fullmatch(world) or len(world) > WORLD_ID_BYTES_MAX:
        raise StoreUrlError(
            f"store URL {_redacted(url)} names no valid world id ({world!r})",
            url=_redacted(url),
        )
    rest = urlencode([(name, value) for name, value in params if name != WORLD_PARAM])
    return PgLocation(urlunsplit(parts._replace(query=rest)), world)


def store_url_path(world_dir: str | os.PathLike[str]) -> Path:
    return Path(world_dir) / STORE_DIR_NAME / STORE_URL_FILE_NAME


def world_location(world_dir: str | os.PathLike[str]) -> PgLocation | None:
    """The server location a world directory points at, or None for an embedded store."""
    path = store_url_path(world_dir)
    if not path.is_file():
        return None
    return parse_store_url(path.read_text().strip(), default_world=Path(world_dir).name)


def write_store_url(world_dir: str | os.PathLike[str], url: str) -> PgLocation:
    """Point `world_dir` (new, or holding no store) at a server store; its location."""
    location = parse_store_url(url, default_world=Path(world_dir).name)
    store_dir = Path(world_dir) / STORE_DIR_NAME
    store_dir.mkdir(parents=True, exist_ok=True)
    path = store_dir / STORE_URL_FILE_NAME
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(url.strip() + "\n")
    return location


def open_world_store(
    world_dir: str | os.PathLike[str],
    *,
    sync: bool = True,
    readonly: bool = False,
    limits: StoreLimits | None = None,
) -> Store:
    """Open the store of a world directory, on whichever backend it points at."""
    location = world_location(world_dir)
    if location is None:
        from aos.kernel.store.lmdb_store import open_lmdb_store

        return open_lmdb_store(world_dir, sync=sync, readonly=readonly, limits=limits)
    # Imported here: psycopg costs start-up time that LMDB worlds should not pay.
    from aos.kernel.store.pg_store import open_pg_store

    return open_pg_store(
        location.conninfo,
        location.world,
        world_dir=Path(world_dir),
        sync=sync,
        readonly=readonly,
        limits=limits,
    )


def _redacted(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
