"""Hypothesis strategies for values in aos's CBOR data model, and `examples_times`, the example
count of a cheap property."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from aos.kernel import cbor


def examples_times(factor: float, **options: Any) -> settings:
    """`factor` times the loaded profile's examples (tests/conftest.py: `ci` or `dev`), for a
    property whose examples are cheap and whose inputs are many: it stays that much stronger
    than the others under either profile. `options`: other settings of the test."""
    return settings(max_examples=round(factor * settings.default.max_examples), **options)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=cbor.INT_MIN, max_value=cbor.INT_MAX),
    st.sampled_from(
        [
            0,
            23,
            24,
            255,
            256,
            65535,
            65536,
            2**32 - 1,
            2**32,
            cbor.INT_MAX,
            -1,
            -24,
            -25,
            -256,
            -257,
            cbor.INT_MIN,
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(width=16),
    st.floats(width=32),
    st.text(max_size=40),
    st.binary(max_size=40),
)
keys = st.one_of(st.text(max_size=12), st.integers(min_value=cbor.INT_MIN, max_value=cbor.INT_MAX))

values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.dictionaries(keys, children, max_size=6),
    ),
    max_leaves=30,
)


def same_value(a: Any, b: Any) -> bool:
    """Structural equality where NaN equals NaN and -0.0 differs from 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        if a != a and b != b:
            return True
        return a == b and (str(a)[0] == "-") == (str(b)[0] == "-")
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return bool(a == b)
