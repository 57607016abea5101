"""What a tool call ends with (spec/11 §3.3): `ToolOutcome` (a receipt's status and payload),
the `error` and `timeout` payload builders every tool shares, and `ToolInvalidError`, raised
for a malformed tool spec or call (an `error` outcome, `tool.invalid`).

Kept apart from `flows/tools/dispatch.py` so that each tool's own module (`tool_postgres`,
`tool_duckdb`, `tool_shell`, `keychain`) builds outcomes without importing the dispatcher."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aos.flows.define.tool_schema import field_problems
from aos.kernel.adapters.sdk import ERROR_MESSAGE_CHARS_MAX, Result, Status


@dataclass(frozen=True)
class ToolOutcome:
    """A tool call's receipt status and payload."""

    status: Status
    payload: Any = None

    def to_result(self) -> Result:
        return Result(self.status, self.payload)


class ToolInvalidError(Exception):
    """The tool spec or the call's params are malformed (an `error`, `tool.invalid`)."""


def failure(
    code: str, message: str, *, kind: str = "transport", retryable: bool = False, **extra: Any
) -> ToolOutcome:
    """An `error` outcome: `{kind, code, message, retryable, error_kind, **extra}`: `kind` is
    the flow error category (spec/11 §3.3), `error_kind` NoETL's name of what failed."""
    payload = {"kind": kind, "code": code, "message": clip(message), "retryable": retryable}
    payload["error_kind"] = noetl_kind(code, kind, message, extra)
    return ToolOutcome("error", {**payload, **extra})


def timed_out(code: str, message: str) -> ToolOutcome:
    """A `timeout` outcome: `{kind: timeout, code, message, retryable: true, error_kind}`."""
    payload = {"kind": "timeout", "code": code, "message": clip(message), "retryable": True}
    payload["error_kind"] = "db_timeout" if code == "postgres.timeout" else "timeout"
    return ToolOutcome("timeout", payload)


SCHEMA_EXCEPTIONS = frozenset(
    {"TypeError", "ValueError", "ValidationError", "KeyError", "IndexError"}
)
"""Python exceptions NoETL classifies as `schema` (`noetl/core/errors.py`,
`classify_python_error`)."""


def noetl_kind(code: str, kind: str, message: str, extra: dict[str, Any]) -> str:
    """What failed, in NoETL 2.13.1's words (`noetl/core/errors.py`, `ErrorKind` and the
    `classify_*` functions; spec/12 §6 has the table): from the aos code and the tool's own
    details (`http.status`, `pg.sqlstate`, `py.exception`)."""
    if code == "http.status":
        return _http_kind(extra.get("http"))
    if code.startswith("python."):
        return _python_kind(code, message, extra.get("py"))
    if code.startswith("postgres."):
        return _postgres_kind(code, message, extra.get("pg"))
    if code in ("http.connect", "http.transport"):
        return "connection"
    return {"authorization": "auth", "timeout": "timeout"}.get(kind, "unknown")


def _http_kind(http: Any) -> str:
    status = http.get("status") if isinstance(http, dict) else None
    if type(status) is not int:
        return "unknown"
    if status == 429:
        return "rate_limit"
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    if 400 <= status < 500:
        return "client_error"
    return "server_error" if status >= 500 else "unknown"


def _python_kind(code: str, message: str, py: Any) -> str:
    if code == "python.timeout":
        return "timeout"
    if code == "python.result_invalid":
        return "schema"
    if code == "python.code_refused" or code == "python.not_allowed":
        return "auth"
    exception = py.get("exception") if isinstance(py, dict) else None
    if code != "python.raised" or not isinstance(exception, str):
        return "unknown"
    if exception == "JSONDecodeError" or "json" in message.lower():
        return "parse"
    if exception in SCHEMA_EXCEPTIONS:
        return "schema"
    return "timeout" if "timeout" in message.lower() else "unknown"


def _postgres_kind(code: str, message: str, pg: Any) -> str:
    if code == "postgres.connect":
        return "db_connection"
    if code == "postgres.auth":
        return "auth"
    sqlstate = pg.get("sqlstate") if isinstance(pg, dict) else None
    state = sqlstate if isinstance(sqlstate, str) else ""
    lowered = message.lower()
    if state in ("40001", "40P01") or "deadlock" in lowered:
        return "db_deadlock"
    if state.startswith("23") or "unique" in lowered or "duplicate" in lowered:
        return "db_constraint"
    if state.startswith("08"):
        return "db_connection"
    if state == "57014":
        return "db_timeout"
    if state.startswith("28") or state == "42501":
        return "auth"
    return "unknown"


def with_spec(tool: dict[str, Any], allowed: frozenset[str]) -> dict[str, Any]:
    """A NoETL tool may carry its fields in `spec` (`{kind: postgres, spec: {auth, command,
    policy}}`): those of this kind's fields not given beside it are taken from there, the
    rest of `spec` (policy, runtime knobs) is the front end's and ignored here."""
    spec = tool.get("spec")
    if spec is None:
        return tool
    if not isinstance(spec, dict):
        raise ToolInvalidError("spec is a map")
    found = {key: value for key, value in spec.items() if key in allowed and key != "kind"}
    return {**found, **{key: value for key, value in tool.items() if key != "spec"}}


def check_fields(tool: dict[str, Any], allowed: frozenset[str]) -> None:
    """Refuse a tool spec with a field its kind does not have (a typo must not be ignored),
    with the schema's reason and fix where it names the field (`flows/define/tool_schema.py`)."""
    unknown = [name for name in tool if name not in allowed]
    if unknown:
        problems = {p.name: str(p) for p in field_problems(tool)}
        found = [problems.get(str(name), f"unknown field `{name}`") for name in unknown]
        raise ToolInvalidError("; ".join(found))


def clip(text: str, limit: int = ERROR_MESSAGE_CHARS_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
