"""`aos node up`: serve a world over HTTP; `aos task ...`: the human task inbox of a node.

    aos node up [--world PATH ...] [--bind 127.0.0.1:9010] [--human-adapter NAME --human-key FILE]
                [--insecure-local] [--identities FILE]
                [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
                [--header-timeout-ms MS] [--connections-max N] [--write-rate-per-s N] ...
                [--limit NAME=VALUE ...] [--limits-file FILE]   (every NodeLimits field)
                [--takeover] [--owner-lease-ms MS] [--node-id ID]   (PostgreSQL worlds)
    aos task ls [--assignee U] [--role R] [--status open|claimed] | task show INTENT
    aos task claim INTENT [--role R ...] | task release INTENT
    aos task reassign INTENT (--to V | --unassign) | task history INTENT
    aos task complete INTENT --status ok --payload-json JSON
    (each acts as the identity of --token / AOS_TOKEN; --user may name it, spec/04 §9.8)

The node holds the world (one writer), so the task commands talk to the running node over its
HTTP API (`--node URL`, env AOS_NODE) instead of opening the world.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any

import click
import uvicorn

from aos.cli.common import (
    emit_json,
    fail,
    handles_errors,
    json_option,
    pass_settings,
    table,
)
from aos.cli.limit_options import LIMITS_EPILOG, limit_options
from aos.cli.remote import credentials_options, node_call
from aos.flows.serve.pages import add_flow_pages
from aos.flows.serve.routes import add_flow_routes
from aos.flows.serve.tracing import add_flow_tracing
from aos.kernel.errors import AosError
from aos.kernel.node.app import create_app
from aos.kernel.node.audit import AuditLog
from aos.kernel.node.errors import NodeConfigError
from aos.kernel.node.human import TASK_STATUSES, HumanAdapter
from aos.kernel.node.identities import (
    Authority,
    IdentityStore,
    InsecureBindError,
    create_first_admin,
)
from aos.kernel.node.inspector import add_inspector
from aos.kernel.node.limits import NodeLimits
from aos.kernel.node.node import Node
from aos.kernel.node.owner import WorldOwnership, remove_owner, unserved, write_owner
from aos.kernel.node.registry_api import add_registry_route
from aos.kernel.node.tls import TlsFiles, uvicorn_options
from aos.kernel.node.transport import (
    LISTEN_BACKLOG,
    bounded_protocol,
    raise_open_files_limit,
    tls_handshake_bounded,
)
from aos.kernel.node.worlds import (
    NAME_CHARS_MAX,
    WORLDS_PATH,
    WORLDS_PREFIX,
    MountedWorld,
    WorldsRouter,
    valid_name,
    where_first,
)
from aos.kernel.signing.keys import read_seed
from aos.kernel.store.url import world_location
from aos.kernel.text import jsontext

BIND_DEFAULT = "127.0.0.1:9010"
NODE_URL_DEFAULT = "http://127.0.0.1:9010"
NODE_TIMEOUT_S_DEFAULT = 30.0
TASKS_LIMIT_DEFAULT = 100
PARAMS_CHARS_MAX = 60
TASK_STATUS_FILTERS = ("open", "claimed")
_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


# --------------------------------------------------------------------------------------------
# aos node up


@click.group("node")
def node_group() -> None:
    """The world host: serve one world to clients and adapters over HTTP."""


@dataclass(frozen=True)
class _UpSettings:
    """What `aos node up` was given: its options, the node's limits resolved from theirs."""

    bind: str
    tls_cert: str | None
    tls_key: str | None
    tls_client_ca: str | None
    human_adapter: str | None
    human_key: str | None
    takeover: bool
    node_id: str | None
    insecure_local: bool
    identities_file: str | None
    no_sync: bool
    access_log: bool
    world_paths: tuple[str, ...]
    as_json: bool
    limits: NodeLimits


@node_group.command("up", epilog=LIMITS_EPILOG)
@click.option(
    "--bind",
    default=BIND_DEFAULT,
    show_default=True,
    help="HOST:PORT to listen on (port 0: any free port). Loopback unless you mean otherwise: "
    "the node's other routes answer any caller who reaches it.",
)
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False),
    help="Serve HTTPS with this certificate chain (PEM); give --tls-key with it.",
)
@click.option(
    "--tls-key",
    type=click.Path(exists=True, dir_okay=False),
    help="The certificate's private key (PEM).",
)
@click.option(
    "--tls-client-ca",
    type=click.Path(exists=True, dir_okay=False),
    help="Mutual TLS: every client must present a certificate this CA (PEM) signed.",
)
@click.option("--human-adapter", metavar="NAME", help="Host this adapter as a human task inbox.")
@click.option(
    "--human-key",
    type=click.Path(exists=True, dir_okay=False),
    help="The human adapter's key file (64 hex digits, as `aos adapter keygen` writes).",
)
@click.option(
    "--takeover",
    is_flag=True,
    help="(PostgreSQL worlds) Take the world from another node whose lease lapsed (a dead "
    "node), waiting at most one --owner-lease-ms for it to lapse.",
)
@click.option(
    "--node-id",
    metavar="ID",
    help="(PostgreSQL worlds) This node's name in the owner registry (default: host name and "
    "world directory, so a restarted node takes back its own world).",
)
@click.option(
    "--insecure-local",
    is_flag=True,
    help="Serve without authentication: every caller may do everything, and task requests "
    "name their own user and roles. For development on a loopback --bind only (refused "
    "otherwise).",
)
@click.option(
    "--identities",
    "identities_file",
    type=click.Path(dir_okay=False),
    help="The identities file of every world this process serves (default: each world's "
    "own, identities.json in its directory).",
)
@click.option("--no-sync", is_flag=True, help="Skip fsync on commit (scratch worlds, tests).")
@click.option("--access-log", is_flag=True, help="Log every request.")
@click.option(
    "--world",
    "world_paths",
    multiple=True,
    envvar="AOS_WORLD",
    default=("./.aos",),
    show_default=True,
    type=click.Path(file_okay=False),
    help="World directory (env AOS_WORLD). Repeat to serve several worlds from this process, "
    "each under /worlds/NAME (NAME: its database key, or its directory's name).",
)
@json_option
@handles_errors
@limit_options(NodeLimits, into="limits")
@pass_settings(_UpSettings)
def up_command(settings: _UpSettings) -> None:
    """Serve the world (or several) over HTTP until SIGINT or SIGTERM, then close it.

    Clients send events and read state, cells and the journal; adapters lease intents and
    post signed receipts; people complete human tasks (`aos task`). The API is described at
    /openapi.json (and browsable at /docs); a web inspector is at /ui (its actions behind the same scopes).
    """
    host, port = _bind(settings.bind)
    if settings.insecure_local and not _is_loopback(host):
        raise InsecureBindError(
            f"--insecure-local with --bind {settings.bind}: not a loopback address"
        )
    tls = TlsFiles.given(settings.tls_cert, settings.tls_key, settings.tls_client_ca)
    human = _human(settings.human_adapter, settings.human_key)
    multi = len(settings.world_paths) > 1
    names = _mount_names(settings.world_paths) if multi else [""]
    servers: list[_NodeServer] = []
    worlds: list[_World] = []
    with contextlib.ExitStack() as closing:  # every world is closed, even if one fails to
        for world_path, name in zip(settings.world_paths, names, strict=True):
            worlds.append(_open_world(world_path, name, settings, human, servers, worlds))
            closing.callback(worlds[-1].close)
        app = _process_app(worlds) if multi else worlds[0].app
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=settings.access_log,
            lifespan="off",
            timeout_graceful_shutdown=max(1, settings.limits.shutdown_grace_ms // 1000),
            timeout_keep_alive=settings.limits.idle_connection_s,
            http=bounded_protocol(settings.limits, raise_open_files_limit()),
            backlog=LISTEN_BACKLOG,
            **uvicorn_options(tls),
        )
        nodes = [world.node for world in worlds]
        as_json = settings.as_json
        server = _NodeServer(config, nodes, lambda url: _announce(url, worlds, human, as_json))
        servers.append(server)
        # Once it listens, each world's owner record tells the CLI to write through it.
        server.on_listening = lambda url: _listening(url, worlds)
        if not all(world.lost is not None for world in worlds):
            server.run()
    lost = [world.lost for world in worlds if world.lost is not None]
    if lost and len(lost) == len(worlds):
        raise lost[0]
    if not settings.as_json:
        click.echo(
            "aos node: stopped, world closed" if not multi else "aos node: stopped, worlds closed"
        )


def _human(adapter: str | None, key_file: str | None) -> HumanAdapter | None:
    if (adapter is None) != (key_file is None):
        raise click.UsageError("give --human-adapter and --human-key together")
    if adapter is None or key_file is None:
        return None
    return HumanAdapter(adapter, read_seed(key_file))


def _open_world(
    world_path: str,
    name: str,
    settings: _UpSettings,
    human: HumanAdapter | None,
    servers: list[_NodeServer],
    worlds: list[_World],
) -> _World:
    authority = _door(world_path, settings.identities_file, settings.insecure_local)
    open_node = _opener(world_path, settings.limits, human, not settings.no_sync, authority)
    world = _World.open(world_path, name, open_node, servers, worlds, settings)
    # Only a world this process now serves gets its first admin: a refused start (another
    # node owns it) must make nobody, least of all one whose token no one saw.
    world.first_token = _first_admin(world_path, authority)
    return world


def _listening(url: str, worlds: list[_World]) -> None:
    for world in worlds:
        world.listening(url)


def _opener(
    world_path: str,
    limits: NodeLimits,
    human: HumanAdapter | None,
    sync: bool,
    authority: Authority,
) -> Callable[[], Node]:
    return lambda: Node.open_path(
        world_path, limits=limits, human=human, sync=sync, authority=authority
    ).start()


def _door(world_path: str, identities_file: str | None, insecure_local: bool) -> Authority:
    """The door of a world: its identities (its own file, or --identities)."""
    store = (
        IdentityStore(Path(identities_file))
        if identities_file is not None
        else IdentityStore.of_world(world_path)
    )
    audit = AuditLog.of_world(world_path)
    return Authority(store, insecure_local=insecure_local, audit=audit)


def _first_admin(world_path: str, authority: Authority) -> str | None:
    """A world whose door has no identities yet gets its first admin, whose token the
    announcement prints once; None when it had some (or the door is open)."""
    if authority.insecure_local or authority.store is None or not Path(world_path).is_dir():
        return None
    first = create_first_admin(authority.store)
    if first is None:
        return None
    authority.audit.write("identity.created", identity=first[0].name, by="aos node up")
    return first[1]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _mount_names(world_paths: tuple[str, ...]) -> list[str]:
    """Each world's name under /worlds/: its database key (PostgreSQL) or its directory's name
    (LMDB); one segment, unique in the process."""
    names = []
    for world_path in world_paths:
        location = world_location(world_path)
        name = location.world if location is not None else Path(world_path).resolve().name
        if not valid_name(name):
            raise NodeConfigError(
                f"world {world_path}: {name!r} cannot name it under /worlds/ (letters, digits, "
                f"'.', '_', '-'; at most {NAME_CHARS_MAX} characters)"
            )
        if name in names:
            raise NodeConfigError(f"two worlds would be served as /worlds/{name}")
        names.append(name)
    return names


def _process_app(worlds: list[_World]) -> WorldsRouter:
    return WorldsRouter([world.mounted() for world in worlds])


class _World:
    """One world the process serves: its ownership (PostgreSQL), node, app and mount name
    (empty when the process serves only it, at the root)."""

    def __init__(
        self,
        path: str,
        name: str,
        ownership: WorldOwnership | None,
        node: Node,
        worlds: list[_World],
    ) -> None:
        self.path = path
        self.name = name
        self.ownership = ownership
        self.node = node
        self.url: str | None = None  # once it listens
        self.first_token: str | None = None  # the first admin's, when this start made it
        self.app = create_app(node)
        add_flow_routes(self.app, node)  # answers world.workflow_unknown on a world without flows
        add_flow_tracing(node)  # spans of its flow executions, when OpenTelemetry is set up
        add_flow_pages(self.app, add_inspector(self.app, node))  # the web inspector, at /ui
        # Any world of the process answers for all of them.
        add_registry_route(self.app, lambda world: where_first([w.where for w in worlds], world))

    @classmethod
    def open(
        cls,
        path: str,
        name: str,
        open_node: Callable[[], Node],
        servers: list[_NodeServer],
        worlds: list[_World],
        settings: _UpSettings,
    ) -> _World:
        """Claim (PostgreSQL) and open the world. Its lease is renewed from the take on, so a
        slow open (a recovery) keeps it; a lost lease stops the process when it serves this
        world only or has lost them all, else this world's routes answer the loss."""
        ownership = WorldOwnership.claim_world(
            path,
            node_id=settings.node_id,
            lease_ms=settings.limits.owner_lease_ms,
            takeover=settings.takeover,
        )
        if ownership is not None:
            ownership.keep(lambda _: _on_lost(path, name, servers, worlds))
        node: Node | None = None
        try:
            node = open_node()
            return cls(path, name, ownership, node, worlds)
        except BaseException:
            if node is not None:
                node.close()
            if ownership is not None:
                ownership.release()
            raise

    @property
    def lost(self) -> AosError | None:
        return None if self.ownership is None else self.ownership.lost

    def listening(self, root_url: str) -> None:
        self.url = root_url + (f"{WORLDS_PREFIX}/{self.name}" if self.name else "")
        write_owner(self.path, self.url, self.node.world_id)
        if self.ownership is not None:
            self.ownership.announce(self.url, self.node.world_id)

    def where(self, world: str) -> dict[str, Any]:
        """Where a world is served: the database's registry, or (embedded) this node alone."""
        if self.ownership is not None:
            return self.ownership.where(world)
        if world != self.node.world_id or self.url is None:
            return unserved(world)
        return {**unserved(world), "world_id": world, "url": self.url, "live": True}

    def mounted(self) -> MountedWorld:
        return MountedWorld(
            self.name, self.node.world_id, self.app, self.where, lambda: self.url, lambda: self.lost
        )

    def close(self) -> None:
        remove_owner(self.path)
        self.node.close()
        if self.ownership is not None:
            self.ownership.release()


def _on_lost(path: str, name: str, servers: list[_NodeServer], worlds: list[_World]) -> None:
    remove_owner(path)
    if not name or all(world.lost is not None for world in worlds):
        _stop_all(servers)
    else:
        click.echo(f"aos node: world {name} was taken over; no longer serving it", err=True)


def _stop_all(servers: list[_NodeServer]) -> None:
    for server in servers:
        server.handle_exit(signal.SIGTERM, None)


def _bind(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise NodeConfigError(f"--bind is HOST:PORT, not {text!r}")
    return host, int(port)


def _announce(url: str, worlds: list[_World], human: HumanAdapter | None, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(_announcement(url, worlds, human), sort_keys=True))
    else:
        for world in worlds:
            click.echo(f"aos node: world {world.node.world_id}")
            if world.first_token is not None:
                click.echo(
                    f"aos node: first identity  admin  token {world.first_token}  (shown once: "
                    "keep it; `aos identity create` makes others)"
                )
            if world.node.authority.insecure_local:
                click.echo(
                    "aos node: --insecure-local: no authentication, every caller may do "
                    "everything (development only)",
                    err=True,
                )
            served = world.url or url
            click.echo(
                f"aos node: serving at {served}  (API: {served}/openapi.json, "
                f"inspector: {served}/ui)"
            )
            if human is not None:
                click.echo(
                    f"aos node: human tasks for {human.name}  (`aos task ls --node {served}`)"
                )
        if len(worlds) > 1:
            click.echo(f"aos node: the worlds it serves: {url}{WORLDS_PATH}")
    host = url.split("//", 1)[1].rsplit(":", 1)[0].strip("[]")
    if host not in _LOOPBACK:
        click.echo(
            "aos node: warning: not on loopback; anyone who reaches it can send events and "
            "read the world (leasing and receipts need an adapter's signature)",
            err=True,
        )
    sys.stdout.flush()


def _announcement(url: str, worlds: list[_World], human: HumanAdapter | None) -> dict[str, Any]:
    """The `--json` line: one world as it always was; several, each with its URL."""
    line: dict[str, Any] = {"url": url, "human_adapter": human and human.name}
    if len(worlds) == 1:
        first = worlds[0].first_token
        return {**line, "world_id": worlds[0].node.world_id, "admin_token": first}
    listed = [
        {"name": w.name, "url": w.url, "world_id": w.node.world_id, "admin_token": w.first_token}
        for w in worlds
    ]
    return {**line, "worlds": listed}


class _NodeServer(uvicorn.Server):
    """uvicorn's server, with three changes: it says where it listens once the socket is
    bound (so `--bind HOST:0` is usable); a TLS handshake must end within the head timeout
    (kernel/node/transport.py); and a SIGINT/SIGTERM ends `run` normally instead of being
    re-raised after shutdown, so the caller closes the world and exits 0."""

    def __init__(
        self, config: uvicorn.Config, nodes: list[Node], announce: Callable[[str], None]
    ) -> None:
        super().__init__(config)
        self._nodes = nodes
        self._announce = announce
        self.on_listening: Callable[[str], object] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        handshake_ms = self._nodes[0].limits.header_timeout_ms
        with tls_handshake_bounded(self._loop, handshake_ms):
            await super().startup(sockets=sockets)
        if self.started and self.servers and self.servers[0].sockets:
            address = self.servers[0].sockets[0].getsockname()
            host = f"[{address[0]}]" if ":" in address[0] else address[0]
            scheme = "https" if self.config.is_ssl else "http"
            url = f"{scheme}://{host}:{address[1]}"
            if self.on_listening is not None:
                self.on_listening(url)
            self._announce(url)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None:
            # Long-polling lease requests return (empty) now rather than at their deadline.
            for node in self._nodes:
                self._loop.call_soon_threadsafe(node.leases.close)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)


# --------------------------------------------------------------------------------------------
# aos task


def _node_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = credentials_options(fn)
    return click.option(
        "--node",
        "node_url",
        envvar="AOS_NODE",
        default=NODE_URL_DEFAULT,
        show_default=True,
        help="The node's URL (env AOS_NODE).",
    )(fn)


_USER_HELP = (
    "Who acts: your identity's name (the node refuses another); only an --insecure-local "
    "node takes the user from here."
)


@click.group("task")
def task_group() -> None:
    """Human tasks: open intents of the human adapter a node hosts. Each command acts as the
    identity of your token (--token, AOS_TOKEN): a task is claimed, completed, released or
    reassigned by that identity, with the roles it holds."""


@task_group.command("ls")
@click.option("--assignee", metavar="USER", help="Only tasks assigned to USER.")
@click.option("--role", metavar="ROLE", help="Only tasks that name ROLE.")
@click.option(
    "--status", type=click.Choice(TASK_STATUS_FILTERS), help="Only unclaimed or claimed tasks."
)
@click.option("--limit", type=click.IntRange(min=1), default=TASKS_LIMIT_DEFAULT, show_default=True)
@_node_option
@json_option
@handles_errors
def task_ls_command(
    assignee: str | None,
    role: str | None,
    status: str | None,
    limit: int,
    node_url: str,
    as_json: bool,
) -> None:
    """List open tasks, oldest first."""
    params: dict[str, Any] = {"limit": limit}
    params.update(
        {k: v for k, v in {"assignee": assignee, "role": role, "status": status}.items() if v}
    )
    found = _request(node_url, "GET", "/v1/tasks", as_json=as_json, params=params)
    if as_json:
        emit_json(found)
        return
    rows = [
        [
            task["intent"],
            _status_text(task),
            task["assignee"] or "-",
            ",".join(task["roles"]) or "-",
            _cell_text(task["origin"]),
            _clip(
                task["title"] or json.dumps(task["params"], sort_keys=True, separators=(",", ":"))
            ),
        ]
        for task in found["tasks"]
    ]
    click.echo(table(["INTENT", "STATUS", "ASSIGNEE", "ROLES", "CELL", "TITLE OR PARAMS"], rows))


@task_group.command("show")
@click.argument("intent")
@_node_option
@json_option
@handles_errors
def task_show_command(intent: str, node_url: str, as_json: bool) -> None:
    """Print one open task (its params in full)."""
    found = _request(node_url, "GET", f"/v1/tasks/{intent}", as_json=as_json)
    if as_json:
        emit_json(found)
        return
    click.echo(f"intent      {found['intent']}")
    click.echo(f"effect      {found['effect']}")
    click.echo(f"cell        {_cell_text(found['origin'])}")
    click.echo(f"issuer ref  {found['issuer_ref'] or '-'}")
    click.echo(f"journal     seq {found['seq']}")
    click.echo(f"status      {_status_text(found)}")
    click.echo(f"assignee    {found['assignee'] or '-'}")
    click.echo(f"roles       {', '.join(found['roles']) or '-'}")
    if found["title"] is not None:
        click.echo(f"title       {found['title']}")
    if found["description"] is not None:
        click.echo(f"description {found['description']}")
    click.echo("params")
    click.echo(json.dumps(found["params"], indent=2, sort_keys=True, ensure_ascii=False))


@task_group.command("claim")
@click.argument("intent")
@click.option("--user", help=_USER_HELP)
@click.option(
    "--role",
    "roles",
    multiple=True,
    metavar="ROLE",
    help="Present only this role of your identity's (repeatable; default: all of them).",
)
@_node_option
@json_option
@handles_errors
def task_claim_command(
    intent: str, user: str, roles: tuple[str, ...], node_url: str, as_json: bool
) -> None:
    """Claim a task as your identity: nobody else may hold it, it must not be assigned to
    someone else, and a task that names roles needs one your identity holds. Claiming a task
    you hold changes nothing."""
    body = {"user": user, "roles": list(roles)}
    found = _request(node_url, "POST", f"/v1/tasks/{intent}/claim", as_json=as_json, json_body=body)
    _print_task_change(found, as_json)


@task_group.command("release")
@click.argument("intent")
@click.option("--user", help=_USER_HELP)
@_node_option
@json_option
@handles_errors
def task_release_command(intent: str, user: str, node_url: str, as_json: bool) -> None:
    """Give back a task you claimed."""
    body = {"user": user}
    path = f"/v1/tasks/{intent}/release"
    _print_task_change(_request(node_url, "POST", path, as_json=as_json, json_body=body), as_json)


@task_group.command("reassign")
@click.argument("intent")
@click.option("--user", help=_USER_HELP)
@click.option("--to", metavar="USER", help="The new assignee.")
@click.option("--unassign", is_flag=True, help="Assign the task to nobody.")
@_node_option
@json_option
@handles_errors
def task_reassign_command(
    intent: str, user: str, to: str | None, unassign: bool, node_url: str, as_json: bool
) -> None:
    """Assign a task to another user (handing over a claimed task releases it)."""
    if (to is None) == (not unassign):
        raise click.UsageError("give exactly one of --to USER, --unassign")
    body = {"user": user, "to": to}
    path = f"/v1/tasks/{intent}/reassign"
    _print_task_change(_request(node_url, "POST", path, as_json=as_json, json_body=body), as_json)


@task_group.command("history")
@click.argument("intent")
@_node_option
@json_option
@handles_errors
def task_history_command(intent: str, node_url: str, as_json: bool) -> None:
    """A task's history, oldest first (also of a closed task the node still remembers)."""
    found = _request(node_url, "GET", f"/v1/tasks/{intent}/history", as_json=as_json)
    if as_json:
        emit_json(found)
        return
    click.echo(f"task {found['intent']}: {found['status']}")
    rows = [
        [_time_text(entry["at_unix_ms"]), entry["kind"], entry["user"] or "-", _detail(entry)]
        for entry in found["entries"]
    ]
    click.echo(table(["AT (UTC)", "EVENT", "USER", "DETAIL"], rows))


@task_group.command("complete")
@click.argument("intent")
@click.option("--status", type=click.Choice(TASK_STATUSES), default="ok", show_default=True)
@click.option("--payload-json", metavar="JSON", help="The answer as JSON ('-': stdin).")
@click.option(
    "--payload-file", type=click.File("r", encoding="utf-8"), help="A file with the answer."
)
@click.option("--user", help=_USER_HELP)
@_node_option
@json_option
@handles_errors
def task_complete_command(
    intent: str,
    status: str,
    payload_json: str | None,
    payload_file: IO[str] | None,
    user: str | None,
    node_url: str,
    as_json: bool,
) -> None:
    """Complete a task: the node signs the receipt with the human adapter's key and the
    origin cell resumes. The payload must fit the effect's receipt schema (status ok)."""
    payload = _payload(payload_json, payload_file)
    body: dict[str, Any] = {"status": status, "payload": payload}
    if user is not None:
        body["user"] = user
    found = _request(
        node_url, "POST", f"/v1/tasks/{intent}/complete", as_json=as_json, json_body=body
    )
    if as_json:
        emit_json(found)
        return
    click.echo(f"settled   {found['intent']}  (journal seq {found['seq']})")
    if found["report"] is not None:
        click.echo(f"run       {found['report']['steps']} steps")


def _print_task_change(found: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(found)
        return
    click.echo(f"task      {found['intent']}")
    click.echo(f"status    {_status_text(found)}")
    click.echo(f"assignee  {found['assignee'] or '-'}")


def _status_text(task: dict[str, Any]) -> str:
    return f"claimed by {task['holder']}" if task["holder"] is not None else str(task["status"])


def _time_text(unix_ms: int) -> str:
    moment = datetime.fromtimestamp(unix_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{unix_ms % 1000:03d}"


def _detail(entry: dict[str, Any]) -> str:
    parts = []
    if entry["kind"] == "reassigned":
        parts.append(f"to {entry['to'] or 'nobody'}")
    if entry["status"] is not None:
        parts.append(f"status {entry['status']}")
    if entry["receipt_seq"] is not None:
        parts.append(f"receipt seq {entry['receipt_seq']}")
    return ", ".join(parts)


def _payload(payload_json: str | None, payload_file: IO[str] | None) -> Any:
    if payload_json is not None and payload_file is not None:
        raise click.UsageError("give at most one of --payload-json, --payload-file")
    if payload_file is not None:
        text = payload_file.read()
    elif payload_json is not None:
        text = sys.stdin.read() if payload_json == "-" else payload_json
    else:
        return None
    return jsontext.parse(text, path="payload")


def _request(
    node_url: str,
    method: str,
    path: str,
    *,
    as_json: bool,
    params: dict[str, Any] | None = None,
    json_body: Any = None,
) -> Any:
    """One API call; an error body from the node is reported like a local error (exit 1)."""
    try:
        return node_call(
            node_url,
            path,
            json_body,
            method=method,
            params=params,
            timeout_s=NODE_TIMEOUT_S_DEFAULT,
        )
    except AosError as error:
        fail(error, as_json=as_json)


def _cell_text(origin: dict[str, Any]) -> str:
    key = origin.get("key")
    if key is None:
        return str(origin["workflow"])
    shown = key if isinstance(key, str) else json.dumps(key, sort_keys=True)
    return f"{origin['workflow']}[{shown}]"


def _clip(text: str) -> str:
    return text if len(text) <= PARAMS_CHARS_MAX else text[: PARAMS_CHARS_MAX - 3] + "..."
