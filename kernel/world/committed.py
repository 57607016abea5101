"""A world's store as of its last commit, read-only, and the checks every reader of a stored
head makes. Both `World.reading` (opening.py) and `aos world status` (world_status.py) read
through it, so a missing world, a head being rebuilt and a store of another format are
refused the same way whichever reads. It imports no manifest model and no wasm engine: the
status command stays light (spec/03-world.md §12)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aos.kernel.hashing import Hash
from aos.kernel.store import open_store
from aos.kernel.store.interface import Store
from aos.kernel.world.checkpointer import META_HEAD, head_usable
from aos.kernel.world.errors import WorldCorruptError, WorldMissingError
from aos.kernel.world.meta import META_FORMAT, WORLD_FORMAT


@contextmanager
def committed_store(root: Path) -> Iterator[Store]:
    """The store of the world at `root`, opened read-only (no writer lock: it works while a
    node serves the world), inside one consistent read whose head is usable. `world.missing`
    where there is no world; `world.corrupt` for a head only a writer can rebuild."""
    if not (root / "store").is_dir():
        raise WorldMissingError(f"no world at {root}")
    store = open_store(root, readonly=True)
    try:
        with store.consistent():
            if not head_usable(store):
                raise WorldCorruptError(
                    "the world's head is being rebuilt or is damaged: open it for writing"
                )
            yield store
    finally:
        store.close()


def check_format(store: Store) -> None:
    """`world.corrupt` unless the store holds an aos world of the format this kernel reads."""
    if store.meta.get(META_FORMAT, None) != WORLD_FORMAT:
        raise WorldCorruptError("the store is not an aos world of a format this kernel reads")


def head_checkpoint(store: Store) -> dict[str, Any]:
    """The stored head checkpoint (without the journal tail after it)."""
    return as_map(store.cas.get_value(Hash(str(store.meta.get(META_HEAD)))), "head checkpoint")


def as_map(value: Any, what: str) -> dict[str, Any]:
    """`value`, which the store says is a map; `world.corrupt` if it is not."""
    if not isinstance(value, dict):
        raise WorldCorruptError(f"the stored {what} is not a map")
    return value
