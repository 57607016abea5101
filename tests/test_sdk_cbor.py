"""The guest's pure-Python CBOR (`aos_sdk.cbor`) against the kernel's (`aos.kernel.cbor`):
same bytes for every value, same acceptance for every input."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aos.kernel import cbor as kernel_cbor
from aos_sdk import cbor as sdk_cbor
from tests.strategies import examples_times

INT_EDGES = [
    0,
    1,
    23,
    24,
    255,
    256,
    65535,
    65536,
    2**32 - 1,
    2**32,
    2**64 - 1,
    -1,
    -24,
    -25,
    -256,
    -257,
    -(2**32),
    -(2**32) - 1,
    -(2**64),
]
FLOAT_EDGES = [
    0.0,
    -0.0,
    1.0,
    1.5,
    -2.5,
    65504.0,
    65520.0,
    5.960464477539063e-08,
    6.103515625e-05,
    1e-7,
    3.4028234663852886e38,
    1.401298464324817e-45,
    1e300,
    -1e-300,
    math.pi,
    float("inf"),
    float("-inf"),
    float("nan"),
    struct.unpack(">d", bytes.fromhex("7ff8000000000001"))[0],  # a NaN with a payload
]

ints = st.one_of(st.integers(min_value=-(2**64), max_value=2**64 - 1), st.sampled_from(INT_EDGES))
floats = st.one_of(
    st.floats(width=16),
    st.floats(width=32),
    st.floats(),
    st.sampled_from(FLOAT_EDGES),
)
texts = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40)
scalars = st.one_of(st.none(), st.booleans(), ints, floats, texts, st.binary(max_size=40))
keys = st.one_of(texts, ints)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=6), st.dictionaries(keys, inner, max_size=6)),
    max_leaves=30,
)


@examples_times(3)  # cheap: the guest encoder is the kernel's twin (600 under ci)
@given(values)
def test_encode_matches_kernel(value: Any) -> None:
    assert sdk_cbor.encode(value) == kernel_cbor.encode(value)
    assert sdk_cbor.encode(value, self_describe=False) == kernel_cbor.encode(
        value, self_describe=False
    )


@examples_times(2)  # cheap: one encode and two decodes (400 under ci)
@given(values)
def test_decode_round_trips_like_kernel(value: Any) -> None:
    data = kernel_cbor.encode(value)
    decoded = sdk_cbor.decode(data)
    assert sdk_cbor.encode(decoded) == data
    assert kernel_cbor.encode(kernel_cbor.decode(data)) == sdk_cbor.encode(decoded)


@given(st.lists(values, max_size=30))
def test_a_list_from_its_items_encodings_is_the_lists_encoding(items: list[Any]) -> None:
    assert sdk_cbor.encode_list([sdk_cbor.encode(i) for i in items]) == kernel_cbor.encode(items)


def test_a_list_item_must_be_a_prefixed_encoding() -> None:
    with pytest.raises(sdk_cbor.CborError):
        sdk_cbor.encode_list([sdk_cbor.encode(1, self_describe=False)])


@pytest.mark.parametrize("value", INT_EDGES + FLOAT_EDGES)
def test_edges(value: Any) -> None:
    assert sdk_cbor.encode(value) == kernel_cbor.encode(value)


def test_one_nan() -> None:
    assert sdk_cbor.encode(float("nan"), self_describe=False) == b"\xf9\x7e\x00"
    assert sdk_cbor.encode(-0.0, self_describe=False) == b"\xf9\x80\x00"


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (2**64, "cbor.integer_range"),
        (-(2**64) - 1, "cbor.integer_range"),
        ({1.5: 1}, "cbor.key_type"),
        ({b"k": 1}, "cbor.key_type"),
        ({None: 1}, "cbor.key_type"),
        (object(), "cbor.unsupported_value"),
        ({1, 2}, "cbor.unsupported_value"),
        ("\ud800", "cbor.unsupported_value"),
    ],
)
def test_encode_rejects_what_kernel_rejects(value: Any, code: str) -> None:
    with pytest.raises(sdk_cbor.CborError) as caught:
        sdk_cbor.encode(value)
    assert caught.value.code == code
    with pytest.raises(Exception):  # noqa: B017 - the kernel's own error type varies
        kernel_cbor.encode(value)


def test_depth_limit_matches_kernel() -> None:
    deep: Any = 0
    for _ in range(64):
        deep = [deep]
    assert sdk_cbor.encode(deep) == kernel_cbor.encode(deep)
    with pytest.raises(sdk_cbor.CborError) as caught:
        sdk_cbor.encode([deep])
    assert caught.value.code == "cbor.depth_exceeded"
    with pytest.raises(kernel_cbor.CborDepthError):
        kernel_cbor.encode([deep])


def _noncanonical_inputs() -> list[bytes]:
    p = b"\xd9\xd9\xf7"
    return [
        b"\x01",  # no self-describe prefix
        p + b"\x18\x01",  # 1 in two bytes
        p + b"\xfa\x3f\xc0\x00\x00",  # 1.5 as a single
        p + b"\xfb\x7f\xf8\x00\x00\x00\x00\x00\x00",  # NaN as a double
        p + b"\xa2\x61\x62\x01\x61\x61\x02",  # keys out of order
        p + b"\xa2\x61\x61\x01\x61\x61\x02",  # duplicate key
        p + b"\xa1\x40\x01",  # bytes key
        p + b"\x9f\x01\xff",  # indefinite array
        p + b"\x5f\x41\x00\xff",  # indefinite bytes
        p + b"\xc1\x01",  # a tag inside
        p + b"\xf7",  # undefined
        p + b"\xf0",  # simple(16)
        p + b"\xf8\x20",  # simple(32)
        p + b"\x82\x01",  # truncated array
        p + b"\x62\x61",  # truncated text
        p + b"\x61\xff",  # invalid UTF-8
        p + b"\x01\x02",  # trailing bytes
        p + b"\x1c",  # reserved additional information
        p + p + b"\x01",  # a second self-describe tag
        b"",
    ]


@pytest.mark.parametrize("data", _noncanonical_inputs(), ids=lambda d: d.hex() or "empty")
def test_decode_rejects_what_kernel_rejects(data: bytes) -> None:
    with pytest.raises(sdk_cbor.CborError):
        sdk_cbor.decode(data)
    with pytest.raises(kernel_cbor.CborError):
        kernel_cbor.decode(data)


@examples_times(2.5)  # cheap: two decodes of up to 24 random bytes (500 under ci)
@given(st.binary(max_size=24))
def test_decode_acceptance_matches_kernel_on_arbitrary_bytes(tail: bytes) -> None:
    data = b"\xd9\xd9\xf7" + tail
    try:
        expected: Any = kernel_cbor.encode(kernel_cbor.decode(data))
    except kernel_cbor.CborError:
        expected = None
    try:
        got: Any = sdk_cbor.encode(sdk_cbor.decode(data))
    except sdk_cbor.CborError:
        got = None
    assert got == expected


def _more_noncanonical_inputs() -> list[bytes]:
    p = b"\xd9\xd9\xf7"
    return [
        p + b"\x78\x01\x61",  # a 1-byte text with a 1-byte length
        p + b"\x59\x00\x01\x00",  # 1 byte of bytes with a 2-byte length
        p + b"\x98\x01\x01",  # an array of 1 with a 1-byte count
        p + b"\xb8\x01\x61\x61\x01",  # a map of 1 with a 1-byte count
        p + b"\x39\x00\x10",  # -17 in three bytes
        p + b"\x1b\x00\x00\x00\x00\xff\xff\xff\xff",  # 2**32 - 1 in nine bytes
        p + b"\xa2\x02\x01\x01\x01",  # integer keys out of order
        p + b"\xa2\x62\x61\x61\x01\x61\x62\x02",  # a longer key before a shorter one
        p + b"\xa1\x61\x61\xa2\x61\x62\x01\x61\x61\x02",  # out of order one level down
        p + b"\xfa\x7f\xc0\x00\x00",  # NaN as a single
        p + b"\xfa\x7f\x80\x00\x00",  # infinity as a single
        p + b"\xfb\x3f\xf8\x00\x00\x00\x00\x00\x00",  # 1.5 as a double
        p + b"\xf9\x7e\x01",  # a NaN with a payload
        p + b"\x82\x18\x01\x01",  # a non-shortest integer, then more items
        p + b"\xa2\x61\x62\x01\x61\x61",  # keys out of order, then truncated
    ]


@pytest.mark.parametrize("data", _more_noncanonical_inputs(), ids=lambda d: d.hex())
def test_decode_checks_canonical_form_while_reading(data: bytes) -> None:
    with pytest.raises(sdk_cbor.CborError) as sdk_caught:
        sdk_cbor.decode(data)
    with pytest.raises(kernel_cbor.CborError) as kernel_caught:
        kernel_cbor.decode(data)
    # Structural faults come first, canonical form last: the kernel's order.
    assert sdk_caught.value.code == kernel_caught.value.code


@examples_times(1.5)  # cheap, and each value has many mutations (300 under ci)
@given(values, st.data())
def test_decode_acceptance_matches_kernel_on_mutated_encodings(value: Any, data: Any) -> None:
    """Canonical encodings with one byte changed: mostly near misses (a head one width too
    wide, keys swapped), which only the canonical check rejects."""
    encoded = bytearray(kernel_cbor.encode(value))
    at = data.draw(st.integers(min_value=3, max_value=len(encoded) - 1))
    encoded[at] = data.draw(st.integers(min_value=0, max_value=255))
    try:
        expected: Any = kernel_cbor.decode(bytes(encoded))
    except kernel_cbor.CborError:
        expected = None
    try:
        got: Any = sdk_cbor.decode(bytes(encoded))
    except sdk_cbor.CborError:
        got = None
    assert (got is None) == (expected is None)
    if got is not None:
        assert sdk_cbor.encode(got) == bytes(encoded)


def test_trusted_decode_skips_only_the_canonical_check() -> None:
    p = b"\xd9\xd9\xf7"
    assert sdk_cbor.decode(p + b"\xa2\x61\x62\x01\x61\x61\x02", trusted=True) == {"b": 1, "a": 2}
    assert sdk_cbor.decode(p + b"\x18\x01", trusted=True) == 1
    for malformed in (p + b"\xa2\x61\x61\x01\x61\x61\x02", p + b"\x82\x01", p + b"\xf7"):
        with pytest.raises(sdk_cbor.CborError):
            sdk_cbor.decode(malformed, trusted=True)


class _Text(str):
    pass


def test_memoized_map_shapes_still_check_key_types() -> None:
    """The key-order memo is keyed by the keys; equal keys of another type (True == 1, a str
    subclass equal to its text) must still be refused, also once the shape is memoized."""
    assert sdk_cbor.encode({1: "x", "a": None}) == kernel_cbor.encode({1: "x", "a": None})
    for bad in ({True: "x", "a": None}, {1: "x", _Text("a"): None}, {1.0: "x", "a": None}):
        with pytest.raises(sdk_cbor.CborError) as caught:
            sdk_cbor.encode(bad)
        assert caught.value.code == "cbor.key_type"
    assert sdk_cbor.encode({"a": "memoized text"}) == kernel_cbor.encode({"a": "memoized text"})
    with pytest.raises(sdk_cbor.CborError) as caught:
        sdk_cbor.encode({"a": _Text("memoized text")})
    assert caught.value.code == "cbor.unsupported_value"


def test_memos_are_bounded_and_never_change_bytes() -> None:
    many = [{f"key{n}": n, "shared": f"text{n}"} for n in range(sdk_cbor.MAP_MEMO_MAX + 50)]
    for value in many:
        assert sdk_cbor.encode(value) == kernel_cbor.encode(value)
    long_text = "x" * (sdk_cbor.TEXT_MEMO_CHARS_MAX + 1)
    assert sdk_cbor.encode({"t": long_text}) == kernel_cbor.encode({"t": long_text})
    wide = {f"k{n}": n for n in range(sdk_cbor.MAP_MEMO_KEYS_MAX + 1)}
    assert sdk_cbor.encode(wide) == kernel_cbor.encode(wide)
    assert sdk_cbor.encode(wide) == kernel_cbor.encode(wide)


@pytest.mark.parametrize("empty", [[], {}])
def test_decode_depth_limit_counts_empty_containers(empty: Any) -> None:
    """An empty list or map read in place still counts against the nesting limit: 64
    containers deep is accepted, 65 is not (as before the in-place read; the kernel's cbor2
    decoder lets a 65th through, a difference this test does not cover)."""
    accepted = []
    for levels in (63, 64):  # maps around the empty container
        deep: Any = {"a": empty}
        for _ in range(levels - 1):
            deep = {"a": deep}
        try:
            sdk_cbor.decode(sdk_cbor.encode(deep, depth_max=100))
            accepted.append(True)
        except sdk_cbor.CborError as error:
            assert error.code == "cbor.depth_exceeded"
            accepted.append(False)
    assert accepted == [True, False]


def _shape(value: Any) -> Any:
    """A value with its types and map key order made comparable (`==` ignores both, and
    NaN never equals itself)."""
    if type(value) is dict:
        return ("map", [(_shape(key), _shape(item)) for key, item in value.items()])
    if type(value) is list:
        return ("list", [_shape(item) for item in value])
    if type(value) is float:
        return ("float", struct.pack(">d", value))
    return (type(value).__name__, value)


def _with_tuples(value: Any) -> Any:
    """The same data with every list made a tuple (what a step may return)."""
    if type(value) is dict:
        return {key: _with_tuples(item) for key, item in value.items()}
    if type(value) is list:
        return tuple(_with_tuples(item) for item in value)
    return value


@examples_times(2)  # cheap: a decode and a copy (400 under ci)
@given(values)
def test_decoded_copy_is_what_decoding_gives(value: Any) -> None:
    expected = _shape(sdk_cbor.decode(sdk_cbor.encode(value)))
    assert _shape(sdk_cbor.decoded_copy(value)) == expected
    assert _shape(sdk_cbor.decoded_copy(_with_tuples(value))) == expected


def test_decoded_copy_shares_no_container() -> None:
    inner = {"b": [1, 2], "a": {}}
    value = {"z": inner, "y": [inner]}
    copy = sdk_cbor.decoded_copy(value)
    assert list(copy["z"]) == ["a", "b"]  # canonical order, as decoding gives
    copy["z"]["b"].append(3)
    copy["y"][0]["a"]["new"] = 1
    assert inner == {"b": [1, 2], "a": {}}


@examples_times(2)  # cheap: two encodes and a copy (400 under ci)
@given(values)
def test_encode_copied_is_encode_and_decoded_copy(value: Any) -> None:
    for given_value in (value, _with_tuples(value)):
        encoded, copy = sdk_cbor.encode_copied(given_value)
        assert encoded == sdk_cbor.encode(given_value)
        assert _shape(copy) == _shape(sdk_cbor.decoded_copy(given_value))


def test_encode_copied_shares_no_container() -> None:
    inner = {"b": [1, 2], "a": {}}
    value = {"z": inner, "y": [inner]}
    _, copy = sdk_cbor.encode_copied(value)
    assert list(copy["z"]) == ["a", "b"]
    copy["z"]["b"].append(3)
    copy["y"][0]["a"]["new"] = 1
    assert inner == {"b": [1, 2], "a": {}}


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ({"a": [2**64]}, "cbor.integer_range"),
        ({"k": {1.5: 1}}, "cbor.key_type"),
        ([{"k": object()}], "cbor.unsupported_value"),
        ({"s": {1, 2}}, "cbor.unsupported_value"),
    ],
)
def test_encode_copied_rejects_what_encode_rejects(value: Any, code: str) -> None:
    with pytest.raises(sdk_cbor.CborError) as caught:
        sdk_cbor.encode_copied(value)
    assert caught.value.code == code


def test_encode_copied_depth_limit_is_encodes() -> None:
    deep: Any = 0
    for _ in range(64):
        deep = [deep]
    assert sdk_cbor.encode_copied(deep)[0] == sdk_cbor.encode(deep)
    for too_deep in ([deep], {"k": deep}):
        with pytest.raises(sdk_cbor.CborError) as caught:
            sdk_cbor.encode_copied(too_deep)
        assert caught.value.code == "cbor.depth_exceeded"
