"""The store backends the conformance and property tests run on: embedded LMDB and a real
PostgreSQL server (the session's throwaway cluster, tests/pg_cluster.py).

A test opens a store with an opener: `opener(world_dir, **options)` takes the options of
`open_lmdb_store` (sync defaults to False, as in the other store tests). On PostgreSQL the
world id is derived from the directory, so reopening the same directory reopens the same
world and every test has a world of its own in the shared database.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aos.kernel.store import Store, open_lmdb_store
from aos.kernel.store.pg_store import open_pg_store

BACKENDS = ("lmdb", "postgresql")
STORE_TEST_DATABASE = "aos_store_tests"

StoreOpener = Callable[..., Store]


def world_id(world_dir: str | os.PathLike[str]) -> str:
    """A world id unique to a test directory (and the same for every opening of it)."""
    return "t-" + hashlib.sha256(str(Path(world_dir).resolve()).encode()).hexdigest()[:24]


def lmdb_opener() -> StoreOpener:
    def opener(world_dir: str | os.PathLike[str], **options: Any) -> Store:
        options.setdefault("sync", False)
        return open_lmdb_store(world_dir, **options)

    return opener


def pg_opener(dsn: str) -> StoreOpener:
    def opener(world_dir: str | os.PathLike[str], **options: Any) -> Store:
        options.setdefault("sync", False)
        return open_pg_store(dsn, world_id(world_dir), world_dir=Path(world_dir), **options)

    return opener
