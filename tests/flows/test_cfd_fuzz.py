"""Fuzzing the flow loader (STYLE: fuzz every parser that takes outside bytes).

Whatever the input — arbitrary bytes, arbitrary JSON or YAML values, a valid definition with
keys dropped, replaced or added, its text with bytes flipped — `load_definition` and
`decode_definition` either return a definition or raise a `FlowError`; never anything else.
What loads is canonical: its CBOR decodes back to the same hash, and loading its canonical
form again changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from aos.flows.define.cfd import (
    ACTIONS,
    FlowDefinition,
    canonical_value,
    decode_definition,
    definition_hash,
    encode_definition,
    load_definition,
)
from aos.flows.errors import FlowError

EXAMPLE = Path(__file__).resolve().parents[2] / "flows" / "examples" / "order.flow.yaml"
EXAMPLE_TEXT = EXAMPLE.read_text()
EXAMPLE_VALUE = canonical_value(load_definition(EXAMPLE_TEXT))

# Words the loader gives meaning to, so random values hit real branches more often.
WORDS = [
    *ACTIONS,
    "name",
    "steps",
    "tasks",
    "do",
    "next",
    "arcs",
    "to",
    "when",
    "tool",
    "kind",
    "echo",
    "rules",
    "then",
    "jump",
    "else",
    "loop",
    "in",
    "self",
    "entry",
    "timeout_s",
    "timeout_ms",
    "{{ x }}",
    "{{ x",
    "{% if %}",
    "$.a",
    "$[",
    "a",
    "",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(WORDS),
    st.text(max_size=20),
)
keys = st.one_of(st.sampled_from(WORDS), st.text(max_size=10))
json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(keys, children, max_size=5)
    ),
    max_leaves=25,
)


def check_loads(text: str | bytes) -> None:
    """Load; a success must be canonical, a failure must be a FlowError."""
    try:
        defn = load_definition(text)
    except FlowError:
        return
    check_canonical(defn)


def check_canonical(defn: FlowDefinition) -> None:
    raw = encode_definition(defn)
    assert definition_hash(decode_definition(raw)) == definition_hash(defn)
    again = load_definition(json.dumps(canonical_value(defn)))
    assert definition_hash(again) == definition_hash(defn)


@given(st.binary(max_size=400))
def test_arbitrary_bytes(data: bytes) -> None:
    check_loads(data)


@given(st.text(max_size=300))
def test_arbitrary_text(text: str) -> None:
    check_loads(text)


@given(json_values)
def test_arbitrary_values_as_json(value: Any) -> None:
    check_loads(json.dumps(value))


@given(json_values)
def test_arbitrary_values_as_yaml(value: Any) -> None:
    check_loads(yaml.safe_dump(value))


# --------------------------------------------------------------------------------------------
# Mutations of a valid definition


def _containers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every map and list in `value`, the root included."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        found.append(path)
        for key, item in value.items():
            found += _containers(item, (*path, key))
    elif isinstance(value, list):
        found.append(path)
        for index, item in enumerate(value):
            found += _containers(item, (*path, index))
    return found


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    value = json.loads(json.dumps(EXAMPLE_VALUE))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = _containers(value)
        if not paths:
            break
        container = _at(value, draw(st.sampled_from(paths)))
        operation = draw(st.sampled_from(["drop", "replace", "insert"]))
        if isinstance(container, dict):
            _mutate_map(draw, container, operation)
        else:
            _mutate_list(draw, container, operation)
    return value


def _mutate_map(draw: st.DrawFn, container: dict[str, Any], operation: str) -> None:
    if operation == "insert" or not container:
        container[draw(keys)] = draw(json_values)
        return
    key = draw(st.sampled_from(sorted(container)))
    if operation == "drop":
        del container[key]
    else:
        container[key] = draw(json_values)


def _mutate_list(draw: st.DrawFn, container: list[Any], operation: str) -> None:
    if operation == "insert" or not container:
        container.insert(draw(st.integers(0, len(container))), draw(json_values))
        return
    index = draw(st.integers(0, len(container) - 1))
    if operation == "drop":
        del container[index]
    else:
        container[index] = draw(json_values)


@given(mutated())
def test_mutated_definitions(value: Any) -> None:
    check_loads(json.dumps(value))


@given(st.data())
def test_mutated_text(data: st.DataObject) -> None:
    raw = bytearray(EXAMPLE_TEXT.encode())
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        index = data.draw(st.integers(0, len(raw) - 1))
        operation = data.draw(st.sampled_from(["flip", "drop", "insert"]))
        if operation == "flip":
            raw[index] = data.draw(st.integers(0, 255))
        elif operation == "drop":
            del raw[index]
        else:
            raw[index:index] = data.draw(
                st.sampled_from([b":", b"-", b" ", b"\n", b"{", b"'", b"&a", b"*a"])
            )
    check_loads(bytes(raw))


@given(st.data())
def test_mutated_canonical_bytes(data: st.DataObject) -> None:
    raw = bytearray(encode_definition(load_definition(EXAMPLE_TEXT)))
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        defn = decode_definition(bytes(raw))
    except FlowError:
        return
    assert encode_definition(defn) == bytes(raw)
