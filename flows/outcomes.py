"""What a tool call ends with (spec/11 §3.3): `ToolOutcome` (a receipt's status and payload),
the `error` and `timeout` payload builders every tool shares, and `ToolInvalidError`, raised
for a malformed tool spec or call (an `error` outcome, `tool.invalid`).

Kept apart from `flows/tools.py` so that each tool's own module (`tool_postgres`,
`tool_duckdb`, `tool_shell`, `keychain`) builds outcomes without importing the dispatcher."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aos.flows.tool_schema import field_problems
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
    """An `error` outcome: `{kind, code, message, retryable, **extra}`."""
    payload = {"kind": kind, "code": code, "message": clip(message), "retryable": retryable}
    return ToolOutcome("error", {**payload, **extra})


def timed_out(code: str, message: str) -> ToolOutcome:
    """A `timeout` outcome: `{kind: timeout, code, message, retryable: true}`."""
    payload = {"kind": "timeout", "code": code, "message": clip(message), "retryable": True}
    return ToolOutcome("timeout", payload)


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
    with the schema's reason and fix where it names the field (`flows/tool_schema.py`)."""
    unknown = [name for name in tool if name not in allowed]
    if unknown:
        problems = {p.name: str(p) for p in field_problems(tool)}
        found = [problems.get(str(name), f"unknown field `{name}`") for name in unknown]
        raise ToolInvalidError("; ".join(found))


def clip(text: str, limit: int = ERROR_MESSAGE_CHARS_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
