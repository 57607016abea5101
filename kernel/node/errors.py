"""Errors of the world host (codes `node.*`, `lease.*`, `request.*`) and the HTTP status every
error code maps to.

The HTTP API returns any `AosError` as `{"error": {code, message, hint?, path?, detail?}}`;
the status says what kind of refusal it is, the code says exactly which.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aos.kernel.errors import AosError
from aos.kernel.prefixes import IdAmbiguousError


class NodeError(AosError):
    code = "node.error"


class NodeConfigError(NodeError):
    code = "node.config_invalid"
    hint = "node limits are positive integers; --bind is HOST:PORT"


class NodeLimitExceededError(NodeError):
    code = "node.limit_exceeded"
    hint = "a request asked for more than the node allows (see the detail's limit)"


class NodeBusyError(NodeError):
    code = "node.busy"
    hint = "too many world operations are waiting; retry shortly"


class NodeInternalError(NodeError):
    code = "node.internal"
    hint = "a bug in the node; the node keeps serving, and its log has the traceback"


class TaskUnknownError(NodeError):
    code = "node.task_unknown"
    hint = "`aos task ls` lists the open tasks; a completed task is gone"


class TaskAmbiguousError(IdAmbiguousError):
    code = "node.task_ambiguous"
    hint = "give more digits of the task's intent hash (`aos task ls` lists them)"


class WorldUnknownError(NodeError):
    """A path of a node serving several worlds names none of them (spec/04 §9.6)."""

    code = "node.world_unknown"
    hint = "`GET /v1/worlds` lists the worlds this node serves, each under /worlds/{name}"


class NodeUnreachableError(AosError):
    """A client (the CLI, the flow client) cannot reach the node at a URL."""

    code = "node.unreachable"
    hint = "start one with `aos node up`, or point --node (env AOS_NODE) at it"


class NodeRefusedError(AosError):
    """The node refused a client's request; `refused` makes one that carries the node's own
    code and hint, so a client reports it exactly as the node said it."""

    code = "node.refused"


def refused(body: dict[str, Any], fallback_message: str) -> AosError:
    """The node's error answer (`{"code", "message", "hint"?, "path"?, "detail"?}`) as an error
    of the same code."""
    code = str(body.get("code") or NodeRefusedError.code)
    # A mirror of the node's class, not a class of its own: the catalogue leaves it out.
    attributes = {"code": code, "hint": str(body.get("hint") or ""), "catalogued": False}
    kind = type("NodeRefusedError", (NodeRefusedError,), attributes)
    found = body.get("detail")
    detail: dict[str, Any] = found if isinstance(found, dict) else {}
    path = body.get("path")
    error: AosError = kind(
        str(body.get("message") or fallback_message),
        path=path if isinstance(path, str) else None,
        **detail,
    )
    return error


class HumanDisabledError(NodeError):
    code = "node.human_disabled"
    hint = "start the node with --human-adapter NAME --human-key FILE to host human tasks"


class HumanAdapterError(NodeError):
    code = "node.human_adapter_invalid"
    hint = "the human adapter must be a defadapter of the manifest, and the key its private half"


class LeaseAdapterUnknownError(NodeError):
    code = "lease.adapter_unknown"
    hint = "the manifest defines no adapter of that name"


class LeaseAdapterNotAllowedError(NodeError):
    code = "lease.adapter_not_allowed"
    hint = "the effect's adapters list does not include this adapter"


class LeaseRevokedError(NodeError):
    code = "lease.revoked"
    hint = "the workflow cancelled the leased intent: stop the work; its receipt would be refused"


class LeaseUnknownError(NodeError):
    code = "lease.unknown"
    hint = "no such lease is held: it expired (the intent may be leased again) or was settled"


class LeaseEffectUnknownError(NodeError):
    code = "lease.effect_unknown"
    hint = "the manifest defines no such effect"


class RequestInvalidError(NodeError):
    code = "request.invalid"
    hint = "the request does not have the shape the API expects (GET /openapi.json)"


class RequestTooLargeError(NodeError):
    code = "request.too_large"
    hint = "request bodies are limited in size (request_bytes_max; blobs: blob_bytes_max)"


class RequestTimeoutError(NodeError):
    code = "request.timeout"
    hint = "send the whole body within request_body_ms_max of the headers"


class RequestHeaderTooLargeError(NodeError):
    """A request head (request line and headers) over `header_bytes_max`; answered by the
    transport itself (kernel/node/transport.py), then the connection is closed."""

    code = "request.header_too_large"
    hint = "request heads are limited in size (header_bytes_max, 64 KiB by default)"


class RateLimitedError(NodeError):
    """A caller made more write requests than its rate allows (kernel/node/rate.py)."""

    code = "request.rate_limited"
    hint = (
        "this caller sent more writes than write_rate_per_s allows (bursts up to "
        "write_burst_max); retry after the Retry-After header's seconds"
    )


class MediaTypeUnsupportedError(NodeError):
    code = "request.media_type_unsupported"
    hint = "POST /v1/blobs takes the raw bytes as application/octet-stream"


class QueryInvalidError(NodeError):
    code = "query.invalid"
    hint = "a read parameter is out of range or malformed (spec/04 §9.4 lists them)"


# Status by exact code first, then by the code's namespace (the part before the dot).
_STATUS_BY_CODE = {
    "receipt.malformed": 400,
    "receipt.too_large": 413,
    "request.timeout": 408,
    "receipt.unknown_intent": 409,
    "receipt.intent_cancelled": 409,
    "receipt.cell_deleted": 409,
    "progress.signature_invalid": 403,
    "lease.revoked": 409,
    "lease.unknown": 404,
    "receipt.wrong_world": 409,
    "receipt.signature_invalid": 403,
    "receipt.adapter_unknown": 403,
    "receipt.adapter_not_allowed": 403,
    "lease.adapter_unknown": 403,
    "lease.adapter_not_allowed": 403,
    "lease.effect_unknown": 422,
    "adapter.unauthenticated": 401,
    "adapter.clock_skewed": 401,
    "adapter.replayed": 409,
    "adapter.forbidden": 403,
    "adapter.nonces_full": 503,
    "adapter.rate_limited": 429,
    "request.too_large": 413,
    "request.header_too_large": 431,
    "request.rate_limited": 429,
    "request.media_type_unsupported": 415,
    "world.blob_too_large": 413,
    "request.invalid": 422,
    "world.event_too_large": 413,
    "world.schema_unknown": 422,
    "world.schema_reserved": 422,
    "world.workflow_unknown": 404,
    "world.cell_missing": 404,
    "world.cell_not_failed": 409,
    "gov.unknown_proposal": 404,
    "gov.already_decided": 409,
    "gov.rejected": 409,
    "gov.not_approved": 409,
    "gov.not_shadowed": 409,
    "gov.shadow_stale": 409,
    "gov.not_quiescent": 409,
    "world.cell_busy": 409,
    "world.idempotency_key_reused": 409,
    "world.intent_not_open": 409,
    "world.not_found": 404,
    "world.clock_manual_only": 409,
    "world.closed": 503,
    "world.step_budget_exceeded": 503,
    "node.task_unknown": 404,
    "node.world_unknown": 404,
    "node.human_disabled": 409,
    "node.busy": 503,
    "store.fenced": 409,
    "store.owned": 409,
    "store.lease_lost": 409,
    "store.unavailable": 503,
    "node.shadow_timeout": 504,
    "node.shadow_unavailable": 409,
    "gov.duplicate_proposal": 409,
    # The flow operations' codes (aos.flows, served by the same app).
    "flow.unknown": 404,
    "flow.version_unknown": 404,
    "flow.execution_unknown": 404,
    "flow.execution_exists": 409,
    "flow.execution_ended": 409,
    "flow.signal_unknown": 409,
    "flow.signal_stale": 409,
    "flow.signal_buffer_full": 409,
    "flow.execution_not_retryable": 409,
    "flow.migration_refused": 409,
    "flow.migration_stale": 409,
    "flow.shadow_failed": 409,
    "flow.too_large": 413,
    "schedule.unknown": 404,
    "schedule.exists": 409,
    "schedule.limit": 409,
    "node.internal": 500,
    # Identities and scopes (kernel/node/identities.py, spec/04 §9.8).
    "auth.unauthenticated": 401,
    "auth.token_invalid": 401,
    "auth.token_expired": 401,
    "auth.token_revoked": 401,
    "auth.forbidden": 403,
    "auth.impersonation": 403,
    "auth.cross_site": 403,
    "auth.identity_exists": 409,
    "auth.identity_unknown": 404,
    "auth.identity_invalid": 422,
    "auth.identities_full": 409,
    "auth.identities_unreadable": 503,
}
_STATUS_BY_NAMESPACE = {"route": 422}
STATUS_DEFAULT = 400
"""Anything else an input can provoke (`input.*`, `cbor.*`, `air.value_*`, ...) is bad input."""


def http_status(error: AosError) -> int:
    found = _STATUS_BY_CODE.get(error.code)
    if found is not None:
        return found
    return _STATUS_BY_NAMESPACE.get(error.code.partition(".")[0], STATUS_DEFAULT)


def error_head(error: AosError) -> tuple[int, bytes]:
    """The status and JSON body of an error answer sent before the app saw the request (by
    the request guard, the rate limit, the transport)."""
    return http_status(error), json.dumps({"error": error.to_dict()}).encode()


async def answer_early(
    send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    error: AosError,
    headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """Answer `error` before the app saw the request. The connection is closed after it,
    since the rest of the request's body may still be on its way."""
    status, payload = error_head(error)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
