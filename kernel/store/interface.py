"""The backend-neutral storage interface.

A backend provides a `Store` holding a `Journal`, a `Cas` and a `Meta`, and a `Batch` that
groups writes to all three into one atomic, durable commit. The embedded LMDB backend is the
default (`aos.kernel.store.lmdb_store`); a server backend (PostgreSQL) implements the same
protocols. Values going in are anything `cbor.encode` accepts; values coming out are strictly
decoded canonical CBOR (`cbor.Value`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, Self

from aos.kernel import cbor
from aos.kernel.buckets import SECONDS_BUCKETS, Buckets
from aos.kernel.hashing import Hash
from aos.kernel.store.limits import StoreLimits


@dataclass(frozen=True, slots=True)
class Mark:
    """A blob's reclaim mark (the world's bookkeeping for reclaiming at flush time, spec/05
    §5.1; the store only keeps it). `young`: named by one reference of the head, written
    after the snapshot at journal sequence `seq` (0: none). `doomed`: named by no reference
    of the head any more, only by snapshots up to the one at `seq`."""

    kind: Literal["young", "doomed"]
    seq: int


@dataclass
class CommitTimes:
    """How long each batch a writer committed took: its write transaction with the syncs
    (LMDB), or its one statement's round trip (PostgreSQL). For the node's metrics (spec/04
    §9.7): a host clock, read around the commit, never by anything a step sees. The writer's
    thread changes it; a reader copies it there."""

    seconds: Buckets = field(default_factory=lambda: Buckets(SECONDS_BUCKETS))

    @contextmanager
    def timing(self) -> Iterator[None]:
        """Time the block: a commit that raised is not counted."""
        started = time.perf_counter()
        yield
        self.seconds.observe(time.perf_counter() - started)


class Journal(Protocol):
    """Append-only sequence of canonical records numbered 1, 2, 3, ... without gaps."""

    def append(self, records: Sequence[object]) -> tuple[int, int]:
        """Append records in one durable commit; return their first and last sequence."""
        ...

    def read(
        self, from_seq: int = 1, to_seq: int | None = None, limit: int | None = None
    ) -> Iterator[tuple[int, cbor.Value]]:
        """Yield `(seq, record)` for `from_seq <= seq <= to_seq` (to the head when `to_seq` is
        None), at most `limit` of them. Raises `store.journal_gap` when a number is missing and
        `store.corrupt_record` when a record is not canonical CBOR."""
        ...

    def read_encoded(
        self, from_seq: int = 1, to_seq: int | None = None, limit: int | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """`read`, but each record's bytes as stored, not decoded: for readers that hash
        records (the journal chain) rather than look into them. Raises `store.journal_gap`
        when a number is missing; what the bytes hold is not checked."""
        ...

    def head(self) -> int:
        """The last sequence number, or 0 for an empty journal (so also the record count)."""
        ...


class Cas(Protocol):
    """Content-addressed blobs keyed by the BLAKE3 of their bytes, verified on every read."""

    def put(self, data: bytes) -> Hash:
        """Store a blob (idempotent); return its hash."""
        ...

    def put_value(self, value: object) -> Hash:
        """Store the canonical encoding of `value`; the hash equals `hash_value(value)`."""
        ...

    def get(self, content_hash: Hash | str) -> bytes:
        """The blob's bytes, checked against the hash (`store.corrupt_blob` if they differ,
        `store.not_found` if absent)."""
        ...

    def get_value(self, content_hash: Hash | str) -> cbor.Value:
        """The blob strictly decoded as canonical CBOR."""
        ...

    def has(self, content_hash: Hash | str) -> bool:
        """Whether a blob with this hash is stored (its bytes are not read or checked)."""
        ...

    def hashes(self) -> Iterator[Hash]:
        """Every stored hash, in digest byte order (for garbage collection)."""
        ...

    def delete(self, content_hash: Hash | str) -> bool:
        """Remove a blob (for garbage collection); return whether it was there."""
        ...

    def mark(self, content_hash: Hash | str) -> Mark | None:
        """The blob's reclaim mark, if it has one (see `Mark`)."""
        ...

    def marks_count(self) -> int:
        """How many blobs carry a mark."""
        ...

    def doomed(self, before_seq: int, limit: int | None = None) -> list[tuple[int, Hash]]:
        """The first `limit` (all if None) `(seq, hash)` rows of doomed marks with
        `seq < before_seq`, in order (a row outlives the mark it was written with: check the
        mark before acting on it)."""
        ...


class Meta(Protocol):
    """A small map from text keys to canonical values."""

    def get(self, key: str, default: cbor.Value = ...) -> cbor.Value:
        """The value of `key`; `default` if absent and given, else `store.not_found`."""
        ...

    def put(self, key: str, value: object) -> None:
        """Set `key` to `value` in one durable commit."""
        ...

    def has(self, key: str) -> bool:
        """Whether `key` is set."""
        ...

    def delete(self, key: str) -> bool:
        """Remove `key`; return whether it was set."""
        ...

    def keys(self) -> list[str]:
        """Every key, in UTF-8 byte order."""
        ...


class Batch(Protocol):
    """Writes that commit together: all of them or none, with one durable commit."""

    def journal_append(self, records: Sequence[object]) -> tuple[int, int]:
        """Add records; return the sequence numbers they will have once committed."""
        ...

    def journal_append_encoded(self, records: Sequence[tuple[object, bytes]]) -> tuple[int, int]:
        """Add records the kernel encoded already, as (value, canonical bytes) pairs, so that a
        backend storing bytes stores these instead of encoding again. The caller vouches that
        the bytes are `cbor.encode(value)`; the record size limit still applies. A backend
        without its own way does what `journal_append` of the values does."""
        return self.journal_append([value for value, _ in records])

    def cas_put(self, data: bytes) -> Hash:
        """Add a blob; return its hash."""
        ...

    def cas_put_value(self, value: object) -> Hash:
        """Add a canonical value as a blob; return its hash."""
        ...

    def cas_delete(self, content_hash: Hash | str) -> None:
        """Remove a blob if present (and its reclaimable mark)."""
        ...

    def cas_mark(self, content_hash: Hash | str, mark: Mark | None) -> None:
        """Set a blob's mark, or remove it (None). A doomed mark also writes its `(seq,
        hash)` row."""
        ...

    def cas_forget_doomed(self, seq: int, content_hash: Hash | str) -> None:
        """Remove one `(seq, hash)` row of a doomed mark."""
        ...

    def cas_clear_marks(self) -> None:
        """Remove every mark, before this batch's own marks apply (rows stay, stale)."""
        ...

    def meta_put(self, key: str, value: object) -> None:
        """Set a meta key."""
        ...

    def meta_delete(self, key: str) -> None:
        """Remove a meta key if present."""
        ...


class Store(Protocol):
    """One world's storage. Close it (or use it as a context manager) when done."""

    @property
    def journal(self) -> Journal: ...

    @property
    def cas(self) -> Cas: ...

    @property
    def meta(self) -> Meta: ...

    @property
    def readonly(self) -> bool: ...

    @property
    def limits(self) -> StoreLimits: ...

    @property
    def world_dir(self) -> Path: ...

    @property
    def commit_times(self) -> CommitTimes:
        """How long the batches this store committed took."""
        ...

    def batch(self) -> AbstractContextManager[Batch]:
        """`with store.batch() as b:` groups writes; they commit when the block exits normally
        and are discarded, with nothing written, when it raises."""
        ...

    def consistent(self) -> AbstractContextManager[None]:
        """`with store.consistent():` serves every read in the block from one point in time,
        whatever a writer in another process commits (or reclaims) meanwhile."""
        ...

    def close(self) -> None:
        """Release the store; with `sync=False`, first make everything written durable."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc_info: object) -> None: ...
