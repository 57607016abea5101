"""Creating a world on the store backend the user chose (one entry for the CLI and tests).

`World.create` writes genesis into an embedded store built beside the target directory and
renamed into place. A world on PostgreSQL is made the same way and then moved: genesis is
copied into the server world in one transaction (`copy_store`), and the directory keeps only
`store/url`, which every later `World.open` / `World.reading` follows through `open_store`.
So the world kernel needs no notion of URLs at all.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from aos.kernel.store import open_lmdb_store
from aos.kernel.store.copy import copy_store
from aos.kernel.store.url import parse_store_url, write_store_url
from aos.kernel.world.errors import WorldExistsError
from aos.kernel.world.world import World


def create_world(
    directory: str | os.PathLike[str],
    manifest_dir: str | os.PathLike[str],
    *,
    store_url: str | None = None,
    sync: bool = True,
    **options: Any,
) -> World:
    """`World.create`, on LMDB in `directory` (no `store_url`), or on the PostgreSQL world
    `store_url` names, with `directory` pointing at it. The server world must be new.

    A process killed between the genesis commit and writing `store/url` leaves a server world
    no directory points at: creating it again is `world.exists`; write the URL file by hand
    (`aos.kernel.store.url.write_store_url`) or choose another id."""
    if store_url is None:
        return World.create(directory, manifest_dir, sync=sync, **options)
    root = Path(directory)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise WorldExistsError(f"{root} exists and is not an empty directory")
    location = parse_store_url(store_url, default_world=root.name)  # bad URLs fail first
    staging = root.parent / f".{root.name}.genesis-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        World.create(staging, manifest_dir, sync=False, **options).close()
        from aos.kernel.store.pg_store import open_pg_store

        with (
            open_lmdb_store(staging, readonly=True) as source,
            open_pg_store(location.conninfo, location.world, sync=sync) as target,
        ):
            if target.journal.head() != 0 or target.meta.keys():
                raise WorldExistsError(
                    f"world {location.world!r} already exists in that database; "
                    "choose another id (?world=ID)"
                )
            copy_store(source, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    write_store_url(root, store_url)
    return World.open(root, sync=sync, **_open_options(options))


def _open_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options of `World.create` that `World.open` takes too (not the clock: it is
    stored with the world)."""
    return {key: value for key, value in options.items() if key != "clock"}
