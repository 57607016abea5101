"""Several worlds in one node process (`aos node up --world A --world B`): each world keeps its
own `Node` and app (kernel/node/app.py), mounted under `/worlds/{name}` (spec/04-effects.md
§9.6), where `name` is the world's database key (PostgreSQL) or its directory's name (LMDB).

The mount is the ASGI one: a world's app sees `root_path` = `/worlds/{name}` and the full path,
so its routes match the path after the prefix while a signed request's target (what the
adapter signed: the whole path) is checked as sent. At the root the process answers
`GET /v1/worlds` (the worlds it serves) and `GET /v1/worlds/{world}/node` (asked of each world
in turn); every other path, an unknown name included, is a typed 404 `node.world_unknown`.
A world whose ownership lease was lost answers that error (`store.lease_lost`) on all its
routes; the others are served on.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from aos.kernel.errors import AosError
from aos.kernel.node.adapter_api import send_json
from aos.kernel.node.errors import WorldUnknownError, http_status
from aos.kernel.node.owner import unserved

WORLDS_PREFIX = "/worlds"
WORLDS_PATH = "/v1/worlds"
NAME_CHARS_MAX = 128
_NAME = re.compile(r"[A-Za-z0-9._-]+")
_WHERE = re.compile(r"/v1/worlds/([^/]+)/node")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def valid_name(name: str) -> bool:
    """A world's mount name is one path segment that needs no escaping."""
    return (
        len(name) <= NAME_CHARS_MAX
        and _NAME.fullmatch(name) is not None
        and name
        not in {
            ".",
            "..",
        }
    )


@dataclass
class MountedWorld:
    """One world of the process: its app, where it says it is served, whether it still may."""

    name: str
    world_id: str
    app: ASGIApp
    where: Callable[[str], dict[str, Any]]
    url: Callable[[], str | None]
    lost: Callable[[], AosError | None]
    """The error that ended its ownership lease (another node has the world), or None."""

    def to_json(self) -> dict[str, Any]:
        lost = self.lost()
        return {
            "name": self.name,
            "world_id": self.world_id,
            "url": self.url(),
            "serving": lost is None,
            "error": None if lost is None else lost.to_dict(),
        }


class WorldsRouter:
    """The process's ASGI app: dispatches `/worlds/{name}/...` to that world's app."""

    def __init__(self, worlds: list[MountedWorld]) -> None:
        self.worlds = {world.name: world for world in worlds}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # websockets and lifespan: none served (uvicorn runs with lifespan off)
        path: str = scope["path"]
        name, _, _ = path.removeprefix(WORLDS_PREFIX + "/").partition("/")
        world = self.worlds.get(name) if path.startswith(WORLDS_PREFIX + "/") else None
        if world is not None and path.startswith(f"{WORLDS_PREFIX}/{name}/"):
            lost = world.lost()
            if lost is not None:
                await send_json(send, http_status(lost), {"error": lost.to_dict()})
                return
            prefix = scope.get("root_path", "") + f"{WORLDS_PREFIX}/{name}"
            await world.app({**scope, "root_path": prefix}, receive, send)
            return
        if scope["method"] == "GET":
            if path == WORLDS_PATH:
                listing = [w.to_json() for w in self.worlds.values()]
                await send_json(send, 200, {"worlds": listing})
                return
            asked = _WHERE.fullmatch(path)
            if asked is not None:
                found = await asyncio.to_thread(self._where, asked.group(1))
                await send_json(send, 200, found)
                return
        error = WorldUnknownError(
            f"this node serves no world at {path}",
            worlds=sorted(self.worlds),
        )
        await send_json(send, http_status(error), {"error": error.to_dict()})

    def _where(self, world: str) -> dict[str, Any]:
        return where_first([mounted.where for mounted in self.worlds.values()], world)


def where_first(wheres: list[Callable[[str], dict[str, Any]]], world: str) -> dict[str, Any]:
    """Where `world` is served, by the first of a process's worlds whose registry knows (a
    PostgreSQL world's knows its whole database; an embedded world's, itself); when none names
    a URL, the first registry's answer (a lapsed registration says whose it was)."""
    first: dict[str, Any] | None = None
    for where in wheres:
        found = where(world)
        if found.get("url") is not None:
            return found
        first = found if first is None else first
    return unserved(world) if first is None else first
