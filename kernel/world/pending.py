"""What one flush will write: journal records and CAS blobs, readable before they are durable.

The world works ahead of the store between flushes: cells read states and index nodes it has
just written. This overlay serves those reads, and `flush` writes everything in one store
batch (one transaction, one fsync).
"""

from __future__ import annotations

from typing import Any

from aos.kernel import cbor
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.store.interface import Store


class PendingWrites:
    def __init__(self, store: Store) -> None:
        self._store = store
        self.blobs: dict[Hash, bytes] = {}
        self.records: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {}

    # -- CAS view (the world's BlobStore) ----------------------------------------------------

    def put(self, data: bytes) -> Hash:
        hash_ = hash_bytes(data)
        if hash_ not in self.blobs and not self._store.cas.has(hash_):
            self.blobs[hash_] = data
        return hash_

    def has(self, hash_: Hash) -> bool:
        return hash_ in self.blobs or self._store.cas.has(hash_)

    def get(self, hash_: Hash) -> bytes:
        data = self.blobs.get(hash_)
        return data if data is not None else self._store.cas.get(hash_)

    def put_value(self, value: Any) -> Hash:
        return self.put(cbor.encode(value))

    def get_value(self, hash_: Hash) -> Any:
        data = self.blobs.get(hash_)
        if data is not None:
            return cbor.decode(data)
        return self._store.cas.get_value(hash_)

    # -- flushing ----------------------------------------------------------------------------

    def __bool__(self) -> bool:
        return bool(self.blobs or self.records or self.meta)

    def flush(self, expected_first_seq: int) -> tuple[int, int]:
        """Write everything in one batch; return the journal range written."""
        first = last = expected_first_seq - 1
        with self._store.batch() as batch:
            for data in self.blobs.values():
                batch.cas_put(data)
            if self.records:
                first, last = batch.journal_append(self.records)
            for key, value in self.meta.items():
                batch.meta_put(key, value)
        self.blobs.clear()
        self.records.clear()
        self.meta.clear()
        return first, last
