"""The adapters' hot endpoints, `POST /v1/leases` and `POST /v1/receipts`, served as plain ASGI
(spec/04-effects.md §9.3): a sequential flow makes one or two of these requests per task, and
FastAPI's routing, dependency solving and pydantic models cost more event-loop time than the
route bodies. `AdapterFastPath` answers exactly these two requests ahead of the FastAPI app,
behind `RequestGuard` (so the size, time and JSON depth limits hold as for every request), with
the same checks in the same order: the signature first (kernel/adapters/auth.py), then the
body's shape, strictly typed, then the node. The FastAPI routes of the same paths call the same
functions (they describe the endpoints in the OpenAPI document).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from aos.kernel import cbor, jsontext
from aos.kernel.errors import AosError
from aos.kernel.node.errors import NodeInternalError, RequestInvalidError, http_status
from aos.kernel.node.node import LeaseAsk, Node

LEASES_PATH = "/v1/leases"
RECEIPTS_PATH = "/v1/receipts"
CBOR_MEDIA_TYPE = "application/cbor"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("aos.node")

_LEASE_KEYS = frozenset({"adapter", "effects", "max", "wait_ms"})
_RECEIPT_KEYS = frozenset({"receipt", "lease"})


# --------------------------------------------------------------------------------------------
# The two endpoints


async def serve_lease(node: Node, identity: str, body: bytes) -> dict[str, Any]:
    """`POST /v1/leases` signed by `identity`: `{adapter, effects?, max?, wait_ms?}`."""
    request = jsontext.parse(body, path="$", depth_max=node.limits.json_depth_max)
    if not isinstance(request, dict) or set(request) - _LEASE_KEYS or "adapter" not in request:
        raise RequestInvalidError(
            'the body is {"adapter": name, "effects": [names], "max": n, "wait_ms": ms}',
            path="$",
        )
    adapter = request["adapter"]
    if not isinstance(adapter, str):
        raise RequestInvalidError("adapter is a name", path="$.adapter")
    effects = _names(request.get("effects", []), "$.effects")
    count = _integer(request.get("max", 1), "$.max")
    wait_ms = _integer(request.get("wait_ms", 0), "$.wait_ms")
    return await node.lease(identity, adapter, effects, count, wait_ms)


async def serve_receipt(
    node: Node, identity: str, body: bytes, content_type: str | None
) -> dict[str, Any]:
    """`POST /v1/receipts` signed by `identity`: `{receipt, lease?}`, JSON or CBOR."""
    value, then_lease = receipt_request(body, content_type)
    return await node.settle(value, identity, then_lease)


def receipt_request(body: bytes, content_type: str | None) -> tuple[Any, LeaseAsk | None]:
    """The receipt, and what the adapter asks to lease once it is settled (if it asks)."""
    media_type = (content_type or "").split(";")[0].strip().lower()
    if media_type == CBOR_MEDIA_TYPE:
        # Not necessarily canonical: an adapter in another language need not sort keys. The
        # signature is checked over the canonical form of what was decoded.
        parsed = cbor.decode(body, canonical=False)
    else:
        parsed = cbor.from_json(jsontext.parse(body, path="$"))
    if not isinstance(parsed, dict) or "receipt" not in parsed or set(parsed) - _RECEIPT_KEYS:
        raise RequestInvalidError(
            'the body is {"receipt": {"body": ..., "signature": ...}, "lease"?: {...}}'
        )
    ask = parsed.get("lease")
    return parsed["receipt"], None if ask is None else _lease_ask(ask)


def _lease_ask(ask: Any) -> LeaseAsk:
    """A receipt request's `lease`: `{"effects": [names]?, "max": n}`."""
    if not isinstance(ask, dict) or set(ask) - {"effects", "max"} or "max" not in ask:
        raise RequestInvalidError('lease is {"effects": [names], "max": n}', path="$.lease")
    effects = _names(ask.get("effects", []), "$.lease.effects")
    return LeaseAsk(effects, _integer(ask["max"], "$.lease.max"))


def _names(value: Any, path: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise RequestInvalidError("a list of names", path=path)
    return value


def _integer(value: Any, path: str) -> int:
    if type(value) is not int:  # not a bool, not a float
        raise RequestInvalidError("an integer", path=path)
    return value


# --------------------------------------------------------------------------------------------
# The ASGI front


class AdapterFastPath:
    """Serves `POST /v1/leases` and `POST /v1/receipts` itself and hands every other request
    to `app`. Placed behind `RequestGuard`, which has read the whole body."""

    def __init__(self, app: ASGIApp, *, node: Node) -> None:
        self.app = app
        self.node = node

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Behind a mount (several worlds per process) the route is the path after `root_path`;
        # the adapter signed the whole path, so that is the target checked.
        path = route_path(scope) if scope["type"] == "http" else None
        if scope["type"] != "http" or scope["method"] != "POST" or path not in _SERVED:
            await self.app(scope, receive, send)
            return
        body = await _body(receive)
        if body is None:
            return  # the client went away
        headers = _headers(scope)
        try:
            query = scope.get("query_string", b"").decode("latin-1")
            identity = self.node.verifier.verify(
                method="POST",
                target=scope["path"] + (f"?{query}" if query else ""),
                body=body,
                headers=headers,
            )
            if path == LEASES_PATH:
                answer = await serve_lease(self.node, identity, body)
            else:
                answer = await serve_receipt(self.node, identity, body, headers.get("content-type"))
        except AosError as error:
            await send_json(send, http_status(error), {"error": error.to_dict()})
            return
        except Exception as error:
            log.error("request failed", exc_info=error)
            internal = NodeInternalError(f"{type(error).__name__}: {error}")
            await send_json(send, http_status(internal), {"error": internal.to_dict()})
            return
        await send_json(send, 200, answer)


_SERVED = frozenset({LEASES_PATH, RECEIPTS_PATH})


def route_path(scope: Scope) -> str:
    """The path the app routes on: behind a mount (`root_path`, ASGI's prefix, as Starlette's
    Mount and kernel/node/worlds.py set it) the part after the prefix; else the whole path."""
    path: str = scope.get("path", "")
    root = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root + "/") else path


async def _body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(bytes(message.get("body", b"")))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _headers(scope: Scope) -> Mapping[str, str]:
    """Header names lowercased (ASGI sends them so); the first of repeated ones, as Starlette's
    `Headers.get` answers."""
    found: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        found.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    return found


async def send_json(send: Send, status: int, payload: Any) -> None:
    data = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
