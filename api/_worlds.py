"""Where a `Flows` handle comes from (spec/11 §13): a flow world opened or created in this
process (LMDB in a directory, or a PostgreSQL world a directory or a store URL names), or a
node's HTTP API.

A world opened here is held for writing for the handle's life (`store.locked` while another
process holds it; through a node instead, `aos.connect`), and its adapters run here with the
adapter keys kept beside it (`DIR.keys`, as `aos flow world create` makes them) or in `keys`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from aos._flows import Flows, HeldFlows
from aos.flows.serve.flow_client import NodeFlows
from aos.flows.serve.flow_world import (
    FlowKeys,
    create_flow_world,
    default_keys_dir,
    environment_keys_dir,
    is_flow_world,
    load_or_make_keys,
)
from aos.flows.serve.local import LocalAdapters, LocalWorldInvalidError, local_world
from aos.flows.tools.config import ToolConfig
from aos.kernel.store.url import is_store_url, write_store_url
from aos.kernel.world.world import CLOCK_WALL, World

PathLike = str | os.PathLike[str]


def open_world(
    where: PathLike,
    *,
    keys: PathLike | None = None,
    python_allow: tuple[str, ...] = (),
    tools: ToolConfig | None = None,
    file_base: PathLike | None = None,
) -> Flows:
    """A flow world held open here: a world directory, or a `postgresql://` store URL (its
    world then named by `?world=ID`, its keys in `keys` or `AOS_FLOW_KEYS`)."""
    resources = ExitStack()
    with closed_on_error(resources):
        path = _directory(where, resources)
        folder = Path(keys) if keys is not None else _keys_of(where, path)
        _check_keys(path, folder)
        world = resources.enter_context(World.open(path))
        if not is_flow_world(world):
            raise LocalWorldInvalidError(f"{path} is not a flow world (`aos flow world create`)")
        adapters = _adapters(world, load_or_make_keys(folder), python_allow, tools, file_base)
        return Flows(HeldFlows(world, path), adapters=adapters, resources=resources)


def create_world(
    path: PathLike | None = None,
    *,
    clock: str = CLOCK_WALL,
    store: str | None = None,
    keys: PathLike | None = None,
    python_allow: tuple[str, ...] = (),
    tools: ToolConfig | None = None,
    file_base: PathLike | None = None,
) -> Flows:
    """A new flow world at `path` (on the PostgreSQL world `store` names, when given), its
    adapter keys made in `keys` (default `PATH.keys`); no `path`: a scratch world on the
    `manual` clock, gone when the handle closes."""
    resources = ExitStack()
    with closed_on_error(resources):
        world, made, folder = new_world(path, resources, clock=clock, store=store, keys=keys)
        adapters = _adapters(world, made, python_allow, tools, file_base)
        return Flows(HeldFlows(world, folder), adapters=adapters, resources=resources)


def new_world(
    path: PathLike | None,
    resources: ExitStack,
    *,
    clock: str,
    store: str | None = None,
    keys: PathLike | None = None,
    sync: bool = True,
) -> tuple[World, FlowKeys, Path]:
    """A new flow world, held open until `resources` close: at `path`, or a scratch one on
    the `manual` clock (removed then); its adapter keys and its directory."""
    if path is None:
        world, made, _ = resources.enter_context(local_world())
        return world, made, Path(world.store.world_dir)
    folder = Path(path)
    keys_dir = Path(keys) if keys is not None else default_keys_dir(folder)
    world, made = create_flow_world(
        folder, keys_dir=keys_dir, clock=clock, store_url=store, sync=sync
    )
    return resources.enter_context(world), made, folder


@contextmanager
def closed_on_error(resources: ExitStack) -> Iterator[None]:
    """Whatever a handle being made holds is let go of if making it fails."""
    try:
        yield
    except BaseException:
        resources.close()
        raise


def _adapters(
    world: World,
    keys: FlowKeys,
    python_allow: tuple[str, ...],
    tools: ToolConfig | None,
    file_base: PathLike | None,
) -> LocalAdapters:
    base = None if file_base is None else Path(file_base)
    return LocalAdapters(world, keys, python_allow=python_allow, config=tools, file_base=base)


def connect(url: str, *, token: str | None = None) -> Flows:
    """The flow world a node serves, through its HTTP API (`token`: the caller's)."""
    return Flows(NodeFlows(url, token=token))


def _directory(where: PathLike, resources: ExitStack) -> Path:
    """The world's directory; for a store URL, a scratch one pointing at it."""
    if not (isinstance(where, str) and is_store_url(where)):
        return Path(where)
    scratch = Path(resources.enter_context(tempfile.TemporaryDirectory(prefix="aos-pg-")))
    folder = scratch / "world"
    folder.mkdir()
    write_store_url(folder, where)
    return folder


def _keys_of(where: PathLike, path: Path) -> Path:
    if isinstance(where, str) and is_store_url(where):
        found = environment_keys_dir()
        if found is None:
            raise LocalWorldInvalidError(
                "a world named by its store URL needs its adapter keys: keys=DIR or AOS_FLOW_KEYS"
            )
        return found
    return default_keys_dir(path)


def _check_keys(path: Path, folder: Path) -> None:
    if not folder.is_dir():
        raise LocalWorldInvalidError(f"{path}: its adapter keys are not in {folder}")
