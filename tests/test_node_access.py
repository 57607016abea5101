"""Access to a node (spec/04 §9.8), walked over the routes of the app itself: every route
declares its scopes; without credentials a scoped route is 401, with an identity that lacks
its scopes 403, with one that holds one of them neither; no refusal changes the world. Also:
tokens expire and are revoked at once, the inspector's cookie only reads, an undeclared route
is refused to everyone, and the audit log names identities, never tokens."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.routing import Mount, Route

from aos.flows.serve.pages import add_flow_pages
from aos.flows.serve.routes import add_flow_routes
from aos.kernel.node import Node, NodeLimits, routes
from aos.kernel.node.access import BUILT_IN_ROUTES, SESSION_COOKIE, declared
from aos.kernel.node.app import create_app
from aos.kernel.node.identities import (
    ADAPTER,
    AUTHENTICATED,
    PUBLIC,
    SCOPES,
    IdentityStore,
)
from aos.kernel.node.inspector import add_inspector
from aos.kernel.node.owner import unserved
from aos.kernel.node.registry_api import add_registry_route
from aos.kernel.signing.request_auth import AdapterAuth
from aos.kernel.world.world import World
from tests.auth_fixtures import bearer, token_for
from tests.test_node import ADAPTER as ADAPTER_NAME
from tests.test_node import TestClient, make_world, open_node, send
from tests.test_receipts import ADAPTER_SEED

TAIL_MS = 200

ORIGIN = {"origin": "http://testserver"}
FORM = {"content-type": "application/x-www-form-urlencoded"}
GUARD_CODES = frozenset(
    {
        "auth.unauthenticated",
        "auth.token_invalid",
        "auth.token_expired",
        "auth.token_revoked",
        "auth.forbidden",
        "auth.cross_site",
        "adapter.unauthenticated",
    }
)
"""What the guard (or an adapter route's signature check) refuses with."""
_PARAM = re.compile(r"\{([a-z_]+)(:path)?\}")


def full_app(node: Node) -> FastAPI:
    """The app `aos node up` serves for one world: API, flows, inspector, registry."""
    app = create_app(node)
    add_flow_routes(app, node)
    add_flow_pages(app, add_inspector(app, node))
    add_registry_route(app, unserved)
    return app


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    # A live tail answers for tail_stream_ms_max (5 minutes by default): the matrix only
    # needs its first bytes.
    limits = NodeLimits(tail_stream_ms_max=TAIL_MS)
    with open_node(make_world(tmp_path / "w"), limits=limits) as opened:
        yield opened


@pytest.fixture
def app(node: Node) -> FastAPI:
    return full_app(node)


@dataclass(frozen=True)
class Row:
    method: str
    path: str  # with its parameters filled in
    scopes: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}"


def rows_of(app: FastAPI) -> list[Row]:
    """One row per route and method of the app, its path parameters filled in."""
    rows = []
    for route in app.routes:
        scopes = declared(route)
        assert scopes, f"{getattr(route, 'path', route)} declares no scope"
        if isinstance(route, Mount):
            rows.append(Row("GET", route.path + "/inspector.css", scopes))
            continue
        assert isinstance(route, Route)
        for method in sorted((route.methods or {"GET"}) - {"HEAD"}):
            rows.append(Row(method, _PARAM.sub(_filled, route.path), scopes))
    return rows


def _filled(found: re.Match[str]) -> str:
    return {"seq": "999999", "world": "nowhere", "name": "nobody"}.get(found.group(1), "zz")


def world_mark(node: Node) -> tuple[int, Any]:
    """The world's height and journal head: what a refusal must leave as it was."""

    def read(world: World) -> tuple[int, Any]:
        return world.height, world.store.journal.head()

    return asyncio.run(node.host.run(read))


def call(client: TestClient, row: Row, headers: dict[str, str] | None = None) -> Any:
    headers = {**ORIGIN, **(headers or {})}
    if row.method == "GET":
        return client.get(row.path, headers=headers, follow_redirects=False)
    if row.path == "/ui/login":
        headers.update(FORM)
        return client.post(row.path, headers=headers, content=b"token=", follow_redirects=False)
    return client.request(row.method, row.path, json={}, headers=headers, follow_redirects=False)


def guard_code(answer: Any) -> str | None:
    """The `auth.*`/`adapter.unauthenticated` code of a guard's refusal (None: not one)."""
    location = answer.headers.get("location", "")
    if answer.request.method == "GET" and answer.status_code == 303 and location.endswith("/login"):
        return "auth.unauthenticated"  # an inspector page sends the browser to log in
    try:
        code = answer.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return str(code) if code in GUARD_CODES else None


def test_every_route_declares_its_scopes(app: FastAPI) -> None:
    undeclared = [getattr(r, "path", r) for r in app.routes if not declared(r)]
    assert undeclared == []
    assert len(rows_of(app)) >= 60  # the walk sees the whole app, not a hand list


def test_every_route_served_is_a_row_of_the_route_table(app: FastAPI) -> None:
    """The route table (kernel/node/routes.py, with the flows' extensions) is the whole app:
    each route the app serves is one row, with the scopes it declares; the frameworks' own
    routes are `BUILT_IN_ROUTES`."""
    rows = {(row.method, row.path): row for row in routes.served(app)}
    assert len(rows) == len(routes.served(app))  # no row twice
    served = set()
    for route in app.routes:
        if isinstance(route, Mount) or route.path in BUILT_IN_ROUTES:
            assert route.path in BUILT_IN_ROUTES, route.path
            continue
        assert isinstance(route, Route)
        for method in (route.methods or set()) - {"HEAD"}:
            row = rows.get((method, route.path))
            assert row is not None, f"{method} {route.path} is not in the route table"
            assert declared(route) == row.scopes, (method, route.path)
            served.add((method, route.path))
    assert served == set(rows)  # and every row is served
    assert {row.path for row in routes.NODE} <= {path for _, path in served}


def test_a_route_table_and_its_handlers_must_agree(node: Node) -> None:
    app = FastAPI()
    row = routes.Route("GET", "/v1/x", "x", ("read",), "read")

    async def x() -> dict[str, Any]:
        return {}

    async def y() -> dict[str, Any]:
        return {}

    with pytest.raises(routes.RouteTableError, match="no handler x"):
        routes.mount(app, [row], {})
    with pytest.raises(routes.RouteTableError, match="without a route: y"):
        routes.mount(app, [row], {"x": x, "y": y})
    assert len(app.routes) == len(FastAPI().routes) and routes.served(app) == []  # nothing
    handlers = routes.Handlers()
    handlers(x)
    with pytest.raises(ValueError, match="two handlers are named x"):
        handlers(x)


def test_the_route_scope_matrix(node: Node, app: FastAPI) -> None:
    """Every route, each with no credentials, a wrong scope and a right scope."""
    client = TestClient(app)
    send(_admin(node, app), "seed")  # a world with a record or two
    adapter = TestClient(app)
    adapter.auth = AdapterAuth(ADAPTER_NAME, ADAPTER_SEED, node.world_id)
    checked = 0
    for row in rows_of(app):
        before = world_mark(node)
        if PUBLIC in row.scopes:
            answer = call(client, row)
            assert guard_code(answer) is None, (row.id, answer.text)
            checked += 1
            continue
        bare = call(client, row)
        assert bare.status_code in (401, 303), (row.id, bare.text)
        assert guard_code(bare) in ("auth.unauthenticated",), (row.id, bare.text)
        assert world_mark(node) == before, row.id
        if row.scopes == (ADAPTER,):
            wrong = call(client, row, bearer(token_for(node)))  # every scope, but no signature
            assert (wrong.status_code, guard_code(wrong)) == (403, "auth.forbidden"), row.id
            right = call(adapter, row)
        elif row.scopes == (AUTHENTICATED,):
            right = call(client, row, bearer(token_for(node, [])))  # no scope at all
        else:
            others = [scope for scope in SCOPES if scope not in row.scopes]
            wrong = call(client, row, bearer(token_for(node, others)))
            assert (wrong.status_code, guard_code(wrong)) == (403, "auth.forbidden"), row.id
            right = call(client, row, bearer(token_for(node, [row.scopes[0]])))
        assert world_mark(node) == before, row.id
        assert right.status_code not in (401, 403), (row.id, right.text)
        assert guard_code(right) is None, (row.id, right.text)
        checked += 1
    assert checked == len(rows_of(app))


def _admin(node: Node, app: FastAPI) -> TestClient:
    client = TestClient(app)
    client.headers.update(bearer(token_for(node)))
    return client


def test_a_route_without_a_declaration_is_refused_to_everyone(node: Node) -> None:
    app = create_app(node)

    @app.get("/v1/undeclared")
    async def undeclared() -> dict[str, Any]:
        return {"ok": True}

    answer = TestClient(app).get("/v1/undeclared", headers=bearer(token_for(node)))
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "auth.forbidden"


def test_an_unknown_path_needs_an_identity_before_it_is_not_found(node: Node) -> None:
    client = TestClient(create_app(node))
    assert client.get("/v1/nothing/here").status_code == 401
    assert client.get("/v1/nothing/here", headers=bearer(token_for(node, []))).status_code == 404


def test_tokens_expire_and_are_revoked_at_once(node: Node, tmp_path: Path) -> None:
    client = TestClient(create_app(node))
    store = node.authority.store
    assert store is not None
    _, token = store.create("soon", ["read"])
    assert client.get("/v1/world", headers=bearer(token)).status_code == 200
    store.revoke("soon")
    refused = client.get("/v1/world", headers=bearer(token))
    assert (refused.status_code, refused.json()["error"]["code"]) == (401, "auth.token_revoked")
    now = [1_000]
    timed = IdentityStore(tmp_path / "ids.json", clock_ms=lambda: now[0])
    _, short = timed.create("brief", ["read"], ttl_ms=500)
    assert timed.by_token(short).name == "brief"
    now[0] = 1_500
    with pytest.raises(Exception, match="expired"):
        timed.by_token(short)
    for bad in ("aos_" + "x" * 43, "Basic abc", "nonsense"):
        answer = client.get("/v1/world", headers={"authorization": f"Bearer {bad}"})
        assert answer.status_code == 401, bad


def test_a_revocation_by_another_process_reaches_a_running_node(tmp_path: Path) -> None:
    """The CLI writes the world's file; the node reads it again at the next request."""
    world = make_world(tmp_path / "w")
    with open_node(world) as node:
        client = TestClient(create_app(node))
        _, token = IdentityStore.of_world(world).create("viewer", ["read"])
        assert client.get("/v1/world", headers=bearer(token)).status_code == 200
        IdentityStore.of_world(world).revoke("viewer")
        assert client.get("/v1/world", headers=bearer(token)).status_code == 401
        (world / "identities.json").write_text("{not json")
        unreadable = client.get("/v1/world", headers=bearer(token))
        assert unreadable.json()["error"]["code"] == "auth.identities_unreadable"


def test_the_inspector_logs_in_with_a_cookie_that_only_reads(node: Node, app: FastAPI) -> None:
    client = TestClient(app)
    assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/login"
    token = token_for(node, ["read", "send"])
    forged = client.post(
        "/ui/login", content=f"token={token}".encode(), headers=FORM, follow_redirects=False
    )
    assert forged.status_code == 403  # no Origin: not from the node's own page
    answer = client.post(
        "/ui/login",
        content=f"token={token}".encode(),
        headers={**ORIGIN, **FORM},
        follow_redirects=False,
    )
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert client.get("/ui").status_code == 200  # the cookie, kept by the client
    height = world_mark(node)
    sent = client.post("/v1/events", json={"schema": "demo/Ping@1", "value": {}})
    assert sent.status_code == 403 and sent.json()["error"]["code"] == "auth.cross_site"
    assert world_mark(node) == height
    client.cookies.delete(SESSION_COOKIE)
    bad = client.post("/ui/login", content=b"token=aos_nope", headers={**ORIGIN, **FORM})
    assert bad.status_code == 401 and "auth.token_invalid" in bad.text


def test_the_audit_log_names_identities_never_tokens(tmp_path: Path) -> None:
    world = make_world(tmp_path / "w")
    with open_node(world) as node:
        client = TestClient(create_app(node))
        token = token_for(node, ["read"], name="reader")
        client.post(
            "/v1/events", json={"schema": "demo/Ping@1", "value": {}}, headers=bearer(token)
        )
        client.get("/v1/world")
        admin = token_for(node, name="boss")
        client.post("/v1/time/advance", json={"by_ns": 1}, headers=bearer(admin))
    text = (world / "audit.jsonl").read_text()
    entries = [json.loads(line) for line in text.splitlines()]
    assert token not in text and admin not in text
    refused = [e for e in entries if e["event"] == "refused"]
    assert {(e["identity"], e["code"]) for e in refused} >= {
        ("reader", "auth.forbidden"),
        (None, "auth.unauthenticated"),
    }
    acted = [e for e in entries if e["event"] == "acted"]
    assert [(e["identity"], e["path"], e["status"]) for e in acted] == [
        ("boss", "/v1/time/advance", 200)
    ]


def test_insecure_local_lets_everyone_in(tmp_path: Path) -> None:
    from aos.kernel.node.identities import Authority

    world = make_world(tmp_path / "w")
    authority = Authority(IdentityStore.of_world(world), insecure_local=True)
    with open_node(world, authority=authority) as node:
        client = TestClient(create_app(node))
        assert client.get("/v1/world").status_code == 200
        assert client.get("/v1/identity").json()["name"] == "local"


def test_the_identity_commands_make_list_and_revoke(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from aos.cli.main import main

    world = make_world(tmp_path / "w")

    def aos(*args: str) -> Any:
        done = CliRunner().invoke(main, [*args, "--world", str(world), "--json"])
        return done.exit_code, json.loads(done.output)

    code, made = aos("identity", "create", "viewer", "--scope", "read", "--ttl", "30d")
    assert code == 0 and made["identity"]["scopes"] == ["read"] and made["token"]
    assert made["token"] not in (world / "identities.json").read_text()
    assert aos("identity", "create", "viewer", "--scope", "read")[1]["error"]["code"] == (
        "auth.identity_exists"
    )
    bad = aos("identity", "create", "x y", "--scope", "read")[1]["error"]["code"]
    assert bad == "auth.identity_invalid"
    assert aos("identity", "create", "t", "--scope", "read", "--ttl", "3 weeks")[0] == 1
    code, revoked = aos("identity", "revoke", "viewer")
    assert code == 0 and revoked["identity"]["revoked_unix_ms"] is not None
    listed = aos("identity", "list")[1]["identities"]
    assert [(i["name"], i["revoked_unix_ms"] is not None) for i in listed] == [("viewer", True)]


def test_an_identities_file_is_audited_beside_it_wherever_the_command_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--file` writes that file and the audit log in its folder, not a world's (there was
    none here: the change was made and the audit line lost, with a traceback)."""
    from click.testing import CliRunner

    from aos.cli.main import main

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no ./.aos world here
    file = tmp_path / "etc" / "identities.json"
    file.parent.mkdir()

    def aos(*args: str) -> Any:
        done = CliRunner().invoke(main, [*args, "--file", str(file), "--json"])
        assert done.exit_code == 0, done.output
        return json.loads(done.output)

    made = aos("identity", "create", "ops", "--scope", "operate")
    aos("identity", "revoke", "ops")
    assert [i["name"] for i in aos("identity", "list")["identities"]] == ["ops"]
    audit = (file.parent / "audit.jsonl").read_text()
    entries = [json.loads(line) for line in audit.splitlines()]
    assert [(e["event"], e["identity"], e["by"]) for e in entries] == [
        ("identity.created", "ops", "local"),
        ("identity.revoked", "ops", "local"),
    ]
    assert made["token"] not in audit and list(elsewhere.iterdir()) == []


def test_insecure_local_is_refused_off_loopback(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from aos.cli.main import main

    world = make_world(tmp_path / "w")
    args = ["node", "up", "--world", str(world), "--insecure-local", "--json"]
    done = CliRunner().invoke(main, [*args, "--bind", "0.0.0.0:0"])
    assert done.exit_code == 1
    assert json.loads(done.output)["error"]["code"] == "auth.insecure_bind"
    assert not (world / "identities.json").exists()  # refused before anything was made
