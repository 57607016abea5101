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

Every step decodes its input and encodes its output with this module, in an interpreter that
runs inside WebAssembly, so it is written for speed: the encodings of short texts and the
sorted key order of each map shape are memoized (bounded tables; the bytes never depend on
them), and the decoder checks canonical form while it reads instead of re-encoding.

Inside a component the work is done by `aos_sdk._cbor_c` (`_cbor_c.c`, compiled for
wasm32-wasi and linked in by `aos.kernel.wasm.build`) when it is there: it gives exactly what
this module's code gives or declines, and then this code runs, so the bytes, values and errors
are this module's in every case (`encode_python` and `decode_python`, the reference, which
`tests/test_sdk_cbor_compiled.py` compares it with). Natively there is no such module.
"""

from __future__ import annotations

import importlib
import math
import struct
from typing import Any

SELF_DESCRIBE_PREFIX = b"\xd9\xd9\xf7"
NESTING_DEPTH_MAX_DEFAULT = 64
INT_MIN = -(2**64)
INT_MAX = 2**64 - 1
# Memo bounds: texts up to TEXT_MEMO_CHARS_MAX characters, maps up to MAP_MEMO_KEYS_MAX keys.
TEXT_MEMO_MAX = 4096
TEXT_MEMO_CHARS_MAX = 64
MAP_MEMO_MAX = 1024
MAP_MEMO_KEYS_MAX = 32

_NAN = b"\xf9\x7e\x00"
_POS_INF = b"\xf9\x7c\x00"
_NEG_INF = b"\xf9\xfc\x00"
_KEY_TYPES = frozenset({str, int})
# The smallest argument each head width may carry in canonical form (additional info 24-27).
_SHORTEST_MIN = {24: 24, 25: 0x100, 26: 0x10000, 27: 0x100000000}
_SIMPLE_VALUES = (False, True, None)  # f4, f5, f6

_NAN_VALUE = struct.unpack(">e", _NAN[1:])[0]  # what decoding the one NaN gives

_TEXT_MEMO: dict[str, bytes] = {}
# A map shape (its keys, in the map's order): the map's head and its keys in canonical order.
_MAP_MEMO: dict[tuple[Any, ...], tuple[bytes, tuple[tuple[Any, bytes], ...]]] = {}


class CborError(ValueError):
    """A value cannot be encoded, or bytes are not canonical CBOR. `code` matches the kernel's
    error code for the same fault."""

    code = "cbor.error"

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def _compiled_codec() -> Any:
    """The compiled codec when this interpreter has it (a component's), else None."""
    try:
        return importlib.import_module("aos_sdk._cbor_c")
    except ImportError:
        return None


COMPILED: Any = _compiled_codec()
"""`aos_sdk._cbor_c`, or None: natively, and in a component built without it."""

_DECLINED: Any = object()  # what the compiled decoder returns when it leaves a value to us


# --------------------------------------------------------------------------------------------
# Encoding


def encode(
    value: Any, *, self_describe: bool = True, depth_max: int = NESTING_DEPTH_MAX_DEFAULT
) -> bytes:
    """Encode `value` canonically; with `self_describe` the bytes start with tag 55799."""
    if COMPILED is not None:
        found = COMPILED.encode(value, depth_max)
        if found is not None:
            return found if self_describe else found[len(SELF_DESCRIBE_PREFIX) :]
    return encode_python(value, self_describe=self_describe, depth_max=depth_max)


def encode_python(
    value: Any, *, self_describe: bool = True, depth_max: int = NESTING_DEPTH_MAX_DEFAULT
) -> bytes:
    """`encode` by this module's own code: the reference the compiled codec is held to."""
    out = bytearray(SELF_DESCRIBE_PREFIX if self_describe else b"")
    _encode_into(out, value, depth_max)
    return bytes(out)


def encode_list(items: list[bytes]) -> bytes:
    """The canonical encoding of a list, from its items' canonical encodings (each with the
    self-describe prefix): a list built that way is never decoded and encoded again."""
    out = bytearray(SELF_DESCRIBE_PREFIX)
    out += _head_bytes(4, len(items))
    skip = len(SELF_DESCRIBE_PREFIX)
    for item in items:
        if item[:skip] != SELF_DESCRIBE_PREFIX:
            raise CborError("cbor.unsupported_value", "a list item is not a prefixed encoding")
        out += memoryview(item)[skip:]
    return bytes(out)


def _head_bytes(major: int, arg: int) -> bytes:
    tag = major << 5
    if arg < 24:
        return bytes((tag | arg,))
    if arg < 0x100:
        return bytes((tag | 24, arg))
    if arg < 0x10000:
        return bytes((tag | 25,)) + arg.to_bytes(2, "big")
    if arg < 0x100000000:
        return bytes((tag | 26,)) + arg.to_bytes(4, "big")
    return bytes((tag | 27,)) + arg.to_bytes(8, "big")


def _text_bytes(value: str) -> bytes:
    """A text's encoding, head included (memoized for short texts: keys, names, ids)."""
    found = _TEXT_MEMO.get(value)
    if found is not None:
        return found
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise CborError("cbor.unsupported_value", "text is not valid Unicode") from None
    encoded = _head_bytes(3, len(raw)) + raw
    if len(value) <= TEXT_MEMO_CHARS_MAX and len(_TEXT_MEMO) < TEXT_MEMO_MAX:
        _TEXT_MEMO[value] = encoded
    return encoded


def _encode_into(out: bytearray, value: Any, depth_left: int) -> None:
    # Exact type checks, as in the kernel: subclasses (IntEnum, str subclasses, OrderedDict)
    # are rejected rather than encoded by accident.
    kind = type(value)
    if kind is str:
        out += _text_bytes(value)
    elif kind is dict:
        if depth_left <= 0:
            _check_depth(depth_left)
        _encode_map(out, value, depth_left)
    elif kind is int:
        if 0 <= value < 24:
            out.append(value)
        else:
            _encode_int(out, value)
    elif value is None:
        out.append(0xF6)
    elif kind is bool:
        out.append(0xF5 if value else 0xF4)
    elif kind is list or kind is tuple:
        if depth_left <= 0:
            _check_depth(depth_left)
        _encode_array(out, value, depth_left)
    elif kind is float:
        out += _float_bytes(value)
    elif kind is bytes:
        out += _head_bytes(2, len(value))
        out += value
    else:
        raise CborError("cbor.unsupported_value", f"cannot encode a value of type {kind.__name__}")


def _check_depth(depth_left: int) -> None:
    if depth_left <= 0:
        raise CborError("cbor.depth_exceeded", "nesting is deeper than the limit")


def _encode_int(out: bytearray, value: int) -> None:
    if not INT_MIN <= value <= INT_MAX:
        raise CborError("cbor.integer_range", f"integer {value} is outside -2**64 .. 2**64-1")
    if value >= 0:
        out += _head_bytes(0, value)
    else:
        out += _head_bytes(1, -1 - value)


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
    keys = tuple(value)
    # Equal tuples of exactly-str/int keys name the same keys, so a memo hit is only trusted
    # once the key types are checked (True == 1 and a str subclass equals its text).
    if not _KEY_TYPES.issuperset(map(type, keys)):
        _reject_key(keys)
    shape = _MAP_MEMO.get(keys)
    if shape is None:
        shape = _new_shape(keys, depth_left)
    head, order = shape
    out += head
    left = depth_left - 1
    memo = _TEXT_MEMO
    for key, key_bytes in order:
        out += key_bytes
        item = value[key]
        # Inline the commonest items (memoized texts, small integers, null, nested maps and
        # lists): a call less each.
        kind = type(item)
        if kind is str and item in memo:
            out += memo[item]
        elif kind is int:
            if 0 <= item < 24:
                out.append(item)
            else:
                _encode_int(out, item)
        elif item is None:
            out.append(0xF6)
        elif kind is dict and left > 0:
            _encode_map(out, item, left)
        elif kind is list and left > 0:
            _encode_array(out, item, left)
        else:
            _encode_into(out, item, left)


def _encode_array(out: bytearray, value: list[Any] | tuple[Any, ...], depth_left: int) -> None:
    count = len(value)
    out += bytes((0x80 | count,)) if count < 24 else _head_bytes(4, count)
    left = depth_left - 1
    for item in value:
        # Inline what long lists mostly hold (a loop's items and its encoded results, the
        # records of the history and of the marking).
        kind = type(item)
        if kind is int and 0 <= item < 24:
            out.append(item)
        elif kind is dict and left > 0:
            _encode_map(out, item, left)
        elif kind is bytes:
            out += _head_bytes(2, len(item)) + item
        else:
            _encode_into(out, item, left)


def encode_copied(value: Any, *, depth_max: int = NESTING_DEPTH_MAX_DEFAULT) -> tuple[bytes, Any]:
    """`encode(value)` (self-described) and `decoded_copy(value)` in one walk: a step's state
    is encoded and kept for the next input (`envelope.StateMemo`), and walking it once is
    cheaper than walking it twice. Raises what `encode` raises. With the compiled codec, the
    copy is what decoding the bytes gives (the copy's definition), at C speed."""
    if COMPILED is not None:
        encoded = COMPILED.encode(value, depth_max)
        if encoded is not None:
            copy = COMPILED.decode(encoded, NESTING_DEPTH_MAX_DEFAULT, True, _DECLINED)
            if copy is not _DECLINED:
                return encoded, copy
    out = bytearray(SELF_DESCRIBE_PREFIX)
    copy = _encode_copy_into(out, value, depth_max)
    return bytes(out), copy


def _encode_copy_into(out: bytearray, value: Any, depth_left: int) -> Any:
    kind = type(value)
    if kind is dict:
        if depth_left <= 0:
            _check_depth(depth_left)
        return _encode_copy_map(out, value, depth_left)
    if kind is list or kind is tuple:
        if depth_left <= 0:
            _check_depth(depth_left)
        return _encode_copy_array(out, value, depth_left)
    _encode_into(out, value, depth_left)
    if kind is float and math.isnan(value):
        return _NAN_VALUE
    return value


def _encode_copy_map(out: bytearray, value: dict[Any, Any], depth_left: int) -> dict[Any, Any]:
    """`_encode_map`, building the copy (keys in canonical order) as it goes. Its opening
    repeats `_encode_map`'s on purpose: a shared helper is one more Python call per map, which
    inside a component costs ~15% more fuel for a step's encoding."""
    keys = tuple(value)
    if not _KEY_TYPES.issuperset(map(type, keys)):
        _reject_key(keys)
    shape = _MAP_MEMO.get(keys)
    if shape is None:
        shape = _new_shape(keys, depth_left)
    head, order = shape
    out += head
    left = depth_left - 1
    memo = _TEXT_MEMO
    copy: dict[Any, Any] = {}
    for key, key_bytes in order:
        out += key_bytes
        item = value[key]
        kind = type(item)
        if kind is str and item in memo:
            out += memo[item]
            copy[key] = item
        elif kind is int:
            if 0 <= item < 24:
                out.append(item)
            else:
                _encode_int(out, item)
            copy[key] = item
        elif item is None:
            out.append(0xF6)
            copy[key] = None
        elif kind is dict and left > 0:
            copy[key] = _encode_copy_map(out, item, left)
        elif kind is list and left > 0:
            copy[key] = _encode_copy_array(out, item, left)
        else:
            copy[key] = _encode_copy_into(out, item, left)
    return copy


def _encode_copy_array(out: bytearray, value: list[Any] | tuple[Any, ...], depth_left: int) -> Any:
    count = len(value)
    out += bytes((0x80 | count,)) if count < 24 else _head_bytes(4, count)
    left = depth_left - 1
    copy: list[Any] = []
    append = copy.append
    for item in value:
        kind = type(item)
        if kind is int and 0 <= item < 24:
            out.append(item)
            append(item)
        elif kind is dict and left > 0:
            append(_encode_copy_map(out, item, left))
        elif kind is bytes:
            out += _head_bytes(2, len(item)) + item
            append(item)
        elif item is None:
            out.append(0xF6)
            append(None)
        else:
            append(_encode_copy_into(out, item, left))
    return copy


def _new_shape(
    keys: tuple[Any, ...], depth_left: int
) -> tuple[bytes, tuple[tuple[Any, bytes], ...]]:
    """A map shape's head and canonical key order, memoized while the table has room."""
    shape = (_head_bytes(5, len(keys)), _key_order(keys, depth_left))
    if len(keys) <= MAP_MEMO_KEYS_MAX and len(_MAP_MEMO) < MAP_MEMO_MAX:
        _MAP_MEMO[keys] = shape
    return shape


def _key_order(keys: tuple[Any, ...], depth_left: int) -> tuple[tuple[Any, bytes], ...]:
    entries: list[tuple[Any, bytes]] = []
    for key in keys:
        key_out = bytearray()
        _encode_into(key_out, key, depth_left - 1)
        entries.append((key, bytes(key_out)))
    entries.sort(key=lambda entry: (len(entry[1]), entry[1]))
    return tuple(entries)


def _reject_key(keys: tuple[Any, ...]) -> None:
    for key in keys:
        key_kind = type(key)
        if key_kind is not str and key_kind is not int:
            raise CborError(
                "cbor.key_type", f"map key of type {key_kind.__name__} (keys are text or integers)"
            )


def decoded_copy(value: Any) -> Any:
    """What `decode(encode(value))` gives, without the bytes: new maps with their keys in
    canonical order, lists for tuples, the one NaN. For a value `encode` accepted (its map
    orders are then memoized, or computed again here)."""
    kind = type(value)
    if kind is dict:
        keys = tuple(value)
        shape = _MAP_MEMO.get(keys)
        order = shape[1] if shape is not None else _key_order(keys, NESTING_DEPTH_MAX_DEFAULT)
        if _IMMUTABLE_SCALARS.issuperset(map(type, value.values())):  # checked at C speed
            return {key: value[key] for key, _ in order}
        return {key: _copied(value[key]) for key, _ in order}
    if kind is list or kind is tuple:
        if _IMMUTABLE_SCALARS.issuperset(map(type, value)):
            return list(value)
        return [_copied(item) for item in value]
    if kind is float and math.isnan(value):
        return _NAN_VALUE
    return value


# Items a copy shares with its original (a float is copied: its NaN becomes the one NaN).
_IMMUTABLE_SCALARS = frozenset({str, int, bool, type(None), bytes})


def _copied(value: Any) -> Any:
    kind = type(value)  # the immutable scalars of most items, without a call
    if kind is str or kind is int or value is None or kind is bool or kind is bytes:
        return value
    return decoded_copy(value)


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

    Canonical form (shortest heads and floats, sorted map keys) is checked while reading and
    reported only once the bytes are otherwise well formed, as the kernel reports it.
    `trusted` skips that check: for bytes the kernel built and checked itself, the step's
    input envelope. Everything else is still checked while reading."""
    raw = data if type(data) is bytes else bytes(data)
    if COMPILED is not None:
        found = COMPILED.decode(raw, depth_max, trusted, _DECLINED)
        if found is not _DECLINED:
            return found
    return decode_python(raw, depth_max=depth_max, trusted=trusted)


def decode_python(
    data: bytes | bytearray | memoryview,
    *,
    depth_max: int = NESTING_DEPTH_MAX_DEFAULT,
    trusted: bool = False,
) -> Any:
    """`decode` by this module's own code: the reference the compiled codec is held to."""
    raw = bytes(data)
    if not raw.startswith(SELF_DESCRIBE_PREFIX):
        raise CborError(
            "cbor.non_canonical", "canonical bytes start with the self-describe tag d9d9f7"
        )
    reader = _Reader(raw, depth_max, check_canonical=not trusted)
    value, end = reader.item(len(SELF_DESCRIBE_PREFIX), depth_max)
    if end != len(raw):
        raise CborError("cbor.trailing_bytes", f"{len(raw) - end} bytes follow the data item")
    if reader.non_canonical:
        raise CborError(
            "cbor.non_canonical", "the bytes are not the canonical encoding of their value"
        )
    return value


def _truncated() -> CborError:
    return CborError("cbor.truncated", "the input ends inside a data item")


class _Reader:
    __slots__ = ("check", "data", "depth_max", "non_canonical", "size")

    def __init__(self, data: bytes, depth_max: int, *, check_canonical: bool) -> None:
        self.data = data
        self.size = len(data)
        self.depth_max = depth_max
        self.check = check_canonical
        self.non_canonical = False

    def item(self, offset: int, depth_left: int) -> tuple[Any, int]:
        data = self.data
        if offset >= self.size:
            raise _truncated()
        start = offset
        initial = data[offset]
        major, info = initial >> 5, initial & 0x1F
        offset += 1
        if info < 24:
            arg = info
        elif info <= 27:
            end = offset + (1 << (info - 24))
            if end > self.size:
                raise _truncated()
            arg = int.from_bytes(data[offset:end], "big")
            offset = end
            if self.check and major != 7 and arg < _SHORTEST_MIN[info]:
                self.non_canonical = True
        elif info == 31:
            raise CborError("cbor.indefinite_length", "aos accepts definite lengths only")
        else:
            raise CborError("cbor.malformed", f"reserved additional information {info}")
        if major == 3:
            end = offset + arg
            if end > self.size:
                raise _truncated()
            try:
                return data[offset:end].decode("utf-8"), end
            except UnicodeDecodeError:
                raise CborError("cbor.malformed", "text string is not valid UTF-8") from None
        if major == 0:
            return arg, offset
        if major == 5 or major == 4:
            if depth_left <= 0:
                raise CborError("cbor.depth_exceeded", "nesting is deeper than the limit")
            if major == 5:
                return self._map(arg, offset, depth_left)
            return self._array(arg, offset, depth_left)
        if major == 7:
            return self._simple(info, arg, start, offset)
        if major == 1:
            return -1 - arg, offset
        if major == 2:
            end = offset + arg
            if end > self.size:
                raise _truncated()
            return data[offset:end], end
        raise CborError("cbor.unknown_tag", f"tag {arg} is not allowed inside a value")

    def _array(self, count: int, offset: int, depth_left: int) -> tuple[Any, int]:
        items: list[Any] = []
        append, item, left = items.append, self.item, depth_left - 1
        data, size = self.data, self.size
        for _ in range(count):
            initial = data[offset] if offset < size else 0xFF
            if initial < 0x18:  # a small unsigned integer
                append(initial)
                offset += 1
            elif 0xF4 <= initial <= 0xF6:  # false, true, null
                append(_SIMPLE_VALUES[initial - 0xF4])
                offset += 1
            elif 0xA0 <= initial < 0xB8 and left > 0:  # a map of fewer than 24 entries
                value, offset = self._map(initial - 0xA0, offset + 1, left)
                append(value)
            else:
                value, offset = item(offset, left)
                append(value)
        return items, offset

    def _map(self, count: int, offset: int, depth_left: int) -> tuple[Any, int]:
        result: dict[Any, Any] = {}
        data, item, left, check = self.data, self.item, depth_left - 1, self.check
        previous = b""
        size = self.size
        for _ in range(count):
            key_start = offset
            initial = data[offset] if offset < size else 0
            if 0x60 <= initial < 0x78:  # a short text key, most keys: read in place
                offset += 1 + initial - 0x60
                if offset > size:
                    raise _truncated()
                try:
                    key = data[key_start + 1 : offset].decode("utf-8")
                except UnicodeDecodeError:
                    raise CborError("cbor.malformed", "text string is not valid UTF-8") from None
            else:
                key, offset = item(offset, left)
                if type(key) is not str and type(key) is not int:
                    raise CborError("cbor.key_type", "map keys must be text strings or integers")
            if key in result:
                raise CborError("cbor.duplicate_key", f"map key {key!r} appears twice")
            if check:
                # Keys ascend by encoded length, then bytewise (duplicates are caught above).
                key_bytes = data[key_start:offset]
                if len(key_bytes) < len(previous) or (
                    len(key_bytes) == len(previous) and key_bytes < previous
                ):
                    self.non_canonical = True
                previous = key_bytes
            initial = data[offset] if offset < size else 0xFF
            if initial < 0x18:  # a small unsigned integer
                result[key] = initial
                offset += 1
            elif 0xF4 <= initial <= 0xF6:  # false, true, null
                result[key] = _SIMPLE_VALUES[initial - 0xF4]
                offset += 1
            elif (initial == 0x80 or initial == 0xA0) and left > 0:  # an empty list or map
                result[key] = [] if initial == 0x80 else {}
                offset += 1
            elif 0x60 <= initial < 0x78:  # a short text
                start, offset = offset + 1, offset + 1 + initial - 0x60
                if offset > size:
                    raise _truncated()
                try:
                    result[key] = data[start:offset].decode("utf-8")
                except UnicodeDecodeError:
                    raise CborError("cbor.malformed", "text string is not valid UTF-8") from None
            elif 0xA0 < initial < 0xB8 and left > 0:  # a map of fewer than 24 entries
                result[key], offset = self._map(initial - 0xA0, offset + 1, left)
            elif 0x40 <= initial < 0x58:  # short bytes (keys, ids)
                start, offset = offset + 1, offset + 1 + initial - 0x40
                if offset > size:
                    raise _truncated()
                result[key] = data[start:offset]
            elif (initial == 0x58 or initial == 0x78) and offset + 1 < size:
                # Bytes or text of 24-255 (hashes, entropy, embedded values), in place.
                length = data[offset + 1]
                start, offset = offset + 2, offset + 2 + length
                if offset > size:
                    raise _truncated()
                if check and length < 24:
                    self.non_canonical = True
                if initial == 0x58:
                    result[key] = data[start:offset]
                else:
                    try:
                        result[key] = data[start:offset].decode("utf-8")
                    except UnicodeDecodeError:
                        raise CborError(
                            "cbor.malformed", "text string is not valid UTF-8"
                        ) from None
            elif 0x18 <= initial <= 0x1B:  # an unsigned integer of 1-8 bytes (times, counts)
                start, offset = offset + 1, offset + 1 + (1 << (initial - 0x18))
                if offset > size:
                    raise _truncated()
                value = int.from_bytes(data[start:offset], "big")
                if check and value < _SHORTEST_MIN[initial - 0x18 + 24]:
                    self.non_canonical = True
                result[key] = value
            elif initial == 0x59 and offset + 2 < size:  # bytes of 256-65535 (embedded values)
                length = (data[offset + 1] << 8) | data[offset + 2]
                start, offset = offset + 3, offset + 3 + length
                if offset > size:
                    raise _truncated()
                if check and length < 0x100:
                    self.non_canonical = True
                result[key] = data[start:offset]
            else:
                result[key], offset = item(offset, left)
        return result, offset

    def _simple(self, info: int, arg: int, start: int, offset: int) -> tuple[Any, int]:
        if info == 20:
            return False, offset
        if info == 21:
            return True, offset
        if info == 22:
            return None, offset
        if 25 <= info <= 27:
            fmt = (">e", ">f", ">d")[info - 25]
            value = struct.unpack(fmt, arg.to_bytes(1 << (info - 24), "big"))[0]
            if self.check and _float_bytes(value) != self.data[start:offset]:
                self.non_canonical = True
            return value, offset
        raise CborError(
            "cbor.unsupported_value",
            "simple values other than false, true and null are not allowed",
        )
