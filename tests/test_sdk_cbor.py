"""The guest's pure-Python CBOR (`aos_sdk.cbor`) against the kernel's (`aos.kernel.cbor`):
same bytes for every value, same acceptance for every input."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aos.kernel import cbor as kernel_cbor
from aos_sdk import cbor as sdk_cbor

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


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_encode_matches_kernel(value: Any) -> None:
    assert sdk_cbor.encode(value) == kernel_cbor.encode(value)
    assert sdk_cbor.encode(value, self_describe=False) == kernel_cbor.encode(
        value, self_describe=False
    )


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_decode_round_trips_like_kernel(value: Any) -> None:
    data = kernel_cbor.encode(value)
    decoded = sdk_cbor.decode(data)
    assert sdk_cbor.encode(decoded) == data
    assert kernel_cbor.encode(kernel_cbor.decode(data)) == sdk_cbor.encode(decoded)


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


@settings(max_examples=500)
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
