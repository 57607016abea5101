"""The strict decoder's fast path (one `cbor2.loads`, then the canonical comparison) accepts
exactly the bytes the step-by-step path accepts, with the same values, and every refusal
raises the same error code as before.

The oracle is the step-by-step definition of canonical decoding: the bytes start with the
self-describe tag, decode strictly as one item (`canonical=False` takes only the checked
path), and are exactly the canonical encoding of what they decode to."""

from __future__ import annotations

from typing import Any

import cbor2
from hypothesis import given
from hypothesis import strategies as st

from aos.kernel import cbor
from tests.strategies import examples_times, same_value, values


def _oracle(raw: bytes) -> tuple[str, Any]:
    """("ok", value) or ("error", code), by the definition the fast path must keep."""
    try:
        if raw and not raw.startswith(cbor.SELF_DESCRIBE_PREFIX):
            return "error", cbor.CborNonCanonicalError.code
        value = cbor.decode(raw, canonical=False)
    except cbor.CborError as error:
        return "error", error.code
    if cbor.encode(value) != raw:
        return "error", cbor.CborNonCanonicalError.code
    return "ok", value


def _decoded(raw: bytes) -> tuple[str, Any]:
    try:
        return "ok", cbor.decode(raw)
    except cbor.CborError as error:
        return "error", error.code


def _agree(raw: bytes) -> None:
    expected, got = _oracle(raw), _decoded(raw)
    assert got[0] == expected[0], (raw.hex(), expected, got)
    if got[0] == "ok":
        assert same_value(got[1], expected[1])
    else:
        assert got[1] == expected[1]


@given(values)
def test_canonical_encodings_decode_to_the_same_value(value: Any) -> None:
    raw = cbor.encode(value)
    _agree(raw)
    assert same_value(cbor.decode(raw), value)


@examples_times(2.5)  # cheap: two decodes of up to 64 random bytes (500 under ci)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_are_judged_as_before(data: bytes) -> None:
    _agree(data)
    _agree(cbor.SELF_DESCRIBE_PREFIX + data)


@examples_times(2)  # cheap, and each value has many mutations (400 under ci)
@given(values, st.data())
def test_mutated_and_extended_encodings_are_judged_as_before(
    value: Any, data: st.DataObject
) -> None:
    encoded = bytearray(cbor.encode(value))
    index = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    encoded[index] = data.draw(st.integers(min_value=0, max_value=255))
    _agree(bytes(encoded))
    tail = data.draw(st.binary(min_size=1, max_size=4))
    _agree(cbor.encode(value) + tail)  # trailing bytes
    _agree(cbor.encode(value)[:-1])  # truncated


@given(values)
def test_non_canonical_forms_of_a_value_are_refused_as_before(value: Any) -> None:
    # cbor2's default (non-canonical) form: doubles for every float, keys in insertion order.
    loose = cbor.SELF_DESCRIBE_PREFIX + cbor2.dumps(value)
    _agree(loose)
    _agree(cbor.SELF_DESCRIBE_PREFIX + loose)  # the self-describe tag twice


def test_each_refusal_keeps_its_error_code() -> None:
    prefix = cbor.SELF_DESCRIBE_PREFIX
    cases = {
        b"": "cbor.truncated",
        b"\x01": "cbor.non_canonical",
        prefix: "cbor.truncated",
        prefix + b"\x01\x02": "cbor.trailing_bytes",
        prefix + b"\x9f\xff": "cbor.indefinite_length",
        prefix + b"\xa2\x61a\x01\x61a\x02": "cbor.duplicate_key",
        prefix + b"\xc1\x01": "cbor.unknown_tag",
        prefix + b"\xf7": "cbor.unsupported_value",
        prefix + b"\x18\x01": "cbor.non_canonical",
        prefix + b"\x62a": "cbor.truncated",
        prefix + b"\x81" * 70 + b"\x01": "cbor.depth_exceeded",
    }
    for raw, code in cases.items():
        assert _decoded(raw) == ("error", code), raw.hex()
        _agree(raw)


# -- decode_chained: bytes a hash chain proved the kernel wrote --------------------------


@given(values)
def test_chained_decoding_of_canonical_bytes_gives_decodes_value(value: Any) -> None:
    raw = cbor.encode(value)
    assert same_value(cbor.decode_chained(raw), cbor.decode(raw))


@examples_times(1.5)  # cheap: decodes of up to 64 random bytes (300 under ci)
@given(st.binary(max_size=64))
def test_chained_decoding_refuses_what_it_cannot_decode_with_decodes_code(data: bytes) -> None:
    """It skips the canonical checks (the chain vouches for the bytes), never the decoding:
    bytes it refuses raise the strict decoder's error for them, and bytes the strict decoder
    accepts it decodes to the same value."""
    raw = cbor.SELF_DESCRIBE_PREFIX + data
    try:
        strict: tuple[str, Any] = ("ok", cbor.decode(raw))
    except cbor.CborError as error:
        strict = ("error", error.code)
    try:
        chained = cbor.decode_chained(raw)
    except cbor.CborError as error:
        assert strict == ("error", error.code)
    else:
        if strict[0] == "ok":
            assert same_value(chained, strict[1])
