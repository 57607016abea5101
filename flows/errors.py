"""Errors of the flow layer (spec/11-flows.md §1.6, §8).

Checking a definition finds *every* problem at once: each is a `Problem` (`code`, `path`,
`message`) and they travel together in one `FlowCheckError`, so an author fixes a whole file
in one round trip. Reading bytes that are not a definition at all (`flow.decode`) or too many
of them (`flow.too_large`) stops at once with a single error.

Codes are stable and dotted (`flow.step_unknown`); tests assert on codes, never on wording.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aos.kernel.errors import AosError

PROBLEMS_MAX = 1000
"""Most problems one check reports; the rest are counted (`dropped`), not listed."""

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def json_path(parts: Sequence[str | int]) -> str:
    """A JSON path from map keys and list indexes: `$.steps[2].tasks[0].tool.kind`. Keys that
    are not plain identifiers are quoted as RFC 9535 normalized paths do (`$.workload['a b']`)."""
    path = "$"
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            path += f".{part}"
        else:
            quoted = part.replace("\\", "\\\\").replace("'", "\\'")
            path += f"['{quoted}']"
    return path


class FlowError(AosError):
    """Base of every flow error."""

    code = "flow.error"


@dataclass(frozen=True)
class Problem:
    """One problem of a definition: a stable code, a JSON path into the definition
    (`$.steps[2].tasks[0].tool.kind`), and what is wrong there."""

    code: str
    path: str
    message: str

    def to_dict(self) -> dict[str, str]:
        """The JSON shape `aos flow check --json` and the HTTP API use."""
        return {"code": self.code, "path": self.path, "message": self.message}

    def __str__(self) -> str:
        return f"{self.code} at {self.path}: {self.message}"


class FlowCheckError(FlowError):
    """Every problem found in one definition, in the order they were found.

    Usable as a single error (its message names the first problem and counts the rest) and as
    a list (`problems`)."""

    code = "flow.invalid"
    hint = "fix every listed problem; `aos flow check FILE` shows them all"

    def __init__(self, problems: Iterable[Problem], *, source: str | None = None) -> None:
        found = list(problems)
        if not found:
            raise ValueError("a FlowCheckError needs at least one problem")
        self.problems: tuple[Problem, ...] = tuple(found[:PROBLEMS_MAX])
        self.dropped = len(found) - len(self.problems)
        self.source = source
        super().__init__(_summary(found, source))

    @property
    def codes(self) -> list[str]:
        """The problem codes, in order (handy in tests and scripts)."""
        return [problem.code for problem in self.problems]

    def to_dict(self) -> dict[str, Any]:
        body = super().to_dict()
        body["problems"] = [problem.to_dict() for problem in self.problems]
        if self.dropped:
            body["dropped"] = self.dropped
        return body


def _summary(problems: list[Problem], source: str | None) -> str:
    first = problems[0]
    where = f"{source}: " if source else ""
    more = len(problems) - 1
    suffix = f" (and {more} more problem{'s' if more != 1 else ''})" if more else ""
    return f"{where}[{first.code}] {first.path}: {first.message}{suffix}"


class FlowDecodeError(FlowError):
    """The bytes are not a definition document: not UTF-8, not YAML or JSON, a duplicate key,
    or (read back from a CAS) not canonical CBOR of a canonical definition."""

    code = "flow.decode"
    hint = "a flow file is one YAML or JSON document, UTF-8, with no duplicate keys"


class FlowTooLargeError(FlowError):
    """More bytes than `definition_bytes_max` (checked before parsing anything)."""

    code = "flow.too_large"
    hint = "a definition is at most definition_bytes_max bytes (1 MiB), authored and canonical"
