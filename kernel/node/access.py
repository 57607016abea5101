"""Access to a node (spec/04-effects.md §9.8): every route declares the scopes it needs, and
`AccessGuard`, in front of everything else the app does, lets through only callers that hold
one of them.

A route declares its scopes in its row of the route table (kernel/node/routes.py), which
mounts it with `needs(...)` (they show in the OpenAPI document as `x-aos-scopes`); the few
routes FastAPI and Starlette make themselves (the API document, the inspector's static files)
are declared in `BUILT_IN_ROUTES`.
The guard builds its table from the app's routes, so a route added without a declaration is
refused to everyone (and a test that walks the app's routes fails).

The pseudo-scopes: `PUBLIC` (anyone, no credentials), `AUTHENTICATED` (any identity),
`ADAPTER` (a request signed by one of the manifest's adapters, kernel/signing/request_auth.py; the
route checks the signature itself). A path no route matches needs an identity, then answers
404. The guard reads no body: an unauthenticated request is refused before its body is read.
"""

from __future__ import annotations

import hmac
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlsplit

import blake3 as _blake3
from starlette.routing import BaseRoute, Router

from aos.kernel.errors import AosError
from aos.kernel.node import identities as ids
from aos.kernel.node.adapter_api import route_path, send_json
from aos.kernel.node.errors import RequestInvalidError, http_status
from aos.kernel.node.identities import (
    ADAPTER,
    ANONYMOUS,
    AUTHENTICATED,
    LOCAL,
    PSEUDO_SCOPES,
    PUBLIC,
    AuthError,
    Authority,
    CrossSiteError,
    ForbiddenError,
    ImpersonationError,
    Principal,
    UnauthenticatedError,
)
from aos.kernel.signing.request_auth import HEADER_ADAPTER, HEADER_SIGNATURE, RequestVerifier

SCOPES_KEY = "x-aos-scopes"
PRINCIPAL_KEY = "aos.principal"
"""Where the guard leaves the caller in the ASGI scope (`principal_of`)."""
LOGIN_PATH = "/ui/login"
"""Where the guard sends a browser that asks for an inspector page without a session."""
LOGOUT_PATH = "/ui/logout"
SESSION_COOKIE = "aos_session"
"""The inspector's cookie: the token, HttpOnly and SameSite=Strict (kernel/node/inspector.py)."""
PAGE_TOKEN_HEADER = "x-aos-page-token"
"""Where an inspector page's action sends the page token (`page_token`) beside the cookie."""
BUILT_IN_ROUTES = {
    "/openapi.json": (PUBLIC,),
    "/docs": (PUBLIC,),
    "/docs/oauth2-redirect": (PUBLIC,),
    "/redoc": (PUBLIC,),
    "/ui/static": (PUBLIC,),
}
"""Routes the frameworks add: the API's description (it describes the software, not the
world) and the inspector's scripts and styles."""
ROUTE_CACHE_ENTRIES_MAX = 4096
"""Route lookups the guard remembers (method and path to scopes)."""
_SAFE_METHODS = frozenset({"GET", "HEAD"})
_WRITE_FREE = frozenset({PUBLIC, AUTHENTICATED, ADAPTER, ids.READ, ids.READ_PARAMS})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("aos.node")


def needs(*scopes: str, openapi_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A route's declaration, as keyword arguments of its decorator: any one of `scopes`."""
    known = (*ids.SCOPES, *PSEUDO_SCOPES)
    assert scopes and all(scope in known for scope in scopes), scopes
    return {"openapi_extra": {**(openapi_extra or {}), SCOPES_KEY: list(scopes)}}


def declared(route: BaseRoute) -> tuple[str, ...] | None:
    """The scopes a route declares (None: it declares none)."""
    extra = getattr(route, "openapi_extra", None)
    if isinstance(extra, dict) and SCOPES_KEY in extra:
        return tuple(extra[SCOPES_KEY])
    path = getattr(route, "path", None)
    return BUILT_IN_ROUTES.get(path) if isinstance(path, str) else None


# --------------------------------------------------------------------------------------------
# Who is calling


def principal_of(scope: Mapping[str, Any]) -> Principal:
    """The caller the guard let in (anonymous where it ran no guard: never in a node)."""
    found = scope.get(PRINCIPAL_KEY)
    return found if isinstance(found, Principal) else ANONYMOUS


@dataclass(frozen=True)
class Acting:
    """Whom a request acts as: `user`, presenting `roles`; `checked_roles` are the identity's
    roles for the inbox's own checks (None on an insecure-local node, which trusts the
    request as a node before identities did)."""

    user: str | None
    roles: tuple[str, ...]
    checked_roles: list[str] | None


def acting_user(
    request: Any, named: str | None, roles: list[str], *, required: bool = True
) -> Acting:
    """The user a task or governance request acts as: its identity. A request may name it
    (`user`, `approver`) and roles it holds, never anyone or anything else. On an
    insecure-local node the request names them (`required`: it must name the user)."""
    principal = principal_of(request.scope)
    if principal.trusts_request:
        if named is None and required:
            raise RequestInvalidError(
                "an --insecure-local node acts as the user the request names", path="$.user"
            )
        return Acting(named, tuple(roles), None)
    if named is not None and named != principal.name:
        raise ImpersonationError(
            f"{principal.name} cannot act as {named}", identity=principal.name, named=named
        )
    foreign = sorted(set(roles) - set(principal.roles))
    if foreign:
        raise ImpersonationError(
            f"{principal.name} does not hold the roles {', '.join(foreign)}",
            identity=principal.name,
            roles=foreign,
        )
    presented = tuple(roles) if roles else principal.roles
    return Acting(principal.name, presented, list(principal.roles))


def bearer_token(headers: Mapping[str, str]) -> str | None:
    value = headers.get("authorization")
    if value is None:
        return None
    kind, _, token = value.strip().partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        raise UnauthenticatedError("the Authorization header is `Bearer TOKEN`")
    return token.strip()


def session_token(headers: Mapping[str, str]) -> str | None:
    raw = headers.get("cookie")
    if raw is None:
        return None
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(raw)
    except Exception:  # a malformed Cookie header is no credential, not a crash
        return None
    morsel = cookie.get(SESSION_COOKIE)
    return morsel.value if morsel is not None and morsel.value else None


# --------------------------------------------------------------------------------------------
# The guard


class RouteTable:
    """The scopes of each route of an app, looked up as its router matches: the first route
    that matches fully, else the first that matches the path only (a 405). Each route's own
    path pattern is tried (no conversion of parameters), and the newest
    `ROUTE_CACHE_ENTRIES_MAX` answers are kept: a client polling one path looks it up once."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._built: list[tuple[re.Pattern[str], frozenset[str] | None, tuple[str, ...]]] = []
        self._cache: OrderedDict[tuple[str, str], tuple[str, ...] | None] = OrderedDict()
        self._count = -1

    def scopes_for(self, scope: Scope) -> tuple[str, ...] | None:
        """The scopes the request's route declares; `()` for a route that declares none;
        None when no route matches."""
        if self._count != len(self.router.routes):
            self._build()
        key = (str(scope["method"]), route_path(scope))
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        found = self._match(*key)
        self._cache[key] = found
        if len(self._cache) > ROUTE_CACHE_ENTRIES_MAX:
            self._cache.popitem(last=False)
        return found

    def _match(self, method: str, path: str) -> tuple[str, ...] | None:
        partial: tuple[str, ...] | None = None
        for pattern, methods, scopes in self._built:
            if pattern.match(path) is None:
                continue
            if methods is None or method in methods:
                return scopes
            if partial is None:
                partial = scopes
        return partial

    def _build(self) -> None:
        self._built = []
        for route in self.router.routes:
            pattern = getattr(route, "path_regex", None)
            if pattern is None:
                continue
            methods = getattr(route, "methods", None)
            self._built.append(
                (pattern, frozenset(methods) if methods else None, declared(route) or ())
            )
        self._cache.clear()
        self._count = len(self.router.routes)


class AccessGuard:
    """Authenticates and authorizes every request before the app (and its body reading)
    sees it; leaves the principal in the scope; logs refusals and privileged actions to the
    authority's audit log. Callers without `read:params` get params redacted
    (kernel/node/redaction.py)."""

    def __init__(
        self, app: ASGIApp, *, authority: Authority, router: Router, verifier: RequestVerifier
    ) -> None:
        self.app = app
        self.authority = authority
        self.table = RouteTable(router)
        self.verifier = verifier

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from aos.kernel.node.redaction import redacting  # redaction imports views

        wanted = self.table.scopes_for(scope)
        headers = _headers(scope)
        try:
            principal = self._principal(scope, headers, wanted)
        except AuthError as error:
            self.authority.audit.refused(scope, error, _who(error))
            if http_status(error) == 401 and _is_page(scope):
                await _redirect(send, scope.get("root_path", "") + LOGIN_PATH)
                return
            await send_json(send, http_status(error), {"error": error.to_dict()})
            return
        scope[PRINCIPAL_KEY] = principal
        if principal.kind in ("identity", "local") and not principal.may(ids.READ_PARAMS):
            send = redacting(send, tasks=not principal.may(ids.TASK))
        if wanted and not set(wanted) <= _WRITE_FREE:
            send = self.authority.audit.acting(scope, principal, send)
        await self.app(scope, receive, send)

    def _principal(
        self, scope: Scope, headers: Mapping[str, str], wanted: tuple[str, ...] | None
    ) -> Principal:
        if wanted is not None and PUBLIC in wanted:
            return self._optional(scope, headers)
        if self.authority.insecure_local:
            return LOCAL
        if wanted is not None and wanted == (ADAPTER,):
            return self._adapter_route(headers)
        principal = self._caller(scope, headers, wanted)
        needed = wanted if wanted is not None else (AUTHENTICATED,)
        if not needed:
            raise ForbiddenError(
                f"{scope['method']} {route_path(scope)} declares no scope: nobody may call it",
                needs=[],
            )
        if not any(principal.may(one) for one in needed):
            raise ForbiddenError(
                f"{principal.name} may not {scope['method']} {route_path(scope)}: it needs "
                f"{' or '.join(needed)}",
                identity=principal.name,
                needs=list(needed),
                has=sorted(principal.scopes - set(PSEUDO_SCOPES)),
            )
        return principal

    def _optional(self, scope: Scope, headers: Mapping[str, str]) -> Principal:
        """On a public route the caller may still be known (the inspector's login page)."""
        if self.authority.insecure_local:
            return LOCAL
        try:
            return self._caller(scope, headers, None)
        except AuthError:
            return ANONYMOUS

    def _adapter_route(self, headers: Mapping[str, str]) -> Principal:
        """An adapter's route: the route checks the signature; a token is the wrong key."""
        if HEADER_SIGNATURE in headers:
            return Principal(headers.get(HEADER_ADAPTER, ""), frozenset({ADAPTER}), kind="adapter")
        token = bearer_token(headers)
        if token is None:
            raise UnauthenticatedError(
                "this route takes requests signed by an adapter (aos-adapter, aos-timestamp-ms, "
                "aos-nonce, aos-signature)"
            )
        who = self.authority.identity(token)
        raise ForbiddenError(
            f"{who.name} is an identity; this route takes requests signed by an adapter",
            identity=who.name,
            needs=[ADAPTER],
        )

    def _caller(
        self, scope: Scope, headers: Mapping[str, str], wanted: tuple[str, ...] | None
    ) -> Principal:
        token = bearer_token(headers)
        if token is not None:
            return self.authority.identity(token)
        cookie = session_token(headers)
        if cookie is not None:
            if scope["method"] not in _SAFE_METHODS:
                _check_page_token(self.authority, cookie, headers)
            return self.authority.identity(cookie)
        if wanted is not None and ADAPTER in wanted and HEADER_SIGNATURE in headers:
            name = self.verifier.verify(
                method=scope["method"],
                target=scope["path"] + _query(scope),
                body=b"",
                headers=headers,
            )
            return Principal(name, frozenset({ADAPTER}), kind="adapter")
        raise UnauthenticatedError(f"{scope['method']} {route_path(scope)} needs credentials")


def page_token(authority: Authority, session: str) -> str:
    """The inspector's page token of a session (its cookie's token): the keyed BLAKE3 of it
    under this process's `page_key`. A page carries it and sends it in `PAGE_TOKEN_HEADER`
    with every action; another site can neither read it from the page nor compute it."""
    return _blake3.blake3(session.encode("utf-8"), key=authority.page_key).hexdigest()


def _check_page_token(authority: Authority, session: str, headers: Mapping[str, str]) -> None:
    """A state-changing request that the cookie authenticates: it must come from the node's
    own pages (`same_origin`) and carry their page token; a cookie alone is no credential for
    a write (spec/04 §9.8), so a forged form or script on another site changes nothing."""
    sent = headers.get(PAGE_TOKEN_HEADER)
    if sent is None:
        raise CrossSiteError(
            "the inspector's cookie alone authenticates reads only; an action sends its "
            f"page's token in {PAGE_TOKEN_HEADER}, or a Bearer token"
        )
    if not same_origin(headers):
        raise CrossSiteError("an action with the inspector's cookie comes from its own pages")
    if not hmac.compare_digest(sent, page_token(authority, session)):
        raise CrossSiteError(
            "the page token does not belong to this session and node (a page from before the "
            "node restarted: load it again)"
        )


def _is_page(scope: Scope) -> bool:
    """An inspector page asked for by a browser (not a fragment htmx loads into one)."""
    path = route_path(scope)
    headers = _headers(scope)
    return (
        scope["method"] == "GET"
        and (path == "/ui" or path.startswith("/ui/"))
        and "hx-request" not in headers
    )


async def _redirect(send: Send, location: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [(b"location", location.encode("latin-1")), (b"content-length", b"0")],
        }
    )
    await send({"type": "http.response.body", "body": b""})


def same_origin(headers: Mapping[str, str]) -> bool:
    """Whether a browser's request comes from this node's own pages: `Sec-Fetch-Site:
    same-origin` (which no page can set), or an `Origin` (else a `Referer`) naming the host it
    was sent to. The inspector's pages send no referrer, so a browser's `Origin` is `null`
    there and `Sec-Fetch-Site` is what tells."""
    if headers.get("sec-fetch-site") == "same-origin":
        return True
    host = headers.get("host", "")
    source = headers.get("origin") or headers.get("referer")
    if not source or source == "null":
        return False
    return urlsplit(source).netloc == host


def _who(error: AosError) -> str | None:
    name = error.detail.get("identity") or error.detail.get("name")
    return name if isinstance(name, str) else None


def _query(scope: Scope) -> str:
    query: bytes = scope.get("query_string", b"")
    return f"?{query.decode('latin-1')}" if query else ""


def _headers(scope: Scope) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        found.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return found
