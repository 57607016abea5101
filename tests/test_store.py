"""The store: journal, CAS and meta round trips, batches, corruption, growth, limits, locking
inside one process, read-only opening. Tests taking `store` or `open_any` run on every backend
(LMDB and PostgreSQL, tests/store_backends.py); the rest test LMDB's own machinery. Cross-process behaviour is in test_store_process.py,
property tests in test_store_properties.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from aos.kernel import cbor
from aos.kernel.errors import AosError
from aos.kernel.hashing import hash_bytes, hash_value
from aos.kernel.store import (
    LmdbStore,
    Store,
    StoreError,
    StoreLimitError,
    StoreLimits,
    errors,
    limits,
    open_lmdb_store,
    open_store,
)
from aos.kernel.store.codec import seq_key
from aos.kernel.store.lmdb_store import STORE_DIR_NAME
from aos.kernel.store.memory_store import MemoryStore
from aos.kernel.store.views import read_back
from tests.store_backends import StoreOpener

KIB = 1024


def open_test_store(world: Path, **options: Any) -> LmdbStore:
    options.setdefault("sync", False)
    return open_lmdb_store(world, **options)


@pytest.fixture
def store(tmp_path: Path, open_any: StoreOpener) -> Iterator[Store]:
    with open_any(tmp_path) as opened:
        yield opened


@pytest.fixture
def lmdb_store(tmp_path: Path) -> Iterator[LmdbStore]:
    with open_test_store(tmp_path) as opened:
        yield opened


def event(n: int) -> dict[str, Any]:
    return {"kind": "domain_event", "n": n, "payload": {"text": f"event {n}"}}


def raw_write(world: Path, db: bytes, key: bytes, value: bytes | None) -> None:
    """Write (or delete, with None) behind the store's back, as a disk fault would."""
    with lmdb.open(str(world / STORE_DIR_NAME), max_dbs=8) as env:
        handle = env.open_db(db)
        with env.begin(write=True) as txn:
            if value is None:
                assert txn.delete(key, db=handle)
            else:
                txn.put(key, value, db=handle)


# --------------------------------------------------------------------------------------------
# Journal


def test_empty_journal(store: Store) -> None:
    assert store.journal.head() == 0
    assert list(store.journal.read()) == []


def test_journal_round_trip_starts_at_one_and_continues(store: Store) -> None:
    assert store.journal.append([event(0), event(1)]) == (1, 2)
    assert store.journal.append([event(2)]) == (3, 3)
    assert store.journal.head() == 3
    assert list(store.journal.read()) == [(1, event(0)), (2, event(1)), (3, event(2))]


def test_journal_read_range_and_limit(store: Store) -> None:
    store.journal.append([event(n) for n in range(1, 11)])
    assert [seq for seq, _ in store.journal.read(4, 6)] == [4, 5, 6]
    assert [seq for seq, _ in store.journal.read(8)] == [8, 9, 10]
    assert [seq for seq, _ in store.journal.read(3, limit=2)] == [3, 4]
    assert [seq for seq, _ in store.journal.read(9, 100)] == [9, 10]
    assert list(store.journal.read(11)) == []
    assert list(store.journal.read(5, 4)) == []
    assert list(store.journal.read(1, limit=0)) == []


def test_journal_read_crosses_chunks(store: Store) -> None:
    store.journal.append([event(n) for n in range(1, 2501)])
    seqs = [seq for seq, record in store.journal.read() if record == event(seq)]
    assert seqs == list(range(1, 2501))
    assert [seq for seq, _ in store.journal.read(1000, limit=1100)] == list(range(1000, 2100))


def test_journal_read_back_is_newest_first_and_bounded(store: Store) -> None:
    """`read_back` across its chunks (512 records), down to `bottom`, at most `records_max`."""
    store.journal.append([event(n) for n in range(1, 1201)])
    back = list(read_back(store.journal, 1200, records_max=10_000))
    assert [seq for seq, _ in back] == list(range(1200, 0, -1))
    assert all(record == event(seq) for seq, record in back)
    assert [s for s, _ in read_back(store.journal, 1100, records_max=600)] == list(
        range(1100, 500, -1)
    )
    assert [s for s, _ in read_back(store.journal, 700, records_max=10_000, bottom=690)] == list(
        range(700, 689, -1)
    )
    assert list(read_back(store.journal, 5, records_max=0)) == []
    assert list(read_back(store.journal, 5, records_max=3, bottom=6)) == []
    assert list(read_back(store.journal, 0, records_max=3)) == []


def test_journal_appends_interleaved_with_reading(store: Store) -> None:
    # Reading holds no transaction between items, so appending while iterating is fine.
    store.journal.append([event(1)])
    reader = store.journal.read()
    assert next(reader) == (1, event(1))
    store.journal.append([event(2)])
    assert next(reader) == (2, event(2))


def test_journal_read_encoded_gives_the_stored_bytes(store: Store) -> None:
    """`read_encoded` yields what `read` decodes, as the canonical bytes stored, over the
    same ranges and chunks."""
    store.journal.append([event(n) for n in range(1, 2501)])
    raws = list(store.journal.read_encoded())
    assert [seq for seq, _ in raws] == list(range(1, 2501))
    assert all(raw == cbor.encode(event(seq)) for seq, raw in raws)
    assert [seq for seq, _ in store.journal.read_encoded(4, 6)] == [4, 5, 6]
    assert [seq for seq, _ in store.journal.read_encoded(1000, limit=1100)] == list(
        range(1000, 2100)
    )
    assert list(store.journal.read_encoded(2501)) == []
    assert list(store.journal.read_encoded(5, 4)) == []
    assert list(store.journal.read_encoded(1, limit=0)) == []


def test_memory_journal_read_encoded_matches_read() -> None:
    store = MemoryStore()
    store.journal.append([event(n) for n in range(1, 6)])
    decoded = list(store.journal.read(2, 4))
    assert [(seq, cbor.decode(raw)) for seq, raw in store.journal.read_encoded(2, 4)] == decoded
    assert [seq for seq, _ in store.journal.read_encoded(3, limit=1)] == [3]


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((0,), {}), ((-1,), {}), (("1",), {}), ((1, "2"), {}), ((1,), {"limit": -1})],
)
@pytest.mark.parametrize("method", ["read", "read_encoded"])
def test_journal_read_rejects_bad_arguments(
    store: Store, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    # Refused at the call, before anything is read (not at the first item).
    with pytest.raises(errors.StoreUsageError):
        getattr(store.journal, method)(*args, **kwargs)


@pytest.mark.parametrize("records", [[], "text", {"kind": "x"}, b"bytes"])
def test_journal_append_needs_a_non_empty_list(store: Store, records: Any) -> None:
    with pytest.raises(errors.StoreUsageError):
        store.journal.append(records)
    assert store.journal.head() == 0


def test_journal_append_rejects_values_outside_the_data_model(store: Store) -> None:
    store.journal.append([event(1)])
    with pytest.raises(cbor.CborUnsupportedValueError):
        store.journal.append([event(2), {"bad": {1, 2}}])
    assert store.journal.head() == 1


# --------------------------------------------------------------------------------------------
# CAS


def test_cas_round_trip_and_idempotent_put(store: Store) -> None:
    data = b"\x00blob\xff" * 100
    first = store.cas.put(data)
    assert first == hash_bytes(data)
    assert store.cas.put(data) == first
    assert store.cas.get(first) == data
    assert store.cas.get(str(first)) == data
    assert store.cas.has(first)
    assert list(store.cas.hashes()) == [first]


def test_cas_put_value_hash_is_hash_value(store: Store) -> None:
    value = {"b": [1, 2.5, None], "a": b"\x01"}
    h = store.cas.put_value(value)
    assert h == hash_value(value)
    assert store.cas.get(h) == cbor.encode(value)
    assert store.cas.get_value(h) == value


def test_cas_empty_blob(store: Store) -> None:
    h = store.cas.put(b"")
    assert store.cas.get(h) == b""


def test_cas_missing_blob_is_not_found(store: Store) -> None:
    missing = hash_bytes(b"never stored")
    assert not store.cas.has(missing)
    with pytest.raises(errors.StoreNotFoundError) as excinfo:
        store.cas.get(missing)
    assert excinfo.value.detail["hash"] == missing


def test_cas_rejects_bad_hash_text(store: Store) -> None:
    with pytest.raises(AosError) as excinfo:
        store.cas.get("sha256:00")
    assert excinfo.value.code == "hash.invalid"


def test_cas_rejects_non_bytes(store: Store) -> None:
    with pytest.raises(errors.StoreUsageError):
        store.cas.put("text")  # type: ignore[arg-type]


def test_cas_get_value_of_a_raw_blob_is_a_cbor_error(store: Store) -> None:
    h = store.cas.put(b"\xff\xff not cbor")
    with pytest.raises(cbor.CborError):
        store.cas.get_value(h)


def test_cas_hashes_in_digest_order_across_chunks_and_delete(store: Store) -> None:
    with store.batch() as batch:
        stored = {batch.cas_put(n.to_bytes(4, "big")) for n in range(2100)}
    listed = list(store.cas.hashes())
    assert len(listed) == 2100
    assert set(listed) == stored
    assert [h.digest for h in listed] == sorted(h.digest for h in listed)
    victim = listed[7]
    assert store.cas.delete(victim)
    assert not store.cas.delete(victim)
    assert not store.cas.has(victim)
    assert len(list(store.cas.hashes())) == 2099


# --------------------------------------------------------------------------------------------
# Meta


def test_meta_round_trip(store: Store) -> None:
    store.meta.put("world/name", "demo")
    store.meta.put("a", {"height": 3, "nested": [None, True]})
    store.meta.put("null", None)
    assert store.meta.get("world/name") == "demo"
    assert store.meta.get("a") == {"height": 3, "nested": [None, True]}
    assert store.meta.get("null", "fallback") is None
    assert store.meta.keys() == ["a", "null", "world/name"]
    assert store.meta.has("a")
    assert store.meta.delete("a")
    assert not store.meta.delete("a")
    assert not store.meta.has("a")


def test_meta_missing_key(store: Store) -> None:
    assert store.meta.get("absent", None) is None
    assert store.meta.get("absent", 7) == 7
    with pytest.raises(errors.StoreNotFoundError):
        store.meta.get("absent")


@pytest.mark.parametrize("key", ["", 3, b"bytes"])
def test_meta_key_must_be_non_empty_text(store: Store, key: Any) -> None:
    with pytest.raises(errors.StoreUsageError):
        store.meta.put(key, 1)


# --------------------------------------------------------------------------------------------
# Corruption


def test_corrupted_blob_is_detected_and_never_returned(tmp_path: Path) -> None:
    data = b"important bytes" * 10
    with open_test_store(tmp_path) as store:
        h = store.cas.put(data)
        value_hash = store.cas.put_value({"v": 1})
    raw_write(tmp_path, b"cas", h.digest, b"important bytez" + data[15:])
    raw_write(tmp_path, b"cas", value_hash.digest, cbor.encode({"v": 2}))
    with open_test_store(tmp_path) as store:
        with pytest.raises(errors.StoreCorruptBlobError) as excinfo:
            store.cas.get(h)
        assert excinfo.value.detail["hash"] == h
        with pytest.raises(errors.StoreCorruptBlobError):
            store.cas.get_value(value_hash)
        # Putting the right bytes again repairs the blob.
        assert store.cas.put(data) == h
        assert store.cas.get(h) == data


@pytest.mark.parametrize(
    ("raw", "cause"),
    [
        (b"\xd9\xd9\xf7\xff", "cbor.malformed"),
        (b"\xd9\xd9\xf7\x18\x01", "cbor.non_canonical"),  # 1 in a two-byte form
        (b"\x01", "cbor.non_canonical"),  # no self-describe prefix
        (b"\xd9\xd9\xf7\x82\x01", "cbor.truncated"),
    ],
)
def test_corrupt_journal_record_is_reported_with_its_seq(
    tmp_path: Path, raw: bytes, cause: str
) -> None:
    with open_test_store(tmp_path) as store:
        store.journal.append([event(1), event(2), event(3)])
    raw_write(tmp_path, b"journal", seq_key(2), raw)
    with open_test_store(tmp_path) as store:
        reader = store.journal.read()
        assert next(reader) == (1, event(1))
        with pytest.raises(errors.StoreCorruptRecordError) as excinfo:
            next(reader)
        assert excinfo.value.detail == {"seq": 2, "cause": cause}
        assert list(store.journal.read(3)) == [(3, event(3))]
        # The bytes as stored, unchecked: a chain over them breaks where they changed.
        assert list(store.journal.read_encoded(2, 2)) == [(2, raw)]


def test_corrupt_meta_value_is_detected(tmp_path: Path) -> None:
    with open_test_store(tmp_path) as store:
        store.meta.put("k", 1)
    raw_write(tmp_path, b"meta", b"k", b"\xd9\xd9\xf7\x18\x01")
    with open_test_store(tmp_path) as store, pytest.raises(errors.StoreCorruptMetaError):
        store.meta.get("k")


@pytest.mark.parametrize(("missing", "found"), [(2, 3), (1, 2)])
def test_journal_gap_is_detected(tmp_path: Path, missing: int, found: int) -> None:
    with open_test_store(tmp_path) as store:
        store.journal.append([event(1), event(2), event(3)])
    raw_write(tmp_path, b"journal", seq_key(missing), None)
    # A writer refuses to continue a journal with a hole in it...
    with pytest.raises(errors.StoreJournalGapError):
        open_test_store(tmp_path)
    # ...and a reader reports the hole where it meets it.
    with open_test_store(tmp_path, readonly=True) as reader:
        with pytest.raises(errors.StoreJournalGapError) as excinfo:
            list(reader.journal.read())
        assert excinfo.value.detail == {"expected": missing, "found": found}
        assert list(reader.journal.read(3)) == [(3, event(3))]
        with pytest.raises(errors.StoreJournalGapError) as excinfo:
            list(reader.journal.read_encoded())
        assert excinfo.value.detail == {"expected": missing, "found": found}


def test_writer_lock_is_released_when_open_fails(tmp_path: Path) -> None:
    with open_test_store(tmp_path) as store:
        store.journal.append([event(1), event(2)])
    raw_write(tmp_path, b"journal", seq_key(1), None)
    with pytest.raises(errors.StoreJournalGapError):
        open_test_store(tmp_path)
    raw_write(tmp_path, b"journal", seq_key(1), cbor.encode(event(1)))
    with open_test_store(tmp_path) as store:
        assert store.journal.head() == 2


# --------------------------------------------------------------------------------------------
# Batches


def test_batch_commits_everything_together(store: Store) -> None:
    with store.batch() as batch:
        blob = batch.cas_put(b"payload")
        value = batch.cas_put_value({"state": 1})
        assert batch.journal_append([event(1), event(2)]) == (1, 2)
        assert batch.journal_append([event(3)]) == (3, 3)
        batch.meta_put("head", 3)
        # Nothing is visible before the batch commits.
        assert store.journal.head() == 0
        assert not store.cas.has(blob)
        assert not store.meta.has("head")
    assert store.journal.head() == 3
    assert store.cas.get(blob) == b"payload"
    assert store.cas.get_value(value) == {"state": 1}
    assert store.meta.get("head") == 3
    assert store.journal.append([event(4)]) == (4, 4)


def test_exception_inside_a_batch_writes_nothing(store: Store) -> None:
    store.journal.append([event(1)])
    store.meta.put("k", "before")
    with pytest.raises(RuntimeError), store.batch() as batch:
        batch.journal_append([event(2), event(3)])
        blob = batch.cas_put(b"never")
        batch.meta_put("k", "after")
        batch.meta_delete("k")
        raise RuntimeError("crash inside the batch")
    assert store.journal.head() == 1
    assert not store.cas.has(blob)
    assert store.meta.get("k") == "before"
    # The next batch reuses the sequence numbers the failed one would have taken.
    assert store.journal.append([event(2)]) == (2, 2)


def test_later_writes_in_a_batch_win(store: Store) -> None:
    store.cas.put(b"old")
    with store.batch() as batch:
        batch.meta_put("k", 1)
        batch.meta_delete("k")
        batch.meta_put("j", 1)
        batch.meta_put("j", 2)
        h = batch.cas_put(b"x")
        batch.cas_delete(h)
        batch.cas_delete(hash_bytes(b"old"))
        batch.cas_put(b"old")
    assert not store.meta.has("k")
    assert store.meta.get("j") == 2
    assert not store.cas.has(h)
    assert store.cas.get(hash_bytes(b"old")) == b"old"


def test_batches_do_not_nest(store: Store) -> None:
    with store.batch() as batch:
        batch.journal_append([event(1)])
        with pytest.raises(errors.StoreUsageError):
            store.journal.append([event(2)])
        with pytest.raises(errors.StoreUsageError), store.batch():
            pass
    assert list(store.journal.read()) == [(1, event(1))]


def test_an_over_limit_write_caught_inside_a_batch_leaves_the_rest(
    tmp_path: Path, open_any: StoreOpener
) -> None:
    with open_any(tmp_path, limits=StoreLimits(record_bytes_max=300)) as store:
        with store.batch() as batch:
            batch.journal_append([event(1)])
            with pytest.raises(errors.StoreRecordTooLargeError):
                batch.journal_append([event(2), record_of_size(301)])
            assert batch.journal_append([event(2)]) == (2, 2)
        assert list(store.journal.read()) == [(1, event(1)), (2, event(2))]


def test_threads_share_one_store(store: Store) -> None:
    def writer(thread: int) -> None:
        for n in range(50):
            with store.batch() as batch:
                batch.journal_append([{"thread": thread, "n": n}] * 3)
                batch.meta_put(f"thread/{thread}", n)
            assert store.journal.head() >= 3

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records = list(store.journal.read())
    assert [seq for seq, _ in records] == list(range(1, 601))
    # Each batch's three records stayed together.
    assert all(records[i][1] == records[i + 1][1] == records[i + 2][1] for i in range(0, 600, 3))
    assert [store.meta.get(f"thread/{t}") for t in range(4)] == [49] * 4


def test_empty_batch_is_a_no_op(store: Store) -> None:
    with store.batch():
        pass
    assert store.journal.head() == 0


def test_each_commit_is_timed_and_nothing_else(store: Store) -> None:
    times = store.commit_times.seconds
    before = (times.observed, times.total)
    with store.batch():
        pass  # empty: nothing committed
    with pytest.raises(RuntimeError), store.batch() as batch:
        batch.journal_append([event(1)])
        raise RuntimeError("crash inside the batch")
    assert (times.observed, times.total) == before
    store.journal.append([event(1)])
    with store.batch() as batch:
        batch.journal_append([event(2)])
        batch.meta_put("k", 1)
    assert times.observed == before[0] + 2 and times.total > before[1]
    assert times.cumulative()[-1] == ("+Inf", times.observed)


def test_a_memory_store_has_no_commits_to_time() -> None:
    store = MemoryStore()
    store.journal.append([event(1)])
    with store.batch() as batch:
        batch.journal_append([event(2)])
    assert store.journal.head() == 2 and store.commit_times.seconds.observed == 0


# --------------------------------------------------------------------------------------------
# Map growth and a full store


def test_map_grows_from_a_tiny_initial_map(tmp_path: Path) -> None:
    tiny = StoreLimits(map_size_bytes_initial=64 * KIB)
    records = [{"n": n, "pad": "x" * 200} for n in range(4000)]
    with open_test_store(tmp_path, limits=tiny) as store:
        assert store.map_size_bytes == 64 * KIB
        with store.batch() as batch:
            batch.journal_append(records)
            blob = batch.cas_put(bytes(300 * KIB))
        assert store.map_growths >= 4
        assert store.map_size_bytes >= 1024 * KIB
        assert store.journal.head() == 4000
    with open_test_store(tmp_path, limits=tiny) as store:
        assert [record for _, record in store.journal.read()] == records
        assert store.cas.get(blob) == bytes(300 * KIB)


def test_store_full_at_the_map_maximum_writes_nothing(tmp_path: Path) -> None:
    bounded = StoreLimits(map_size_bytes_initial=64 * KIB, map_size_bytes_max=256 * KIB)
    with open_test_store(tmp_path, limits=bounded) as store:
        store.journal.append([event(1)])
        store.meta.put("k", "kept")
        with pytest.raises(errors.StoreFullError) as excinfo, store.batch() as batch:
            batch.journal_append([event(2)])
            blob = batch.cas_put(bytes(300 * KIB))
            batch.meta_put("k", "lost")
        assert excinfo.value.detail["limit"] == "map_size_bytes_max"
        assert store.map_size_bytes == 256 * KIB
        assert store.journal.head() == 1
        assert not store.cas.has(blob)
        assert store.meta.get("k") == "kept"
        # What still fits is still accepted.
        assert store.journal.append([event(2)]) == (2, 2)
    with open_test_store(tmp_path, limits=bounded) as store:
        assert [seq for seq, _ in store.journal.read()] == [1, 2]


def test_disk_full_is_store_full_and_writes_nothing(
    lmdb_store: LmdbStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = lmdb_store
    store.journal.append([event(1)])
    real_put_pending = LmdbStore._put_pending

    def put_then_fail(self: LmdbStore, txn: Any, pending: Any) -> None:
        real_put_pending(self, txn, pending)
        raise lmdb.DiskError("mdb_txn_commit", 28)

    monkeypatch.setattr(LmdbStore, "_put_pending", put_then_fail)
    with pytest.raises(errors.StoreFullError):
        store.journal.append([event(2)])
    with pytest.raises(errors.StoreFullError):
        store.cas.put(b"blob")
    monkeypatch.undo()
    assert store.journal.head() == 1
    assert not store.cas.has(hash_bytes(b"blob"))
    assert store.journal.append([event(2)]) == (2, 2)


# --------------------------------------------------------------------------------------------
# Limits, at the edge


def record_of_size(size_bytes: int) -> bytes:
    """A record (a byte string) whose canonical encoding is exactly `size_bytes` long."""
    for length in range(size_bytes, -1, -1):
        record = b"r" * length
        if len(cbor.encode(record)) == size_bytes:
            return record
    raise AssertionError(f"no record encodes to {size_bytes} bytes")


def meta_value_of_size(size_bytes: int) -> str:
    for length in range(size_bytes, -1, -1):
        value = "v" * length
        if len(cbor.encode(value)) == size_bytes:
            return value
    raise AssertionError(f"no text encodes to {size_bytes} bytes")


def test_record_bytes_max_edge(tmp_path: Path, open_any: StoreOpener) -> None:
    with open_any(tmp_path, limits=StoreLimits(record_bytes_max=300)) as store:
        assert store.journal.append([record_of_size(300)]) == (1, 1)
        with pytest.raises(errors.StoreRecordTooLargeError) as excinfo:
            store.journal.append([record_of_size(301)])
        assert excinfo.value.detail["size_bytes"] == 301
        assert store.journal.head() == 1


def test_blob_bytes_max_edge(tmp_path: Path, open_any: StoreOpener) -> None:
    with open_any(tmp_path, limits=StoreLimits(blob_bytes_max=1000)) as store:
        store.cas.put(bytes(1000))
        with pytest.raises(errors.StoreBlobTooLargeError):
            store.cas.put(bytes(1001))
        with pytest.raises(errors.StoreBlobTooLargeError):
            store.cas.put_value(record_of_size(1001))
        assert not store.cas.has(hash_bytes(bytes(1001)))


def test_batch_records_max_edge(tmp_path: Path, open_any: StoreOpener) -> None:
    with open_any(tmp_path, limits=StoreLimits(batch_records_max=10)) as store:
        assert store.journal.append([event(n) for n in range(10)]) == (1, 10)
        with pytest.raises(errors.StoreBatchTooLargeError):
            store.journal.append([event(n) for n in range(11)])
        with pytest.raises(errors.StoreBatchTooLargeError), store.batch() as batch:
            batch.journal_append([event(n) for n in range(6)])
            batch.journal_append([event(n) for n in range(5)])
        assert store.journal.head() == 10


def test_batch_bytes_max_edge(tmp_path: Path, open_any: StoreOpener) -> None:
    sized = StoreLimits(
        record_bytes_max=600, blob_bytes_max=600, meta_value_bytes_max=600, batch_bytes_max=1000
    )
    with open_any(tmp_path, limits=sized) as store:
        with store.batch() as batch:
            batch.cas_put(bytes(600))
            batch.cas_put(b"\x01" * 400)
        with pytest.raises(errors.StoreBatchTooLargeError), store.batch() as batch:
            batch.cas_put(b"\x02" * 600)
            batch.cas_put(b"\x03" * 401)
        assert not store.cas.has(hash_bytes(b"\x02" * 600))


def test_meta_key_bytes_max_edge_counts_utf8_bytes(tmp_path: Path, open_any: StoreOpener) -> None:
    with open_any(tmp_path, limits=StoreLimits(meta_key_bytes_max=10)) as store:
        store.meta.put("é" * 5, 1)  # 10 UTF-8 bytes
        with pytest.raises(errors.StoreMetaKeyTooLargeError):
            store.meta.put("é" * 5 + "x", 1)
        with pytest.raises(errors.StoreMetaKeyTooLargeError):
            store.meta.get("x" * 11)
        assert store.meta.keys() == ["é" * 5]


def test_meta_value_bytes_max_edge(tmp_path: Path, open_any: StoreOpener) -> None:
    with open_any(tmp_path, limits=StoreLimits(meta_value_bytes_max=100)) as store:
        store.meta.put("k", meta_value_of_size(100))
        with pytest.raises(errors.StoreMetaValueTooLargeError):
            store.meta.put("k", meta_value_of_size(101))
        assert store.meta.get("k") == meta_value_of_size(100)


def test_default_limits() -> None:
    defaults = StoreLimits()
    assert defaults.record_bytes_max == limits.RECORD_BYTES_MAX_DEFAULT == 1024 * KIB
    assert defaults.blob_bytes_max == limits.BLOB_BYTES_MAX_DEFAULT == cbor.INPUT_BYTES_MAX_DEFAULT
    assert defaults.batch_records_max == limits.BATCH_RECORDS_MAX_DEFAULT
    assert defaults.batch_bytes_max == limits.BATCH_BYTES_MAX_DEFAULT
    assert defaults.meta_key_bytes_max == limits.META_KEY_BYTES_MAX_DEFAULT
    assert defaults.meta_value_bytes_max == limits.META_VALUE_BYTES_MAX_DEFAULT
    assert defaults.map_size_bytes_initial == limits.MAP_SIZE_BYTES_DEFAULT == 64 * KIB * KIB
    assert defaults.map_size_bytes_max == limits.MAP_SIZE_BYTES_MAX_DEFAULT


@pytest.mark.parametrize(
    "overrides",
    [
        {"record_bytes_max": 0},
        {"blob_bytes_max": -1},
        {"batch_records_max": 1.5},
        {"batch_records_max": True},
        {"map_size_bytes_initial": 2 * KIB * KIB, "map_size_bytes_max": KIB * KIB},
        {"blob_bytes_max": 2000, "batch_bytes_max": 1000},
    ],
)
def test_inconsistent_limits_are_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(errors.StoreUsageError):
        StoreLimits(**overrides)


def test_meta_key_limit_above_lmdb_key_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(errors.StoreUsageError):
        open_test_store(tmp_path, limits=StoreLimits(meta_key_bytes_max=512))
    # The failed open released the world.
    open_test_store(tmp_path).close()


# --------------------------------------------------------------------------------------------
# Opening, locking within one process, read-only, closing, durability modes


def test_open_store_returns_the_lmdb_backend_as_a_store(tmp_path: Path) -> None:
    opened: Store = open_store(tmp_path, sync=False)
    with opened as store:
        assert isinstance(store, LmdbStore)
        assert store.world_dir == tmp_path
        assert not store.readonly
    assert (tmp_path / "store" / "data.mdb").is_file()
    assert (tmp_path / "store" / "writer.lock").is_file()


def test_missing_world_or_store(tmp_path: Path) -> None:
    with pytest.raises(errors.StoreMissingError):
        open_test_store(tmp_path / "nowhere")
    with pytest.raises(errors.StoreMissingError):
        open_test_store(tmp_path, readonly=True)
    assert not (tmp_path / "store").exists()


def test_second_open_in_the_same_process_is_locked(tmp_path: Path) -> None:
    with open_test_store(tmp_path):
        with pytest.raises(errors.StoreLockedError):
            open_test_store(tmp_path)
        with pytest.raises(errors.StoreLockedError):
            open_test_store(tmp_path, readonly=True)
    open_test_store(tmp_path).close()


def test_readonly_store_reads_and_refuses_writes(tmp_path: Path, open_any: StoreOpener) -> None:
    with open_any(tmp_path) as store:
        store.journal.append([event(1)])
        h = store.cas.put(b"blob")
        store.meta.put("k", "v")
    with open_any(tmp_path, readonly=True) as reader:
        assert reader.readonly
        assert list(reader.journal.read()) == [(1, event(1))]
        assert reader.journal.head() == 1
        assert reader.cas.get(h) == b"blob"
        assert reader.meta.get("k") == "v"
        for write in (
            lambda: reader.journal.append([event(2)]),
            lambda: reader.cas.put(b"x"),
            lambda: reader.cas.delete(h),
            lambda: reader.meta.put("k", "w"),
        ):
            with pytest.raises(errors.StoreReadonlyError):
                write()
        with pytest.raises(errors.StoreReadonlyError), reader.batch():
            pass


def test_closed_store_refuses_everything(tmp_path: Path, open_any: StoreOpener) -> None:
    store = open_any(tmp_path)
    store.journal.append([event(1)])
    store.close()
    store.close()
    with pytest.raises(errors.StoreClosedError):
        store.journal.head()
    with pytest.raises(errors.StoreClosedError):
        store.journal.append([event(2)])
    with pytest.raises(errors.StoreClosedError):
        store.cas.get(hash_bytes(b""))
    with open_any(tmp_path) as again:
        assert again.journal.head() == 1


@pytest.mark.parametrize("sync", [True, False])
def test_both_durability_modes_persist_across_reopen(
    tmp_path: Path, sync: bool, open_any: StoreOpener
) -> None:
    with open_any(tmp_path, sync=sync) as store:
        with store.batch() as batch:
            batch.journal_append([event(1), event(2)])
            h = batch.cas_put(b"blob")
            batch.meta_put("k", sync)
        store.journal.append([event(3)])
    with open_any(tmp_path, sync=sync) as store:
        assert [seq for seq, _ in store.journal.read()] == [1, 2, 3]
        assert store.cas.get(h) == b"blob"
        assert store.meta.get("k") is sync


# --------------------------------------------------------------------------------------------
# Errors


def all_store_errors() -> list[type[StoreError]]:
    found: list[type[StoreError]] = []
    pending: list[type[StoreError]] = [StoreError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def test_every_store_error_has_a_stable_code_and_a_hint() -> None:
    classes = all_store_errors()
    codes = [cls.code for cls in classes]
    assert len(codes) == len(set(codes))
    for cls in classes:
        assert cls.code.startswith("store.")
        if cls not in (StoreError, StoreLimitError):
            assert cls.hint, cls
    assert issubclass(errors.StoreRecordTooLargeError, StoreLimitError)
    body = errors.StoreLockedError("world is locked by pid 7", pid=7).to_dict()
    assert body["code"] == "store.locked"
    assert body["detail"] == {"pid": 7}
