"""A cell's key from what a user gives (spec/03-world.md §12): a key value normalized as
routing normalizes it, or a KEY as typed on a command line. Needs the world's runtime (its
workflows' key schemas), unlike the reads of cells by key bytes (queries.py).
"""

from __future__ import annotations

from typing import Any

from aos.kernel import cbor
from aos.kernel.air.errors import AirError
from aos.kernel.air.normalize import normalize
from aos.kernel.air.types import RefType
from aos.kernel.text import jsontext
from aos.kernel.world.errors import KeyRequiredError, KeyUnexpectedError
from aos.kernel.world.runtime import Runtime


def key_bytes(runtime: Runtime, workflow: str, key: Any) -> bytes | None:
    """The canonical key bytes of a cell, from a key value (normalized like routing)."""
    definition = runtime.workflow(workflow)
    if definition.key_schema is None:
        return None
    if key is None:
        raise KeyRequiredError(f"{workflow} is keyed; name a key")
    key_type: Any = definition.key_schema
    if isinstance(key_type, str):
        key_type = RefType(ref=key_type)
    return cbor.encode(normalize(key, key_type, runtime.schemas))


def key_from_text(runtime: Runtime, workflow: str, text: str | None) -> tuple[Any, bytes | None]:
    """The key value and canonical key bytes a user's KEY names, as `aos world state get`
    and the cell operations read it: as typed (a text key bare: `order-1`), else, when that
    does not fit the workflow's key type, as JSON (`42`, `{"a": 1}`); left out for a workflow
    that is not keyed."""
    if runtime.workflow(workflow).key_schema is None:
        if text is not None:
            raise KeyUnexpectedError(f"{workflow} is not keyed; leave KEY out")
        return None, None
    if text is None:
        return None, key_bytes(runtime, workflow, None)  # raises world.key_required
    try:
        return text, key_bytes(runtime, workflow, text)
    except AirError as as_typed:
        try:
            parsed = jsontext.parse(text, path="key")
        except jsontext.JsonInvalidError:
            raise as_typed from None
        return parsed, key_bytes(runtime, workflow, parsed)
