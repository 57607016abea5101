"""Shared pieces of the AIR pydantic models: the model config and validated text types.

Every AIR model is strict (no coercion: `"1"` is not an int), forbids unknown fields, is
frozen, and reads and writes its JSON field names (aliases such as `$kind`, `int`, `list`).
Validators raise `PydanticCustomError` with an `air.*` type, so a pydantic error converts to an
`Issue` whose code is stable.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, WithJsonSchema
from pydantic_core import PydanticCustomError

from aos.kernel import hashing
from aos.kernel.air.names import NAME_LENGTH_MAX, NAME_PATTERN, name_problem


class AirModel(BaseModel):
    """Base of every AIR model."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
    )


def _check_name(text: str) -> str:
    problem = name_problem(text)
    if problem is not None:
        raise PydanticCustomError("air.name_invalid", problem)
    return text


def _check_hash(text: str) -> str:
    if not hashing.is_hash(text):
        raise PydanticCustomError(
            "air.hash_invalid",
            "{text} is not a hash (blake3: and 64 lowercase hex digits)",
            {"text": repr(text[:80])},
        )
    return text


Name = Annotated[
    str,
    AfterValidator(_check_name),
    WithJsonSchema({"type": "string", "pattern": NAME_PATTERN, "maxLength": NAME_LENGTH_MAX}),
]
"""A definition name, `namespace/name@version`."""

HashText = Annotated[
    str,
    AfterValidator(_check_hash),
    WithJsonSchema({"type": "string", "pattern": "^blake3:[0-9a-f]{64}$"}),
]
"""A `blake3:<64 hex>` hash."""


def loc_to_path(loc: tuple[int | str, ...], root: str) -> str:
    """Render a pydantic error location as an AIR path (`root.a.b[3]`).

    Union tags are written `:tag` (see types.py) and are dropped: they name the branch that
    was tried, which the next element repeats as the field name.
    """
    path = root
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.startswith(":"):
            continue
        elif part == "[key]":
            path += "(key)"
        else:
            path += f".{part}" if path else part
    return path


def json_dump(model: BaseModel) -> Any:
    """The model as plain JSON values (dicts, lists, str, int, bool, None) with its JSON
    field names; never a pydantic or str-subclass object, so the result encodes as canonical
    CBOR directly."""
    return json.loads(model.model_dump_json(exclude_none=True))
