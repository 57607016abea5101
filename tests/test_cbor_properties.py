"""Properties of canonical CBOR over generated values and arbitrary bytes."""

from __future__ import annotations

import random
from typing import Any

import cbor2
from hypothesis import given
from hypothesis import strategies as st

from aos.kernel import cbor
from tests.strategies import examples_times, keys, same_value, scalars, values


@given(values)
def test_decode_inverts_encode(value: Any) -> None:
    assert same_value(cbor.decode(cbor.encode(value)), value)


@given(values, st.randoms(use_true_random=False))
def test_encoding_ignores_insertion_order(value: Any, rng: random.Random) -> None:
    assert cbor.encode(_shuffled(value, rng)) == cbor.encode(value)


@given(values)
def test_encoding_is_a_fixed_point(value: Any) -> None:
    data = cbor.encode(value)
    assert cbor.encode(cbor.decode(data)) == data
    assert cbor.is_canonical(data)


@given(values)
def test_map_keys_are_in_length_then_bytewise_order(value: Any) -> None:
    for node in _maps(value):
        encoded = [cbor.encode(k, self_describe=False) for k in node]
        assert sorted(encoded, key=lambda e: (len(e), e)) == [
            cbor.encode(k, self_describe=False) for k in cbor.decode(cbor.encode(node))
        ]


@examples_times(2.5)  # cheap: one decode of up to 64 random bytes (500 under ci)
@given(st.binary(max_size=64))
def test_strict_decode_raises_only_typed_errors(data: bytes) -> None:
    for candidate in (data, cbor.SELF_DESCRIBE_PREFIX + data):
        for canonical in (True, False):
            try:
                value = cbor.decode(candidate, canonical=canonical)
            except cbor.CborError as error:
                assert error.code.startswith("cbor.")
                continue
            # Accepted bytes are inside the data model: they encode without error.
            reencoded = cbor.encode(value)
            if canonical:
                assert reencoded == candidate


@examples_times(1.5)  # cheap, and each value has many mutations (300 under ci)
@given(values, st.data())
def test_mutated_encodings_decode_canonically_or_fail_typed(
    value: Any, data: st.DataObject
) -> None:
    encoded = bytearray(cbor.encode(value))
    index = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    encoded[index] = data.draw(st.integers(min_value=0, max_value=255))
    try:
        decoded = cbor.decode(bytes(encoded))
    except cbor.CborError:
        return
    # Whatever survives the strict decoder is canonical: it re-encodes to the same bytes.
    assert cbor.encode(decoded) == bytes(encoded)


@given(values)
def test_generic_decoder_agrees_with_strict_decoder_on_canonical_bytes(value: Any) -> None:
    data = cbor.encode(value)
    assert same_value(cbor.decode_generic(data[3:]), cbor.decode(data))


@given(values)
def test_diagnostic_notation_reads_every_canonical_encoding(value: Any) -> None:
    text = cbor.diagnostic(cbor.encode(value))
    assert text.startswith("55799(") and text.endswith(")")


@given(values)
def test_cbor2_canonical_and_ours_agree(value: Any) -> None:
    # Guards against a cbor2 upgrade silently changing its canonical forms.
    assert cbor.encode(value, self_describe=False) == cbor2.dumps(value, canonical=True)


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


def _maps(value: Any) -> list[dict[Any, Any]]:
    found: list[dict[Any, Any]] = []
    if isinstance(value, dict):
        found.append(value)
        for v in value.values():
            found.extend(_maps(v))
    elif isinstance(value, list):
        for v in value:
            found.extend(_maps(v))
    return found


@examples_times(2)  # cheap, and each value has many insertion orders (400 under ci)
@given(values, st.randoms(use_true_random=False))
def test_canonical_body_is_cbor2_canonical_mode_in_any_insertion_order(
    value: Any, rng: random.Random
) -> None:
    # canonical_body writes maps in cbor2's default mode after ordering their keys; it must
    # give exactly cbor2's canonical bytes, floats (written by the canonical mode) included.
    shuffled = _shuffled(value, rng)
    expected = cbor2.dumps(value, canonical=True)
    assert cbor.canonical_body(shuffled) == expected
    assert cbor.canonical_body(value) == expected
    assert cbor.encode_built(shuffled) == cbor.SELF_DESCRIBE_PREFIX + expected


def test_canonical_body_orders_mixed_keys_and_finds_nested_floats() -> None:
    value = {"bb": [{"z": 1, 10: 2, "a": 3, -1: 4}], "a": {"c": [1, {"x": 1.5}]}, 300: None}
    assert cbor.canonical_body(value) == cbor2.dumps(value, canonical=True)
    assert cbor.canonical_body((1, [2.0], "x")) == cbor2.dumps((1, [2.0], "x"), canonical=True)
    assert cbor.canonical_body(-0.0) == bytes.fromhex("f98000")


# Values of the data model without floats: what `encode_ordered` is for.
_float_free = st.recursive(
    scalars.filter(lambda value: not isinstance(value, float)),
    lambda children: st.one_of(
        st.lists(children, max_size=6), st.dictionaries(keys, children, max_size=6)
    ),
    max_leaves=30,
)


@given(_float_free)
def test_encode_ordered_is_encode_for_a_value_built_in_canonical_order(value: Any) -> None:
    in_order = cbor.decode(cbor.encode(value))  # decoded maps come in canonical key order
    assert cbor.encode_ordered(in_order) == cbor.encode(value)
