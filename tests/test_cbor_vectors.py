"""Conformance: the public CBOR and canonical-encoding vectors in ../shared/vectors."""

from __future__ import annotations

import base64
import hashlib
import json
import math
from typing import Any

import cbor2
import pytest

from aos.kernel import cbor
from tests.conftest import shared_json

RFC_VECTORS = shared_json("vectors", "rfc8949", "appendix_a.json")
AGENTOS_VECTORS = shared_json("vectors", "agentos", "canonical-cbor.json") + shared_json(
    "vectors", "agentos", "schemas.json"
)


def _same(expected: Any, actual: Any) -> bool:
    """JSON-decoded expectation vs decoded CBOR, with float sign and type kept strict."""
    if isinstance(expected, float):
        return (
            isinstance(actual, float)
            and expected == actual
            and math.copysign(1, expected) == math.copysign(1, actual)
        )
    if isinstance(expected, bool) or expected is None:
        return expected is actual
    if isinstance(expected, int):
        return type(actual) is int and expected == actual
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(_same(e, a) for e, a in zip(expected, actual, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and set(expected) == set(actual)
            and all(_same(v, actual[k]) for k, v in expected.items())
        )
    return bool(expected == actual)


def _in_data_model(value: Any) -> bool:
    """Whether a generically decoded value is inside aos's data model."""
    if isinstance(value, cbor2.CBORTag | cbor2.CBORSimpleValue) or value is cbor2.undefined:
        return False
    if type(value) is int:
        return cbor.INT_MIN <= value <= cbor.INT_MAX
    if isinstance(value, list):
        return all(_in_data_model(v) for v in value)
    if isinstance(value, dict):
        return all(_in_data_model(k) and _in_data_model(v) for k, v in value.items())
    return True


def _ids(vectors: list[dict[str, Any]]) -> list[str]:
    return [v.get("hex") or v.get("label") or "?" for v in vectors]


def test_vector_files_are_complete() -> None:
    assert len(RFC_VECTORS) == 82
    assert len(AGENTOS_VECTORS) == 4


# RFC 7049 listed f818 as simple(24); RFC 8949 §3.3 made a two-byte simple value below 32
# not well-formed, and we follow RFC 8949.
NOT_WELL_FORMED_IN_RFC_8949 = {"f818"}


def test_two_byte_simple_below_32_is_not_well_formed() -> None:
    for hex_text in NOT_WELL_FORMED_IN_RFC_8949:
        data = bytes.fromhex(hex_text)
        with pytest.raises(cbor.CborMalformedError):
            cbor.decode_generic(data)
        with pytest.raises(cbor.CborMalformedError):
            cbor.diagnostic(data)
        with pytest.raises(cbor.CborMalformedError):
            cbor.decode(data, canonical=False)


WELL_FORMED_RFC_VECTORS = [v for v in RFC_VECTORS if v["hex"] not in NOT_WELL_FORMED_IN_RFC_8949]


@pytest.mark.parametrize("vector", WELL_FORMED_RFC_VECTORS, ids=_ids(WELL_FORMED_RFC_VECTORS))
def test_rfc_vector_decodes_to_its_stated_value(vector: dict[str, Any]) -> None:
    data = base64.b64decode(vector["cbor"])
    assert data.hex() == vector["hex"]
    if "decoded" in vector:
        assert _same(vector["decoded"], cbor.decode_generic(data))
    else:
        assert cbor.diagnostic(data) == vector["diagnostic"]


@pytest.mark.parametrize("vector", WELL_FORMED_RFC_VECTORS, ids=_ids(WELL_FORMED_RFC_VECTORS))
def test_rfc_roundtrip_vector_reencodes_where_our_rules_allow(vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    value = cbor.decode_generic(data)
    if not vector["roundtrip"]:
        # Indefinite lengths and wide floats: the strict decoder refuses the bytes as
        # non-canonical input (or as indefinite), whatever their value.
        with pytest.raises(cbor.CborError) as info:
            cbor.decode(data, canonical=False)
            cbor.decode(cbor.SELF_DESCRIBE_PREFIX + data)
        assert info.value.code in {"cbor.indefinite_length", "cbor.non_canonical"}
        return
    if _in_data_model(value):
        assert cbor.encode(value, self_describe=False) == data
        assert cbor.decode(cbor.SELF_DESCRIBE_PREFIX + data) == value or value != value
    else:
        # Tags, simple values and bignums are outside the data model: refused, with a reason.
        with pytest.raises(cbor.CborError) as info:
            cbor.decode(data, canonical=False)
        assert info.value.code in {"cbor.unknown_tag", "cbor.unsupported_value"}


def test_rfc_vectors_cover_both_sides_of_the_data_model() -> None:
    inside = [
        v
        for v in WELL_FORMED_RFC_VECTORS
        if v["roundtrip"] and _in_data_model(cbor.decode_generic(bytes.fromhex(v["hex"])))
    ]
    assert len(inside) >= 50


@pytest.mark.parametrize("vector", AGENTOS_VECTORS, ids=_ids(AGENTOS_VECTORS))
def test_agentos_vector_bytes_match(vector: dict[str, Any]) -> None:
    data = cbor.encode(cbor.from_json(vector["json"]))
    assert data.hex() == vector["cbor_hex"]
    algorithm, digest = vector["hash"].split(":")
    assert algorithm == "sha256"
    assert hashlib.sha256(data).hexdigest() == digest
    assert cbor.decode(data) == vector["json"]


def test_agentos_vectors_reencode_from_shuffled_json() -> None:
    for vector in AGENTOS_VECTORS:
        shuffled = json.loads(json.dumps(vector["json"], sort_keys=True))
        reversed_keys = _reverse_keys(shuffled)
        assert cbor.encode(reversed_keys).hex() == vector["cbor_hex"]


def _reverse_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reverse_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reverse_keys(v) for v in value]
    return value
