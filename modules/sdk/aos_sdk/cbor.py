"""Canonical CBOR for guests: a pure-Python twin of `aos.kernel.cbor`.

It runs inside a component (componentize-py's bundled CPython, no C extensions) and natively,
and produces exactly the bytes the kernel produces (`tests/test_sdk_cbor.py` proves the parity
with hypothesis). The rules:

* the data model is `None | bool | int | float | str | bytes | list | dict` (tuples encode as
  lists), integers in [-2**64, 2**64 - 1], map keys that are text or integers;
* definite lengths; integers, lengths and floats in their shortest form (a float in the
  narrowest of half/single/double that keeps its value), one NaN (`f9 7e00`);
* map keys sorted by the length of their encoding, then bytewise; no duplicate keys;
* no tags inside a value; stored and hashed values start with tag 55799 (`d9 d9 f7`).

`decode` is strict: anything but the one canonical encoding of a value is rejected.
"""

from __future__ import annotations

import math
import struct
from typing import Any

SELF_DESCRIBE_PREFIX = b"\xd9\xd9\xf7"
NESTING_DEPTH_MAX_DEFAULT = 64
INT_MIN = -(2**64)
INT_MAX = 2**64 - 1

_NAN = b"\xf9\x7e\x00"
_POS_INF = b"\xf9\x7c\x00"
_NEG_INF = b"\xf9\xfc\x00"


class CborError(ValueError):
    """A value cannot be encoded, or bytes are not canonical CBOR. `code` matches the kernel's
    error code for the same fault."""

    code = "cbor.error"

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


# --------------------------------------------------------------------------------------------
# Encoding


def encode(
    value: Any, *, self_describe: bool = True, depth_max: int = NESTING_DEPTH_MAX_DEFAULT
) -> bytes:
    """Encode `value` canonically; with `self_describe` the bytes start with tag 55799."""
    out = bytearray(SELF_DESCRIBE_PREFIX if self_describe else b"")
    _encode_into(out, value, depth_max)
    return bytes(out)


def _head(out: bytearray, major: int, arg: int) -> None:
    tag = major << 5
    if arg < 24:
        out.append(tag | arg)
    elif arg < 0x100:
        out.append(tag | 24)
        out.append(arg)
    elif arg < 0x10000:
        out.append(tag | 25)
        out += arg.to_bytes(2, "big")
    elif arg < 0x100000000:
        out.append(tag | 26)
        out += arg.to_bytes(4, "big")
    else:
        out.append(tag | 27)
        out += arg.to_bytes(8, "big")


def _encode_into(out: bytearray, value: Any, depth_left: int) -> None:
    # Exact type checks, as in the kernel: subclasses (IntEnum, str subclasses, OrderedDict)
    # are rejected rather than encoded by accident.
    kind = type(value)
    if value is None:
        out.append(0xF6)
    elif kind is bool:
        out.append(0xF5 if value else 0xF4)
    elif kind is int:
        _encode_int(out, value)
    elif kind is float:
        out += _float_bytes(value)
    elif kind is str:
        try:
            raw = value.encode("utf-8")
        except UnicodeEncodeError:
            raise CborError("cbor.unsupported_value", "text is not valid Unicode") from None
        _head(out, 3, len(raw))
        out += raw
    elif kind is bytes:
        _head(out, 2, len(value))
        out += value
    elif kind is list or kind is tuple:
        _check_depth(depth_left)
        _head(out, 4, len(value))
        for item in value:
            _encode_into(out, item, depth_left - 1)
    elif kind is dict:
        _check_depth(depth_left)
        _encode_map(out, value, depth_left)
    else:
        raise CborError("cbor.unsupported_value", f"cannot encode a value of type {kind.__name__}")


def _check_depth(depth_left: int) -> None:
    if depth_left <= 0:
        raise CborError("cbor.depth_exceeded", "nesting is deeper than the limit")


def _encode_int(out: bytearray, value: int) -> None:
    if not INT_MIN <= value <= INT_MAX:
        raise CborError("cbor.integer_range", f"integer {value} is outside -2**64 .. 2**64-1")
    if value >= 0:
        _head(out, 0, value)
    else:
        _head(out, 1, -1 - value)


def _float_bytes(value: float) -> bytes:
    if math.isnan(value):
        return _NAN
    if math.isinf(value):
        return _POS_INF if value > 0 else _NEG_INF
    # Narrowest width whose round trip gives the same value back (struct raises
    # OverflowError when the value does not fit the width at all).
    for code, fmt in ((0xF9, ">e"), (0xFA, ">f")):
        try:
            packed = struct.pack(fmt, value)
        except OverflowError:
            continue
        if struct.unpack(fmt, packed)[0] == value:
            return bytes((code,)) + packed
    return b"\xfb" + struct.pack(">d", value)


def _encode_map(out: bytearray, value: dict[Any, Any], depth_left: int) -> None:
    entries: list[tuple[bytes, Any]] = []
    for key, item in value.items():
        key_kind = type(key)
        if key_kind is not str and key_kind is not int:
            raise CborError(
                "cbor.key_type", f"map key of type {key_kind.__name__} (keys are text or integers)"
            )
        key_out = bytearray()
        _encode_into(key_out, key, depth_left - 1)
        entries.append((bytes(key_out), item))
    entries.sort(key=lambda entry: (len(entry[0]), entry[0]))
    _head(out, 5, len(entries))
    for key_bytes, item in entries:
        out += key_bytes
        _encode_into(out, item, depth_left - 1)


# --------------------------------------------------------------------------------------------
# Strict decoding


def decode(
    data: bytes | bytearray | memoryview,
    *,
    depth_max: int = NESTING_DEPTH_MAX_DEFAULT,
    trusted: bool = False,
) -> Any:
    """Decode the canonical, self-described encoding of one value; reject anything else
    (malformed or truncated bytes, trailing bytes, indefinite lengths, tags, simple values
    other than false/true/null, duplicate or non-text/int keys, non-shortest forms).

    `trusted` skips only the last check, that the bytes are the shortest, sorted encoding
    (a re-encode, about half the cost): for bytes the kernel built and checked itself, the
    step's input envelope. Everything else is still checked while reading."""
    raw = bytes(data)
    if not raw.startswith(SELF_DESCRIBE_PREFIX):
        raise CborError(
            "cbor.non_canonical", "canonical bytes start with the self-describe tag d9d9f7"
        )
    value, end = _Reader(raw, depth_max).item(len(SELF_DESCRIBE_PREFIX), depth_max)
    if end != len(raw):
        raise CborError("cbor.trailing_bytes", f"{len(raw) - end} bytes follow the data item")
    if not trusted and encode(value, depth_max=depth_max) != raw:
        raise CborError(
            "cbor.non_canonical", "the bytes are not the canonical encoding of their value"
        )
    return value


class _Reader:
    def __init__(self, data: bytes, depth_max: int) -> None:
        self.data = data
        self.depth_max = depth_max

    def _take(self, offset: int, size: int) -> bytes:
        end = offset + size
        if end > len(self.data):
            raise CborError("cbor.truncated", "the input ends inside a data item")
        return self.data[offset:end]

    def _head(self, offset: int) -> tuple[int, int, int, int]:
        initial = self._take(offset, 1)[0]
        major, info = initial >> 5, initial & 0x1F
        offset += 1
        if info < 24:
            return major, info, info, offset
        if info <= 27:
            size = 1 << (info - 24)
            return major, info, int.from_bytes(self._take(offset, size), "big"), offset + size
        if info == 31:
            raise CborError("cbor.indefinite_length", "aos accepts definite lengths only")
        raise CborError("cbor.malformed", f"reserved additional information {info}")

    def item(self, offset: int, depth_left: int) -> tuple[Any, int]:
        major, info, arg, offset = self._head(offset)
        if major == 0:
            return arg, offset
        if major == 1:
            return -1 - arg, offset
        if major == 2:
            return self._take(offset, arg), offset + arg
        if major == 3:
            try:
                return self._take(offset, arg).decode("utf-8"), offset + arg
            except UnicodeDecodeError:
                raise CborError("cbor.malformed", "text string is not valid UTF-8") from None
        if major == 6:
            raise CborError("cbor.unknown_tag", f"tag {arg} is not allowed inside a value")
        if major == 7:
            return self._simple(info, arg, offset)
        if depth_left <= 0:
            raise CborError("cbor.depth_exceeded", "nesting is deeper than the limit")
        if major == 4:
            return self._array(arg, offset, depth_left)
        return self._map(arg, offset, depth_left)

    def _array(self, count: int, offset: int, depth_left: int) -> tuple[Any, int]:
        items: list[Any] = []
        for _ in range(count):
            item, offset = self.item(offset, depth_left - 1)
            items.append(item)
        return items, offset

    def _map(self, count: int, offset: int, depth_left: int) -> tuple[Any, int]:
        result: dict[Any, Any] = {}
        for _ in range(count):
            key, offset = self.item(offset, depth_left - 1)
            if type(key) is not str and type(key) is not int:
                raise CborError("cbor.key_type", "map keys must be text strings or integers")
            if key in result:
                raise CborError("cbor.duplicate_key", f"map key {key!r} appears twice")
            result[key], offset = self.item(offset, depth_left - 1)
        return result, offset

    def _simple(self, info: int, arg: int, offset: int) -> tuple[Any, int]:
        if info == 20:
            return False, offset
        if info == 21:
            return True, offset
        if info == 22:
            return None, offset
        if info == 25:
            return struct.unpack(">e", arg.to_bytes(2, "big"))[0], offset
        if info == 26:
            return struct.unpack(">f", arg.to_bytes(4, "big"))[0], offset
        if info == 27:
            return struct.unpack(">d", arg.to_bytes(8, "big"))[0], offset
        raise CborError(
            "cbor.unsupported_value",
            "simple values other than false, true and null are not allowed",
        )
