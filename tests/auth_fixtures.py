"""Identities for tests of a node: a node's door is shut by default (spec/04 §9.8), so a test
client carries a token of an identity made for it."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from aos.kernel.node import Node
from aos.kernel.node.identities import SCOPES

_names = itertools.count(1)


def token_for(
    node: Node, scopes: Iterable[str] = SCOPES, roles: Iterable[str] = (), name: str | None = None
) -> str:
    """A new identity of `node`'s world with `scopes` (every scope by default); its token."""
    store = node.authority.store
    assert store is not None
    _, token = store.create(name or f"tester-{next(_names)}", scopes, roles)
    return token


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def authorize(client: Any, node: Node, scopes: Iterable[str] = SCOPES, **options: Any) -> Any:
    """`client` (a TestClient or an httpx client) sending a token of a new identity."""
    client.headers.update(bearer(token_for(node, scopes, **options)))
    return client


# --------------------------------------------------------------------------------------------
# Nodes in a process of their own

_TOKENS: dict[str, str] = {}
"""The first admin's token of each node a test started, by the node's URL."""


def remember_node(url: str, token: str | None) -> None:
    """Note the token `aos node up --json` announced (`admin_token`) for requests to `url`."""
    if token is not None:
        _TOKENS[url.rstrip("/")] = token


def admin_headers(url: str) -> dict[str, str]:
    """The bearer header of the node `url` is on (the longest known prefix that ends where a
    path segment does: `:3464` is no prefix of `:34645`), or none."""
    found = [base for base in _TOKENS if url == base or url.startswith(base + "/")]
    return bearer(_TOKENS[max(found, key=len)]) if found else {}


class _Http:
    """`httpx`'s module functions, each request carrying the token of the node it goes to."""

    def request(self, method: str, url: str, **options: Any) -> Any:
        import httpx

        headers = {**admin_headers(url), **(options.pop("headers", None) or {})}
        return httpx.request(method, url, headers=headers, **options)

    def get(self, url: str, **options: Any) -> Any:
        return self.request("GET", url, **options)

    def post(self, url: str, **options: Any) -> Any:
        return self.request("POST", url, **options)


node_http = _Http()


@contextmanager
def announced(announcement: dict[str, Any]) -> Iterator[None]:
    """While a node `aos node up --json` announced so serves: its first admin's token goes
    with `http`'s requests to it and (env AOS_TOKEN) with the CLI's."""
    worlds = announcement.get("worlds") or [announcement]
    for world in worlds:
        remember_node(str(world["url"]), world.get("admin_token"))
    token = worlds[0].get("admin_token")
    before = os.environ.get("AOS_TOKEN")
    if token is not None:
        os.environ["AOS_TOKEN"] = token
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("AOS_TOKEN", None)
        else:
            os.environ["AOS_TOKEN"] = before


def admin_token(url: str) -> str | None:
    """The first admin's token of the node `url` is on (None: no node a test started)."""
    found = admin_headers(url).get("authorization")
    return None if found is None else found.removeprefix("Bearer ")
