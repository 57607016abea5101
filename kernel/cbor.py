"""Canonical CBOR: the one encoding of everything aos journals, stores or hashes.

The rules (spec/01-encoding.md):

* the data model is `None | bool | int | float | str | bytes | list | dict`, with integers in
  the CBOR range [-2**64, 2**64 - 1] and map keys that are text or integers;
* definite lengths only; integers, lengths and floats in their shortest form (a float in the
  narrowest of half/single/double that keeps its value), and one NaN (`f9 7e00`);
* map keys sorted by the length of their encoding, then bytewise; no duplicate keys;
* no tags inside a value; a stored or hashed value starts with the self-describe tag 55799
  (`d9 d9 f7`).

cbor2 does the byte work. The rules are ours: values are checked before encoding, and the
strict decoder checks structure while decoding (cbor2 options and hooks) and canonical form
afterwards by re-encoding and comparing bytes, so there is exactly one accepted encoding of
each value.
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn, TypeAlias, cast

import cbor2

# The codec's errors, re-exported (`cbor.CborError`): they live apart, uncompiled.
# isort: off
from aos.kernel.cbor_errors import (
    CborDepthError as CborDepthError,
    CborDuplicateKeyError as CborDuplicateKeyError,
    CborError as CborError,
    CborIndefiniteLengthError as CborIndefiniteLengthError,
    CborIntegerRangeError as CborIntegerRangeError,
    CborKeyTypeError as CborKeyTypeError,
    CborMalformedError as CborMalformedError,
    CborNonCanonicalError as CborNonCanonicalError,
    CborTooLargeError as CborTooLargeError,
    CborTrailingBytesError as CborTrailingBytesError,
    CborTruncatedError as CborTruncatedError,
    CborUnknownTagError as CborUnknownTagError,
    CborUnsupportedValueError as CborUnsupportedValueError,
)
# isort: on

SELF_DESCRIBE_TAG = 55799
SELF_DESCRIBE_PREFIX = b"\xd9\xd9\xf7"

# Bounds on what the decoder accepts from outside. Both can be lowered or raised per call.
NESTING_DEPTH_MAX_DEFAULT = 64
INPUT_BYTES_MAX_DEFAULT = 64 * 1024 * 1024

INT_MIN = -(2**64)
INT_MAX = 2**64 - 1

Value: TypeAlias = "bool | int | float | str | bytes | list[Value] | dict[str | int, Value] | None"


# --------------------------------------------------------------------------------------------
# Encoding


def encode(
    value: Any,
    *,
    self_describe: bool = True,
    depth_max: int = NESTING_DEPTH_MAX_DEFAULT,
) -> bytes:
    """Encode `value` canonically. With `self_describe` (the default) the bytes start with tag
    55799, which is the form that is stored and hashed."""
    if not _encodable(value, depth_max):
        _check_value(value, depth_max, "$")  # raises, naming the path of the fault
    body = canonical_body(value)
    return SELF_DESCRIBE_PREFIX + body if self_describe else body


def encode_built(value: Any) -> bytes:
    """The canonical stored form of a value the kernel built from parts already checked (a
    journal record around a normalized event, a step's context): no validation walk. Values
    from outside go through `encode` (or `decode`) once, at the boundary; using this for
    anything else could store bytes a strict reader refuses."""
    return SELF_DESCRIBE_PREFIX + canonical_body(value)


def encode_ordered(value: Any) -> bytes:
    """The canonical stored form of a value the kernel built already in canonical form: every
    map's keys in canonical order and no float anywhere in it (the fixed fields of a typed
    journal record), except inside `Encoded` parts, which are written as the bytes they carry.
    Nothing is walked; cbor2's default mode writes it as it is (see `canonical_body`).
    Anything not built that way goes through `encode_built`."""
    return SELF_DESCRIBE_PREFIX + cbor2.dumps(value, default=_write_encoded)


class Encoded:
    """A value's canonical encoding, carried in place of the value inside a map the kernel
    builds (`encode_ordered`), so a value encoded once (an admitted event, a guest's checked
    output) is never walked or encoded again. `body` has no self-describe prefix."""

    __slots__ = ("body",)

    def __init__(self, body: bytes) -> None:
        self.body = body

    @classmethod
    def of_stored(cls, stored: bytes) -> Encoded:
        """The part of a value held in its stored form (self-describe prefix and all)."""
        return cls(stored[len(SELF_DESCRIBE_PREFIX) :])


def _write_encoded(encoder: Any, part: Any) -> None:
    if type(part) is not Encoded:
        raise CborUnsupportedValueError(f"cannot encode a value of type {type(part).__name__}")
    encoder.write(part.body)


def canonical_body(value: Any) -> bytes:
    """`cbor2.dumps(value, canonical=True)` (no self-describe prefix) for a value of the data
    model, at about a third of its cost for maps.

    cbor2's canonical mode pays ~1.7 µs per map to encode and sort its keys one by one, and
    every record, step input and index node is maps. Its default mode writes maps in their
    insertion order and is otherwise canonical for our data model (shortest integers and
    lengths, definite lengths) except for floats, which it always writes as doubles. So maps
    are put in canonical key order first (the order of a key set is computed once and
    remembered) and the default mode writes the bytes; a value holding a float goes to the
    canonical mode. tests/test_cbor_properties.py holds the two equal over generated values.
    """
    kind = type(value)
    if kind is not dict and kind is not list and kind is not tuple:
        return cbor2.dumps(value, canonical=kind is float)
    try:
        ordered = _in_canonical_order(value)
    except _FloatFoundError:
        return cbor2.dumps(value, canonical=True)
    return cbor2.dumps(ordered)


class _FloatFoundError(Exception):
    """A float in the value: cbor2's canonical mode must encode it (the default mode writes
    floats as 8-byte doubles, not in their shortest exact form)."""


_CONTAINERS = (dict, list, tuple)
# Key sets seen, and their canonical order (`_ALREADY_CANONICAL` when it is theirs). Bounded:
# records and index nodes have few shapes; maps keyed by user data have many, and past the
# bound their order is computed each time. The order depends only on the keys, never on
# what is remembered.
_KEY_ORDERS: dict[tuple[Any, ...], tuple[Any, ...] | None] = {}
_KEY_ORDERS_MAX = 4096
_ALREADY_CANONICAL = None


def _in_canonical_order(value: Any) -> Any:
    """`value` with every map's keys in canonical order (the same object where nothing
    moved); raises `_FloatFoundError` at the first float."""
    if type(value) is dict:
        return _map_in_canonical_order(value)
    changed = False
    items = []
    for item in value:
        kind = type(item)
        if kind in _CONTAINERS:
            new = _in_canonical_order(item)
            changed = changed or new is not item
            item = new
        elif kind is float:
            raise _FloatFoundError
        items.append(item)
    return items if changed else value


def _map_in_canonical_order(value: dict[Any, Any]) -> dict[Any, Any]:
    keys = tuple(value)
    try:
        order = _KEY_ORDERS[keys]
    except KeyError:
        order = _key_order(keys)
    changed = order is not _ALREADY_CANONICAL
    pairs = []
    for key in keys if order is None else order:
        item = value[key]
        kind = type(item)
        if kind in _CONTAINERS:
            new = _in_canonical_order(item)
            changed = changed or new is not item
            item = new
        elif kind is float:
            raise _FloatFoundError
        pairs.append((key, item))
    return dict(pairs) if changed else value


def _key_order(keys: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """Keys sorted by the length of their encoding, then bytewise (spec/01 §3)."""
    encoded = [cbor2.dumps(key) for key in keys]  # text and integer keys: already canonical
    order = tuple(
        keys[i] for i in sorted(range(len(keys)), key=lambda i: (len(encoded[i]), encoded[i]))
    )
    result = _ALREADY_CANONICAL if order == keys else order
    if len(_KEY_ORDERS) < _KEY_ORDERS_MAX:
        _KEY_ORDERS[keys] = result
    return result


# Types that need no check beyond their type (ints are range checked).
_LEAVES = frozenset({type(None), bool, str, bytes, float})
_DECODED_LEAVES = frozenset({type(None), bool, str, bytes, float, int})
_KEY_TYPES = frozenset({str, int})


def _encodable(value: Any, depth_left: int) -> bool:
    """Whether `_check_value` would accept `value`: the same checks without spelling a path
    for every item, and the types of a container's items gathered at C speed (every step's
    output and every record pass here, so this is hot)."""
    kind = type(value)
    if kind in _LEAVES:
        return True
    if kind is int:
        return bool(INT_MIN <= value <= INT_MAX)
    if depth_left <= 0:
        return False
    if kind is dict:
        key_kinds = set(map(type, value))
        if not key_kinds <= _KEY_TYPES or (int in key_kinds and not _ints_in_range(value)):
            return False
        items: Any = value.values()
    elif kind is list or kind is tuple:
        items = value
    else:
        return False
    kinds = set(map(type, items))
    if int in kinds and not _ints_in_range(items):
        return False
    kinds.discard(int)
    if kinds <= _LEAVES:
        return True
    left = depth_left - 1
    return all(_encodable(item, left) for item in items if type(item) not in _LEAVES)


def _ints_in_range(items: Any) -> bool:
    return all(INT_MIN <= item <= INT_MAX for item in items if type(item) is int)


def _check_value(value: Any, depth_left: int, path: str) -> None:
    # Exact type checks: subclasses (IntEnum, OrderedDict, str subclasses) would let
    # cbor2 pick encodings we never reviewed.
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is bytes:
        return
    if kind is int:
        if not INT_MIN <= value <= INT_MAX:
            raise CborIntegerRangeError(f"integer {value} is outside -2**64 .. 2**64-1", path=path)
        return
    if kind is float:
        return
    if depth_left <= 0:
        raise CborDepthError("nesting is deeper than the limit", path=path)
    if kind is list or kind is tuple:
        for index, item in enumerate(value):
            _check_value(item, depth_left - 1, f"{path}[{index}]")
        return
    if kind is dict:
        for key, item in value.items():
            key_kind = type(key)
            if key_kind is str:
                child = f"{path}.{key}"
            elif key_kind is int:
                if not INT_MIN <= key <= INT_MAX:
                    raise CborIntegerRangeError(f"map key {key} is out of range", path=path)
                child = f"{path}[{key}]"
            else:
                raise CborKeyTypeError(
                    f"map key of type {key_kind.__name__} (keys are text or integers)", path=path
                )
            _check_value(item, depth_left - 1, child)
        return
    raise CborUnsupportedValueError(f"cannot encode a value of type {kind.__name__}", path=path)


def same_encoding(a: Any, b: Any) -> bool:
    """True only when `a` and `b` certainly encode to the same bytes: the same object, or
    equal maps (text keys), lists and scalars of the same exact types all the way down.
    False when unsure (floats are compared by identity only: -0.0 == 0.0, and NaN != NaN)."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is dict:
        return len(a) == len(b) and all(
            type(key) is str and key in b and same_encoding(item, b[key]) for key, item in a.items()
        )
    if kind is list:
        return len(a) == len(b) and all(same_encoding(x, y) for x, y in zip(a, b, strict=True))
    return kind is not float and kind in _DECODED_LEAVES and a == b


# --------------------------------------------------------------------------------------------
# Strict decoding


class _TagRejectedError(Exception):
    def __init__(self, tag: int) -> None:
        super().__init__(tag)
        self.tag = tag


class _RejectEveryTag(Mapping[int, Any]):
    """A `semantic_decoders` table that claims every tag number, so that cbor2 never applies
    its own meaning (datetimes, bignums, sets...) to a tag and every tag reaches us."""

    def __getitem__(self, tag: int) -> Any:
        def reject(_value: Any, _immutable: bool) -> NoReturn:
            raise _TagRejectedError(tag)

        return reject

    def __contains__(self, tag: object) -> bool:
        return True

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0


_REJECT_EVERY_TAG = _RejectEveryTag()


def decode(
    data: bytes | bytearray | memoryview,
    *,
    canonical: bool = True,
    depth_max: int = NESTING_DEPTH_MAX_DEFAULT,
    bytes_max: int = INPUT_BYTES_MAX_DEFAULT,
) -> Value:
    """Decode bytes from outside, strictly.

    Always rejected: malformed or truncated data, trailing bytes, indefinite lengths, duplicate
    keys, keys that are not text or integers, any tag (but a leading 55799), simple values other
    than false/true/null, and nesting deeper than `depth_max`. With `canonical` (the default)
    the bytes must also be exactly `encode(value)`, self-describe prefix included.
    """
    raw = bytes(data)
    if len(raw) > bytes_max:
        raise CborTooLargeError(f"input is {len(raw)} bytes; the limit is {bytes_max}")
    if canonical:
        # Any, not Value: the sentinel is no value, and compiled code checks declared types.
        accepted: Any = _decode_canonical_fast(raw, depth_max)
        if accepted is not _REFUSED:
            return cast(Value, accepted)
    return _decode_checked(raw, canonical, depth_max)


def decode_chained(raw: bytes) -> Value:
    """Decode bytes a hash chain has just proven to be the bytes the kernel encoded (the
    journal records a world's open checked against the chain head it stored, spec/05 §1.2):
    they were canonical when written, so the canonical and data-model checks, two thirds of
    `decode`'s cost, would find nothing. One C-level decode with the strict decoder's
    options; bytes it cannot decode go through `decode`, which names the fault."""
    if not raw.startswith(SELF_DESCRIBE_PREFIX):
        return decode(raw, bytes_max=len(raw))
    try:
        value: Value = cbor2.loads(
            raw[3:],
            semantic_decoders=_REJECT_EVERY_TAG,
            max_depth=NESTING_DEPTH_MAX_DEFAULT,
            allow_indefinite=False,
            allow_duplicate_keys=False,
        )
    except Exception:  # bad bytes of any kind: the strict decoder says what is wrong
        return decode(raw, bytes_max=len(raw))
    return value


_REFUSED: Any = object()


def _decode_canonical_fast(raw: bytes, depth_max: int) -> Any:
    """The value of `raw` when it is canonical, else `_REFUSED` (without saying why).

    One C-level `cbor2.loads` with the strict decoder's options, then the same data-model and
    canonical checks as `_decode_checked`. `loads` ignores trailing bytes, but a value whose
    canonical encoding equals all of `raw` was decoded from all of it (a well-formed item
    determines its own length), so this accepts exactly what `_decode_checked` accepts, and
    the same value. Anything it refuses goes through `_decode_checked`, which names the fault.
    """
    if not raw.startswith(SELF_DESCRIBE_PREFIX):
        return _REFUSED
    try:
        value = cbor2.loads(
            raw[3:],
            semantic_decoders=_REJECT_EVERY_TAG,
            max_depth=depth_max,
            allow_indefinite=False,
            allow_duplicate_keys=False,
        )
    except Exception:  # bad input of any kind (RecursionError too): the checked path says why
        return _REFUSED
    try:
        ordered = _plain_in_canonical_order(value)
    except _FloatFoundError:
        ordered = _plain_decoded(value)
        body = canonical_body(value) if ordered else b""
    else:
        body = cbor2.dumps(value) if ordered else b""
    if not ordered or len(body) + 3 != len(raw) or not raw.endswith(body):
        return _REFUSED
    return value


_PLAIN_SCALARS = frozenset({type(None), bool, str, bytes, int})


def _plain_in_canonical_order(value: Any) -> bool:
    """Whether a decoded float-free value is of the data model with every map's keys in
    canonical order; raises `_FloatFoundError` at the first float. With both, cbor2's
    default mode re-encodes it canonically, so comparing that with the input is the whole
    canonical check, and one walk does what `_plain_decoded` and `canonical_body` do."""
    kind = type(value)
    if kind is dict:
        if not _KEY_TYPES.issuperset(map(type, value)):
            return False  # checked before the order: (True,) == (1,) in the order cache
        keys = tuple(value)
        order = _KEY_ORDERS[keys] if keys in _KEY_ORDERS else _key_order(keys)
        if order is not _ALREADY_CANONICAL:
            return False
        items: Any = value.values()
    elif kind is list:
        items = value
    elif kind is float:
        raise _FloatFoundError
    else:
        return kind in _PLAIN_SCALARS
    for item in items:
        if type(item) not in _PLAIN_SCALARS and not _plain_in_canonical_order(item):
            return False
    return True


def _decode_checked(raw: bytes, canonical: bool, depth_max: int) -> Value:
    """`decode` one step at a time, raising the error that names the first fault."""
    if not raw:
        raise CborTruncatedError("no data item", offset=0)
    start = 3 if raw.startswith(SELF_DESCRIBE_PREFIX) else 0
    if canonical and start == 0:
        raise CborNonCanonicalError("canonical bytes start with the self-describe tag d9d9f7")
    value: Any = _decode_structure(raw, start, depth_max)  # checked below, then a Value
    if not _plain_decoded(value):
        _check_decoded(value, depth_max, "$")  # raises, naming the path of the fault
    if canonical:
        expected = SELF_DESCRIBE_PREFIX + cbor2.dumps(value, canonical=True)
        if expected != raw:
            offset = _first_difference(expected, raw)
            raise CborNonCanonicalError(
                f"not the canonical encoding (first difference at byte {offset})", offset=offset
            )
    return cast(Value, value)


def is_canonical(data: bytes) -> bool:
    """True when `data` is the canonical, self-described encoding of some value."""
    try:
        decode(data)
    except CborError:
        return False
    return True


def _decode_structure(raw: bytes, start: int, depth_max: int) -> Any:
    stream = io.BytesIO(raw)
    stream.seek(start)
    if start == len(raw):
        raise CborTruncatedError("no data item", offset=start)
    decoder = cbor2.CBORDecoder(
        stream,
        semantic_decoders=_REJECT_EVERY_TAG,
        max_depth=depth_max,
        allow_indefinite=False,
        allow_duplicate_keys=False,
    )
    # A name per handler: compiled (spec/09 §5), one name would keep the first handler's type.
    try:
        value = decoder.decode()
    except _TagRejectedError as rejected:  # raised directly on some paths
        raise CborUnknownTagError(f"tag {rejected.tag} is not allowed") from None
    except cbor2.CBORDecodeEOF:
        raise CborTruncatedError("input ends inside a data item") from None
    except cbor2.CBORDecodeError as failed:
        raise _translate(failed) from None
    except RecursionError:
        raise CborDepthError("nesting is too deep to decode") from None
    except (ValueError, TypeError, OverflowError, MemoryError) as malformed:
        raise CborMalformedError(f"malformed CBOR: {malformed}") from None
    end = stream.tell()
    if end != len(raw):
        raise CborTrailingBytesError(
            f"{len(raw) - end} bytes follow the data item (it ends at byte {end})", offset=end
        )
    return value


def _translate(exc: cbor2.CBORDecodeError) -> CborError:
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, _TagRejectedError):
        return CborUnknownTagError(f"tag {cause.tag} is not allowed")
    if isinstance(cause, CborError):
        return cause
    text = str(exc)
    if "indefinite" in text:
        return CborIndefiniteLengthError(text)
    if "uplicate" in text:
        return CborDuplicateKeyError(text)
    if "nesting depth" in text:
        return CborDepthError(text)
    if "unhashable" in text or "hashable" in text:
        return CborKeyTypeError(text)
    return CborMalformedError(text)


def _plain_decoded(value: Any) -> bool:
    """Whether `_check_decoded` would accept what cbor2 decoded: the same checks without
    spelling a path for every item, the types of a container's items gathered at C speed
    (cbor2 already bounded the depth)."""
    kind = type(value)
    if kind is dict:
        if not _KEY_TYPES.issuperset(map(type, value)):
            return False
        items: Any = value.values()
    elif kind is list:
        items = value
    else:
        return kind in _DECODED_LEAVES
    if _DECODED_LEAVES.issuperset(map(type, items)):
        return True
    return all(_plain_decoded(item) for item in items if type(item) not in _DECODED_LEAVES)


def _check_decoded(value: Any, depth_left: int, path: str) -> None:
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is bytes:
        return
    if kind is int:
        return  # cbor2 produces out-of-range ints only through bignum tags, rejected above
    if kind is float:
        return
    if kind is list:
        for index, item in enumerate(value):
            _check_decoded(item, depth_left - 1, f"{path}[{index}]")
        return
    if kind is dict:
        for key, item in value.items():
            key_kind = type(key)
            if key_kind is not str and key_kind is not int:
                raise CborKeyTypeError(
                    f"map key of type {key_kind.__name__} (keys are text or integers)", path=path
                )
            _check_decoded(item, depth_left - 1, f"{path}.{key}")
        return
    if isinstance(value, cbor2.CBORSimpleValue) or value is cbor2.undefined:
        raise CborUnsupportedValueError(
            "simple values other than false, true and null are not allowed", path=path
        )
    raise CborMalformedError(f"unexpected decoded item {kind.__name__}", path=path)


def _first_difference(a: bytes, b: bytes) -> int:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))


# --------------------------------------------------------------------------------------------
# Lenient decoding and diagnostic notation (for inspection tools, never for input)


def decode_generic(data: bytes, *, depth_max: int = NESTING_DEPTH_MAX_DEFAULT) -> Any:
    """Decode any well-formed CBOR item without applying aos's rules: tags come back as
    `cbor2.CBORTag`, indefinite items are accepted. For inspection and conformance tests only;
    input from outside goes through `decode`."""
    stream = io.BytesIO(bytes(data))
    decoder = cbor2.CBORDecoder(stream, semantic_decoders=_KEEP_EVERY_TAG, max_depth=depth_max)
    try:
        value = decoder.decode()
    except cbor2.CBORDecodeEOF:
        raise CborTruncatedError("input ends inside a data item") from None
    except cbor2.CBORDecodeError as exc:
        raise _translate(exc) from None
    except RecursionError:
        raise CborDepthError("nesting is too deep to decode") from None
    end = stream.tell()
    if end != len(data):
        raise CborTrailingBytesError(f"{len(data) - end} bytes follow the data item", offset=end)
    return value


class _KeepEveryTag(Mapping[int, Any]):
    """Keep every tag visible, except the bignums (tags 2 and 3), which are numbers."""

    def __getitem__(self, tag: int) -> Any:
        # cbor2 calls a semantic decoder with the tag's decoded content and an
        # "immutable" flag.
        def keep(value: Any, _immutable: bool) -> Any:
            if tag in (2, 3) and isinstance(value, bytes):
                number = int.from_bytes(value, "big")
                return number if tag == 2 else -1 - number
            return cbor2.CBORTag(tag, value)

        return keep

    def __contains__(self, tag: object) -> bool:
        return True

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0


_KEEP_EVERY_TAG = _KeepEveryTag()


def diagnostic(data: bytes, *, depth_max: int = NESTING_DEPTH_MAX_DEFAULT) -> str:
    """RFC 8949 §8 diagnostic notation of one CBOR item, read from the bytes themselves, so
    it shows what is really there: tags, indefinite lengths, simple values."""
    parts: list[str] = []
    end = _diag_item(bytes(data), 0, parts, depth_max)
    if end != len(data):
        raise CborTrailingBytesError(f"{len(data) - end} bytes follow the data item", offset=end)
    return "".join(parts)


def _diag_head(data: bytes, offset: int) -> tuple[int, int, int | None, int]:
    """Read an item head: (major type, additional info, argument or None, next offset)."""
    if offset >= len(data):
        raise CborTruncatedError("input ends inside a data item", offset=offset)
    initial = data[offset]
    major, info = initial >> 5, initial & 0x1F
    offset += 1
    if info < 24:
        return major, info, info, offset
    if info in (24, 25, 26, 27):
        size = 1 << (info - 24)
        if offset + size > len(data):
            raise CborTruncatedError("input ends inside an item head", offset=offset)
        return major, info, int.from_bytes(data[offset : offset + size], "big"), offset + size
    if info == 31 and major in (2, 3, 4, 5, 7):
        return major, info, None, offset
    raise CborMalformedError(f"reserved additional information {info}", offset=offset - 1)


def _diag_item(data: bytes, offset: int, out: list[str], depth_left: int) -> int:
    if depth_left < 0:
        raise CborDepthError("nesting is deeper than the limit", offset=offset)
    start = offset
    major, info, arg, offset = _diag_head(data, offset)
    if major == 0:
        out.append(str(arg))
        return offset
    if major == 1:
        assert arg is not None
        out.append(str(-1 - arg))
        return offset
    if major in (2, 3):
        if arg is None:
            return _diag_indefinite_string(data, offset, major, out)
        end = offset + arg
        if end > len(data):
            raise CborTruncatedError("input ends inside a string", offset=start)
        out.append(_diag_string(major, data[offset:end], start))
        return end
    if major == 4:
        out.append("[_ " if arg is None else "[")
        offset = _diag_sequence(data, offset, arg, out, depth_left, pairs=False)
        out.append("]")
        return offset
    if major == 5:
        out.append("{_ " if arg is None else "{")
        offset = _diag_sequence(data, offset, arg, out, depth_left, pairs=True)
        out.append("}")
        return offset
    if major == 6:
        out.append(f"{arg}(")
        offset = _diag_item(data, offset, out, depth_left - 1)
        out.append(")")
        return offset
    return _diag_simple(data, start, info, arg, offset, out)


def _diag_string(major: int, chunk: bytes, offset: int) -> str:
    if major == 2:
        return f"h'{chunk.hex()}'"
    try:
        text = chunk.decode("utf-8")
    except UnicodeDecodeError:
        raise CborMalformedError("text string is not valid UTF-8", offset=offset) from None
    import json

    return json.dumps(text, ensure_ascii=False)


def _diag_indefinite_string(data: bytes, offset: int, major: int, out: list[str]) -> int:
    chunks: list[str] = []
    while True:
        if offset >= len(data):
            raise CborTruncatedError("input ends inside an indefinite string", offset=offset)
        if data[offset] == 0xFF:
            offset += 1
            break
        chunk_major, _, length, body = _diag_head(data, offset)
        if chunk_major != major or length is None:
            raise CborMalformedError("bad chunk in an indefinite-length string", offset=offset)
        if body + length > len(data):
            raise CborTruncatedError("input ends inside a string chunk", offset=offset)
        chunks.append(_diag_string(major, data[body : body + length], offset))
        offset = body + length
    out.append("(_ " + ", ".join(chunks) + ")" if chunks else ("''_" if major == 2 else '""_'))
    return offset


def _diag_sequence(
    data: bytes, offset: int, count: int | None, out: list[str], depth_left: int, *, pairs: bool
) -> int:
    index = 0
    while True:
        if count is None:
            if offset >= len(data):
                raise CborTruncatedError("input ends inside an indefinite container", offset=offset)
            if data[offset] == 0xFF:
                return offset + 1
        elif index == count:
            return offset
        if index:
            out.append(", ")
        offset = _diag_item(data, offset, out, depth_left - 1)
        if pairs:
            out.append(": ")
            offset = _diag_item(data, offset, out, depth_left - 1)
        index += 1


def _diag_simple(
    data: bytes, start: int, info: int, arg: int | None, offset: int, out: list[str]
) -> int:
    if info < 24:
        names = {20: "false", 21: "true", 22: "null", 23: "undefined"}
        out.append(names.get(info, f"simple({info})"))
    elif info == 24:
        assert arg is not None
        if arg < 32:
            raise CborMalformedError("two-byte simple value below 32", offset=start)
        out.append(f"simple({arg})")
    elif info == 25:
        out.append(_diag_float(struct.unpack(">e", data[start + 1 : start + 3])[0]))
    elif info == 26:
        out.append(_diag_float(struct.unpack(">f", data[start + 1 : start + 5])[0]))
    elif info == 27:
        out.append(_diag_float(struct.unpack(">d", data[start + 1 : start + 9])[0]))
    else:
        raise CborMalformedError("unexpected break code", offset=start)
    return offset


def _diag_float(number: float) -> str:
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return repr(number)


# --------------------------------------------------------------------------------------------
# JSON views (for the CLI and HTTP API)


def from_json(value: Any, path: str = "$") -> Value:
    """Map parsed JSON onto the CBOR data model. `{"$bytes": "<hex>"}` stands for a byte
    string; everything else maps one to one."""
    if isinstance(value, dict):
        if set(value) == {"$bytes"} and isinstance(value["$bytes"], str):
            try:
                return bytes.fromhex(value["$bytes"])
            except ValueError:
                raise CborUnsupportedValueError("$bytes is not hex", path=path) from None
        return {str(k): from_json(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise CborUnsupportedValueError(f"no CBOR form for {type(value).__name__}", path=path)


def to_json(value: Any) -> Any:
    """The inverse of `from_json` (integer map keys become their decimal text)."""
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    return value
