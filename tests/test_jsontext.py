"""Strict JSON text (kernel/text/jsontext.py): the one reader for JSON from outside."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aos.kernel.text import jsontext
from aos.kernel.text.jsontext import JsonInvalidError, JsonTooDeepError, JsonTooLargeError
from tests.strategies import examples_times

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


def nested(depth: int, *, opener: str = "[", closer: str = "]", inner: str = "") -> str:
    return opener * depth + inner + closer * depth


@given(json_values)
@examples_times(1.5)  # cheap: one write and one read of a value (300 under ci)
def test_every_json_value_reads_back_as_itself(value: Any) -> None:
    assert jsontext.parse(json.dumps(value)) == value
    assert jsontext.parse(json.dumps(value).encode()) == value


@pytest.mark.parametrize(
    "text",
    [
        nested(64),
        '{"a":' * 63 + "[]" + "}" * 63,
        nested(64, inner='"]]]]]]]]"'),  # brackets inside strings do not count
        nested(64, inner='"\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["'),
        "[" + "[]," * 1000 + "[]]",  # wide, not deep
    ],
)
def test_nesting_up_to_the_limit_is_read(text: str) -> None:
    assert jsontext.parse(text) is not None


@pytest.mark.parametrize(
    "text",
    [
        nested(65),
        '{"a":' * 64 + "[]" + "}" * 64,
        "[" * 65,  # unclosed and deep: the depth is what is refused
        nested(65, inner='"x"'),
        "[" + "[[]," * 70 + "]" * 70,  # deep behind siblings
        nested(100_000),
    ],
)
def test_nesting_past_the_limit_is_too_deep(text: str) -> None:
    with pytest.raises(JsonTooDeepError) as refused:
        jsontext.parse(text)
    assert refused.value.code == "input.json_too_deep"


def test_the_depth_limit_is_overridable() -> None:
    assert jsontext.parse(nested(3), depth_max=3) == [[[]]]
    with pytest.raises(JsonTooDeepError):
        jsontext.parse(nested(4), depth_max=3)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',
        '{"x": {"b": 1, "b": 1}}',
        "NaN",
        "[Infinity]",
        "-Infinity",
        "{",
        "",
        "1 2",
    ],
)
def test_not_strict_json_is_refused(text: str) -> None:
    with pytest.raises(JsonInvalidError) as refused:
        jsontext.parse(text)
    assert refused.value.code == "input.invalid_json"


def test_bytes_must_be_utf8() -> None:
    with pytest.raises(JsonInvalidError):
        jsontext.parse(b'"\xff"')


def test_size_limit_at_the_edge() -> None:
    text = json.dumps("x" * 98)  # 100 bytes
    assert jsontext.parse(text, bytes_max=100) == "x" * 98
    with pytest.raises(JsonTooLargeError) as refused:
        jsontext.parse(text, bytes_max=99)
    assert refused.value.code == "input.json_too_large"


@given(st.binary(max_size=200))
@examples_times(2.5)  # cheap: one read of random bytes (500 under ci)
def test_random_bytes_give_a_value_or_a_typed_error(data: bytes) -> None:
    with contextlib.suppress(JsonInvalidError, JsonTooDeepError):
        jsontext.parse(data, depth_max=8)


@given(st.text(alphabet='[]{}":,\\ 1a', max_size=200))
@examples_times(2.5)  # cheap: one read of a short text (500 under ci)
def test_bracket_soup_gives_a_value_or_a_typed_error(text: str) -> None:
    with contextlib.suppress(JsonInvalidError, JsonTooDeepError):
        jsontext.parse(text, depth_max=4)


def depth_of(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(item) for item in value.values()), default=0)
    return 0


@given(json_values, st.integers(min_value=0, max_value=6))
@examples_times(2.5)  # cheap: one scan and one read (500 under ci)
def test_the_depth_scan_agrees_with_the_parsed_depth(value: Any, depth_max: int) -> None:
    text = json.dumps(value)
    if depth_of(value) <= depth_max:
        assert jsontext.parse(text, depth_max=depth_max) == value
    else:
        with pytest.raises(JsonTooDeepError):
            jsontext.parse(text, depth_max=depth_max)
