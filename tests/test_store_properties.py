"""Property tests: random batches read back exactly, and a store driven by random batches
(some of which fail half-way) always equals a plain in-memory model, across reopenings. Each
runs on every backend (LMDB and PostgreSQL, tests/store_backends.py)."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from aos.kernel import cbor
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.store import Store, StoreLimits
from tests.store_backends import StoreOpener, lmdb_opener, pg_opener
from tests.strategies import same_value, values

KIB = 1024


@settings(max_examples=40)  # costly: a store opened per example, on each backend
@given(st.lists(st.lists(values, min_size=1, max_size=8), min_size=1, max_size=6))
def test_random_batches_read_back_in_order(open_any: StoreOpener, batches: list[list[Any]]) -> None:
    with tempfile.TemporaryDirectory() as world, open_any(world) as store:
        expected: list[Any] = []
        for records in batches:
            first, last = store.journal.append(records)
            assert (first, last) == (len(expected) + 1, len(expected) + len(records))
            expected.extend(records)
        read = list(store.journal.read())
        assert [seq for seq, _ in read] == list(range(1, len(expected) + 1))
        assert all(same_value(a, b) for a, (_, b) in zip(expected, read, strict=True))
        start = len(expected) // 2 + 1
        assert [seq for seq, _ in store.journal.read(start, limit=3)] == list(
            range(start, min(start + 3, len(expected) + 1))
        )


@settings(max_examples=60)  # costly: a store opened per example, on each backend
@given(values)
def test_put_value_round_trips_any_value(open_any: StoreOpener, value: Any) -> None:
    with tempfile.TemporaryDirectory() as world, open_any(world) as store:
        h = store.cas.put_value(value)
        assert h == hash_bytes(cbor.encode(value))
        assert same_value(store.cas.get_value(h), value)


class _AbortError(Exception):
    pass


meta_keys = st.sampled_from(["a", "b", "world/head", "é"])
operations = st.lists(
    st.one_of(
        st.tuples(st.just("journal"), st.lists(values, min_size=1, max_size=4)),
        st.tuples(st.just("cas"), st.binary(max_size=4 * KIB)),
        st.tuples(st.just("cas_delete"), st.integers(min_value=0, max_value=10)),
        st.tuples(st.just("meta"), meta_keys, values),
        st.tuples(st.just("meta_delete"), meta_keys),
    ),
    max_size=6,
)


class StoreMachine(RuleBasedStateMachine):
    """The store next to a model: a list of records, a dict of blobs, a dict of meta values."""

    # The backend under test; set per backend below.
    opener = staticmethod(lmdb_opener())

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        # A tiny initial map makes growth part of the random walk (on LMDB).
        self.limits = StoreLimits(map_size_bytes_initial=64 * KIB)
        self.store: Store = self.opener(self.dir.name, limits=self.limits)
        self.journal: list[Any] = []
        self.cas: dict[Hash, bytes] = {}
        self.meta: dict[str, Any] = {}

    @rule(ops=operations, fail=st.booleans())
    def batch(self, ops: list[tuple[Any, ...]], fail: bool) -> None:
        journal, cas, meta = list(self.journal), dict(self.cas), dict(self.meta)
        try:
            with self.store.batch() as batch:
                for op in ops:
                    self._apply(batch, op, journal, cas, meta)
                if fail:
                    raise _AbortError
        except _AbortError:
            return
        self.journal, self.cas, self.meta = journal, cas, meta

    def _apply(
        self,
        batch: Any,
        op: tuple[Any, ...],
        journal: list[Any],
        cas: dict[Hash, bytes],
        meta: dict[str, Any],
    ) -> None:
        kind = op[0]
        if kind == "journal":
            assert batch.journal_append(op[1]) == (len(journal) + 1, len(journal) + len(op[1]))
            journal.extend(op[1])
        elif kind == "cas":
            cas[batch.cas_put(op[1])] = op[1]
        elif kind == "cas_delete" and cas:
            victim = sorted(cas)[op[1] % len(cas)]
            batch.cas_delete(victim)
            del cas[victim]
        elif kind == "meta":
            batch.meta_put(op[1], op[2])
            meta[op[1]] = op[2]
        elif kind == "meta_delete":
            batch.meta_delete(op[1])
            meta.pop(op[1], None)

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = self.opener(self.dir.name, limits=self.limits)

    @invariant()
    def matches_the_model(self) -> None:
        read = list(self.store.journal.read())
        assert self.store.journal.head() == len(self.journal)
        assert [seq for seq, _ in read] == list(range(1, len(self.journal) + 1))
        assert all(same_value(a, b) for a, (_, b) in zip(self.journal, read, strict=True))
        assert set(self.store.cas.hashes()) == set(self.cas)
        assert all(self.store.cas.get(h) == data for h, data in self.cas.items())
        assert self.store.meta.keys() == sorted(self.meta, key=lambda k: k.encode())
        assert all(same_value(self.store.meta.get(k), v) for k, v in self.meta.items())

    def teardown(self) -> None:
        self.store.close()
        self.dir.cleanup()


class PgStoreMachine(StoreMachine):
    """The same walk on PostgreSQL."""


@pytest.fixture
def pg_machine(pg_store_dsn: str) -> None:
    PgStoreMachine.opener = staticmethod(pg_opener(pg_store_dsn))


# Costly: each walk opens a world and reopens it along the way.
StoreMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=15)
# Fewer walks on the server: each opens a world and reconnects at every `reopen`.
PgStoreMachine.TestCase.settings = settings(max_examples=12, stateful_step_count=15)
test_store_machine = StoreMachine.TestCase
test_pg_store_machine = pytest.mark.usefixtures("pg_machine")(PgStoreMachine.TestCase)
