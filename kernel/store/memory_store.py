"""An in-memory store for scratch worlds (replay audits, recovery, governance shadows).

It implements the `Store` interface without durability. Its journal may start above 1 (a
scratch world restored from a snapshot continues the source's numbering), and CAS reads it
cannot serve fall through to a read-only `Cas` of another store (the world being audited),
so a scratch world sees the source's states and index nodes without copying them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from aos.kernel import cbor
from aos.kernel.hashing import Hash, hash_bytes, parse
from aos.kernel.store.errors import StoreNotFoundError
from aos.kernel.store.interface import Cas, CommitTimes, Mark
from aos.kernel.store.limits import StoreLimits

_ABSENT = object()
# Address space for a spilled scratch CAS (sparse: only what is written takes disk).
SPILL_MAP_SIZE_BYTES = 1 << 40


class _Journal:
    def __init__(self, base: int) -> None:
        self.base = base  # records 1..base belong to the source, not to this store
        self.records: list[bytes] = []

    def append(self, records: Sequence[object]) -> tuple[int, int]:
        return self.append_encoded([cbor.encode(r) for r in records])

    def append_encoded(self, encoded: Sequence[bytes]) -> tuple[int, int]:
        first = self.head() + 1
        self.records.extend(encoded)
        return first, self.head()

    def read(
        self, from_seq: int = 1, to_seq: int | None = None, limit: int | None = None
    ) -> Iterator[tuple[int, cbor.Value]]:
        for seq, raw in self.read_encoded(from_seq, to_seq, limit):
            yield seq, cbor.decode(raw)

    def read_encoded(
        self, from_seq: int = 1, to_seq: int | None = None, limit: int | None = None
    ) -> Iterator[tuple[int, bytes]]:
        start = max(from_seq, self.base + 1)
        end = self.head() if to_seq is None else min(to_seq, self.head())
        if limit is not None:
            end = min(end, start + limit - 1)
        for seq in range(start, end + 1):
            yield seq, self.records[seq - self.base - 1]

    def head(self) -> int:
        return self.base + len(self.records)


class _SpillBlobs:
    """A dict-like blob map on a temporary LMDB environment, so a scratch world's CAS does
    not have to fit in memory (replays and shadows of large worlds)."""

    def __init__(self, directory: Path) -> None:
        import lmdb

        self._env = lmdb.open(
            str(directory), map_size=SPILL_MAP_SIZE_BYTES, sync=False, metasync=False, lock=False
        )
        self._count = 0

    def get(self, hash_: Hash) -> bytes | None:
        with self._env.begin() as txn:
            data = txn.get(hash_.digest)
        return None if data is None else bytes(data)

    def __contains__(self, hash_: object) -> bool:
        return isinstance(hash_, Hash) and self.get(hash_) is not None

    def __setitem__(self, hash_: Hash, data: bytes) -> None:
        with self._env.begin(write=True) as txn:
            if txn.put(hash_.digest, data, overwrite=False):
                self._count += 1

    def pop(self, hash_: Hash, default: Any = None) -> Any:
        with self._env.begin(write=True) as txn:
            data = txn.pop(hash_.digest)
        if data is None:
            return default
        self._count -= 1
        return bytes(data)

    def keys(self) -> list[Hash]:
        with self._env.begin() as txn:
            return [Hash.from_digest(bytes(k)) for k, _ in txn.cursor()]

    def items(self) -> Iterator[tuple[Hash, bytes]]:
        with self._env.begin() as txn:
            for key, value in txn.cursor():
                yield Hash.from_digest(bytes(key)), bytes(value)

    def __iter__(self) -> Iterator[Hash]:
        return iter(self.keys())

    def __len__(self) -> int:
        return self._count

    def close(self) -> None:
        self._env.close()


class _Cas:
    def __init__(
        self, fallback: Cas | None, fallback_has: bool, spill_dir: Path | None = None
    ) -> None:
        self.blobs: Any = {} if spill_dir is None else _SpillBlobs(spill_dir)
        self._fallback = fallback
        self._fallback_has = fallback_has
        self.marks: dict[Hash, Mark] = {}
        self.doomed_rows: set[tuple[int, Hash]] = set()

    def put(self, data: bytes) -> Hash:
        hash_ = hash_bytes(data)
        self.blobs[hash_] = bytes(data)
        return hash_

    def put_value(self, value: object) -> Hash:
        return self.put(cbor.encode(value))

    def get(self, content_hash: Hash | str) -> bytes:
        hash_ = parse(content_hash)
        data: bytes | None = self.blobs.get(hash_)
        if data is not None:
            return data
        if self._fallback is not None:
            return self._fallback.get(hash_)
        raise StoreNotFoundError(f"no blob {hash_}")

    def get_value(self, content_hash: Hash | str) -> cbor.Value:
        return cbor.decode(self.get(content_hash))

    def has(self, content_hash: Hash | str) -> bool:
        hash_ = parse(content_hash)
        if hash_ in self.blobs:
            return True
        return self._fallback_has and self._fallback is not None and self._fallback.has(hash_)

    def hashes(self) -> Iterator[Hash]:
        return iter(sorted(self.blobs.keys()))

    def delete(self, content_hash: Hash | str) -> bool:
        hash_ = parse(content_hash)
        self.marks.pop(hash_, None)
        return self.blobs.pop(hash_, None) is not None

    def mark(self, content_hash: Hash | str) -> Mark | None:
        return self.marks.get(parse(content_hash))

    def marks_count(self) -> int:
        return len(self.marks)

    def doomed(self, before_seq: int, limit: int | None = None) -> list[tuple[int, Hash]]:
        rows = sorted(row for row in self.doomed_rows if row[0] < before_seq)
        return rows if limit is None else rows[:limit]


class _Meta:
    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def get(self, key: str, default: object = _ABSENT) -> cbor.Value:
        raw = self.values.get(key)
        if raw is None:
            if default is _ABSENT:
                raise StoreNotFoundError(f"no meta key {key!r}")
            return default  # type: ignore[return-value]
        return cbor.decode(raw)

    def put(self, key: str, value: object) -> None:
        self.values[key] = cbor.encode(value)

    def has(self, key: str) -> bool:
        return key in self.values

    def delete(self, key: str) -> bool:
        return self.values.pop(key, None) is not None

    def keys(self) -> list[str]:
        return sorted(self.values, key=lambda k: k.encode())


class _Batch:
    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self.records: list[bytes] = []  # encoded: what the journal keeps
        self.blobs: list[bytes] = []
        self.deletes: list[Hash | str] = []
        self.meta: dict[str, object] = {}
        self.meta_deletes: list[str] = []
        self.marks: dict[Hash, Mark | None] = {}
        self.doomed: dict[tuple[int, Hash], bool] = {}
        self.clear_marks = False

    def journal_append(self, records: Sequence[object]) -> tuple[int, int]:
        # Encoded now: what the durable store would refuse is refused before commit.
        return self._extend([cbor.encode(record) for record in records])

    def journal_append_encoded(self, records: Sequence[tuple[object, bytes]]) -> tuple[int, int]:
        """The caller's bytes are kept as they are (the kernel encoded each record once)."""
        return self._extend([raw for _, raw in records])

    def _extend(self, encoded: list[bytes]) -> tuple[int, int]:
        first = self._store.journal.head() + len(self.records) + 1
        self.records.extend(encoded)
        return first, first + len(encoded) - 1

    def cas_put(self, data: bytes) -> Hash:
        self.blobs.append(bytes(data))
        return hash_bytes(data)

    def cas_put_value(self, value: object) -> Hash:
        return self.cas_put(cbor.encode(value))

    def cas_delete(self, content_hash: Hash | str) -> None:
        self.deletes.append(content_hash)

    def cas_mark(self, content_hash: Hash | str, mark: Mark | None) -> None:
        hash_ = parse(content_hash)
        self.marks[hash_] = mark
        if mark is not None and mark.kind == "doomed":
            self.doomed[(mark.seq, hash_)] = True

    def cas_forget_doomed(self, seq: int, content_hash: Hash | str) -> None:
        self.doomed[(seq, parse(content_hash))] = False

    def cas_clear_marks(self) -> None:
        self.clear_marks = True
        self.marks.clear()

    def meta_put(self, key: str, value: object) -> None:
        self.meta[key] = value

    def meta_delete(self, key: str) -> None:
        self.meta_deletes.append(key)


class MemoryStore:
    """A non-durable `Store` (see the module docstring)."""

    def __init__(
        self,
        *,
        base_height: int = 0,
        fallback_cas: Cas | None = None,
        fallback_has: bool = True,
        limits: StoreLimits | None = None,
        spill_dir: Path | None = None,
    ) -> None:
        """`fallback_has=False` makes `has` answer for this store's own blobs only, so that a
        writer that skips blobs the store "has" keeps everything it writes (recovery, which
        must be able to replace a rotten blob of the source)."""
        self._journal = _Journal(base_height)
        self._cas = _Cas(fallback_cas, fallback_has, spill_dir)
        self._meta = _Meta()
        self._limits = limits or StoreLimits()
        self._commit_times = CommitTimes()

    @property
    def commit_times(self) -> CommitTimes:
        """Always empty: this store commits nothing durable (nothing worth a commit's time)."""
        return self._commit_times

    @property
    def journal(self) -> _Journal:
        return self._journal

    @property
    def cas(self) -> _Cas:
        return self._cas

    @property
    def meta(self) -> _Meta:
        return self._meta

    @property
    def readonly(self) -> bool:
        return False

    @property
    def limits(self) -> StoreLimits:
        return self._limits

    @property
    def world_dir(self) -> Path:
        return Path(":memory:")

    @contextmanager
    def batch(self) -> Iterator[_Batch]:
        batch = _Batch(self)
        yield batch
        self._journal.append_encoded(batch.records)
        for data in batch.blobs:
            self._cas.put(data)
        if batch.clear_marks:
            self._cas.marks.clear()
        for marked_hash, mark in batch.marks.items():
            if mark is not None:
                self._cas.marks[marked_hash] = mark
            else:
                self._cas.marks.pop(marked_hash, None)
        for row, write in batch.doomed.items():
            if write:
                self._cas.doomed_rows.add(row)
            else:
                self._cas.doomed_rows.discard(row)
        for hash_ in batch.deletes:
            self._cas.delete(hash_)
        for key, value in batch.meta.items():
            self._meta.put(key, value)
        for key in batch.meta_deletes:
            self._meta.delete(key)

    @contextmanager
    def consistent(self) -> Iterator[None]:
        """Reads are consistent already: nothing writes this store from elsewhere."""
        yield

    def close(self) -> None:
        if isinstance(self._cas.blobs, _SpillBlobs):
            self._cas.blobs.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
