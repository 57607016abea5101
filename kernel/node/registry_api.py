"""`GET /v1/worlds/{world}/node`: where a world is served now, answered by any node.

A node on a PostgreSQL world answers from the database's owner registry (spec/07 §11.5), so
it knows every world of that database, served by itself or by another node; `world` is the
world's database key or its kernel world id. A node on an embedded world knows only its
own. Adapters ask this when their node goes away (spec/10), to follow the world. Public
(spec/04 §9.8): an adapter asks any node of the database, which need not know it, and the
answer says only where a world is served, as service discovery does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from aos.kernel.node import routes
from aos.kernel.node.routes import Handlers


def add_registry_route(app: FastAPI, where: Callable[[str], dict[str, Any]]) -> None:
    """Serve `where(world)` (blocking: it may ask the database, so it runs on a worker
    thread): `routes.REGISTRY`."""
    handler = Handlers()

    @handler
    def world_node(world: str) -> dict[str, Any]:
        """Where `world` is served now: `url` is null while no node holds a live lease."""
        return where(world)

    routes.mount(app, routes.REGISTRY, handler)
