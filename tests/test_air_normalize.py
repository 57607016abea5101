"""Typed values: canonical forms, bad values with exact paths, and properties."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aos.kernel import cbor
from aos.kernel.air import (
    DefSchema,
    SchemaUnknownError,
    ValueInvalidError,
    normalize_to_bytes,
    parse_type,
)
from aos.kernel.air.errors import AirError
from aos.kernel.air.normalize import (
    DEC128_TEXT_LENGTH_MAX,
    INT_MAX,
    INT_MIN,
    NAT_MAX,
    TIME_NS_MAX,
    normalize,
)
from aos.kernel.air.types import MAP_KEY_TAGS, RefCycleError, TypeExpr

HASH_A = "blake3:" + "ab" * 32
UUID = "123e4567-e89b-12d3-a456-426614174000"


def t(json_type: Any) -> TypeExpr:
    return parse_type(json_type)


def prim(tag: str) -> TypeExpr:
    return t({tag: {}})


def schemas(**types: Any) -> dict[str, DefSchema]:
    return {
        name.replace("_", "/") + "@1": DefSchema.model_validate(
            {"$kind": "defschema", "name": name.replace("_", "/") + "@1", "type": type_}
        )
        for name, type_ in types.items()
    }


# --------------------------------------------------------------------------------------------
# Good values: (type, input, canonical)

GOOD: list[tuple[Any, Any, Any]] = [
    ({"bool": {}}, True, True),
    ({"int": {}}, INT_MIN, INT_MIN),
    ({"int": {}}, INT_MAX, INT_MAX),
    ({"nat": {}}, 0, 0),
    ({"nat": {}}, NAT_MAX, NAT_MAX),
    ({"dec128": {}}, "1.50", "1.5"),
    ({"dec128": {}}, "1.5", "1.5"),
    ({"dec128": {}}, "+001.2300", "1.23"),
    ({"dec128": {}}, "1e3", "1000"),
    ({"dec128": {}}, "12.5E-3", "0.0125"),
    ({"dec128": {}}, "-0.000", "0"),
    ({"dec128": {}}, "-7", "-7"),
    ({"dec128": {}}, 42, "42"),
    ({"dec128": {}}, "9" * 34, "9" * 34),
    ({"dec128": {}}, "1e6144", "1" + "0" * 6144),  # the largest exponent, padded
    ({"dec128": {}}, "1e-6176", "0." + "0" * 6175 + "1"),  # the smallest
    ({"bytes": {}}, b"\x00\xff", b"\x00\xff"),
    ({"bytes": {}}, bytearray(b"ab"), b"ab"),
    ({"bytes": {}}, {"$bytes": "00FF"}, b"\x00\xff"),
    ({"bytes": {}}, {"$bytes": ""}, b""),
    ({"text": {}}, "héllo", "héllo"),
    ({"time": {}}, 0, 0),
    ({"time": {}}, TIME_NS_MAX, TIME_NS_MAX),
    ({"time": {}}, "1970-01-01T00:00:01.5Z", 1_500_000_000),
    ({"time": {}}, "2024-03-01T12:00:00+02:00", 1_709_287_200_000_000_000),
    ({"time": {}}, "2024-03-01t10:00:00.000000001z", 1_709_287_200_000_000_001),
    ({"duration": {}}, -5, -5),
    ({"duration": {}}, "250ms", 250_000_000),
    ({"duration": {}}, "1h30m", 5_400_000_000_000),
    ({"duration": {}}, "-1.5s", -1_500_000_000),
    ({"duration": {}}, "2d3ns", 172_800_000_000_003),
    ({"duration": {}}, "1.5us", 1_500),
    ({"hash": {}}, HASH_A, HASH_A),
    ({"uuid": {}}, UUID.upper(), UUID),
    ({"unit": {}}, {}, {}),
    ({"list": {"int": {}}}, (3, 1, 2), [3, 1, 2]),
    ({"set": {"int": {}}}, [3, 1, 3, 2], [1, 2, 3]),
    ({"set": {"text": {}}}, {"b", "a"}, ["a", "b"]),
    ({"set": {"dec128": {}}}, ["1.0", "1", "0.5"], ["1", "0.5"]),  # "1" encodes shorter
    ({"option": {"int": {}}}, None, None),
    ({"option": {"int": {}}}, 5, 5),
    ({"map": {"key": {"text": {}}, "value": {"int": {}}}}, {"bb": 1, "a": 2}, {"a": 2, "bb": 1}),
    (
        {"map": {"key": {"int": {}}, "value": {"unit": {}}}},
        {"-1": {}, "10": {}, 2: {}},
        {2: {}, 10: {}, -1: {}},
    ),
    ({"map": {"key": {"uuid": {}}, "value": {"bool": {}}}}, {UUID.upper(): True}, {UUID: True}),
    ({"map": {"key": {"hash": {}}, "value": {"bool": {}}}}, {HASH_A: False}, {HASH_A: False}),
    (
        {"record": {"b": {"int": {}}, "aa": {"option": {"text": {}}}, "c": {"text": {}}}},
        {"c": "x", "b": 1},
        {"b": 1, "c": "x", "aa": None},
    ),
    ({"variant": {"On": {"unit": {}}, "Set": {"nat": {}}}}, {"$tag": "On"}, {"$tag": "On"}),
    (
        {"variant": {"On": {"unit": {}}, "Set": {"nat": {}}}},
        {"$tag": "On", "$value": {}},
        {"$tag": "On"},
    ),
    (
        {"variant": {"On": {"unit": {}}, "Set": {"nat": {}}}},
        {"$value": 3, "$tag": "Set"},
        {"$tag": "Set", "$value": 3},
    ),
]


@pytest.mark.parametrize(("json_type", "value", "expected"), GOOD)
def test_good_values(json_type: Any, value: Any, expected: Any) -> None:
    result = normalize(value, t(json_type))
    assert result == expected
    assert type(result) is type(expected)
    if isinstance(expected, dict):
        assert list(result) == list(expected)  # canonical key order, not input order
    assert normalize(result, t(json_type)) == result  # idempotent


# --------------------------------------------------------------------------------------------
# Bad values: (type, input, code, path)

RECORD = {"record": {"items": {"list": {"ref": "demo/Item@1"}}}}
ITEM = {"record": {"price": {"dec128": {}}, "tags": {"set": {"text": {}}}}}

BAD: list[tuple[Any, Any, str, str]] = [
    ({"bool": {}}, 1, "air.value_invalid", "$"),
    ({"int": {}}, True, "air.value_invalid", "$"),
    ({"int": {}}, 1.0, "air.value_invalid", "$"),
    ({"int": {}}, "1", "air.value_invalid", "$"),
    ({"int": {}}, INT_MAX + 1, "air.value_out_of_range", "$"),
    ({"int": {}}, INT_MIN - 1, "air.value_out_of_range", "$"),
    ({"nat": {}}, -1, "air.value_out_of_range", "$"),
    ({"nat": {}}, NAT_MAX + 1, "air.value_out_of_range", "$"),
    ({"dec128": {}}, 1.5, "air.value_invalid", "$"),  # floats have already lost digits
    ({"dec128": {}}, "1.2.3", "air.value_invalid", "$"),
    ({"dec128": {}}, "NaN", "air.value_invalid", "$"),
    ({"dec128": {}}, "Infinity", "air.value_invalid", "$"),
    ({"dec128": {}}, ".5", "air.value_invalid", "$"),
    ({"dec128": {}}, "1" * 35, "air.value_out_of_range", "$"),  # never rounded
    ({"dec128": {}}, "1e6145", "air.value_out_of_range", "$"),
    ({"dec128": {}}, "1e-6177", "air.value_out_of_range", "$"),
    ({"dec128": {}}, "1e9999999999", "air.value_out_of_range", "$"),
    ({"dec128": {}}, "1" + "0" * DEC128_TEXT_LENGTH_MAX, "air.value_invalid", "$"),
    ({"bytes": {}}, "00ff", "air.value_invalid", "$"),
    ({"bytes": {}}, {"$bytes": "0"}, "air.value_invalid", "$"),
    ({"bytes": {}}, {"$bytes": "zz"}, "air.value_invalid", "$"),
    ({"text": {}}, b"x", "air.value_invalid", "$"),
    ({"text": {}}, "\ud800", "air.value_invalid", "$"),
    ({"time": {}}, -1, "air.value_out_of_range", "$"),
    ({"time": {}}, TIME_NS_MAX + 1, "air.value_out_of_range", "$"),
    ({"time": {}}, "2024-02-30T00:00:00Z", "air.value_invalid", "$"),
    ({"time": {}}, "2024-01-01T00:00:00", "air.value_invalid", "$"),  # no zone
    ({"time": {}}, "2024-01-01T00:00:00+24:00", "air.value_invalid", "$"),
    ({"time": {}}, "1969-12-31T23:59:59Z", "air.value_out_of_range", "$"),
    ({"duration": {}}, "5", "air.value_invalid", "$"),
    ({"duration": {}}, "5 s", "air.value_invalid", "$"),
    ({"duration": {}}, "0.5ns", "air.value_invalid", "$"),
    ({"duration": {}}, "-", "air.value_invalid", "$"),
    ({"duration": {}}, "999999999999d", "air.value_out_of_range", "$"),
    ({"hash": {}}, "blake3:" + "AB" * 32, "air.value_invalid", "$"),
    ({"hash": {}}, "sha256:" + "ab" * 32, "air.value_invalid", "$"),
    ({"uuid": {}}, "123e4567e89b12d3a456426614174000", "air.value_invalid", "$"),
    ({"unit": {}}, None, "air.value_invalid", "$"),
    ({"unit": {}}, {"a": 1}, "air.value_invalid", "$"),
    ({"list": {"int": {}}}, {1, 2}, "air.value_invalid", "$"),
    ({"list": {"int": {}}}, [1, "2"], "air.value_invalid", "$[1]"),
    ({"set": {"int": {}}}, "ab", "air.value_invalid", "$"),
    ({"option": {"int": {}}}, "x", "air.value_invalid", "$"),
    (
        {"map": {"key": {"int": {}}, "value": {"int": {}}}},
        {"01": 1},
        "air.value_invalid",
        '$["01"]',
    ),
    (
        {"map": {"key": {"nat": {}}, "value": {"int": {}}}},
        {"-1": 1},
        "air.value_out_of_range",
        '$["-1"]',
    ),
    (
        {"map": {"key": {"uuid": {}}, "value": {"int": {}}}},
        {UUID: 1, UUID.upper(): 2},
        "air.value_duplicate_key",
        f'$["{UUID}"]',
    ),
    (
        {"map": {"key": {"text": {}}, "value": {"int": {}}}},
        {"k": "v"},
        "air.value_invalid",
        '$["k"]',
    ),
    ({"map": {"key": {"text": {}}, "value": {"int": {}}}}, [], "air.value_invalid", "$"),
    ({"record": {"a": {"int": {}}}}, {}, "air.value_field_missing", "$.a"),
    ({"record": {"a": {"int": {}}}}, {"a": 1, "b": 2}, "air.value_field_unknown", "$.b"),
    ({"record": {"a": {"int": {}}}}, {1: 1}, "air.value_invalid", "$"),
    ({"record": {"a": {"int": {}}}}, [1], "air.value_invalid", "$"),
    (
        {"variant": {"A": {"int": {}}}},
        {"$tag": "B", "$value": 1},
        "air.value_variant_unknown",
        "$.$tag",
    ),
    ({"variant": {"A": {"int": {}}}}, {"$tag": "A"}, "air.value_field_missing", "$.$value"),
    ({"variant": {"A": {"int": {}}}}, {"A": 1}, "air.value_field_unknown", "$.A"),
    ({"variant": {"A": {"int": {}}}}, {"$value": 1}, "air.value_invalid", "$.$tag"),
    (
        {"variant": {"A": {"unit": {}}}},
        {"$tag": "A", "$value": None},
        "air.value_invalid",
        "$.$value",
    ),
    (
        {"variant": {"A": {"int": {}}}},
        {"$tag": "A", "$value": "x"},
        "air.value_invalid",
        "$.$value",
    ),
    (
        RECORD,
        {"items": [{"price": "1", "tags": []}, {"price": "x", "tags": []}]},
        "air.value_invalid",
        "$.items[1].price",
    ),
    (
        RECORD,
        {"items": [{"price": "1", "tags": ["a", 5]}]},
        "air.value_invalid",
        "$.items[0].tags[1]",
    ),
]


@pytest.mark.parametrize(("json_type", "value", "code", "path"), BAD)
def test_bad_values(json_type: Any, value: Any, code: str, path: str) -> None:
    with pytest.raises(ValueInvalidError) as caught:
        normalize(value, t(json_type), schemas(demo_Item=ITEM))
    assert (caught.value.code, caught.value.path) == (code, path)
    assert str(caught.value).startswith(f"{path}: ")


def test_error_text_names_the_path_and_the_type() -> None:
    value = {"items": [{"price": "1", "tags": []}] * 3 + [{"price": "abc", "tags": []}]}
    with pytest.raises(ValueInvalidError) as caught:
        normalize(value, t(RECORD), schemas(demo_Item=ITEM))
    assert str(caught.value) == "$.items[3].price: expected dec128, got str 'abc'"


# --------------------------------------------------------------------------------------------
# Refs, names, built-ins, depth


def test_schema_by_name_and_refs() -> None:
    found = schemas(demo_Item=ITEM, demo_Order=RECORD)
    value = {"items": [{"price": "2.50", "tags": ["b", "a", "b"]}]}
    expected = {"items": [{"tags": ["a", "b"], "price": "2.5"}]}
    assert normalize(value, "demo/Order@1", found) == expected
    # Bare types work as well as definitions.
    bare = {name: schema.type_ for name, schema in found.items()}
    assert normalize(value, "demo/Order@1", bare) == expected


def test_unknown_schemas_and_ref_cycles() -> None:
    with pytest.raises(SchemaUnknownError) as caught:
        normalize(1, "demo/Nope@1")
    assert caught.value.path == "$"
    with pytest.raises(SchemaUnknownError) as caught:
        normalize({"a": 1}, t({"record": {"a": {"ref": "demo/Nope@1"}}}))
    assert caught.value.path == "$.a"
    with pytest.raises(RefCycleError):
        normalize(1, "demo/A@1", schemas(demo_A={"ref": "demo/B@1"}, demo_B={"ref": "demo/A@1"}))


def test_builtin_schemas_are_always_available() -> None:
    ctx = {
        "now_ns": "2024-01-01T00:00:00Z",
        "entropy": {"$bytes": "00" * 64},
        "journal_height": 7,
        "manifest_hash": HASH_A,
        "workflow": "demo/w@1",
        "cell_mode": False,
    }
    result = normalize(ctx, "sys/WorkflowContext@1")
    assert result["key"] is None
    assert result["now_ns"] == 1_704_067_200_000_000_000
    receipt = {
        "origin_workflow": "demo/w@1",
        "origin_key": None,
        "intent_hash": HASH_A,
        "effect": "sys/timer.set@1",
        "adapter": "sys/timer@1",
        "status": {"$tag": "ok"},
        "payload": b"",
        "emitted_seq": 3,
    }
    assert normalize(receipt, "sys/EffectReceiptEnvelope@1")["status"] == {"$tag": "ok"}


def nested_lists(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def test_depth_limit_edge() -> None:
    list_type: Any = {"int": {}}
    for _ in range(10):
        list_type = {"list": list_type}
    assert normalize(nested_lists(10), t(list_type), depth_max=10) == nested_lists(10)
    with pytest.raises(ValueInvalidError) as caught:
        normalize(nested_lists(10), t(list_type), depth_max=9)
    assert caught.value.code == "air.value_too_deep"
    assert caught.value.path == "$" + "[0]" * 9


def test_recursive_schemas_stop_at_the_depth_limit() -> None:
    # Checked manifests reject ref cycles, but normalize must stay safe on any input.
    tree = schemas(demo_Tree={"record": {"kids": {"list": {"ref": "demo/Tree@1"}}}})
    value: Any = {"kids": []}
    for _ in range(5):
        value = {"kids": [value]}
    assert normalize(value, "demo/Tree@1", tree) == value
    with pytest.raises(ValueInvalidError) as caught:
        normalize(value, "demo/Tree@1", tree, depth_max=6)
    assert caught.value.code == "air.value_too_deep"


def test_normalize_to_bytes_is_canonical_cbor() -> None:
    data = normalize_to_bytes(
        {"b": 1, "a": {"$bytes": "ff"}}, t({"record": {"a": {"bytes": {}}, "b": {"int": {}}}})
    )
    assert data == cbor.encode({"a": b"\xff", "b": 1})
    assert cbor.decode(data) == {"a": b"\xff", "b": 1}


# --------------------------------------------------------------------------------------------
# Properties

_PRIMITIVE_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "bool": st.booleans(),
    "int": st.integers(INT_MIN, INT_MAX),
    "nat": st.integers(0, NAT_MAX),
    "dec128": st.builds(
        lambda coefficient, exponent: f"{coefficient}e{exponent}",
        st.integers(-(10**30), 10**30),
        st.integers(-40, 40),
    ),
    "bytes": st.one_of(
        st.binary(max_size=8), st.binary(max_size=8).map(lambda b: {"$bytes": b.hex()})
    ),
    "text": st.text(max_size=6),
    "time": st.one_of(st.integers(0, TIME_NS_MAX), st.just("2001-02-03T04:05:06.789+01:30")),
    "duration": st.one_of(st.integers(INT_MIN, INT_MAX), st.sampled_from(["1ms", "-2h3m", "4.5s"])),
    "hash": st.binary(min_size=32, max_size=32).map(lambda b: "blake3:" + b.hex()),
    "uuid": st.uuids().map(str).flatmap(lambda u: st.sampled_from([u, u.upper()])),
    "unit": st.just({}),
}
_FIELD_NAMES = st.sampled_from(["a", "b", "cc", "id", "x_1"])

_types: st.SearchStrategy[Any] = st.recursive(
    st.sampled_from(sorted(_PRIMITIVE_VALUES)).map(lambda tag: {tag: {}}),
    lambda inner: st.one_of(
        inner.map(lambda x: {"list": x}),
        inner.map(lambda x: {"set": x}),
        inner.filter(lambda x: "option" not in x).map(lambda x: {"option": x}),
        st.tuples(st.sampled_from(MAP_KEY_TAGS), inner).map(
            lambda kv: {"map": {"key": {kv[0]: {}}, "value": kv[1]}}
        ),
        st.dictionaries(_FIELD_NAMES, inner, max_size=3).map(lambda f: {"record": f}),
        st.dictionaries(_FIELD_NAMES, inner, min_size=1, max_size=3).map(lambda f: {"variant": f}),
    ),
    max_leaves=6,
)


def _values(json_type: Any) -> st.SearchStrategy[Any]:
    tag, body = next(iter(json_type.items()))
    if tag in _PRIMITIVE_VALUES:
        return _PRIMITIVE_VALUES[tag]
    if tag == "list":
        return st.lists(_values(body), max_size=3)
    if tag == "set":
        return st.lists(_values(body), max_size=3)
    if tag == "option":
        return st.one_of(st.none(), _values(body))
    if tag == "map":
        key_tag = next(iter(body["key"]))
        keys = _PRIMITIVE_VALUES[key_tag]
        if key_tag in ("int", "nat"):
            keys = keys.flatmap(lambda k: st.sampled_from([k, str(k)]))
        # Keys that collide once normalized (uuid case) are an error, not a property failure.
        return st.dictionaries(keys, _values(body["value"]), max_size=3).filter(
            lambda d: len({str(k).lower() for k in d}) == len(d)
        )
    if tag == "record":
        return st.fixed_dictionaries({name: _values(field) for name, field in body.items()})
    assert tag == "variant"
    arms = sorted(body)
    return st.sampled_from(arms).flatmap(
        lambda arm: _values(body[arm]).map(lambda v: {"$tag": arm, "$value": v})
    )


@given(st.data())
def test_normalize_is_idempotent(data: st.DataObject) -> None:
    json_type = data.draw(_types)
    type_ = t(json_type)
    once = normalize(data.draw(_values(json_type)), type_)
    twice = normalize(once, type_)
    assert twice == once
    assert cbor.encode(twice) == cbor.encode(once)
    # A canonical value survives the trip through its own bytes.
    assert normalize(cbor.decode(cbor.encode(once)), type_) == once


_SHUFFLE_TYPE = t({"map": {"key": {"text": {}}, "value": {"set": {"dec128": {}}}}})


@given(
    st.dictionaries(
        st.text(max_size=4),
        st.lists(st.integers(-1000, 1000).map(lambda n: f"{n}.0"), max_size=5),
        max_size=5,
    ),
    st.randoms(use_true_random=False),
)
def test_shuffled_maps_and_sets_give_identical_bytes(value: dict[str, list[str]], rng: Any) -> None:
    items = list(value.items())
    rng.shuffle(items)
    shuffled = {}
    for key, elements in items:
        elements = list(elements) + list(elements[:1])  # a duplicate, too
        rng.shuffle(elements)
        shuffled[key] = elements
    assert normalize_to_bytes(shuffled, _SHUFFLE_TYPE) == normalize_to_bytes(value, _SHUFFLE_TYPE)


def test_map_key_order_follows_canonical_cbor() -> None:
    value = {"bb": 1, "a": 2, "ccc": 3, "b": 4}
    result = normalize(value, t({"map": {"key": {"text": {}}, "value": {"int": {}}}}))
    assert list(result) == ["a", "b", "bb", "ccc"]
    assert json.dumps(result) == '{"a": 2, "b": 4, "bb": 1, "ccc": 3}'


# --------------------------------------------------------------------------------------------
# any


def test_any_takes_every_data_value_as_it_is() -> None:
    any_type = {"any": {}}
    value = {"b": [1, 2.5, None, {"z": 1, "a": b"x"}], "a": True, 7: -(2**64)}
    assert normalize(value, parse_type(any_type)) is value
    assert normalize((1, 2), parse_type(any_type)) == [1, 2]
    assert cbor.encode(normalize({"b": 1, "a": 2}, parse_type(any_type))) == cbor.encode(
        {"a": 2, "b": 1}
    )


@pytest.mark.parametrize(
    ("value", "code", "path"),
    [
        ({1.5: 2}, "air.value_invalid", "$"),
        ({"a": [1, {"q": object()}]}, "air.value_invalid", "$.a[1].q"),
        ({"x": 2**64}, "air.value_out_of_range", "$.x"),
        ({"x": {1, 2}}, "air.value_invalid", "$.x"),
    ],
)
def test_any_refuses_what_is_not_data_with_its_path(value: Any, code: str, path: str) -> None:
    with pytest.raises(AirError) as refused:
        normalize(value, parse_type({"any": {}}))
    assert (refused.value.code, refused.value.path) == (code, path)


def test_any_depth_at_the_edge() -> None:
    nested: Any = 1
    for _ in range(4):
        nested = [nested]
    assert normalize(nested, parse_type({"any": {}}), depth_max=4) == nested
    with pytest.raises(AirError) as refused:
        normalize([nested], parse_type({"any": {}}), depth_max=4)
    assert refused.value.code == "air.value_too_deep"
