"""Writes through the node that owns a world.

While `aos node up` serves a world it is the world's only writer, so a command that writes
(`aos world send`, `cell retry|reset`, `intent cancel`, `time advance|jump-next`, every
`aos gov` action) sends its
request to that node: the one named by `--node`, else the one the world's owner record names
(kernel/node/owner.py: `node.json`, or for a PostgreSQL world the database's owner registry,
which may name a node on another machine). Reads need no node: they open the world read-only.

Every request carries the caller's token (`Authorization: Bearer`, spec/04 §9.8), the first
found of: `--token TOKEN`, `--token-file FILE`, env `AOS_TOKEN`, env `AOS_TOKEN_FILE`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from aos.kernel import cbor
from aos.kernel.errors import AosError
from aos.kernel.node.errors import NodeUnreachableError, refused
from aos.kernel.node.owner import owner_url
from aos.kernel.node.tls import client_verify

NODE_TIMEOUT_S = 60.0
"""How long a write through the node may take (it runs the world to idle)."""
SHADOW_TIMEOUT_S = 900.0
"""How long `aos gov shadow` waits for a node's shadow (the node's own bound,
`--shadow-ms-max`, is 600 s by default)."""

TOKEN_ENV = "AOS_TOKEN"
TOKEN_FILE_ENV = "AOS_TOKEN_FILE"
TOKEN_FILE_BYTES_MAX = 4096
_TOKEN_KEY = "aos.token"
_TOKEN_FILE_KEY = "aos.token_file"


def _remember(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def store(context: click.Context, _: click.Parameter, value: Any) -> None:
        if value is not None:
            context.meta[key] = value

    return store


def credentials_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--token` and `--token-file`, kept for `client_token` (no command argument)."""
    fn = click.option(
        "--token-file",
        type=click.Path(dir_okay=False),
        expose_value=False,
        callback=_remember(_TOKEN_FILE_KEY),
        help=f"A file holding the token (env {TOKEN_FILE_ENV}).",
    )(fn)
    return click.option(
        "--token",
        expose_value=False,
        callback=_remember(_TOKEN_KEY),
        help=f"The identity's token for the node (env {TOKEN_ENV}; `aos identity create`).",
    )(fn)


def node_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = credentials_options(fn)
    return click.option(
        "--node",
        "node_url",
        metavar="URL",
        help="Write through this node (default: the node that serves the world, if one does).",
    )(fn)


def client_token() -> str | None:
    """The token to send: --token, --token-file, AOS_TOKEN, AOS_TOKEN_FILE (the first given)."""
    context = click.get_current_context(silent=True)
    meta = context.meta if context is not None else {}
    if meta.get(_TOKEN_KEY):
        return str(meta[_TOKEN_KEY])
    if meta.get(_TOKEN_FILE_KEY):
        return _token_file(str(meta[_TOKEN_FILE_KEY]))
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV].strip()
    if os.environ.get(TOKEN_FILE_ENV):
        return _token_file(os.environ[TOKEN_FILE_ENV])
    return None


def _token_file(path: str) -> str:
    try:
        with open(path, "rb") as file:
            data = file.read(TOKEN_FILE_BYTES_MAX + 1)
    except OSError as error:
        raise TokenFileError(f"cannot read the token file {path}: {error}") from None
    if len(data) > TOKEN_FILE_BYTES_MAX or not data.strip():
        raise TokenFileError(f"{path} does not hold one token")
    return data.decode("utf-8", "replace").strip()


def auth_headers() -> dict[str, str]:
    token = client_token()
    return {} if token is None else {"authorization": f"Bearer {token}"}


class TokenFileError(AosError):
    code = "auth.token_file"
    hint = "the token file holds the token `aos identity create` printed, and nothing else"


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

    content = None
    headers = auth_headers()
    if cbor_body is not None:
        content = cbor.encode(cbor_body)
        headers["content-type"] = "application/cbor"
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
