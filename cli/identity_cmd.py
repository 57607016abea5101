"""`aos identity`: who may call a world's node, with which scopes (spec/04-effects.md §9.8).

    aos identity create NAME --scope SCOPE ... [--role ROLE ...] [--ttl 30d]
    aos identity list
    aos identity revoke NAME
    aos identity whoami --node URL

Each writes the world's identities file (`--world`, the default) or another one (`--file`,
as `aos node up --identities` reads it), noting the change in the audit log beside the file
(the world's own for the world's file), or asks a node (`--node URL`, with an `admin`
token). A running node sees the change at its next request. `create` prints the token once:
the file keeps only its hash.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

import click

from aos.cli.common import emit_json, handles_errors, json_option, table
from aos.cli.remote import credentials_options, node_call
from aos.kernel.node.audit import AUDIT_FILE_NAME, AuditLog
from aos.kernel.node.identities import (
    SCOPES,
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


class Identities(Protocol):
    """The identities of one place; the commands call one and render what it answers, the
    same whichever it is (`identities_at`)."""

    def create(
        self, name: str, scopes: list[str], roles: list[str], ttl: str | None
    ) -> tuple[dict[str, Any], str]: ...

    def listed(self) -> list[dict[str, Any]]: ...

    def revoke(self, name: str) -> dict[str, Any]: ...


class FileIdentities:
    """An identities file written here, each change noted in the audit log beside it (the
    world's own log for the world's file)."""

    def __init__(self, store: IdentityStore, audit: AuditLog) -> None:
        self.store, self.audit = store, audit

    def create(
        self, name: str, scopes: list[str], roles: list[str], ttl: str | None
    ) -> tuple[dict[str, Any], str]:
        ttl_ms = None if ttl is None else parse_ttl(ttl)
        made, token = self.store.create(name, scopes, roles, ttl_ms=ttl_ms)
        self.audit.write("identity.created", identity=name, by="local")
        return made.to_json(), token

    def listed(self) -> list[dict[str, Any]]:
        return [identity.to_json() for identity in self.store.identities()]

    def revoke(self, name: str) -> dict[str, Any]:
        identity = self.store.revoke(name)
        self.audit.write("identity.revoked", identity=name, by="local")
        return identity.to_json()


class NodeIdentities:
    """A node's identities, asked as an admin (the node writes and audits them)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def create(
        self, name: str, scopes: list[str], roles: list[str], ttl: str | None
    ) -> tuple[dict[str, Any], str]:
        request = {"name": name, "scopes": scopes, "roles": roles, "ttl": ttl}
        found = node_call(self.url, "/v1/identities", request)
        return found["identity"], found["token"]

    def listed(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = node_call(self.url, "/v1/identities", method="GET")[
            "identities"
        ]
        return found

    def revoke(self, name: str) -> dict[str, Any]:
        identity: dict[str, Any] = node_call(self.url, f"/v1/identities/{name}/revoke", {})[
            "identity"
        ]
        return identity


def identities_at(world_path: str, file_path: str | None, node_url: str | None) -> Identities:
    """The place the options name: `--node`, else `--file`, else the world."""
    if node_url is not None:
        return NodeIdentities(node_url)
    if file_path is not None:
        audit = AuditLog(Path(file_path).resolve().parent / AUDIT_FILE_NAME)
        return FileIdentities(IdentityStore(Path(file_path)), audit)
    if not Path(world_path).is_dir():
        raise click.UsageError(f"no world at {world_path} (give --world, --file or --node)")
    return FileIdentities(IdentityStore.of_world(world_path), AuditLog.of_world(world_path))


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
    place = identities_at(world_path, file_path, node_url)
    identity, token = place.create(name, wanted, list(roles), ttl)
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
    found = identities_at(world_path, file_path, node_url).listed()
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
    identity = identities_at(world_path, file_path, node_url).revoke(name)
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
