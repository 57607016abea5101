"""Strict JSON text: the one reader for JSON that comes from outside (CLI arguments and files,
HTTP request bodies).

One value; no duplicate keys (the last would silently win); no `NaN` or `Infinity`; at most
`depth_max` levels of nesting and `bytes_max` bytes. The nesting is measured on the raw text
before anything is parsed — strings removed by a regular expression, then the running bracket
depth — so a hostile document costs a linear scan in C, never a recursion, whatever its shape.
Everything downstream (pydantic, `cbor.from_json`, AIR normalization) recurses, so the bound
here is what keeps a deep document from becoming a `RecursionError`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aos.kernel.errors import InvalidInputError

JSON_DEPTH_MAX_DEFAULT = 64
"""The same bound as canonical CBOR's nesting (kernel/cbor.py), so a value that parses fits."""
JSON_BYTES_MAX_DEFAULT = 64 * 1024 * 1024

# A JSON string: quote, then any run of non-quote non-backslash characters or escapes, quote.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in _BRACKETS)
_SQUARE = bytes.maketrans(b"{}", b"[]")  # depth does not care which kind of bracket


class JsonInvalidError(InvalidInputError):
    """Text that is not one strict JSON value."""

    code = "input.invalid_json"
    hint = 'send one JSON value, no duplicate keys, no NaN; bytes are written {"$bytes": "<hex>"}'


class JsonTooDeepError(InvalidInputError):
    """JSON nested more deeply than the reader's bound."""

    code = "input.json_too_deep"
    hint = "JSON values nest at most 64 levels (json_depth_max)"


class JsonTooLargeError(InvalidInputError):
    """JSON text longer than the reader's bound."""

    code = "input.json_too_large"
    hint = "JSON text is bounded in size (json_bytes_max); store large data as a blob"


def parse(
    text: str | bytes,
    *,
    path: str = "$",
    depth_max: int = JSON_DEPTH_MAX_DEFAULT,
    bytes_max: int = JSON_BYTES_MAX_DEFAULT,
) -> Any:
    """The one JSON value `text` holds, or a typed error; bytes must be UTF-8."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if len(raw) > bytes_max:
        raise JsonTooLargeError(
            f"the JSON is {len(raw)} bytes; the limit is {bytes_max}", path=path, limit=bytes_max
        )
    check_depth(raw, depth_max=depth_max, path=path)
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise JsonInvalidError("the JSON is not UTF-8 text", path=path) from None
    try:
        return json.loads(decoded, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise JsonInvalidError(f"not JSON: {error}", path=path) from None


def check_depth(raw: bytes, *, depth_max: int = JSON_DEPTH_MAX_DEFAULT, path: str = "$") -> None:
    """Refuse `raw` if its brackets (outside strings) nest deeper than `depth_max`. Each pass
    deletes the innermost bracket pairs, one level; what is left after `depth_max` passes is
    deeper than that, or malformed (no pair left to delete), which the parser reports. A run
    of `depth_max + 1` openers, the usual hostile shape, is found at once."""
    brackets = _STRING.sub(b"", raw).translate(_SQUARE, delete=_NOT_BRACKETS)
    run = b"[" * (depth_max + 1)
    for _ in range(depth_max):
        if not brackets or run in brackets:
            break
        brackets = brackets.replace(b"[]", b"")
    if run in brackets or b"[]" in brackets:
        raise JsonTooDeepError(
            f"the JSON nests more than {depth_max} levels", path=path, limit=depth_max
        )


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise JsonInvalidError(f"duplicate key {key!r}")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise JsonInvalidError(f"{name} is not JSON (numbers are finite)")
