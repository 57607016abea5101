"""Errors of the AIR layer: definition problems and typed-value problems.

Two shapes, one hierarchy:

* checking an authored folder or a manifest finds *all* problems at once; each is an `Issue`
  (`code`, `path`, `message`, optional `file`) and they travel together in one
  `AirCheckError`, so an author fixes a whole folder in one round trip;
* normalizing one value stops at the first problem and raises a single `ValueInvalidError`
  (or a finer subclass) whose `path` points into the value (`$.items[3].price`).

Codes are stable and dotted (`air.dangling_ref`); tests assert on codes, never on wording.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aos.kernel.errors import AosError


class AirError(AosError):
    """Base of every AIR error."""

    code = "air.error"


@dataclass(frozen=True, order=True)
class Issue:
    """One problem found while checking AIR: a stable code, where it is, what is wrong.

    `path` is logical: rooted at a definition name (`demo/Counter@1.impl.module`), at
    `manifest` (`manifest.routing.subscriptions[2].workflow`), or at a file and index for
    definitions whose name could not be read (`schemas.json[1].name`). `file` is the authored
    file, relative to the folder, when there is one.
    """

    code: str
    path: str
    message: str
    file: str | None = None

    def to_dict(self) -> dict[str, str]:
        body = {"code": self.code, "path": self.path, "message": self.message}
        if self.file is not None:
            body["file"] = self.file
        return body

    def __str__(self) -> str:
        return f"{self.code} at {self.path}: {self.message}"


class AirCheckError(AirError):
    """All the problems found in one check, in a deterministic order.

    Usable as a single error (its `path` and message are those of the first issue, with a
    count), and as a list (`issues`).
    """

    code = "air.check_failed"
    hint = "fix every listed issue; `aos air check DIR` shows them all"

    def __init__(self, issues: Iterable[Issue]) -> None:
        self.issues: tuple[Issue, ...] = tuple(issues)
        if not self.issues:
            raise ValueError("an AirCheckError needs at least one issue")
        first = self.issues[0]
        more = len(self.issues) - 1
        suffix = f" (and {more} more issue{'s' if more != 1 else ''})" if more else ""
        super().__init__(f"[{first.code}] {first.message}{suffix}", path=first.path)

    @property
    def codes(self) -> list[str]:
        """The issue codes, in order (handy in tests and scripts)."""
        return [issue.code for issue in self.issues]

    def to_dict(self) -> dict[str, Any]:
        body = super().to_dict()
        body["issues"] = [issue.to_dict() for issue in self.issues]
        return body


# --------------------------------------------------------------------------------------------
# Typed-value errors (normalize.py). One class per code so callers can catch precisely.


class ValueInvalidError(AirError):
    """A value does not fit its schema type (wrong shape, bad text form, bad length)."""

    code = "air.value_invalid"
    hint = "the value must match its schema; see spec/02-air.md, 'Typed values'"


class ValueFieldMissingError(ValueInvalidError):
    code = "air.value_field_missing"
    hint = "every record field must be present (an option field may be omitted or null)"


class ValueFieldUnknownError(ValueInvalidError):
    code = "air.value_field_unknown"
    hint = "a record accepts exactly the fields its schema declares"


class ValueVariantUnknownError(ValueInvalidError):
    code = "air.value_variant_unknown"
    hint = 'a variant value is {"$tag": "<Arm>", "$value": ...} with an arm of its schema'


class ValueOutOfRangeError(ValueInvalidError):
    code = "air.value_out_of_range"
    hint = "int is i64, nat is u64, time is 0..2**63-1 ns, duration is i64 ns"


class ValueDuplicateKeyError(ValueInvalidError):
    code = "air.value_duplicate_key"
    hint = "two map keys are the same after normalization (for example upper/lower case uuid)"


class ValueTooDeepError(ValueInvalidError):
    code = "air.value_too_deep"
    hint = "the value nests deeper than the normalizer's depth limit"


class SchemaUnknownError(AirError):
    """A type refers to a schema name that is neither given nor built in."""

    code = "air.schema_unknown"
    hint = "the schema must be defined in the manifest or be a built-in sys/ schema"
