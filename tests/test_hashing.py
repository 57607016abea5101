"""BLAKE3 hashes: official vectors, the text form, and value vs raw-bytes hashing."""

from __future__ import annotations

from typing import Any

import blake3
import pytest
from hypothesis import given

from aos.kernel import cbor, hashing
from tests.conftest import shared_json
from tests.strategies import values

BLAKE3 = shared_json("vectors", "blake3", "test_vectors.json")


def _input(length: int) -> bytes:
    return bytes(i % 251 for i in range(length))


@pytest.mark.parametrize(
    "case", BLAKE3["cases"], ids=[str(c["input_len"]) for c in BLAKE3["cases"]]
)
def test_blake3_official_vectors(case: dict[str, Any]) -> None:
    data = _input(case["input_len"])
    # The vectors give extended output; the first 32 bytes are the default hash.
    assert hashing.hash_bytes(data).hex == case["hash"][:64]
    assert blake3.blake3(data).hexdigest(length=len(case["hash"]) // 2) == case["hash"]
    key = BLAKE3["key"].encode()
    keyed = blake3.blake3(data, key=key).hexdigest(length=len(case["keyed_hash"]) // 2)
    assert keyed == case["keyed_hash"]
    derived = blake3.blake3(data, derive_key_context=BLAKE3["context_string"]).hexdigest(
        length=len(case["derive_key"]) // 2
    )
    assert derived == case["derive_key"]


def test_vector_file_has_all_cases() -> None:
    assert len(BLAKE3["cases"]) >= 30


def test_hash_text_form() -> None:
    h = hashing.hash_bytes(b"")
    assert h == "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    assert h.digest == bytes.fromhex(h.hex)
    assert hashing.parse(str(h)) == h
    assert h.short() == "blake3:af1349b9f5f9"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "blake3:",
        "sha256:" + "0" * 64,
        "blake3:" + "0" * 63,
        "blake3:" + "0" * 65,
        "blake3:" + "A" * 64,
        "blake3:" + "g" * 64,
        "BLAKE3:" + "0" * 64,
        " blake3:" + "0" * 64,
        42,
        None,
    ],
)
def test_invalid_hash_text_is_refused(text: Any) -> None:
    with pytest.raises(hashing.InvalidHashError) as info:
        hashing.parse(text)
    assert info.value.code == "hash.invalid"
    assert not hashing.is_hash(text)


def test_from_digest_checks_length() -> None:
    with pytest.raises(hashing.InvalidHashError):
        hashing.Hash.from_digest(b"\x00" * 31)


@given(values)
def test_value_hash_is_hash_of_canonical_bytes(value: Any) -> None:
    assert hashing.hash_value(value) == hashing.hash_bytes(cbor.encode(value))


def test_value_hash_differs_from_raw_hash_of_the_same_text() -> None:
    assert hashing.hash_value("abc") != hashing.hash_bytes(b"abc")


def test_value_hash_ignores_key_order() -> None:
    assert hashing.hash_value({"a": 1, "b": 2}) == hashing.hash_value({"b": 2, "a": 1})
