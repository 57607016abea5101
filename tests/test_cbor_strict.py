"""The strict decoder and the encoder refuse everything outside the rules, each with its code."""

from __future__ import annotations

import math
from collections import OrderedDict
from decimal import Decimal
from typing import Any

import pytest

from aos.kernel import cbor

P = cbor.SELF_DESCRIBE_PREFIX


@pytest.mark.parametrize(
    ("hex_text", "code"),
    [
        ("", "cbor.truncated"),
        ("d9d9f7", "cbor.truncated"),
        ("d9d9f71a0000", "cbor.truncated"),
        ("d9d9f782", "cbor.truncated"),
        ("d9d9f76461", "cbor.truncated"),
        ("d9d9f70102", "cbor.trailing_bytes"),
        ("d9d9f7a0a0", "cbor.trailing_bytes"),
        ("d9d9f75f4201ff", "cbor.indefinite_length"),
        ("d9d9f79fff", "cbor.indefinite_length"),
        ("d9d9f7bfff", "cbor.indefinite_length"),
        ("d9d9f77f6161ff", "cbor.indefinite_length"),
        ("d9d9f7a2616101616102", "cbor.duplicate_key"),
        ("d9d9f7a1420102f5", "cbor.key_type"),
        ("d9d9f7a1f501", "cbor.key_type"),
        ("d9d9f7a1f601", "cbor.key_type"),
        ("d9d9f7a181010a", "cbor.key_type"),
        ("d9d9f7a1f93c0001", "cbor.key_type"),
        ("d9d9f7c11a514b67b0", "cbor.unknown_tag"),
        ("d9d9f7c249010000000000000000", "cbor.unknown_tag"),
        ("d9d9f7d9d9f700", "cbor.unknown_tag"),
        ("d9d9f781d82000", "cbor.unknown_tag"),
        ("d9d9f7f7", "cbor.unsupported_value"),
        ("d9d9f7f0", "cbor.unsupported_value"),
        ("d9d9f7f8ff", "cbor.unsupported_value"),
        ("d9d9f71c", "cbor.malformed"),
        ("d9d9f7ff", "cbor.malformed"),
        ("d9d9f762c328", "cbor.malformed"),
        ("d9d9f7f818", "cbor.malformed"),
        # decodes, but not in the one canonical form
        ("a0", "cbor.non_canonical"),
        ("d9d9f71817", "cbor.non_canonical"),
        ("d9d9f7190001", "cbor.non_canonical"),
        ("d9d9f7780161", "cbor.non_canonical"),
        ("d9d9f7a2616201616101", "cbor.non_canonical"),
        ("d9d9f7a262616101616202", "cbor.non_canonical"),
        ("d9d9f7fb3ff8000000000000", "cbor.non_canonical"),
        ("d9d9f7fa3fc00000", "cbor.non_canonical"),
        ("d9d9f7f97e01", "cbor.non_canonical"),
        ("d9d9f7fb7ff8000000000000", "cbor.non_canonical"),
    ],
)
def test_strict_decode_rejects_with_its_code(hex_text: str, code: str) -> None:
    with pytest.raises(cbor.CborError) as info:
        cbor.decode(bytes.fromhex(hex_text))
    assert info.value.code == code


def test_non_canonical_check_can_be_relaxed_but_structure_cannot() -> None:
    assert cbor.decode(bytes.fromhex("a2616202616101"), canonical=False) == {"a": 1, "b": 2}
    assert cbor.decode(bytes.fromhex("1817"), canonical=False) == 23
    with pytest.raises(cbor.CborDuplicateKeyError):
        cbor.decode(bytes.fromhex("a2616101616102"), canonical=False)


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def test_depth_limit_edge_is_the_same_for_encode_and_decode() -> None:
    limit = cbor.NESTING_DEPTH_MAX_DEFAULT
    data = cbor.encode(_nested(limit))
    assert cbor.decode(data) == _nested(limit)
    with pytest.raises(cbor.CborDepthError):
        cbor.encode(_nested(limit + 1))
    over = P + bytes([0x81] * (limit + 1)) + b"\x00"
    with pytest.raises(cbor.CborDepthError):
        cbor.decode(over)


def test_depth_limit_is_overridable() -> None:
    data = cbor.encode(_nested(3))
    assert cbor.decode(data, depth_max=3) == _nested(3)
    with pytest.raises(cbor.CborDepthError):
        cbor.decode(data, depth_max=2)
    with pytest.raises(cbor.CborDepthError):
        cbor.encode(_nested(3), depth_max=2)


@pytest.mark.parametrize("prefix", [b"\x81", b"\xa1\x61\x61", b"\xc6"])
def test_hostile_nesting_is_refused_without_crashing(prefix: bytes) -> None:
    with pytest.raises(cbor.CborError) as info:
        cbor.decode(P + prefix * 100_000 + b"\x00", canonical=False)
    assert info.value.code in {"cbor.depth_exceeded", "cbor.unknown_tag"}


def test_size_limit_edge() -> None:
    data = cbor.encode(b"x" * 100)
    assert cbor.decode(data, bytes_max=len(data)) == b"x" * 100
    with pytest.raises(cbor.CborTooLargeError):
        cbor.decode(data, bytes_max=len(data) - 1)


def test_huge_declared_lengths_are_truncation_not_allocation() -> None:
    for hex_text in ("5bffffffffffffffff", "9bffffffffffffffff", "bbffffffffffffffff"):
        with pytest.raises(cbor.CborTruncatedError):
            cbor.decode(bytes.fromhex(hex_text), canonical=False)


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (2**64, "cbor.integer_range"),
        (-(2**64) - 1, "cbor.integer_range"),
        ({2**64: 1}, "cbor.integer_range"),
        ({b"k": 1}, "cbor.key_type"),
        ({(1, 2): 1}, "cbor.key_type"),
        ({True: 1}, "cbor.key_type"),
        ({1.5: 1}, "cbor.key_type"),
        ({None: 1}, "cbor.key_type"),
        (Decimal("1.5"), "cbor.unsupported_value"),
        ({1, 2}, "cbor.unsupported_value"),
        (OrderedDict(a=1), "cbor.unsupported_value"),
        (object(), "cbor.unsupported_value"),
        ([bytearray(b"x")], "cbor.unsupported_value"),
    ],
)
def test_encode_refuses_values_outside_the_data_model(value: Any, code: str) -> None:
    with pytest.raises(cbor.CborError) as info:
        cbor.encode(value)
    assert info.value.code == code


def test_encode_error_paths_point_at_the_value() -> None:
    with pytest.raises(cbor.CborError) as info:
        cbor.encode({"items": [1, {"price": 2**70}]})
    assert info.value.path == "$.items[1].price"


@pytest.mark.parametrize(
    ("value", "hex_text"),
    [
        (0, "00"),
        (23, "17"),
        (24, "1818"),
        (-1, "20"),
        (2**64 - 1, "1bffffffffffffffff"),
        (-(2**64), "3bffffffffffffffff"),
        (1.0, "f93c00"),
        (1.5, "f93e00"),
        (100000.0, "fa47c35000"),
        (1.1, "fb3ff199999999999a"),
        (-0.0, "f98000"),
        (5.960464477539063e-08, "f90001"),
        (math.inf, "f97c00"),
        (-math.inf, "f9fc00"),
        (math.nan, "f97e00"),
        (float.fromhex("0x1.8p+1000"), "fb7e78000000000000"),
        ({"b": 2, "a": 1, "aa": 3}, "a3616101616202626161 03".replace(" ", "")),
        ({10: 0, -1: 0, 100: 0, "a": 0}, "a40a00200018640061610 0".replace(" ", "")),
        ((1, 2), "820102"),
    ],
)
def test_canonical_forms(value: Any, hex_text: str) -> None:
    assert cbor.encode(value, self_describe=False).hex() == hex_text
    assert cbor.encode(value).hex() == "d9d9f7" + hex_text


def test_every_nan_payload_encodes_as_the_one_nan() -> None:
    import struct

    quiet_with_payload = struct.unpack(">d", bytes.fromhex("7ff8000000000123"))[0]
    negative_nan = struct.unpack(">d", bytes.fromhex("fff8000000000000"))[0]
    for nan in (math.nan, quiet_with_payload, negative_nan):
        assert cbor.encode(nan, self_describe=False).hex() == "f97e00"


def test_json_views_round_trip_bytes() -> None:
    value = {"blob": b"\x00\xff", "list": [1, "x"]}
    as_json = cbor.to_json(value)
    assert as_json == {"blob": {"$bytes": "00ff"}, "list": [1, "x"]}
    assert cbor.from_json(as_json) == value
    with pytest.raises(cbor.CborUnsupportedValueError):
        cbor.from_json({"$bytes": "zz"})


def test_errors_carry_stable_codes_and_hints() -> None:
    with pytest.raises(cbor.CborError) as info:
        cbor.decode(bytes.fromhex("d9d9f70102"))
    body = info.value.to_dict()
    assert body["code"] == "cbor.trailing_bytes"
    assert body["hint"]
    assert body["detail"] == {"offset": 4}


# --------------------------------------------------------------------------------------------
# same_encoding: when the world may keep a step's own state bytes


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({"a": [1, "x", None, b"y", True]}, {"a": [1, "x", None, b"y", True]}),
        ({"n": {"deep": [{"k": 2**64 - 1}]}}, {"n": {"deep": [{"k": 2**64 - 1}]}}),
        ([], []),
        ("same", "same"),
    ],
)
def test_same_encoding_of_equal_plain_values(a: Any, b: Any) -> None:
    assert cbor.same_encoding(a, b)
    assert cbor.encode(a) == cbor.encode(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({"a": 1}, {"a": True}),  # equal under ==, encoded differently
        ({"a": 1}, {"a": 1.0}),
        ({"a": 0.0}, {"a": -0.0}),
        ({"a": float("nan")}, {"a": float("nan")}),
        ({"a": None}, {}),  # a normalized record fills a missing option field
        ({"a": 1}, {"b": 1}),
        ({1: "x"}, {1: "x"}),  # integer keys: unsure, so encoded again
        ([1, 2], [2, 1]),
        ((1, 2), [1, 2]),
    ],
)
def test_same_encoding_is_false_when_unsure_or_different(a: Any, b: Any) -> None:
    assert not cbor.same_encoding(a, b)


def test_same_encoding_trusts_identity() -> None:
    value = {"x": [0.5, {"y": -0.0}]}
    assert cbor.same_encoding(value, value)
    assert cbor.same_encoding({"top": value["x"]}, {"top": value["x"]})
