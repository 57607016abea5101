"""The built-in `http` adapter: performs an HTTP request per intent.

Params (the shape of `demo/HttpRequestParams@1`):

    {"method": text, "url": text, "headers": {text: text}, "body": bytes | null}

An `ok` receipt's payload (the shape of `demo/HttpResponse@1`) is the response, whatever its
status code (the workflow decides what a 402 means):

    {"status": nat, "headers": {lowercase name: text}, "body": bytes}

A body over `body_bytes_inline_max` is not inlined: it is uploaded to the world's CAS
(`Adapter.put_blob`, `POST /v1/blobs`) and the payload names it by hash instead:

    {"status": nat, "headers": {...}, "body": b"", "body_ref": "blake3:..."}

The request carries `Idempotency-Key: <intent hash>` (replacing one the params may set), so
a server that honours the header charges once however often the intent is leased again.
Limits: `timeout_s` for the whole exchange (a `timeout` receipt when it passes), and
`body_bytes_max` for the response body read at all (past it, or when the body cannot be
uploaded, the receipt is `error` with `{message, status, headers, ...}`). Transport failures
(refused connection, bad URL) are `error` receipts with a message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from aos.kernel.adapters.sdk import AdapterConfigInvalidError, Lease, Result
from aos.kernel.errors import AosError

HTTP_TIMEOUT_S_DEFAULT = 10.0
HTTP_TIMEOUT_S_MAX = 600.0
HTTP_BODY_BYTES_INLINE_MAX_DEFAULT = 64 * 1024
HTTP_BODY_BYTES_INLINE_MAX_MAX = 512 * 1024
"""Half the world's default receipt limit, leaving room for the headers and the envelope."""
HTTP_BODY_BYTES_MAX_DEFAULT = 16 * 1024 * 1024
"""Largest response body read; the node's default `blob_bytes_max`."""
HTTP_BODY_BYTES_MAX_MAX = 64 * 1024 * 1024
"""The store's default `blob_bytes_max`."""
HTTP_RESPONSE_HEADERS_MAX = 64
"""Most response headers kept in the payload (the first ones, in the server's order)."""
HTTP_CONNECTIONS_MAX = 64
IDEMPOTENCY_HEADER = "Idempotency-Key"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@dataclass(frozen=True)
class HttpOptions:
    """`url_map` rewrites a URL prefix (first match wins), so a deployment can point the
    service a workflow names at the host that serves it (the demo's local payment server)."""

    timeout_s: float = HTTP_TIMEOUT_S_DEFAULT
    body_bytes_inline_max: int = HTTP_BODY_BYTES_INLINE_MAX_DEFAULT
    body_bytes_max: int = HTTP_BODY_BYTES_MAX_DEFAULT
    url_map: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not 0 < self.timeout_s <= HTTP_TIMEOUT_S_MAX:
            raise AdapterConfigInvalidError(f"timeout_s is in (0, {HTTP_TIMEOUT_S_MAX}]")
        if not 0 <= self.body_bytes_inline_max <= HTTP_BODY_BYTES_INLINE_MAX_MAX:
            raise AdapterConfigInvalidError(
                f"body_bytes_inline_max is 0..{HTTP_BODY_BYTES_INLINE_MAX_MAX}"
            )
        if not self.body_bytes_inline_max <= self.body_bytes_max <= HTTP_BODY_BYTES_MAX_MAX:
            raise AdapterConfigInvalidError(
                f"body_bytes_max is body_bytes_inline_max..{HTTP_BODY_BYTES_MAX_MAX}"
            )
        for source, target in self.url_map:
            if not source or not target.startswith(("http://", "https://")):
                raise AdapterConfigInvalidError(f"url map {source}={target}: TARGET is http(s)://")


def parse_url_map(entries: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`FROM=TO` entries, as the CLI takes them."""
    pairs = []
    for entry in entries:
        source, sep, target = entry.partition("=")
        if not sep:
            raise AdapterConfigInvalidError(f"url map {entry!r} is FROM=TO")
        pairs.append((source, target))
    return tuple(pairs)


class HttpEffect:
    """The handler (`(params, lease) -> Result`), with its own connection pool. `put_blob`
    stores a large body and returns its hash (`Adapter.put_blob`); without it a body over
    `body_bytes_inline_max` is an `error` receipt."""

    def __init__(
        self,
        options: HttpOptions | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        put_blob: Callable[[bytes], str] | None = None,
    ) -> None:
        self.options = options or HttpOptions()
        self.put_blob = put_blob
        self._client = httpx.Client(
            transport=transport,
            follow_redirects=False,  # a redirect is the workflow's to see, not ours to chase
            trust_env=False,
            limits=httpx.Limits(max_connections=HTTP_CONNECTIONS_MAX),
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HttpEffect:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __call__(self, params: Any, lease: Lease) -> Result:
        request = _request(params)
        if isinstance(request, Result):
            return request
        method, url, headers, body = request
        url = self._mapped(url)
        headers = {k: v for k, v in headers.items() if k.lower() != IDEMPOTENCY_HEADER.lower()}
        headers[IDEMPOTENCY_HEADER] = lease.intent
        timeout_s = self.options.timeout_s
        deadline = time.monotonic() + timeout_s
        try:
            with self._client.stream(
                method, url, headers=headers, content=body, timeout=timeout_s
            ) as response:
                return self._read(response, deadline)
        except httpx.TimeoutException:
            return Result.timeout(f"{method} {url}: no answer within {timeout_s} s")
        except _OverdueError:
            return Result.timeout(f"{method} {url}: the response took over {timeout_s} s")
        except (httpx.HTTPError, httpx.InvalidURL) as error:
            return Result.error(f"{method} {url}: {type(error).__name__}: {error}")

    def _mapped(self, url: str) -> str:
        for source, target in self.options.url_map:
            if url.startswith(source):
                return target + url[len(source) :]
        return url

    def _read(self, response: httpx.Response, deadline: float) -> Result:
        limit = self.options.body_bytes_max
        headers = response_headers(response.headers)
        chunks: list[bytes] = []
        size = 0
        # httpx's timeout bounds each read, not the whole body; a server that trickles bytes
        # must still not hold the lease past the deadline.
        for chunk in response.iter_bytes():
            if time.monotonic() > deadline:
                raise _OverdueError
            size += len(chunk)
            if size > limit:
                return Result.error(
                    f"the response body is over {limit} bytes (body_bytes_max)",
                    status=response.status_code,
                    headers=headers,
                    body_bytes_max=limit,
                )
            chunks.append(chunk)
        body = b"".join(chunks)
        payload: dict[str, Any] = {"status": response.status_code, "headers": headers}
        if size <= self.options.body_bytes_inline_max:
            return Result("ok", {**payload, "body": body})
        return self._by_reference(payload, body)

    def _by_reference(self, payload: dict[str, Any], body: bytes) -> Result:
        """A body too large to inline: into the world's CAS, named by hash."""
        inline_max = self.options.body_bytes_inline_max
        if self.put_blob is None:
            return Result.error(
                f"the response body is {len(body)} bytes, over {inline_max} "
                "(body_bytes_inline_max), and this adapter cannot upload blobs",
                **payload,
                body_bytes_inline_max=inline_max,
            )
        try:
            ref = self.put_blob(body)
        except AosError as error:
            return Result.error(
                f"the response body ({len(body)} bytes) could not be stored: {error}",
                **payload,
                code=str(error.detail.get("node_code", error.code)),
            )
        return Result("ok", {**payload, "body": b"", "body_ref": ref})


class _OverdueError(Exception):
    """The whole exchange ran past `timeout_s` (becomes a `timeout` receipt)."""


def _request(params: Any) -> tuple[str, str, dict[str, str], bytes | None] | Result:
    """The request the params describe, or an `error` Result saying what is wrong."""
    if not isinstance(params, dict):
        return Result.error("params are a map {method, url, headers, body}")
    method, url = params.get("method"), params.get("url")
    headers, body = params.get("headers") or {}, params.get("body")
    if not isinstance(method, str) or method.upper() not in METHODS:
        return Result.error(f"method {method!r} is one of {sorted(METHODS)}")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return Result.error(f"url {url!r} is http(s)://...")
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        return Result.error("headers are a map of text to text")
    if body is not None and not isinstance(body, bytes):
        return Result.error("body is bytes or null")
    return method.upper(), url, headers, body


def response_headers(headers: httpx.Headers) -> dict[str, str]:
    """Lowercase names; a repeated header's values joined with ", " (RFC 9110 §5.3)."""
    kept: dict[str, str] = {}
    for name, value in headers.multi_items():
        key = name.lower()
        if key in kept:
            kept[key] = f"{kept[key]}, {value}"
        elif len(kept) < HTTP_RESPONSE_HEADERS_MAX:
            kept[key] = value
    return kept
