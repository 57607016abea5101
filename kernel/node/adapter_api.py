"""The node's hot endpoints served as plain ASGI: the adapters' `POST /v1/leases` and
`POST /v1/receipts` (spec/04-effects.md §9.3), and the GET routes registered as `FastRead`s
(a flow execution's status, which a client polls while it runs). A sequential flow makes one or
two adapter requests per task and its client a status poll every few milliseconds, and
FastAPI's routing, dependency solving, pydantic models and response encoding cost more
event-loop time (and GIL time taken from the host thread's step) than the route bodies.
`AdapterFastPath` answers exactly these requests ahead of the FastAPI app, behind
`RequestGuard` (so the size, time and JSON depth limits hold as for every request), with the
same checks in the same order: the signature first (kernel/signing/request_auth.py), then the body's
shape, strictly typed, then the node. The FastAPI routes of the same paths call the same
functions (they describe the endpoints in the OpenAPI document), and an error is answered as
the app's error handler answers it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from aos.kernel import cbor
from aos.kernel.errors import AosError
from aos.kernel.node.errors import NodeInternalError, RequestInvalidError, http_status
from aos.kernel.node.models import LeaseResponse, SettleResponse
from aos.kernel.node.node import LeaseAsk, Node
from aos.kernel.text import jsontext

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


async def serve_lease(node: Node, identity: str, body: bytes) -> LeaseResponse:
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
) -> SettleResponse:
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


@dataclass(frozen=True)
class FastRead:
    """A GET route served ahead of the FastAPI app: a route path under `prefix` whose rest
    `serves` accepts is answered with `answer(rest, query)` (JSON-ready; `query` is the raw
    query string, decoded as latin-1 like ASGI's). What `serves` refuses goes to the app, so a
    more specific route under the same prefix keeps its FastAPI handler."""

    prefix: str
    serves: Callable[[str], bool]
    answer: Callable[[str, str], Awaitable[Any]]


def add_fast_read(app: FastAPI, read: FastRead) -> None:
    """Serve `read` on `app` (made by `create_app`), before it serves its first request."""
    reads: list[FastRead] = app.state.fast_reads
    reads.append(read)


class AdapterFastPath:
    """Serves `POST /v1/leases`, `POST /v1/receipts` and the registered `FastRead`s itself and
    hands every other request to `app`. Placed behind `RequestGuard`, which has read the whole
    body."""

    def __init__(self, app: ASGIApp, *, node: Node, reads: list[FastRead]) -> None:
        self.app = app
        self.node = node
        self.reads = reads  # filled by add_fast_read until the app serves

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            # Behind a mount (several worlds per process) the route is the path after
            # `root_path`; the adapter signed the whole path, so that is the target checked.
            path = route_path(scope)
            if scope["method"] == "POST" and path in _SERVED:
                await self._adapter_request(scope, receive, send, path)
                return
            if scope["method"] == "GET":
                for read in self.reads:
                    rest = path[len(read.prefix) :]
                    if path.startswith(read.prefix) and read.serves(rest):
                        await _answering(send, read.answer(rest, _query(scope)))
                        return
        await self.app(scope, receive, send)

    async def _adapter_request(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        body = await _body(receive)
        if body is None:
            return  # the client went away
        headers = _headers(scope)

        async def answer() -> LeaseResponse | SettleResponse:
            query = _query(scope)
            identity = self.node.verifier.verify(
                method="POST",
                target=scope["path"] + (f"?{query}" if query else ""),
                body=body,
                headers=headers,
            )
            if path == LEASES_PATH:
                return await serve_lease(self.node, identity, body)
            return await serve_receipt(self.node, identity, body, headers.get("content-type"))

        await _answering(send, answer())


async def _answering(send: Send, answer: Awaitable[Any]) -> None:
    """Send `answer`'s value, or its error as the app's error handler would."""
    try:
        value = await answer
    except AosError as error:
        await send_json(send, http_status(error), {"error": error.to_dict()})
        return
    except Exception as error:
        log.error("request failed", exc_info=error)
        internal = NodeInternalError(f"{type(error).__name__}: {error}")
        await send_json(send, http_status(internal), {"error": internal.to_dict()})
        return
    await send_json(send, 200, value.model_dump() if isinstance(value, BaseModel) else value)


_SERVED = frozenset({LEASES_PATH, RECEIPTS_PATH})


def route_path(scope: Scope) -> str:
    """The path the app routes on: behind a mount (`root_path`, ASGI's prefix, as Starlette's
    Mount and kernel/node/worlds.py set it) the part after the prefix; else the whole path."""
    path: str = scope.get("path", "")
    root = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root + "/") else path


def _query(scope: Scope) -> str:
    query: bytes = scope.get("query_string", b"")
    return query.decode("latin-1")


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
