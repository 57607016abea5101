"""The flow world's tools (spec/11-flows.md §1.2, §3.3, §7; spec/12 §6): what the adapters
`aos/echo@1`, `aos/http@1`, `aos/python@1`, `aos/postgres@1`, `aos/duckdb@1`, `aos/shell@1` and
`aos/file@1` do with a tool call.

A flow's `call` task becomes an effect `aos/tool.KIND@1` whose params are `aos/ToolCall@1`
`{exec, step, task, attempt, tool, args, result_inline_bytes_max}`; `tool` is the rendered tool
spec (`kind` and the kind's fields). `run_tool` performs one such call and returns its outcome;
it is pure of any transport, so the same code runs in an adapter process (`make_adapter`,
`aos adapter run tool-KIND`) and in process (`flows/local.py`, `aos flow run --local`).

    echo    the result is `args`
    http    {method, url, headers, query, json | body, timeout_ms, expect, follow_redirects}
            -> {status, headers, json | text | body}
            (`endpoint` and `params` are accepted as the upstream names of url and query;
            an ok result also has NoETL's `data` (the decoded body), `status_code` and `url`,
            and `http: {status, headers}`)
    python  {function: "package.module:function", timeout_ms} -> function(args), in a
            subprocess, for modules the adapter's allowlist admits; or {code, libs,
            timeout_ms} -> the code's `result` (or what its `main` returns), `args` as
            variables, in a worker subprocess reused between calls (flows/pyworker.py)

Each kind's fields are its schema's (flows/tool_schema.py), the one `aos flow check` reads.
    postgres, duckdb, shell   flows/tool_postgres.py, tool_duckdb.py, tool_shell.py
    file    {op: read | write, path} inside the adapter's base directory (`flows/files.py`):
            read -> the content (JSON, JSON text sequence, YAML); write args -> {path, bytes}

Secrets (flows/keychain.py) go in here, right before use: `${keychain:NAME}` placeholders in
http headers and the shell tool's `env` where the call's `keychain` grants allow them, the
postgres tool's `auth`; every text of the outcome that holds one is scrubbed.

Outcomes are `ok` (the payload is the result), `error` and `timeout`; an error payload is small
and always `{kind, code, message, retryable, ...}` with `kind` one of the flow error kinds
(`transport`, `timeout`, `authorization`). An `ok` result whose canonical CBOR is larger than
the call's `result_inline_bytes_max` is stored with `put_blob` and the payload names it:
`{"$ref": "blake3:...", "size": N}`.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from aos.flows import pyworker
from aos.flows.config import ToolConfig, default_config
from aos.flows.files import FILE_BYTES_MAX_DEFAULT, FileToolError, read_resource, write_resource
from aos.flows.keychain import (
    Grants,
    GrantsInvalidError,
    Keychain,
    KeychainMissingError,
    KeychainSourceError,
    field_grants,
    keychain_failure,
    scrubbed,
    substitute,
)
from aos.flows.outcomes import ToolInvalidError, ToolOutcome, failure, timed_out, with_spec
from aos.flows.outcomes import check_fields as _check_fields
from aos.flows.outcomes import clip as _clip
from aos.flows.tool_duckdb import (
    DUCKDB_FIELDS,
    DUCKDB_TIMEOUT_S_DEFAULT,
    DuckdbSettings,
    run_duckdb,
)
from aos.flows.tool_postgres import (
    POSTGRES_FIELDS,
    POSTGRES_TIMEOUT_S_DEFAULT,
    PostgresSettings,
    run_postgres,
)
from aos.flows.tool_schema import TOOL_SCHEMAS, python_args_problems, python_libs_problem
from aos.flows.tool_shell import SHELL_FIELDS, SHELL_TIMEOUT_S_DEFAULT, ShellSettings, run_shell
from aos.flows.tool_transfer import TRANSFER_TIMEOUT_S_DEFAULT, TransferSettings, run_transfer
from aos.kernel import cbor
from aos.kernel.adapters.builtin.http import (
    HTTP_BODY_BYTES_MAX_DEFAULT,
    HTTP_BODY_BYTES_MAX_MAX,
    HTTP_TIMEOUT_S_DEFAULT,
    HTTP_TIMEOUT_S_MAX,
    IDEMPOTENCY_HEADER,
    METHODS,
    response_headers,
)
from aos.kernel.adapters.builtin.python_fn import (
    PYTHON_LIMIT_CODES,
    PYTHON_TIMEOUT_S_DEFAULT,
    PYTHON_TIMEOUT_S_MAX,
    PythonFunctionEffect,
    PythonOptions,
)
from aos.kernel.adapters.builtin.python_limits import PythonLimits
from aos.kernel.adapters.sdk import (
    Adapter,
    AdapterConfigInvalidError,
    Handler,
    Lease,
    Result,
)
from aos.kernel.errors import AosError
from aos.kernel.node.models import TRACEBACK_CHARS_MAX

log = logging.getLogger("aos.flows.tools")

TOOL_EFFECTS: dict[str, str] = {
    "aos/tool.echo@1": "aos/echo@1",
    "aos/tool.http@1": "aos/http@1",
    "aos/tool.python@1": "aos/python@1",
    "aos/tool.postgres@1": "aos/postgres@1",
    "aos/tool.duckdb@1": "aos/duckdb@1",
    "aos/tool.shell@1": "aos/shell@1",
    "aos/tool.file@1": "aos/file@1",
    "aos/tool.transfer@1": "aos/transfer@1",
}
"""Tool effect -> the adapter identity that settles it."""
TOOL_KINDS: tuple[str, ...] = tuple(TOOL_SCHEMAS)
EFFECT_OF_KIND: dict[str, str] = {kind: f"aos/tool.{kind}@1" for kind in TOOL_KINDS}
_KIND_OF_EFFECT = {effect: kind for kind, effect in EFFECT_OF_KIND.items()}

RESULT_INLINE_BYTES_MAX_DEFAULT = 64 * 1024
"""spec/11 §7; used when the params do not say."""
RESULT_INLINE_BYTES_CAP_DEFAULT = 512 * 1024
"""The most any call may inline, whatever its params say: half the world's default receipt
limit, leaving room for the envelope."""
HTTP_TIMEOUT_S_MAX_DEFAULT = 120.0
PYTHON_TIMEOUT_S_MAX_DEFAULT = 300.0
ERROR_HEADERS_MAX = 32
ERROR_TEXT_CHARS_MAX = 256
"""Error payloads stay small: at most this many response headers, each value (and the start
of the response body) clipped to this many characters."""
RENEW_INTERVAL_S_MIN = 0.1

ECHO_FIELDS = TOOL_SCHEMAS["echo"].accepted
HTTP_FIELDS = TOOL_SCHEMAS["http"].accepted
PYTHON_FIELDS = TOOL_SCHEMAS["python"].accepted
FILE_FIELDS = TOOL_SCHEMAS["file"].accepted
"""Each kind's fields, from its one schema (`flows/tool_schema.py`), which the check reads too."""

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


# --------------------------------------------------------------------------------------------
# Data


def _no_blob(data: bytes) -> str:
    raise AdapterConfigInvalidError("this tool context cannot store blobs")


@dataclass(frozen=True)
class ToolContext:
    """What one tool call may use besides its params.

    `intent` is the intent hash, passed on as the idempotency key; `put_blob` stores bytes in
    the world's CAS and returns their hash (`Adapter.put_blob`, `World.put_blob`).
    `python_allow` are the module prefixes the python tool's `function` form may import (a
    prefix admits the module itself and its submodules; none: nothing is allowed) and
    `python_paths` the folders put first on its `sys.path`; `python_code` whether inline
    `code` may run (an adapter serving untrusted deployers turns it off); `python_limits` the
    memory, CPU and user of the processes both forms run in. A tool's `timeout_ms` is bounded by the `*_timeout_s_max`;
    `http_response_bytes_max` bounds the response body read; no call inlines more than
    `result_inline_bytes_cap` bytes of result. The file tool works inside `file_base` (none:
    it refuses every call) on files of at most `file_bytes_max` bytes."""

    intent: str
    put_blob: Callable[[bytes], str] = _no_blob
    python_allow: tuple[str, ...] = ()
    python_paths: tuple[Path, ...] = ()
    python_timeout_s_max: float = PYTHON_TIMEOUT_S_MAX_DEFAULT
    python_executable: str = sys.executable
    python_code: bool = True
    python_limits: PythonLimits = field(default_factory=PythonLimits)
    http_timeout_s_max: float = HTTP_TIMEOUT_S_MAX_DEFAULT
    http_response_bytes_max: int = HTTP_BODY_BYTES_MAX_DEFAULT
    http_transport: httpx.BaseTransport | None = None
    result_inline_bytes_cap: int = RESULT_INLINE_BYTES_CAP_DEFAULT
    keychain: Keychain | None = None
    grants: Grants = field(default_factory=Grants)
    postgres: PostgresSettings = field(default_factory=PostgresSettings)
    duckdb: DuckdbSettings = field(default_factory=DuckdbSettings)
    shell: ShellSettings = field(default_factory=ShellSettings)
    file_base: Path | None = None
    file_bytes_max: int = FILE_BYTES_MAX_DEFAULT
    flow_format: int = 1
    execution_context: Any = None

    def __post_init__(self) -> None:
        if isinstance(self.python_allow, str):
            raise AdapterConfigInvalidError("python_allow is a list of module prefixes")
        object.__setattr__(self, "python_allow", tuple(self.python_allow))
        object.__setattr__(self, "python_paths", tuple(Path(p) for p in self.python_paths))
        for prefix in self.python_allow:
            if not isinstance(prefix, str) or not all(p.isidentifier() for p in prefix.split(".")):
                raise AdapterConfigInvalidError(
                    f"python allow prefix {prefix!r} is a dotted module name (say acme.tools)"
                )
        for path in self.python_paths:
            if not path.is_dir():
                raise AdapterConfigInvalidError(f"python module path {path} is not a directory")
        if not 0 < self.python_timeout_s_max <= PYTHON_TIMEOUT_S_MAX:
            raise AdapterConfigInvalidError(
                f"python_timeout_s_max is in (0, {PYTHON_TIMEOUT_S_MAX:g}]"
            )
        if not 0 < self.http_timeout_s_max <= HTTP_TIMEOUT_S_MAX:
            raise AdapterConfigInvalidError(f"http_timeout_s_max is in (0, {HTTP_TIMEOUT_S_MAX:g}]")
        if not 0 <= self.http_response_bytes_max <= HTTP_BODY_BYTES_MAX_MAX:
            raise AdapterConfigInvalidError(
                f"http_response_bytes_max is 0..{HTTP_BODY_BYTES_MAX_MAX}"
            )
        if not 0 <= self.result_inline_bytes_cap <= RESULT_INLINE_BYTES_CAP_DEFAULT:
            raise AdapterConfigInvalidError(
                f"result_inline_bytes_cap is 0..{RESULT_INLINE_BYTES_CAP_DEFAULT}"
            )

    def for_intent(self, intent: str) -> ToolContext:
        """This context for a call of `intent`. Not checked again, as `replace` would: only the
        intent differs, and checking the rest re-reads the file system (the python paths) on
        every call."""
        return self._with(intent=intent)

    def for_call(self, flow_format: int, execution_context: Any) -> ToolContext:
        """This context for one call's own `flow_format` and `execution_context`."""
        return self._with(flow_format=flow_format, execution_context=execution_context)

    def _with(self, **changes: Any) -> ToolContext:
        call = copy.copy(self)
        for name, value in changes.items():
            object.__setattr__(call, name, value)
        return call

    def with_grants(self, grants: Grants) -> ToolContext:
        """This context for a call with the keychain grants `grants` (as `for_intent`)."""
        return self._with(grants=grants)

    def python_allows(self, module: str) -> bool:
        return any(module == p or module.startswith(p + ".") for p in self.python_allow)


class _ToolInvalidError(ToolInvalidError):
    """The tool spec or the call's params are malformed (an `error`, `tool.invalid`)."""


# --------------------------------------------------------------------------------------------
# Running a tool call


def run_tool(effect: str, params: Any, *, context: ToolContext) -> ToolOutcome:
    """Perform one tool call (`params`: `aos/ToolCall@1`) of `effect`. Never raises for
    anything the call or the outside world does: every failure is an outcome."""
    kind = _KIND_OF_EFFECT.get(effect)
    if kind is None:
        return failure("tool.unknown", f"{effect} is not a tool effect ({sorted(TOOL_EFFECTS)})")
    runner = _RUNNERS[kind]
    try:
        tool, args, inline_max = _call_of(kind, params)
        outcome = runner(tool, args, _for_call(params, context.with_grants(Grants.of_call(params))))
    except (ToolInvalidError, GrantsInvalidError) as error:
        return failure("tool.invalid", f"{kind} tool: {error}")
    except Exception as error:  # a bug must not leave the intent waiting or the driver down
        log.exception("the %s tool failed", kind)
        return failure("tool.failed", f"{kind} tool: {type(error).__name__}: {error}")
    if outcome.status != "ok":
        return outcome
    return _inline_or_ref(
        outcome.payload, min(inline_max, context.result_inline_bytes_cap), context
    )


def _call_of(kind: str, params: Any) -> tuple[dict[str, Any], Any, int]:
    if not isinstance(params, dict):
        raise _ToolInvalidError("the params are an aos/ToolCall@1 map")
    tool = params.get("tool")
    if not isinstance(tool, dict) or tool.get("kind") != kind:
        raise _ToolInvalidError(f"params.tool is a map with kind {kind!r}")
    inline_max = params.get("result_inline_bytes_max", RESULT_INLINE_BYTES_MAX_DEFAULT)
    if type(inline_max) is not int or inline_max < 0:
        raise _ToolInvalidError("params.result_inline_bytes_max is a natural number")
    return tool, params.get("args"), inline_max


def _for_call(params: dict[str, Any], context: ToolContext) -> ToolContext:
    """The context with the call's own `flow_format` (default 1) and `context`."""
    flow_format = params.get("flow_format")
    if flow_format is None:
        flow_format = 1
    if type(flow_format) is not int or flow_format < 1:
        raise _ToolInvalidError("params.flow_format is a definition format (1, 2, ...)")
    return context.for_call(flow_format, params.get("context"))


def _inline_or_ref(result: Any, inline_max: int, context: ToolContext) -> ToolOutcome:
    """The result itself, or, when its canonical CBOR is over `inline_max` bytes, a reference
    to those bytes stored with `put_blob`."""
    try:
        if _has_non_finite(result):
            raise ValueError("a float that is NaN or infinite")
        data = cbor.encode(result)
    except (cbor.CborError, ValueError) as error:
        return failure("tool.result_invalid", f"the result is not plain data: {error}")
    if len(data) <= inline_max:
        return ToolOutcome("ok", result)
    try:
        ref = context.put_blob(data)
    except Exception as error:  # the node refused or stayed away; worth another attempt
        code = error.detail.get("node_code", error.code) if isinstance(error, AosError) else None
        return failure(
            "tool.result_store",
            f"the result ({len(data)} bytes) could not be stored: {error}",
            retryable=True,
            store_code=str(code or type(error).__name__),
        )
    return ToolOutcome("ok", {"$ref": ref, "size": len(data)})


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def _timeout_s(tool: dict[str, Any], default_s: float, max_s: float) -> float:
    """`timeout_ms` in seconds (the default when absent), at most `max_s`."""
    value = tool.get("timeout_ms")
    if value is None:
        return min(default_s, max_s)
    if type(value) is not int or value < 1:
        raise _ToolInvalidError(f"timeout_ms is a whole number of milliseconds >= 1, not {value!r}")
    return min(value / 1000, max_s)


# -- echo


def _echo(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    _check_fields(tool, ECHO_FIELDS)
    return ToolOutcome("ok", args)


# -- http


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


def _http(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
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
        raise _ToolInvalidError(f"url {request.url!r}: {error}") from None
    except httpx.HTTPError as error:
        message = f"{request.where}: {type(error).__name__}: {error}"
        return failure("http.transport", message, retryable=True)


def _http_request(tool: dict[str, Any], context: ToolContext) -> _HttpRequest:
    _check_fields(tool, HTTP_FIELDS)
    method = tool.get("method") or "GET"
    if not isinstance(method, str) or method.upper() not in METHODS:
        raise _ToolInvalidError(f"method {method!r} is one of {sorted(METHODS)}")
    if tool.get("url") is not None and tool.get("endpoint") is not None:
        raise _ToolInvalidError("a request has url or endpoint (its upstream name), not both")
    url = tool.get("url") if tool.get("url") is not None else tool.get("endpoint")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise _ToolInvalidError(f"url {url!r} is http(s)://...")
    headers = _text_map(tool.get("headers"), "headers")
    query = {**_map_or_empty(tool.get("params")), **_map_or_empty(tool.get("query"))}
    if not isinstance(query, dict) or not all(
        isinstance(k, str) and _query_value(v) for k, v in query.items()
    ):
        raise _ToolInvalidError("query is a map of text to text, numbers, booleans or lists")
    content = _content(tool, headers)
    expect = tool.get("expect")
    if expect is not None and (
        not isinstance(expect, list)
        or not expect
        or not all(type(s) is int and 100 <= s <= 599 for s in expect)
    ):
        raise _ToolInvalidError("expect is a non-empty list of HTTP status codes (100..599)")
    follow = tool.get("follow_redirects", False)
    if not isinstance(follow, bool):
        raise _ToolInvalidError("follow_redirects is true or false")
    return _HttpRequest(
        method=method.upper(),
        url=url,
        headers=headers,
        query=query,
        content=content,
        timeout_s=_timeout_s(tool, HTTP_TIMEOUT_S_DEFAULT, context.http_timeout_s_max),
        expect=None if expect is None else frozenset(expect),
        follow_redirects=follow,
    )


def _map_or_empty(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _ToolInvalidError("query (params) is a map of text to text, numbers or booleans")
    return value


def _text_map(value: Any, name: str) -> dict[str, str]:
    """A map of text to scalars, the scalars as text."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int | float) and not isinstance(v, bool)
        for k, v in value.items()
    ):
        raise _ToolInvalidError(f"{name} is a map of text to text")
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
        raise _ToolInvalidError(f"a request has one body: json, body or payload, not {given}")
    value = tool.get("json")
    body = tool.get("body") if tool.get("body") is not None else tool.get("payload")
    if isinstance(body, dict | list):
        value, body = body, None
    if value is not None:
        try:
            text = json.dumps(cbor.to_json(value), allow_nan=False, separators=(",", ":"))
        except ValueError as error:
            raise _ToolInvalidError(f"json has no JSON form: {error}") from None
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
        return text.encode()
    if body is None or isinstance(body, bytes):
        return body
    if not isinstance(body, str):
        raise _ToolInvalidError("body is text (use json for a structured value)")
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


# -- python


def _python(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    _check_fields(tool, PYTHON_FIELDS)
    if (tool.get("code") is None) == (tool.get("function") is None):
        raise _ToolInvalidError("a python tool has `code` (inline) or `function`, one of them")
    timeout_s = _timeout_s(tool, PYTHON_TIMEOUT_S_DEFAULT, context.python_timeout_s_max)
    if tool.get("code") is not None:
        if not context.python_code:
            message = "this adapter does not run inline code (aos adapter run --no-code)"
            return failure("python.code_refused", message, kind="authorization")
        return _run_code(tool, args, timeout_s, context)
    ref = tool.get("function")
    module = _function_module(ref)
    if not context.python_allows(module):
        allowed = ", ".join(context.python_allow) or "none"
        return failure(
            "python.not_allowed",
            f"module {module} is not allowed to this adapter (allowed prefixes: {allowed})",
            kind="authorization",
        )
    return _run_function(str(ref), args, timeout_s, context)


def _run_code(
    tool: dict[str, Any], args: Any, timeout_s: float, context: ToolContext
) -> ToolOutcome:
    """Inline `code` in a reused worker (flows/pyworker.py): `args` as variables, `result` as
    the output."""
    code, libs = tool.get("code"), tool.get("libs") or {}
    if not isinstance(code, str):
        raise _ToolInvalidError("code is text (python source)")
    problem = python_libs_problem(libs)
    if problem is not None:
        raise _ToolInvalidError(problem)
    refused = python_args_problems(args, libs)
    if refused:
        raise _ToolInvalidError("; ".join(why for _, why in refused))
    options = pyworker.PoolOptions(python=context.python_executable, limits=context.python_limits)
    pool = pyworker.pool_for(options)
    request = {
        "code": code,
        "args": args,
        "libs": libs if isinstance(libs, dict) else {},
        "seed": context.intent,
        "context": context.execution_context,
        "noetl": context.flow_format >= 2,
    }
    try:
        answer = pool.run(request, timeout_s)
    except pyworker.WorkerError as error:
        if error.code == "python.timeout":
            return timed_out(error.code, str(error))
        return failure(error.code, str(error))
    if isinstance(answer, dict) and "ok" in answer:
        try:
            return ToolOutcome("ok", cbor.from_json(answer["ok"]))
        except cbor.CborError as error:
            return failure("python.result_invalid", f"the result has no CBOR form: {error}")
    raised = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(raised, dict):
        return failure("python.crashed", "the python worker answered without a result")
    kind = str(raised.get("type"))
    if kind == "NotData":  # the worker's own: the code ran, its `result` is not plain data
        return failure("python.result_invalid", str(raised.get("message")))
    message = f"{kind}: {raised.get('message')}"
    # The code the definition holds raised: the definition's own logic, not a transport.
    shown = raised.get("traceback")
    trace: dict[str, Any] = {}
    if isinstance(shown, str):
        trace["traceback"] = shown[-TRACEBACK_CHARS_MAX:]
    return failure("python.raised", message, kind="expression", py={"exception": kind}, **trace)


def _function_module(ref: Any) -> str:
    module, sep, function = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not sep or not all(p.isidentifier() for p in module.split(".")):
        raise _ToolInvalidError(f"function {ref!r} is package.module:function")
    if not function.isidentifier():
        raise _ToolInvalidError(f"function {ref!r} is package.module:function")
    return module


def _run_function(ref: str, args: Any, timeout_s: float, context: ToolContext) -> ToolOutcome:
    """`ref(args)` in a fresh child process: the built-in python adapter's runner."""
    runner = PythonFunctionEffect(
        PythonOptions(
            functions={"*": ref},
            module_paths=context.python_paths,
            timeout_s=timeout_s,
            python=context.python_executable,
            limits=context.python_limits,
        )
    )
    effect = EFFECT_OF_KIND["python"]
    lease = Lease(
        lease_id="",
        intent=context.intent,
        effect=effect,
        params=args,
        idempotency_key=context.intent,
        issuer_ref=None,
        origin_workflow="",
        origin_key=None,
        expires_unix_ms=0,
    )
    result = runner(args, lease)
    if result.status == "ok":
        return ToolOutcome("ok", result.payload)
    found = result.payload if isinstance(result.payload, dict) else {}
    message = str(found.get("message", ""))
    if result.status == "timeout":
        return timed_out("python.timeout", message)
    if found.get("code") in PYTHON_LIMIT_CODES:
        return failure(str(found["code"]), message)
    if "type" in found:
        exception = str(found["type"])
        return failure("python.raised", message, kind="expression", py={"exception": exception})
    if "exit_code" in found:
        stderr = _clip(str(found.get("stderr", "")), ERROR_TEXT_CHARS_MAX)
        return failure(
            "python.crashed", message, py={"exit_code": found["exit_code"], "stderr": stderr}
        )
    return failure("python.result_invalid", message)


# -- postgres, duckdb, shell (each in its own module: flows/tool_KIND.py); their fields may
# also come in NoETL's `spec`


def _postgres(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    tool = with_spec(tool, POSTGRES_FIELDS)
    timeout_s = _timeout_s(tool, POSTGRES_TIMEOUT_S_DEFAULT, context.postgres.timeout_s_max)
    return run_postgres(tool, args, context.postgres, context.keychain, timeout_s)


def _duckdb(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    tool = with_spec(tool, DUCKDB_FIELDS)
    timeout_s = _timeout_s(tool, DUCKDB_TIMEOUT_S_DEFAULT, context.duckdb.timeout_s_max)
    return run_duckdb(tool, args, context.duckdb, timeout_s)


def _shell(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    grants = field_grants(tool, context.grants, "env")
    tool = with_spec(tool, SHELL_FIELDS)
    timeout_s = _timeout_s(tool, SHELL_TIMEOUT_S_DEFAULT, context.shell.timeout_s_max)
    return run_shell(tool, args, context.shell, context.keychain, grants, timeout_s)


def _transfer(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    """NoETL's transfer (flows/tool_transfer.py); an http source is fetched by the http tool."""
    timeout_s = _timeout_s(tool, TRANSFER_TIMEOUT_S_DEFAULT, context.postgres.timeout_s_max)
    settings = TransferSettings(context.postgres, context.duckdb, context.keychain, timeout_s)
    return run_transfer(tool, settings, lambda request: _http(request, None, context))


# -- file


def _file(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    _check_fields(tool, FILE_FIELDS)
    op = tool.get("op")
    try:
        if op == "read":
            return ToolOutcome(
                "ok", read_resource(context.file_base, tool.get("path"), context.file_bytes_max)
            )
        if op == "write":
            written = write_resource(
                context.file_base, tool.get("path"), args, context.file_bytes_max
            )
            return ToolOutcome("ok", written)
    except FileToolError as error:
        return failure(error.code, str(error))
    raise _ToolInvalidError(f"op {op!r} is read or write")


_RUNNERS: dict[str, Callable[[dict[str, Any], Any, ToolContext], ToolOutcome]] = {
    "echo": _echo,
    "http": _http,
    "python": _python,
    "postgres": _postgres,
    "duckdb": _duckdb,
    "shell": _shell,
    "file": _file,
    "transfer": _transfer,
}


# --------------------------------------------------------------------------------------------
# Adapters


def handlers_for(kind: str, context: ToolContext) -> dict[str, Handler]:
    """The SDK handlers of tool `kind` (effect -> handler). `context` holds what every call
    shares; each lease's intent replaces its `intent`."""
    effect = _effect_of(kind)

    def handle(params: Any, lease: Lease) -> Result:
        outcome = run_tool(lease.effect, params, context=context.for_intent(lease.intent))
        return outcome.to_result()

    return {effect: handle}


def make_adapter(
    kind: str,
    *,
    seed: bytes,
    node: str,
    name: str | None = None,
    python_allow: Iterable[str] = (),
    python_paths: Iterable[Path] = (),
    python_timeout_s_max: float = PYTHON_TIMEOUT_S_MAX_DEFAULT,
    python_code: bool = True,
    python_limits: PythonLimits | None = None,
    http_timeout_s_max: float = HTTP_TIMEOUT_S_MAX_DEFAULT,
    http_response_bytes_max: int = HTTP_BODY_BYTES_MAX_DEFAULT,
    config: ToolConfig | None = None,
    file_base: Path | None = None,
    renew: bool = True,
    **adapter_options: Any,
) -> Adapter:
    """An SDK adapter serving tool `kind` (`echo`, `http`, `python`, `postgres`, `duckdb`,
    `shell`, `file`), with the keychain and limits of `config` (default: `flows/config.py`'s
    defaults): named `name` (default
    the kind's adapter identity, say `aos/http@1`), large results stored through the node
    (`Adapter.put_blob`), and, with `renew`, each lease renewed while its call runs, so a
    call longer than the node's lease is not handed out again. `adapter_options` go to
    `Adapter` (concurrency, lease_wait_ms, retry, on_outcome, ...)."""
    effect = _effect_of(kind)
    context = ToolContext(
        intent="",
        python_allow=tuple(python_allow),
        python_paths=tuple(python_paths),
        python_timeout_s_max=python_timeout_s_max,
        python_code=python_code,
        python_limits=python_limits or PythonLimits(),
        http_timeout_s_max=http_timeout_s_max,
        http_response_bytes_max=http_response_bytes_max,
        **(config or default_config()).context(),
        file_base=file_base,
    )
    adapter = Adapter(name=name or TOOL_EFFECTS[effect], seed=seed, node=node, **adapter_options)
    context = replace(context, put_blob=adapter.put_blob)
    for served, handler in handlers_for(kind, context).items():
        adapter.effect(served)(renewing(adapter, handler) if renew else handler)
    return adapter


def renewing(adapter: Adapter, handler: Handler, renewer: Renewer | None = None) -> Handler:
    """`handler`, with its lease renewed every third of its remaining time while it runs.
    One renewer thread serves every call of the handler (a new `Renewer` of `adapter`, or
    the one given): a call costs two dictionary updates, not a thread of its own (most calls
    end long before their first renewal)."""
    renewer = renewer or Renewer(adapter)

    def handle(params: Any, lease: Lease) -> Result:
        renewer.track(lease)
        try:
            return handler(params, lease)
        finally:
            renewer.done(lease)

    return handle


class Renewer:
    """Renews the leases of running calls, each every `interval` (a third of the time its
    lease had left when the call started, at least RENEW_INTERVAL_S_MIN), from one daemon
    thread started at the first call.

    A call wakes the thread only when its first renewal is due before the thread's next
    wake-up: a quick call (most of them) then costs two dictionary updates under a lock and
    no thread switch, which would otherwise be paid on every call of a chain."""

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self._changed = threading.Condition()
        self._due: dict[str, tuple[float, float, Lease]] = {}  # lease id -> (at, interval, lease)
        self._thread: threading.Thread | None = None
        # Minus infinite while the thread is not waiting: it looks at `_due` before it waits
        # again, so nothing added meanwhile is missed (see `wake_at`).
        self._wake_at = -math.inf
        self.wakes = 0  # times the thread woke to look at `_due` (tests read it)

    def track(self, lease: Lease) -> None:
        left_ms = lease.expires_unix_ms - time.time_ns() // 1_000_000
        interval_s = max(RENEW_INTERVAL_S_MIN, left_ms / 3000)
        due_at = time.monotonic() + interval_s
        with self._changed:
            self._due[lease.lease_id] = (due_at, interval_s, lease)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True)
                self._thread.start()
            if due_at < self._wake_at:
                self._changed.notify()

    def done(self, lease: Lease) -> None:
        with self._changed:
            self._due.pop(lease.lease_id, None)

    @property
    def wake_at(self) -> float:
        """When the waiting thread wakes by itself (`time.monotonic()` seconds): infinite while
        it waits for a call, minus infinite while it is not waiting (or not started)."""
        with self._changed:
            return self._wake_at

    def _run(self) -> None:
        while True:
            for lease_id, interval_s, lease in self._wait_for_due():
                if self._renewed(lease):
                    with self._changed:  # still running: due again one interval from now
                        if lease_id in self._due:
                            self._due[lease_id] = (time.monotonic() + interval_s, interval_s, lease)
                else:
                    self.done(lease)

    def _wait_for_due(self) -> list[tuple[str, float, Lease]]:
        """The leases due now (waiting until one is)."""
        with self._changed:
            while True:
                now = time.monotonic()
                due = [(k, i, lease) for k, (at, i, lease) in self._due.items() if at <= now]
                if due:
                    self._wake_at = -math.inf
                    return due
                self._wake_at = min((at for at, _, _ in self._due.values()), default=math.inf)
                self._changed.wait(None if self._wake_at == math.inf else self._wake_at - now)
                self.wakes += 1

    def _renewed(self, lease: Lease) -> bool:
        try:
            if self.adapter.renew(lease):
                return True
            log.warning("%s was cancelled while running; its receipt will be refused", lease.intent)
        except AosError as error:
            log.warning("renewing the lease of %s failed: %s", lease.intent, error)
        return False


def _effect_of(kind: str) -> str:
    effect = EFFECT_OF_KIND.get(kind)
    if effect is None:
        raise AdapterConfigInvalidError(f"tool kind {kind!r} is one of {list(TOOL_KINDS)}")
    return effect
