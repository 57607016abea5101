"""The CAS: the definition and results stored by reference (`{"$ref", "size"}`), read
(`ctx.read`) and written (`ctx.write`, spec/08 §4.4).

A blob is content-addressed, so a decoded copy kept in a module-level memo (bounded, keyed
by hash) can never change a result: a warm instance that remembers it and a fresh one that
has to ask return the same output. A value this step writes is read back from the step's own
table: until the host tells the step its hash, the hash is a stand-in."""

from __future__ import annotations

from typing import Any

from aos_flow.errors import ExprError, Missing
from aos_sdk import cbor

REF_KEYS = ("$ref", "size", "schema_hint")
REF_BYTES_MAX = 96
"""The longest encoding of a reference `{"$ref", "size"}`: the self-describe prefix (3), a
map head (1), `"$ref"` (5), its text (2 + 71), `"size"` (5) and a 64-bit size (9). A result
no longer than this gains nothing from being stored by reference."""
DECODED_MAX = 32
_UNKNOWN: Any = object()
REQUEST_MAX = 12
_DECODED: dict[str, Any] = {}


def is_ref(value: Any) -> bool:
    """A result stored in the CAS: `{"$ref": "blake3:...", "size": N}` (and maybe a hint)."""
    if type(value) is not dict or type(value.get("$ref")) is not str:
        return False
    return value["$ref"].startswith("blake3:") and all(key in REF_KEYS for key in value)


def remember(table: dict[str, Any], key: str, value: Any, bound: int) -> None:
    """Insert into a bounded memo, evicting the oldest entry (results never depend on it)."""
    if key not in table and len(table) >= bound:
        del table[next(iter(table))]
    table[key] = value


class Blobs:
    """The blobs this step may read: those the host sent; any other raises `Missing`."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.written: dict[str, Any] = {}  # values this step wrote, by (stand-in) hash

    def store(self, data: bytes, value: Any = _UNKNOWN) -> dict[str, Any]:
        """Write `data`, a canonical encoding (of `value`, when the caller has it decoded),
        with this step; its reference."""
        blob_hash = self.ctx.write(data)
        self.written[blob_hash] = value
        return {"$ref": blob_hash, "size": len(data)}

    def by_reference(self, value: Any, inline_max: int) -> Any:
        """`value`, or a reference to it when its encoding is longer than `inline_max`."""
        if is_ref(value) or type(value) in (bool, int, float) or value is None:
            return value
        data = cbor.encode(value)
        return self.store(data, value) if len(data) > inline_max else value

    def raw(self, blob_hash: str) -> bytes:
        if not self.ctx.readable(blob_hash):
            raise Missing(blob_hash)
        return self.ctx.read(blob_hash)

    def deref(self, value: Any) -> Any:
        """The value a reference stands for (anything else is returned as it is)."""
        if not is_ref(value):
            return value
        blob_hash = value["$ref"]
        if blob_hash in self.written:  # its hash may be a stand-in: never in the memo
            if self.written[blob_hash] is _UNKNOWN:
                self.written[blob_hash] = self._decoded(blob_hash)
            return self.written[blob_hash]
        if blob_hash in _DECODED:
            return _DECODED[blob_hash]
        decoded = self._decoded(blob_hash)
        remember(_DECODED, blob_hash, decoded, DECODED_MAX)
        return decoded

    def _decoded(self, blob_hash: str) -> Any:
        try:
            return cbor.decode(self.raw(blob_hash))
        except cbor.CborError as error:
            raise ExprError(f"{blob_hash} is not a canonical CBOR value: {error}") from None

    def request(self, missing: str, business: Any) -> list[str]:
        """What to ask the host for when `missing` is absent: it, and the other references
        the business state holds (so that a step walking several refs needs one read round,
        the host allowing two)."""
        wanted = [missing]
        for found in _refs(business):
            if len(wanted) >= REQUEST_MAX:
                break
            if found not in wanted and not self.ctx.readable(found) and found not in _DECODED:
                wanted.append(found)
        return wanted


def _refs(value: Any) -> list[str]:
    """Every reference hash in `value`, in a deterministic walk order."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if is_ref(item):
            found.append(item["$ref"])
        elif type(item) is dict:
            stack.extend(reversed(list(item.values())))
        elif type(item) is list:
            stack.extend(reversed(item))
    return found


def forget() -> None:
    """Empty the memo of decoded blobs (after the import-time warm-up, `warmup.py`)."""
    _DECODED.clear()
