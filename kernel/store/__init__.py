"""The store of a world: journal, content-addressed blobs (CAS) and a small meta map.

    from aos.kernel.store import open_store

    with open_store(world_dir) as store:              # the writer; sync=True by default
        with store.batch() as batch:                  # one transaction, one durable commit
            blob = batch.cas_put_value({"big": "payload"})
            first, last = batch.journal_append([{"kind": "domain_event", "ref": blob}])
            batch.meta_put("head", last)
        for seq, record in store.journal.read(first):
            ...

The interface (`Store`, `Journal`, `Cas`, `Meta`, `Batch`) is backend-neutral; `open_store`
returns the embedded LMDB backend, or the PostgreSQL one when the world directory points at a
database (`aos.kernel.store.url`). Layout, durability, limits and error codes are specified in
spec/07-storage.md.
"""

from __future__ import annotations

import os

from aos.kernel.store.errors import (
    StoreBatchTooLargeError,
    StoreBlobTooLargeError,
    StoreClosedError,
    StoreCorruptBlobError,
    StoreCorruptMetaError,
    StoreCorruptRecordError,
    StoreError,
    StoreFencedError,
    StoreFullError,
    StoreIoError,
    StoreJournalGapError,
    StoreLimitError,
    StoreLockedError,
    StoreMetaKeyTooLargeError,
    StoreMetaValueTooLargeError,
    StoreMissingError,
    StoreNotFoundError,
    StoreReadonlyError,
    StoreRecordTooLargeError,
    StoreUnavailableError,
    StoreUrlError,
    StoreUsageError,
)
from aos.kernel.store.interface import Batch, Cas, Journal, Meta, Store
from aos.kernel.store.limits import (
    BATCH_BYTES_MAX_DEFAULT,
    BATCH_RECORDS_MAX_DEFAULT,
    BLOB_BYTES_MAX_DEFAULT,
    MAP_SIZE_BYTES_DEFAULT,
    MAP_SIZE_BYTES_MAX_DEFAULT,
    META_KEY_BYTES_MAX_DEFAULT,
    META_VALUE_BYTES_MAX_DEFAULT,
    RECORD_BYTES_MAX_DEFAULT,
    StoreLimits,
)
from aos.kernel.store.lmdb_store import LmdbStore, open_lmdb_store
from aos.kernel.store.url import open_world_store


def open_store(
    world_dir: str | os.PathLike[str],
    *,
    sync: bool = True,
    readonly: bool = False,
    limits: StoreLimits | None = None,
) -> Store:
    """Open the store of `world_dir`: LMDB (see `open_lmdb_store`) unless the directory points
    at a PostgreSQL store (`store/url`, see `aos.kernel.store.url` and `open_pg_store`)."""
    return open_world_store(world_dir, sync=sync, readonly=readonly, limits=limits)


__all__ = [
    "BATCH_BYTES_MAX_DEFAULT",
    "BATCH_RECORDS_MAX_DEFAULT",
    "BLOB_BYTES_MAX_DEFAULT",
    "MAP_SIZE_BYTES_DEFAULT",
    "MAP_SIZE_BYTES_MAX_DEFAULT",
    "META_KEY_BYTES_MAX_DEFAULT",
    "META_VALUE_BYTES_MAX_DEFAULT",
    "RECORD_BYTES_MAX_DEFAULT",
    "Batch",
    "Cas",
    "Journal",
    "LmdbStore",
    "Meta",
    "Store",
    "StoreBatchTooLargeError",
    "StoreBlobTooLargeError",
    "StoreClosedError",
    "StoreCorruptBlobError",
    "StoreCorruptMetaError",
    "StoreCorruptRecordError",
    "StoreError",
    "StoreFencedError",
    "StoreFullError",
    "StoreIoError",
    "StoreJournalGapError",
    "StoreLimitError",
    "StoreLimits",
    "StoreLockedError",
    "StoreMetaKeyTooLargeError",
    "StoreMetaValueTooLargeError",
    "StoreMissingError",
    "StoreNotFoundError",
    "StoreReadonlyError",
    "StoreRecordTooLargeError",
    "StoreUnavailableError",
    "StoreUrlError",
    "StoreUsageError",
    "open_lmdb_store",
    "open_store",
]
