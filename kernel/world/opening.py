"""Creating, opening and reading worlds on disk (spec/03-world.md §1, §2).

Genesis is written in a sibling directory and renamed into place; opening checks the
store's format and head checkpoint (rebuilding a head that is not usable through
`recovery.recover`) and restores the head into a new `World`. The `World` classmethods are
the entry points; these functions hold what they do.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos.kernel.air.errors import AirError
from aos.kernel.air.loader import assemble_manifest, load_manifest_dir
from aos.kernel.air.model import Manifest, canonical_form
from aos.kernel.errors import AosError, KernelInvariantError
from aos.kernel.hashing import Hash
from aos.kernel.store import open_store
from aos.kernel.store.interface import Store
from aos.kernel.wasm import WasmEngine
from aos.kernel.world import worldkey
from aos.kernel.world.checkpointer import META_HEAD, head_usable
from aos.kernel.world.committed import as_map, check_format, committed_store, head_checkpoint
from aos.kernel.world.errors import WorldCorruptError, WorldExistsError, WorldMissingError
from aos.kernel.world.limits import WorldLimits, recorded_limits
from aos.kernel.world.meta import META_CONFIG
from aos.kernel.world.modules import building_resolver
from aos.kernel.world.runtime import Runtime, stored_definitions
from aos.kernel.world.staged import StagedWrites
from aos.kernel.world.stamps import StampSource
from aos.kernel.world.timers import CLOCK_MANUAL, CLOCK_WALL

if TYPE_CHECKING:
    from aos.kernel.world.world import World


def create(
    factory: type[World],
    root: Path,
    manifest_dir: str | os.PathLike[str],
    *,
    sync: bool,
    stamps: StampSource | None,
    engine: WasmEngine,
    limits: WorldLimits | None,
    clock: str,
) -> None:
    """Write genesis for a world at `root` (see `World.create`)."""
    if clock not in (CLOCK_WALL, CLOCK_MANUAL):
        raise AosError(f"clock is {clock!r}; it is {CLOCK_WALL} or {CLOCK_MANUAL}")
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise WorldExistsError(f"{root} exists and is not an empty directory")
    built: dict[Hash, Path] = {}
    loaded = load_manifest_dir(manifest_dir, artifact_resolver=building_resolver(built))
    # Genesis is written in a sibling directory and renamed into place, so a process killed
    # while creating leaves either no world or a whole one, never one that neither opens
    # nor can be created again.
    root.parent.mkdir(parents=True, exist_ok=True)
    building = root.parent / f".{root.name}.creating-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir()
    try:
        store = open_store(building, sync=sync)
        try:
            genesis = factory(
                store,
                loaded,
                engine=engine,
                stamps=stamps or StampSource(),
                limits=limits or WorldLimits(),
                clock=clock,
            )
            genesis.genesis(lambda wasm_hash: built[wasm_hash].read_bytes())
            store.meta.put(worldkey.META_PUBLIC_KEY, worldkey.create(building))
        finally:
            store.close()
        (building / "store" / "writer.lock").unlink(missing_ok=True)
        os.replace(building, root)  # replaces an empty directory atomically
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise


def open_writing(
    factory: type[World],
    root: Path,
    *,
    sync: bool,
    stamps: StampSource | None,
    engine: WasmEngine | None,
    limits: WorldLimits | None,
) -> World:
    """Open the world at `root` for writing (see `World.open`)."""
    if not (root / "store").is_dir():
        raise WorldMissingError(f"no world at {root}")
    store = open_store(root, sync=sync)
    try:
        if not head_usable(store):
            store.close()
            from aos.kernel.world.recovery import recover  # recovery replays into a World

            recover(root, engine=engine)
            store = open_store(root, sync=sync)
        return from_store(factory, store, engine, stamps, limits)
    except BaseException:
        store.close()
        raise


@contextmanager
def open_reading(factory: type[World], root: Path, *, engine: WasmEngine | None) -> Iterator[World]:
    """The world at `root` as of its last commit, read-only (see `World.reading`)."""
    with committed_store(root) as store:
        yield from_store(factory, store, engine, None, None)


def from_store(
    factory: type[World],
    store: Store,
    engine: WasmEngine | None,
    stamps: StampSource | None,
    limits: WorldLimits | None,
) -> World:
    """A world over an open store, at its head checkpoint with the journal tail folded in."""
    check_format(store)
    config = as_map(store.meta.get(META_CONFIG), "world config")
    head_hash = Hash(str(store.meta.get(META_HEAD)))
    head = as_map(store.cas.get_value(head_hash), "head checkpoint")
    blobs = StagedWrites(store)
    manifest = Manifest.model_validate(blobs.get_value(Hash(head["manifest"])))
    try:
        loaded = assemble_manifest(manifest, stored_definitions(manifest, blobs))
    except AirError as error:
        raise WorldCorruptError(f"the stored manifest does not check: {error}") from None
    world = factory(
        store,
        loaded,
        engine=engine or WasmEngine(),
        stamps=stamps or StampSource(),
        limits=recorded_limits(config, limits or WorldLimits()),
        clock=str(config["clock"]),
    )
    world.restore_head(str(config["id"]), head, head_hash)
    return world


def store_definitions(
    pending: StagedWrites, runtime: Runtime, module_bytes: Callable[[Hash], bytes]
) -> None:
    """Stage, for genesis, every definition, the manifest and every module in the CAS, each
    checked against the hash the manifest names it by."""
    loaded = runtime.loaded
    for definition in loaded.definitions.values():
        pending.put_value(canonical_form(definition))
    if pending.put_value(canonical_form(loaded.manifest)) != loaded.manifest_hash:
        raise KernelInvariantError("manifest hash differs from its stored form's hash")
    for module in runtime.modules.values():
        assert module.artifact.hash_ is not None
        wasm_hash = Hash(module.artifact.hash_)
        if pending.put(module_bytes(wasm_hash)) != wasm_hash:
            raise KernelInvariantError(f"module {module.name} changed while being stored")


def scratch_limits(limits: WorldLimits | None) -> WorldLimits:
    """The limits of a scratch world (replay, recovery, shadow): no automatic snapshots or
    checkpoints, and every snapshot kept (a replay follows the recorded ones)."""
    base = limits or WorldLimits()
    return WorldLimits(
        **{
            **base.__dict__,
            "snapshot_every_records": None,
            "snapshot_every_s": None,
            "snapshots_kept_max": None,
            "checkpoint_every_records": None,
        }
    )


def head_at_end(factory: type[World], store: Store, engine: WasmEngine) -> dict[str, Any]:
    """The head of the world in `store` at its journal's end: the stored head checkpoint,
    with the journal tail after it folded in (read-only: nothing is written)."""
    head = head_checkpoint(store)
    if head["height"] == store.journal.head():
        return head
    return from_store(factory, store, engine, None, None).current_head()
