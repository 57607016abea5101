"""Which client a command uses (kernel/client.py, flows/serve/flow_client.py), and the caller's token.

A command that touches a world either opens it (`--world DIR`, env `AOS_WORLD`, default
`./.aos`: reads read-only, so they work beside a node that serves it; writes through that
node when one does) or talks to a node (`--node URL`; env `AOS_NODE` for `aos flow` and
`aos task`). Precedence (docs/worlds.md, spec/04 §11): an option given on the
command line wins over the environment; `--world` and `--node` both given is an error
naming both (`cli.target_conflict`), and so are `AOS_WORLD` and `AOS_NODE` both set when
neither option is given. For `aos world` and `aos gov`, `--node` only names the node to
write through: their reads need the world's directory.

Every request to a node carries the caller's token (`Authorization: Bearer`, spec/04 §9.8),
the first found of: `--token TOKEN`, `--token-file FILE`, env `AOS_TOKEN`, env
`AOS_TOKEN_FILE`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from aos.kernel.errors import AosError

if TYPE_CHECKING:
    from aos.kernel.client import LocalWorld

NODE_TIMEOUT_S = 60.0
"""How long a write through the node may take (it runs the world to idle)."""

TOKEN_ENV = "AOS_TOKEN"
TOKEN_FILE_ENV = "AOS_TOKEN_FILE"
TOKEN_FILE_BYTES_MAX = 4096
WORLD_ENV = "AOS_WORLD"
NODE_ENV = "AOS_NODE"
_TOKEN_KEY = "aos.token"
_TOKEN_FILE_KEY = "aos.token_file"


class TargetConflictError(AosError):
    code = "cli.target_conflict"
    hint = "give one of --world DIR (open the world) and --node URL (ask its node)"


class TokenFileError(AosError):
    code = "auth.token_file"
    hint = "the token file holds the token `aos identity create` printed, and nothing else"


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
    """`--node URL` of `aos world` and `aos gov`: the node to write through."""
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


def world_client(world_path: str, node_url: str | None = None) -> LocalWorld:
    """The client of `aos world` and `aos gov`: the world opened here, written through the
    node that serves it (or `node_url`)."""
    from aos.kernel.client import LocalWorld

    return LocalWorld(world_path, token=client_token(), node_url=node_url)


def node_target(world_path: str, node_url: str | None) -> str | None:
    """The node a command that opens a world or asks a node (`aos flow`) talks to, by the
    precedence above; None: it opens the world at `world_path`."""
    context = click.get_current_context()
    world_source = context.get_parameter_source("world_path")
    node_source = context.get_parameter_source("node_url")
    world_given = world_source == ParameterSource.COMMANDLINE
    node_given = node_url is not None and node_source == ParameterSource.COMMANDLINE
    if world_given and node_given:
        raise TargetConflictError(f"both --world {world_path} and --node {node_url} are given")
    if world_given or node_given:
        return node_url if node_given else None
    if node_url is not None and world_source == ParameterSource.ENVIRONMENT:
        raise TargetConflictError(
            f"both {WORLD_ENV}={world_path} and {NODE_ENV}={node_url} are set, and neither "
            "--world nor --node is given"
        )
    return node_url


def node_call(
    url: str,
    path: str,
    body: Any = None,
    *,
    method: str = "POST",
    params: dict[str, Any] | None = None,
    timeout_s: float = NODE_TIMEOUT_S,
) -> Any:
    """One request to a node's route the clients have no method for (identities, tasks): the
    answer's JSON, or the node's error raised as an AosError."""
    from aos.kernel.client import NodeConnection

    connection = NodeConnection(url, token=client_token(), timeout_s=timeout_s)
    try:
        return connection.call(method, path, body, params=params)
    finally:
        connection.close()
