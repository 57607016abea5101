"""The flow world's tools (spec/11-flows.md §1.2, §3.3, §7; spec/12 §6): what the adapters
`aos/echo@1`, `aos/http@1`, `aos/python@1`, `aos/postgres@1`, `aos/duckdb@1`, `aos/shell@1` and
`aos/file@1` do with a tool call.

A flow's `call` task becomes an effect `aos/tool.KIND@1` whose params are `aos/ToolCall@1`
`{exec, step, task, attempt, tool, args, result_inline_bytes_max}`; `tool` is the rendered tool
spec (`kind` and the kind's fields). `run_tool` performs one such call and returns its outcome;
it is pure of any transport, so the same code runs in an adapter process (`make_adapter`,
`aos adapter run tool-KIND`) and in process (`flows/serve/local.py`, `aos flow run --local`).

    echo        the result is `args`
    http        flows/tools/http.py
    python      flows/tools/python.py (inline code in flows/tools/pyworker.py)
    postgres, duckdb, shell, transfer
                flows/tools/postgres.py, duckdb.py, shell.py, transfer.py
    file        {op: read | write, path} inside the adapter's base directory
                (`flows/tools/file.py`): read -> the content (JSON, JSON text sequence,
                YAML); write args -> {path, bytes}

Each kind's fields are its schema's (flows/define/tool_schema.py), the one `aos flow check`
reads; what a call may use besides its params is its `ToolContext` (flows/tools/context.py).

Secrets (flows/tools/keychain.py) go in here, right before use: `${keychain:NAME}` placeholders in
http headers and the shell tool's `env` where the call's `keychain` grants allow them, the
postgres tool's `auth`; every text of the outcome that holds one is scrubbed.

Outcomes are `ok` (the payload is the result), `error` and `timeout`; an error payload is small
and always `{kind, code, message, retryable, ...}` with `kind` one of the flow error kinds
(`transport`, `timeout`, `authorization`). An `ok` result whose canonical CBOR is larger than
the call's `result_inline_bytes_max` is stored with `put_blob` and the payload names it:
`{"$ref": "blake3:...", "size": N}`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from aos.flows.define.tool_schema import (
    TOOL_KINDS,
    TOOL_SCHEMAS,
)
from aos.flows.tools.config import ToolConfig, default_config
from aos.flows.tools.context import (
    HTTP_TIMEOUT_S_MAX_DEFAULT,
    PYTHON_TIMEOUT_S_MAX_DEFAULT,
    ToolCallInvalidError,
    ToolContext,
    timeout_s_of,
)
from aos.flows.tools.duckdb import (
    DUCKDB_FIELDS,
    DUCKDB_TIMEOUT_S_DEFAULT,
    run_duckdb,
)
from aos.flows.tools.file import (
    FileToolError,
    read_resource,
    write_resource,
)
from aos.flows.tools.http import run_http
from aos.flows.tools.keychain import (
    Grants,
    GrantsInvalidError,
    field_grants,
)
from aos.flows.tools.outcomes import ToolInvalidError, ToolOutcome, failure, with_spec
from aos.flows.tools.outcomes import check_fields as _check_fields
from aos.flows.tools.postgres import (
    POSTGRES_FIELDS,
    POSTGRES_TIMEOUT_S_DEFAULT,
    run_postgres,
)
from aos.flows.tools.python import run_python
from aos.flows.tools.shell import SHELL_FIELDS, SHELL_TIMEOUT_S_DEFAULT, run_shell
from aos.flows.tools.transfer import TRANSFER_TIMEOUT_S_DEFAULT, TransferSettings, run_transfer
from aos.kernel import cbor
from aos.kernel.adapters.builtin.http import (
    HTTP_BODY_BYTES_MAX_DEFAULT,
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
EFFECT_OF_KIND: dict[str, str] = {kind: f"aos/tool.{kind}@1" for kind in TOOL_KINDS}
_KIND_OF_EFFECT = {effect: kind for kind, effect in EFFECT_OF_KIND.items()}

RESULT_INLINE_BYTES_MAX_DEFAULT = 64 * 1024
"""spec/11 §7; used when the params do not say."""
RENEW_INTERVAL_S_MIN = 0.1

ECHO_FIELDS = TOOL_SCHEMAS["echo"].accepted
FILE_FIELDS = TOOL_SCHEMAS["file"].accepted
"""Each kind's fields, from its one schema (`flows/define/tool_schema.py`), which the check reads too."""


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
        raise ToolCallInvalidError("the params are an aos/ToolCall@1 map")
    tool = params.get("tool")
    if not isinstance(tool, dict) or tool.get("kind") != kind:
        raise ToolCallInvalidError(f"params.tool is a map with kind {kind!r}")
    inline_max = params.get("result_inline_bytes_max", RESULT_INLINE_BYTES_MAX_DEFAULT)
    if type(inline_max) is not int or inline_max < 0:
        raise ToolCallInvalidError("params.result_inline_bytes_max is a natural number")
    return tool, params.get("args"), inline_max


def _for_call(params: dict[str, Any], context: ToolContext) -> ToolContext:
    """The context with the call's own `flow_format` (default 1) and `context`."""
    flow_format = params.get("flow_format")
    if flow_format is None:
        flow_format = 1
    if type(flow_format) is not int or flow_format < 1:
        raise ToolCallInvalidError("params.flow_format is a definition format (1, 2, ...)")
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


# -- echo


def _echo(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    _check_fields(tool, ECHO_FIELDS)
    return ToolOutcome("ok", args)


# -- postgres, duckdb, shell (each in its own module: flows/tool_KIND.py); their fields may
# also come in NoETL's `spec`


def _postgres(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    tool = with_spec(tool, POSTGRES_FIELDS)
    timeout_s = timeout_s_of(tool, POSTGRES_TIMEOUT_S_DEFAULT, context.postgres.timeout_s_max)
    return run_postgres(tool, args, context.postgres, context.keychain, timeout_s)


def _duckdb(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    tool = with_spec(tool, DUCKDB_FIELDS)
    timeout_s = timeout_s_of(tool, DUCKDB_TIMEOUT_S_DEFAULT, context.duckdb.timeout_s_max)
    return run_duckdb(tool, args, context.duckdb, timeout_s)


def _shell(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    grants = field_grants(tool, context.grants, "env")
    tool = with_spec(tool, SHELL_FIELDS)
    timeout_s = timeout_s_of(tool, SHELL_TIMEOUT_S_DEFAULT, context.shell.timeout_s_max)
    return run_shell(tool, args, context.shell, context.keychain, grants, timeout_s)


def _transfer(tool: dict[str, Any], args: Any, context: ToolContext) -> ToolOutcome:
    """NoETL's transfer (flows/tools/transfer.py); an http source is fetched by the http tool."""
    timeout_s = timeout_s_of(tool, TRANSFER_TIMEOUT_S_DEFAULT, context.postgres.timeout_s_max)
    settings = TransferSettings(context.postgres, context.duckdb, context.keychain, timeout_s)
    return run_transfer(tool, settings, lambda request: run_http(request, None, context))


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
    raise ToolCallInvalidError(f"op {op!r} is read or write")


_RUNNERS: dict[str, Callable[[dict[str, Any], Any, ToolContext], ToolOutcome]] = {
    "echo": _echo,
    "http": run_http,
    "python": run_python,
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
    `shell`, `file`), with the keychain and limits of `config` (default: `flows/tools/config.py`'s
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
