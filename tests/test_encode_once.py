"""Encode once: kernel-built values skip the validation walk (`cbor.encode_built`), records
carry their bytes into the store (`journal_append_encoded`), and both give exactly what the
validating path gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from aos.kernel import cbor
from aos.kernel.hashing import hash_bytes
from aos.kernel.store import open_store
from aos.kernel.store.errors import StoreRecordTooLargeError
from aos.kernel.store.limits import StoreLimits
from aos.kernel.store.memory_store import MemoryStore
from tests.strategies import values
from tests.test_world import EVENT, create, inc


@given(values)
def test_encode_built_is_encode_for_every_value_of_the_data_model(value: Any) -> None:
    assert cbor.encode_built(value) == cbor.encode(value)


def _pairs(records: list[Any]) -> list[tuple[object, bytes]]:
    return [(record, cbor.encode(record)) for record in records]


def test_lmdb_stores_the_bytes_it_was_given_and_reads_them_back(tmp_path: Path) -> None:
    records = [{"kind": "x", "n": n, "b": bytes([n])} for n in range(3)]
    with open_store(tmp_path, sync=False) as store:
        with store.batch() as batch:
            assert batch.journal_append_encoded(_pairs(records)) == (1, 3)
        assert [record for _, record in store.journal.read(1)] == records


def test_an_encoded_record_over_the_size_limit_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    limits = StoreLimits(record_bytes_max=64)
    with open_store(tmp_path, sync=False, limits=limits) as store:
        with pytest.raises(StoreRecordTooLargeError), store.batch() as batch:
            batch.journal_append_encoded(_pairs([{"kind": "x", "pad": "y" * 100}]))
        assert store.journal.head() == 0


def test_the_memory_store_keeps_the_values() -> None:
    store = MemoryStore()
    with store.batch() as batch:
        assert batch.journal_append_encoded(_pairs([{"kind": "x"}, {"kind": "y"}])) == (1, 2)
    assert [record for _, record in store.journal.read(1)] == [{"kind": "x"}, {"kind": "y"}]


def test_an_admitted_event_hash_is_the_hash_of_its_stored_record(tmp_path: Path) -> None:
    with create(tmp_path / "w") as world:
        admitted = world.ingress(EVENT, inc("a"))
        world.run_to_idle()
        [(_, record)] = list(world.store.journal.read(admitted.seq, admitted.seq))
        assert admitted.event_hash == hash_bytes(cbor.encode(record))
