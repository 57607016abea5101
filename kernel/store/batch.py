"""A batch being built: writes are validated, encoded and counted against the limits as they
are added, and only reach the backend when the whole batch commits as one transaction.

Building in memory first is what lets a backend retry a whole batch (LMDB does after growing
its map) and what makes an exception inside `with store.batch()` write nothing at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from aos.kernel import cbor, hashing
from aos.kernel.hashing import Hash
from aos.kernel.store import codec
from aos.kernel.store.errors import StoreBatchTooLargeError, StoreUsageError
from aos.kernel.store.interface import Mark
from aos.kernel.store.limits import StoreLimits


class PendingBatch:
    """The writes of one batch, in the form the backend stores them.

    Journal sequence numbers are assigned as records are added, continuing from the head the
    batch was opened at; the backend checks at commit that the head has not moved.
    """

    def __init__(self, limits: StoreLimits, head: int) -> None:
        self._limits = limits
        self.head_before = head
        self.journal: list[bytes] = []
        # digest -> bytes to store, or None to delete; the last write of a key wins.
        self.cas: dict[bytes, bytes | None] = {}
        self.meta: dict[bytes, bytes | None] = {}
        # digest -> encoded mark, or None to remove it; applied after `clear_marks`, and a
        # deleted blob loses its mark whatever this says.
        self.marks: dict[bytes, bytes | None] = {}
        self.clear_marks = False
        # doomed row key (seq + digest) -> write (True) or remove (False)
        self.doomed: dict[bytes, bool] = {}
        self._bytes_total = 0

    @property
    def first_seq(self) -> int:
        return self.head_before + 1

    @property
    def last_seq(self) -> int:
        """The head after this batch commits (equal to `head_before` without records)."""
        return self.head_before + len(self.journal)

    def is_empty(self) -> bool:
        return not (
            self.journal or self.cas or self.meta or self.marks or self.doomed or self.clear_marks
        )

    def journal_append(self, records: Sequence[object]) -> tuple[int, int]:
        """Add records; return the first and last sequence numbers they will have."""
        if isinstance(records, (str, bytes, dict)) or not isinstance(records, Sequence):
            raise StoreUsageError("journal_append takes a list of records")
        self._check_room(len(records))
        return self._extend([codec.encode_record(record, self._limits) for record in records])

    def journal_append_encoded(self, records: Sequence[tuple[object, bytes]]) -> tuple[int, int]:
        """Add records the caller encoded already, as (value, canonical bytes) pairs: the
        bytes are stored as they are (sizes are checked, the encoding is not)."""
        self._check_room(len(records))
        return self._extend([codec.check_record_size(raw, self._limits) for _, raw in records])

    def _check_room(self, added: int) -> None:
        if not added:
            raise StoreUsageError("journal_append needs at least one record")
        count = len(self.journal) + added
        if count > self._limits.batch_records_max:
            raise StoreBatchTooLargeError(
                f"a batch of {count} journal records; the limit is "
                f"{self._limits.batch_records_max}",
                limit="batch_records_max",
                limit_value=self._limits.batch_records_max,
                size_records=count,
            )
        codec.check_seq_room(self.head_before, count)

    def _extend(self, encoded: list[bytes]) -> tuple[int, int]:
        self._count_bytes(sum(len(raw) for raw in encoded))
        first = self.last_seq + 1
        self.journal.extend(encoded)
        return first, self.last_seq

    def cas_put(self, data: bytes) -> Hash:
        """Add a blob; return its hash (BLAKE3 of the raw bytes)."""
        data = codec.check_blob(data, self._limits)
        content_hash = hashing.hash_bytes(data)
        if self.cas.get(content_hash.digest) is None:
            self._count_bytes(len(data))
            self.cas[content_hash.digest] = data
        return content_hash

    def cas_put_value(self, value: object) -> Hash:
        """Add the canonical encoding of `value` as a blob; its hash is `hash_value(value)`."""
        return self.cas_put(cbor.encode(value))

    def cas_delete(self, content_hash: Hash | str) -> None:
        """Remove a blob if present (garbage collection, reclaiming); its mark goes with it."""
        self.cas[hashing.parse(content_hash).digest] = None

    def cas_mark(self, content_hash: Hash | str, mark: Mark | None) -> None:
        """Set (or remove, None) the blob's reclaim mark when the batch commits."""
        digest = hashing.parse(content_hash).digest
        self.marks[digest] = None if mark is None else codec.encode_mark(mark)
        if mark is not None and mark.kind == "doomed":
            self.doomed[codec.seq_key(mark.seq) + digest] = True

    def cas_forget_doomed(self, seq: int, content_hash: Hash | str) -> None:
        """Remove a doomed row when the batch commits."""
        self.doomed[codec.seq_key(seq) + hashing.parse(content_hash).digest] = False

    def cas_clear_marks(self) -> None:
        """Remove every mark when the batch commits, before its own marks."""
        self.clear_marks = True
        self.marks.clear()

    def meta_put(self, key: str, value: object) -> None:
        """Set a meta key to a canonical value."""
        raw_key = codec.meta_key(key, self._limits)
        raw_value = codec.encode_meta_value(value, self._limits)
        self._count_bytes(len(raw_value))
        self.meta[raw_key] = raw_value

    def meta_delete(self, key: str) -> None:
        """Remove a meta key if present."""
        self.meta[codec.meta_key(key, self._limits)] = None

    def _count_bytes(self, size_bytes: int) -> None:
        total = self._bytes_total + size_bytes
        if total > self._limits.batch_bytes_max:
            raise StoreBatchTooLargeError(
                f"a batch of {total} bytes; the limit is {self._limits.batch_bytes_max}",
                limit="batch_bytes_max",
                limit_value=self._limits.batch_bytes_max,
                size_bytes=total,
            )
        self._bytes_total = total
