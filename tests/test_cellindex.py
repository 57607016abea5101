"""CellIndex: a content-addressed trie whose root depends only on its contents."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aos.kernel import cbor
from aos.kernel.hashing import Hash, hash_bytes, hash_value
from aos.kernel.world.cellindex import CellEntry, CellIndex, key_hash


class MemoryCas:
    def __init__(self) -> None:
        self.blobs: dict[Hash, bytes] = {}

    def put(self, data: bytes) -> Hash:
        assert cbor.decode(data) is not None  # the index writes canonical nodes only
        h = hash_bytes(data)
        self.blobs[h] = data
        return h

    def get_value(self, hash_: Hash) -> Any:
        return cbor.decode(self.blobs[hash_])


def entry(n: int, seq: int = 1) -> CellEntry:
    key = cbor.encode(f"k{n}")
    return CellEntry(
        key=key, state=hash_value({"n": n, "seq": seq}), size_bytes=n, last_active_seq=seq
    )


def digest(n: int) -> bytes:
    return key_hash(cbor.encode(f"k{n}"))


def test_empty_index() -> None:
    index = CellIndex(MemoryCas())
    assert index.count(index.empty_root) == 0
    assert index.get(index.empty_root, digest(1)) is None
    assert list(index.items(index.empty_root)) == []


def test_get_after_update_and_delete() -> None:
    index = CellIndex(MemoryCas(), bucket_entries_max=2)
    root = index.update(index.empty_root, {digest(n): entry(n) for n in range(50)})
    assert index.count(root) == 50
    for n in range(50):
        assert index.get(root, digest(n)) == entry(n)
    root = index.update(root, {digest(n): None for n in range(0, 50, 2)})
    assert index.count(root) == 25
    assert index.get(root, digest(2)) is None
    assert index.get(root, digest(3)) == entry(3)
    root = index.update(root, {digest(n): None for n in range(1, 50, 2)})
    assert root == index.empty_root


def test_items_come_in_key_hash_order() -> None:
    index = CellIndex(MemoryCas(), bucket_entries_max=3)
    root = index.update(index.empty_root, {digest(n): entry(n) for n in range(40)})
    digests = [d for d, _ in index.items(root)]
    assert digests == sorted(digest(n) for n in range(40))


def test_deleting_a_missing_key_changes_nothing() -> None:
    index = CellIndex(MemoryCas(), bucket_entries_max=2)
    root = index.update(index.empty_root, {digest(n): entry(n) for n in range(10)})
    assert index.update(root, {digest(99): None}) == root


def test_bad_key_hash_is_an_invariant_error() -> None:
    from aos.kernel.errors import KernelInvariantError

    index = CellIndex(MemoryCas())
    with pytest.raises(KernelInvariantError):
        index.update(index.empty_root, {b"short": entry(1)})


operations = st.lists(
    st.tuples(st.integers(min_value=0, max_value=60), st.integers(min_value=0, max_value=3)),
    max_size=80,
)


@settings(max_examples=60)  # costly: up to 80 updates, a rebuild and 61 reads per example
@given(operations, st.integers(min_value=1, max_value=5), st.randoms(use_true_random=False))
def test_root_depends_only_on_contents(
    ops: list[tuple[int, int]], bucket: int, rng: random.Random
) -> None:
    """Any history of batched upserts and deletes gives the root of building the final
    contents in one batch, and `get` agrees with a dict model."""
    index = CellIndex(MemoryCas(), bucket_entries_max=bucket)
    model: dict[bytes, CellEntry] = {}
    root = index.empty_root
    batch: dict[bytes, CellEntry | None] = {}
    for n, action in ops:
        if action == 0:
            batch[digest(n)] = None
            model.pop(digest(n), None)
        else:
            batch[digest(n)] = entry(n, action)
            model[digest(n)] = entry(n, action)
        if rng.random() < 0.3:
            root = index.update(root, batch)
            batch = {}
    root = index.update(root, batch)
    fresh = index.update(index.empty_root, dict(model))
    assert root == fresh
    assert index.count(root) == len(model)
    assert dict(index.items(root)) == model
    for n in range(61):
        assert index.get(root, digest(n)) == model.get(digest(n))


@given(
    st.sets(st.integers(0, 200), max_size=80),
    st.one_of(st.none(), st.integers(0, 200)),
    st.integers(min_value=1, max_value=4),
)
def test_items_after_is_the_tail_of_items(keys: set[int], after: int | None, bucket: int) -> None:
    index = CellIndex(MemoryCas(), bucket_entries_max=bucket)
    root = index.update(index.empty_root, {digest(n): entry(n) for n in keys})
    cut = None if after is None else digest(after)
    expected = [(d, e) for d, e in index.items(root) if cut is None or d > cut]
    assert list(index.items_after(root, cut)) == expected


def test_items_after_reads_only_the_path_it_needs() -> None:
    cas = MemoryCas()
    index = CellIndex(cas, bucket_entries_max=2)
    root = index.update(index.empty_root, {digest(n): entry(n) for n in range(2000)})
    reads = 0
    plain_get = cas.get_value

    def counting_get(hash_: Hash) -> Any:
        nonlocal reads
        reads += 1
        return plain_get(hash_)

    cas.get_value = counting_get  # type: ignore[method-assign]
    first = next(index.items_after(root, None))
    assert first == next(index.items(root)) and reads < 20  # one path down, not 2,000 cells
