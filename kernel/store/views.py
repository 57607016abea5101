"""What every backend's journal, CAS and meta views share: single writes as one-item
batches, and the journal read's argument checks and contiguity check. A backend supplies the
store (its `batch()`), the point reads and the chunked journal fetch."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from aos.kernel import cbor, hashing
from aos.kernel.hashing import Hash
from aos.kernel.store import codec
from aos.kernel.store.batch import PendingBatch
from aos.kernel.store.errors import StoreJournalGapError, StoreUsageError
from aos.kernel.store.interface import Journal

READ_BACK_CHUNK_RECORDS = 512
"""Records `read_back` fetches at a time."""

# Fetch up to `count` (seq, raw record) rows with `start <= seq <= last`, in order.
ChunkFetcher = Callable[[int, int, int], list[tuple[int, bytes]]]


class _Batching(Protocol):
    def batch(self) -> AbstractContextManager[PendingBatch]: ...


class JournalWrites:
    """`append` as a one-batch commit."""

    _store: _Batching

    def append(self, records: Sequence[object]) -> tuple[int, int]:
        """Append records in one transaction and one durable commit."""
        with self._store.batch() as batch:
            return batch.journal_append(records)


class CasWrites:
    """`put`, `put_value` and `delete` as one-batch commits; `get_value` over `get`."""

    _store: _Batching
    # The backend's view reads: `get` checks the bytes against the hash, `has` does not read.
    get: Callable[[Hash | str], bytes]
    has: Callable[[Hash | str], bool]

    def put(self, data: bytes) -> Hash:
        """Store a blob (idempotent) in one durable commit; return its hash."""
        with self._store.batch() as batch:
            return batch.cas_put(data)

    def put_value(self, value: object) -> Hash:
        """Store the canonical encoding of `value`; the hash equals `hash_value(value)`."""
        with self._store.batch() as batch:
            return batch.cas_put_value(value)

    def get_value(self, content_hash: Hash | str) -> cbor.Value:
        """The blob strictly decoded (a blob that is not canonical CBOR raises `cbor.*`)."""
        data = self.get(content_hash)
        return cbor.decode(data, bytes_max=len(data))

    def delete(self, content_hash: Hash | str) -> bool:
        """Remove a blob (for garbage collection); return whether it was there."""
        present = self.has(hashing.parse(content_hash))
        with self._store.batch() as batch:
            batch.cas_delete(content_hash)
        return present


class MetaWrites:
    """`put` and `delete` as one-batch commits."""

    _store: _Batching
    has: Callable[[str], bool]  # the backend's view reads

    def put(self, key: str, value: object) -> None:
        """Set `key` in one durable commit."""
        with self._store.batch() as batch:
            batch.meta_put(key, value)

    def delete(self, key: str) -> bool:
        """Remove `key`; return whether it was set."""
        present = self.has(key)
        with self._store.batch() as batch:
            batch.meta_delete(key)
        return present


def read_journal_encoded(
    fetch: ChunkFetcher,
    from_seq: int,
    to_seq: int | None,
    limit: int | None,
    *,
    seq_max: int,
    chunk_records: int,
) -> Iterator[tuple[int, bytes]]:
    """`Journal.read_encoded` over a backend's chunk fetch: the arguments checked now, the
    records checked for contiguity as they come, their bytes as stored."""
    if type(from_seq) is not int or from_seq < codec.SEQ_FIRST:
        raise StoreUsageError(f"from_seq must be an integer >= {codec.SEQ_FIRST}")
    if to_seq is not None and type(to_seq) is not int:
        raise StoreUsageError("to_seq must be an integer or None")
    if limit is not None and (type(limit) is not int or limit < 0):
        raise StoreUsageError("limit must be a non-negative integer or None")
    last = seq_max if to_seq is None else min(to_seq, seq_max)
    count = seq_max if limit is None else limit
    return _contiguous(fetch, from_seq, last, count, chunk_records)


def decoded(raws: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, cbor.Value]]:
    """`Journal.read` over `read_encoded`: each record strictly decoded as it comes (a
    record that is not canonical CBOR is `store.corrupt_record` at its seq)."""
    for seq, raw in raws:
        yield seq, codec.decode_record(seq, raw)


def _contiguous(
    fetch: ChunkFetcher, expected: int, last: int, count: int, chunk_records: int
) -> Iterator[tuple[int, bytes]]:
    while count > 0 and expected <= last:
        chunk = fetch(expected, last, min(count, chunk_records))
        if not chunk:
            return
        for seq, raw in chunk:
            if seq != expected:
                raise StoreJournalGapError(
                    f"journal record {expected} is missing (the next one is {seq})",
                    expected=expected,
                    found=seq,
                )
            yield seq, raw
            expected += 1
        count -= len(chunk)


def read_back(
    journal: Journal, top: int, *, records_max: int, bottom: int = 1
) -> Iterator[tuple[int, cbor.Value]]:
    """Records from `top` down to `bottom`, newest first, at most `records_max` of them. The
    journal reads forward only, so they are fetched `READ_BACK_CHUNK_RECORDS` at a time: for
    readers that want the newest matches of a filter and must bound what they look at (the
    inspector's pages, an execution's newest history)."""
    left = records_max
    while top >= max(bottom, 1) and left > 0:
        low = max(bottom, 1, top - min(READ_BACK_CHUNK_RECORDS, left) + 1)
        chunk = list(journal.read(low, top))
        yield from reversed(chunk)
        left -= len(chunk)
        top = low - 1
