"""Limits as data (spec/04-effects.md §10.1): a field of a `*Limits` dataclass carries its help
text and its bounds, so that the dataclass is the one place a limit is written. The dataclass
checks itself against them (`problems`), and the CLI generates from them its `--field-name`
options, `--limit NAME=VALUE` and the `[limits]` table of a settings file
(cli/limit_options.py).

    @dataclass(frozen=True)
    class NodeLimits:
        lease_ms: int = limit(LEASE_MS_DEFAULT, "How long ...", minimum=1)
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

HELP_KEY = "aos.help"
MINIMUM_KEY = "aos.minimum"
MAXIMUM_KEY = "aos.maximum"
LIMIT_TYPES: tuple[type, ...] = (int, str)
"""What a generated limit may be: a value `--limit`, TOML and click all spell one way."""


def limit(
    default: Any, help: str, *, minimum: int | None = None, maximum: int | None = None
) -> Any:
    """A dataclass field that is a limit: its default, what it bounds (the CLI's help), and
    the range it must lie in (checked by `problems`)."""
    metadata = {HELP_KEY: help, MINIMUM_KEY: minimum, MAXIMUM_KEY: maximum}
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class LimitField:
    """One limit of a `*Limits` dataclass, as the CLI and a settings file see it."""

    name: str
    kind: type
    default: Any
    help: str
    minimum: int | None
    maximum: int | None

    def problem(self, value: Any) -> str | None:
        """Why `value` cannot be this limit (wrong type, out of its range), or None."""
        if not _is_kind(value, self.kind):
            return f"{self.name} must be {_KIND_TEXT[self.kind]}, not {value!r}"
        if self.minimum is not None and value < self.minimum:
            return f"{self.name} must be at least {self.minimum}, not {value!r}"
        if self.maximum is not None and value > self.maximum:
            return f"{self.name} must be at most {self.maximum}, not {value!r}"
        return None


_KIND_TEXT = {int: "an integer", str: "text"}


def _is_kind(value: Any, kind: type) -> bool:
    return type(value) is kind  # so True is no integer limit


def limit_fields(cls: type) -> tuple[LimitField, ...]:
    """The limits of a `*Limits` dataclass, in field order. Every field must be made by
    `limit` and have one of `LIMIT_TYPES` (a programming error otherwise)."""
    if cls not in _FIELDS:
        _FIELDS[cls] = _read_fields(cls)
    return _FIELDS[cls]


_FIELDS: dict[type, tuple[LimitField, ...]] = {}
"""Each class's fields, read once (every instance checks itself against them)."""


def _read_fields(cls: type) -> tuple[LimitField, ...]:
    hints = typing.get_type_hints(cls)
    found = []
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        if kind not in LIMIT_TYPES or HELP_KEY not in field.metadata:
            raise TypeError(f"{cls.__name__}.{field.name} is not a limit(...) of {LIMIT_TYPES}")
        found.append(
            LimitField(
                name=field.name,
                kind=kind,
                default=field.default,
                help=field.metadata[HELP_KEY],
                minimum=field.metadata[MINIMUM_KEY],
                maximum=field.metadata[MAXIMUM_KEY],
            )
        )
    return tuple(found)


def problems(limits: Any) -> list[str]:
    """What is wrong with the values of a `*Limits` instance, field by field (its
    `__post_init__` raises its own typed error with the first)."""
    found = (field.problem(getattr(limits, field.name)) for field in limit_fields(type(limits)))
    return [problem for problem in found if problem is not None]
