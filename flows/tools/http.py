"""The http tool (`aos/tool.http@1`, spec/11 §1.2, §3.3): one HTTP exchange with httpx.

    {method, url, headers, query, json | body, timeout_ms, expect, follow_redirects}
      -> {status, headers, json | text | body}

`endpoint` and `params` are accepted as the upstream names of url and query; an ok result
also has NoETL's `data` (the decoded body), `status_code` and `url`, and `http: {status,
headers}`. Secrets (`${keychain:NAME}`) go into headers only, where the call's grants allow
them, and every text of the outcome that holds one is scrubbed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from aos.flows.define.tool_schema import TOOL_SCHEMAS
from aos.flows.tools.context import (
    ERROR_TEXT_CHARS_MAX,
    ToolCallInvalidError,
    ToolContext,
    timeout_s_of,
)
from aos.flows.tools.keychain import (
    KeychainMissingError,
    KeychainSourceError,
    field_grants,
    keychain_failure,
    scrubbed,
    substitute,
)
from aos.flows.tools.outcomes import ToolOutcome, failure, timed_out
from aos.flows.tools.outcomes import check_fields as _check_fields
from aos.flows.tools.outcomes import clip as _clip
from aos.kernel import cbor
from aos.kernel.adapters.builtin.http import (
    HTTP_TIMEOUT_S_DEFAULT,
    IDEMPOTENCY_HEADER,
    METHODS,
    response_headers,
)

ERROR_HEADERS_MAX = 32
"""An error payload quotes at most this many response headers."""
HTTP_FIELDS = TOOL_SCHEMAS["http"].accepted

_TEXT_TYPES = frozenset(
    {
        "application/javascript",
        "application/x-www-form-urlencoded",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/x-ndjson",
    }
)


@dataclass(frozen=True)
class _HttpRequest:
    method: str
    url: str
    headers: dict[str, str]
    query: dict[str, Any]
    content: bytes | None
    timeout_s: float
    expect: frozenset[int] | None
    follow_redirects: bool

    @property
    def where(self) -> str:
        return f"{self.method} {_clip(self.url, ERROR_TEXT_CHARS_MAX)}"


class _OverdueError(Exception):
    """The whole exchange ran past its timeout."""


class _TooLargeError(Exception):
    """The response body is over `http_response_bytes_max`."""


def run_http(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    request = _http_request(tool, context)
    secrets: list[str] = []
    try:
        # Secrets go in last, into headers only: the url, query and body are quoted in
        # messages and errors, which a secret must never reach.
        grants = field_grants(tool, context.grants, "headers")
        headers = substitute(request.headers, context.keychain, grants, secrets)
    except (KeychainMissingError, KeychainSourceError) as error:
        return keychain_failure(error)
    # A server that echoes a request header (or an error that quotes one) must not carry
    # the secret into the receipt.
    return scrubbed(_exchange(request, headers, context), secrets)


def _exchange(request: _HttpRequest, headers: dict[str, str], context: ToolContext) -> ToolOutcome:
    if request.method != "GET":
        headers = {k: v for k, v in headers.items() if k.lower() != IDEMPOTENCY_HEADER.lower()}
        headers[IDEMPOTENCY_HEADER] = context.intent
    deadline = time.monotonic() + request.timeout_s
    client = httpx.Client(
        transport=context.http_transport,
        follow_redirects=request.follow_redirects,
        trust_env=False,  # no proxy from the environment, as the built-in http adapter
    )
    try:
        url = httpx.URL(request.url)
        if request.query:  # beside the URL's own query, not instead of it
            url = url.copy_merge_params(request.query)
        with (
            client,
            client.stream(
                request.method,
                url,
                headers=headers,
                content=request.content,
                timeout=request.timeout_s,
            ) as response,
        ):
            try:
                body = _read_body(response, context.http_response_bytes_max, deadline)
            except _TooLargeError:
                return failure(
                    "http.too_large",
                    f"{request.where}: the response body is over "
                    f"{context.http_response_bytes_max} bytes (http_response_bytes_max)",
                    http=_error_http(response, b""),
                )
            return _http_outcome(request, response, body)
    except (httpx.TimeoutException, _OverdueError):
        return timed_out(
            "http.timeout", f"{request.where}: no answer within {request.timeout_s:g} s"
        )
    except httpx.ConnectError as error:
        return failure("http.connect", f"{request.where}: {error}", retryable=True)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as error:
        raise ToolCallInvalidError(f"url {request.url!r}: {error}") from None
    except httpx.HTTPError as error:
        message = f"{request.where}: {type(error).__name__}: {error}"
        return failure("http.transport", message, retryable=True)


def _http_request(tool: dict[str, Any], context: ToolContext) -> _HttpRequest:
    _check_fields(tool, HTTP_FIELDS)
    method = tool.get("method") or "GET"
    if not isinstance(method, str) or method.upper() not in METHODS:
        raise ToolCallInvalidError(f"method {method!r} is one of {sorted(METHODS)}")
    if tool.get("url") is not None and tool.get("endpoint") is not None:
        raise ToolCallInvalidError("a request has url or endpoint (its upstream name), not both")
    url = tool.get("url") if tool.get("url") is not None else tool.get("endpoint")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ToolCallInvalidError(f"url {url!r} is http(s)://...")
    headers = _text_map(tool.get("headers"), "headers")
    query = {**_map_or_empty(tool.get("params")), **_map_or_empty(tool.get("query"))}
    if not isinstance(query, dict) or not all(
        isinstance(k, str) and _query_value(v) for k, v in query.items()
    ):
        raise ToolCallInvalidError("query is a map of text to text, numbers, booleans or lists")
    content = _content(tool, headers)
    expect = tool.get("expect")
    if expect is not None and (
        not isinstance(expect, list)
        or not expect
        or not all(type(s) is int and 100 <= s <= 599 for s in expect)
    ):
        raise ToolCallInvalidError("expect is a non-empty list of HTTP status codes (100..599)")
    follow = tool.get("follow_redirects", False)
    if not isinstance(follow, bool):
        raise ToolCallInvalidError("follow_redirects is true or false")
    return _HttpRequest(
        method=method.upper(),
        url=url,
        headers=headers,
        query=query,
        content=content,
        timeout_s=timeout_s_of(tool, HTTP_TIMEOUT_S_DEFAULT, context.http_timeout_s_max),
        expect=None if expect is None else frozenset(expect),
        follow_redirects=follow,
    )


def _map_or_empty(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ToolCallInvalidError("query (params) is a map of text to text, numbers or booleans")
    return value


def _text_map(value: Any, name: str) -> dict[str, str]:
    """A map of text to scalars, the scalars as text."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int | float) and not isinstance(v, bool)
        for k, v in value.items()
    ):
        raise ToolCallInvalidError(f"{name} is a map of text to text")
    return {k: str(v) for k, v in value.items()}


def _query_value(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, str | int | float | bool) for v in value)
    return isinstance(value, str | int | float | bool)


def _content(tool: dict[str, Any], headers: dict[str, str]) -> bytes | None:
    """The request body: `json` (a value, sent as JSON) or `body` (text, or bytes; a map or a
    list is sent as JSON, as NoETL sends its `body` and `payload`)."""
    given = [name for name in ("json", "body", "payload") if tool.get(name) is not None]
    if len(given) > 1:
        raise ToolCallInvalidError(f"a request has one body: json, body or payload, not {given}")
    value = tool.get("json")
    body = tool.get("body") if tool.get("body") is not None else tool.get("payload")
    if isinstance(body, dict | list):
        value, body = body, None
    if value is not None:
        try:
            text = json.dumps(cbor.to_json(value), allow_nan=False, separators=(",", ":"))
        except ValueError as error:
            raise ToolCallInvalidError(f"json has no JSON form: {error}") from None
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
        return text.encode()
    if body is None or isinstance(body, bytes):
        return body
    if not isinstance(body, str):
        raise ToolCallInvalidError("body is text (use json for a structured value)")
    return body.encode()


def _read_body(response: httpx.Response, limit: int, deadline: float) -> bytes:
    """The whole body, within `limit` bytes and the deadline (httpx's timeout bounds each
    read, not the body: a server trickling bytes must still not hold the call)."""
    data = bytearray()
    for chunk in response.iter_bytes():
        if time.monotonic() > deadline:
            raise _OverdueError
        if len(data) + len(chunk) > limit:
            raise _TooLargeError
        data += chunk
    return bytes(data)


def _http_outcome(request: _HttpRequest, response: httpx.Response, body: bytes) -> ToolOutcome:
    status = response.status_code
    expected = 200 <= status <= 299 if request.expect is None else status in request.expect
    if not expected:
        wanted = "2xx" if request.expect is None else str(sorted(request.expect))
        return failure(
            "http.status",
            f"{request.where}: HTTP {status} (expected {wanted})",
            kind="authorization" if status in (401, 403) else "transport",
            retryable=status >= 500 or status == 429,
            http=_error_http(response, body),
        )
    headers = response_headers(response.headers)
    decoded = _decoded(response, body)
    # `data` is the body as upstream playbooks read it (`outcome.result.data`), with
    # `status_code` and `url` the rest of NoETL's http result (`noetl/tools/http/response.py`,
    # `process_response`), and `http` the protocol details the outcome envelope carries for
    # ok calls too (spec/11 §3.3).
    data = next(iter(decoded.values()))
    return ToolOutcome(
        "ok",
        {
            "status": status,
            "headers": headers,
            **decoded,
            "data": data,
            "status_code": status,
            "url": str(response.url),
            "http": {"status": status, "headers": headers},
        },
    )


def _media_type(response: httpx.Response) -> str:
    content_type: str = response.headers.get("content-type", "")
    return content_type.partition(";")[0].strip().lower()


def _is_json(media: str) -> bool:
    return media == "application/json" or media.endswith("+json")


def _is_text(media: str) -> bool:
    return (
        not media
        or media.startswith("text/")
        or _is_json(media)
        or media.endswith("+xml")
        or media in _TEXT_TYPES
    )


def _decoded(response: httpx.Response, body: bytes) -> dict[str, Any]:
    """`{json}` for a JSON body that parses (to plain data), `{text}` for a textual one that
    decodes, `{body}` (bytes) for anything else."""
    media = _media_type(response)
    if _is_text(media):
        try:
            text = body.decode(response.charset_encoding or "utf-8")
        except (LookupError, UnicodeDecodeError):
            return {"body": body}
        if _is_json(media):
            try:
                value = json.loads(text, parse_constant=_no_constant)
                cbor.encode(value)  # integers out of range: keep the text
            except (ValueError, RecursionError, cbor.CborError):
                return {"text": text}
            return {"json": value}
        return {"text": text}
    return {"body": body}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not plain data")


def _error_http(response: httpx.Response, body: bytes) -> dict[str, Any]:
    """What an error payload says of the response: the status, the first headers and the start
    of a textual body, all clipped."""
    headers = {
        name: _clip(value, ERROR_TEXT_CHARS_MAX)
        for name, value in list(response_headers(response.headers).items())[:ERROR_HEADERS_MAX]
    }
    found: dict[str, Any] = {"status": response.status_code, "headers": headers}
    if body and _is_text(_media_type(response)):
        found["body"] = _clip(
            body[: ERROR_TEXT_CHARS_MAX * 4].decode("utf-8", "replace"), ERROR_TEXT_CHARS_MAX
        )
    return found
