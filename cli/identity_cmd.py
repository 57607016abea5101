"""`aos identity`: who may call a world's node, with which scopes (spec/04-effects.md §9.8).

    aos identity create NAME --scope SCOPE ... [--role ROLE ...] [--ttl 30d]
    aos identity list
    aos identity revoke NAME
    aos identity whoami --node URL

Each writes the world's identities file (`--world`, the default) or another one (`--file`,
as `aos node up --identities` reads it), or asks a node (`--node URL`, with an `admin`
token). A running node sees the change at its next request. `create` prints the token once:
the file keeps only its hash.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from aos.cli.common import emit_json, handles_errors, json_option, table
from aos.cli.remote import credentials_options, node_call
from aos.kernel.node.audit import AuditLog
from aos.kernel.node.identities import (
    SCOPES,
    Identity,
    IdentityStore,
    create_first_admin,
    parse_ttl,
)

ALL_SCOPES = "all"


def first_admin_token(world_dir: str | os.PathLike[str]) -> str | None:
    """Make a new world's first identity (`admin`, every scope); its token (None if the world
    has identities already)."""
    first = create_first_admin(IdentityStore.of_world(world_dir))
    if first is None:
        return None
    AuditLog.of_world(world_dir).write("identity.created", identity=first[0].name, by="local")
    return first[1]


def echo_first_admin(token: str | None) -> None:
    if token is not None:
        click.echo(f"admin     {token}")
        click.echo(
            "          the token of identity `admin` (every scope), shown once: keep it "
            "(AOS_TOKEN); `aos identity create` makes others"
        )


def _where(fn: Any) -> Any:
    fn = credentials_options(fn)
    fn = click.option("--node", "node_url", metavar="URL", help="Ask this node (admin token).")(fn)
    fn = click.option(
        "--file",
        "file_path",
        type=click.Path(dir_okay=False),
        help="An identities file (as `aos node up --identities` reads it).",
    )(fn)
    return click.option(
        "--world",
        "world_path",
        envvar="AOS_WORLD",
        default="./.aos",
        show_default=True,
        type=click.Path(file_okay=False),
        help="The world whose identities these are (env AOS_WORLD).",
    )(fn)


def _store(world_path: str, file_path: str | None) -> IdentityStore:
    if file_path is not None:
        return IdentityStore(Path(file_path))
    if not Path(world_path).is_dir():
        raise click.UsageError(f"no world at {world_path} (give --world, --file or --node)")
    return IdentityStore.of_world(world_path)


@click.group("identity")
def identity_group() -> None:
    """Identities: tokens with scopes and roles for a world's node."""


@identity_group.command("create")
@click.argument("name")
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    required=True,
    type=click.Choice([*SCOPES, ALL_SCOPES]),
    help="A scope (repeatable; `all` for every one).",
)
@click.option("--role", "roles", multiple=True, help="A role for human tasks (repeatable).")
@click.option(
    "--ttl", help="How long the token lives: 90s, 30m, 12h, 30d (default: until revoked)."
)
@_where
@json_option
@handles_errors
def create_command(
    name: str,
    scopes: tuple[str, ...],
    roles: tuple[str, ...],
    ttl: str | None,
    world_path: str,
    file_path: str | None,
    node_url: str | None,
    as_json: bool,
) -> None:
    """Make identity NAME and print its token (once: only its hash is kept)."""
    wanted = list(SCOPES) if ALL_SCOPES in scopes else list(dict.fromkeys(scopes))
    if node_url is not None:
        request = {"name": name, "scopes": wanted, "roles": list(roles), "ttl": ttl}
        found = node_call(node_url, "/v1/identities", request)
        identity, token = found["identity"], found["token"]
    else:
        made, token = _store(world_path, file_path).create(
            name, wanted, roles, ttl_ms=None if ttl is None else parse_ttl(ttl)
        )
        identity = made.to_json()
        AuditLog.of_world(world_path).write("identity.created", identity=name, by="local")
    if as_json:
        emit_json({"identity": identity, "token": token})
        return
    click.echo(f"identity  {identity['name']}")
    click.echo(f"scopes    {', '.join(identity['scopes'])}")
    click.echo(f"roles     {', '.join(identity['roles']) or '-'}")
    click.echo(f"expires   {_when(identity['expires_unix_ms']) or 'never (until revoked)'}")
    click.echo(f"token     {token}")
    click.echo("          shown once: keep it (--token, AOS_TOKEN or --token-file)")


@identity_group.command("list")
@_where
@json_option
@handles_errors
def list_command(
    world_path: str, file_path: str | None, node_url: str | None, as_json: bool
) -> None:
    """Every identity, revoked ones too (never a token)."""
    if node_url is not None:
        found = node_call(node_url, "/v1/identities", method="GET")["identities"]
    else:
        found = [i.to_json() for i in _store(world_path, file_path).identities()]
    if as_json:
        emit_json({"identities": found})
        return
    rows = [
        [
            i["name"],
            ",".join(i["scopes"]),
            ",".join(i["roles"]) or "-",
            _when(i["expires_unix_ms"]) or "-",
            _when(i["revoked_unix_ms"]) or "-",
        ]
        for i in found
    ]
    click.echo(table(["NAME", "SCOPES", "ROLES", "EXPIRES (UTC)", "REVOKED (UTC)"], rows))


@identity_group.command("revoke")
@click.argument("name")
@_where
@json_option
@handles_errors
def revoke_command(
    name: str, world_path: str, file_path: str | None, node_url: str | None, as_json: bool
) -> None:
    """Revoke NAME's token, at once on a running node (the name is never reused)."""
    if node_url is not None:
        identity = node_call(node_url, f"/v1/identities/{name}/revoke", {})["identity"]
    else:
        revoked: Identity = _store(world_path, file_path).revoke(name)
        identity = revoked.to_json()
        AuditLog.of_world(world_path).write("identity.revoked", identity=name, by="local")
    if as_json:
        emit_json({"identity": identity})
        return
    click.echo(f"revoked   {identity['name']}  at {_when(identity['revoked_unix_ms'])}")


@identity_group.command("whoami")
@click.option("--node", "node_url", envvar="AOS_NODE", required=True, metavar="URL")
@credentials_options
@json_option
@handles_errors
def whoami_command(node_url: str, as_json: bool) -> None:
    """The identity the node sees for your token."""
    found = node_call(node_url, "/v1/identity", method="GET")
    if as_json:
        emit_json(found)
        return
    click.echo(f"identity  {found['name']}  ({', '.join(found['scopes'])})")


def _when(unix_ms: int | None) -> str | None:
    if unix_ms is None:
        return None
    from datetime import UTC, datetime

    return datetime.fromtimestamp(unix_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
