"""The identities on a node's HTTP API (spec/04-effects.md §9.8), as `aos identity --node`:

    GET  /v1/identity                   the caller: name, scopes, roles, expiry (any identity)
    GET  /v1/identities                 every identity, revoked ones too (admin)
    POST /v1/identities                 {name, scopes, roles?, ttl?} -> {identity, token} (admin)
    POST /v1/identities/{name}/revoke   (admin)

The token is in the creating answer only; the file keeps its hash.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field

from aos.kernel.node.access import principal_of
from aos.kernel.node.identities import (
    IDENTITY_NAME_CHARS_MAX,
    IDENTITY_ROLES_MAX,
    SCOPES,
    Authority,
    IdentityStore,
    IdentityUnknownError,
    parse_ttl,
)
from aos.kernel.node.routes import Handlers


class IdentityRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=IDENTITY_NAME_CHARS_MAX)
    scopes: list[str] = Field(max_length=len(SCOPES), description=", ".join(SCOPES))
    roles: list[str] = Field(default_factory=list, max_length=IDENTITY_ROLES_MAX)
    ttl: str | None = Field(None, max_length=20, description="e.g. 90s, 30m, 12h, 30d")


def identity_handlers(authority: Authority) -> Handlers:
    """The handlers of `routes.IDENTITIES`."""
    handler = Handlers()

    def store() -> IdentityStore:
        if authority.store is None:
            raise IdentityUnknownError("this node keeps no identities")
        return authority.store

    @handler
    async def whoami(request: Request) -> dict[str, Any]:
        """The caller's identity (on an --insecure-local node: `local`, every scope)."""
        principal = principal_of(request.scope)
        if principal.kind != "identity":
            return {"name": principal.name, "kind": principal.kind, "scopes": sorted(SCOPES)}
        return {**store().get(principal.name).to_json(), "kind": principal.kind}

    @handler
    async def listing() -> dict[str, Any]:
        found = await asyncio.to_thread(store().identities)
        return {"identities": [identity.to_json() for identity in found]}

    @handler
    async def create(body: IdentityRequest, request: Request) -> dict[str, Any]:
        """A new identity; its token is in this answer only."""
        ttl_ms = None if body.ttl is None else parse_ttl(body.ttl)
        identity, token = await asyncio.to_thread(
            store().create, body.name, body.scopes, body.roles, ttl_ms=ttl_ms
        )
        by = principal_of(request.scope).name
        authority.audit.write("identity.created", request.scope, identity=identity.name, by=by)
        return {"identity": identity.to_json(), "token": token}

    @handler
    async def revoke(name: str, request: Request) -> dict[str, Any]:
        identity = await asyncio.to_thread(store().revoke, name)
        by = principal_of(request.scope).name
        authority.audit.write("identity.revoked", request.scope, identity=name, by=by)
        return {"identity": identity.to_json()}

    return handler
