"""Writes through the node that owns a world.

While `aos node up` serves a world it is the world's only writer, so a command that writes
(`aos world send`, `cell retry|reset`, `intent cancel`, `time advance|jump-next`, every
`aos gov` action) sends its
request to that node: the one named by `--node`, else the one the world's owner record names
(kernel/node/owner.py: `node.json`, or for a PostgreSQL world the database's owner registry,
which may name a node on another machine). Reads need no node: they open the world read-only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from aos.kernel import cbor
from aos.kernel.node.errors import NodeUnreachableError, refused
from aos.kernel.node.owner import owner_url
from aos.kernel.node.tls import client_verify

NODE_TIMEOUT_S = 60.0
"""How long a write through the node may take (it runs the world to idle)."""
SHADOW_TIMEOUT_S = 900.0
"""How long `aos gov shadow` waits for a node's shadow (the node's own bound,
`--shadow-ms-max`, is 600 s by default)."""

node_option = click.option(
    "--node",
    "node_url",
    metavar="URL",
    help="Write through this node (default: the node that serves the world, if one does).",
)


def serving_node(world_path: str, node_url: str | None) -> str | None:
    """The node to write through: `--node`, else the live owner of the world, else None."""
    return node_url if node_url else owner_url(Path(world_path))


def node_call(
    url: str,
    path: str,
    body: Any = None,
    *,
    method: str = "POST",
    params: dict[str, Any] | None = None,
    timeout_s: float = NODE_TIMEOUT_S,
    cbor_body: Any = None,
) -> Any:
    """One request (a POST of `body` as JSON, or of `cbor_body` as canonical CBOR, or a GET);
    the answer's JSON, or the node's error raised as an AosError."""
    import httpx  # only commands that talk to a node pay for it

    content = headers = None
    if cbor_body is not None:
        content, headers = cbor.encode(cbor_body), {"content-type": "application/cbor"}
    try:
        response = httpx.request(
            method,
            url.rstrip("/") + path,
            json=body if content is None else None,
            content=content,
            headers=headers,
            params=params,
            timeout=timeout_s,
            verify=client_verify(url),
        )
    except httpx.HTTPError as error:
        raise NodeUnreachableError(f"cannot reach {url}: {error}") from None
    try:
        found = response.json()
    except ValueError:
        found = None
    if response.is_success and found is not None:
        return found
    answer = found.get("error") if isinstance(found, dict) else None
    raise refused(answer if isinstance(answer, dict) else {}, f"HTTP {response.status_code}")
