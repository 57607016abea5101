"""The error hierarchy of aos.

Every error a user can meet is an `AosError` with a stable `code` (dotted, lowercase, never
reused for another meaning). The CLI prints the code and a one-line hint; the HTTP API returns
them in its error bodies; tests assert on codes, never on message wording.

A broken kernel invariant is not an `AosError`: it is `KernelInvariantError`, which stops the
world loudly because continuing could journal something wrong.
"""

from __future__ import annotations

from typing import Any, ClassVar


class AosError(Exception):
    """Base of every user-facing aos error."""

    code: ClassVar[str] = "aos.error"
    hint: ClassVar[str] = ""

    def __init__(self, message: str, *, path: str | None = None, **detail: Any) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.detail = detail

    def __str__(self) -> str:
        if self.path:
            return f"{self.path}: {self.message}"
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape the CLI (`--json`) and the HTTP API use for this error."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.path:
            body["path"] = self.path
        if self.hint:
            body["hint"] = self.hint
        if self.detail:
            body["detail"] = {k: _jsonable(v) for k, v in sorted(self.detail.items())}
        return body


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


class KernelInvariantError(Exception):
    """A kernel invariant broke. Not a user error: the world must stop."""


class InvalidInputError(AosError):
    """Input from outside (a CLI argument, a request body) that cannot be parsed."""

    code = "input.invalid"
