"""The bounds of a store. Every one is a named constant (unit last), a default, and a field of
`StoreLimits` so that a world can override it; crossing one is a typed `store.*` error.

The first six bind every backend. The two map sizes and the fallocate step only mean something to the LMDB backend
(its memory map has a fixed size that we grow by doubling, and its file's blocks are
allocated ahead of the writes) and are ignored by others.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from aos.kernel.store.errors import StoreUsageError

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# One journal record, canonical bytes (self-describe prefix included).
RECORD_BYTES_MAX_DEFAULT = 1 * MIB
# One CAS blob, raw bytes. Equal to the CBOR decoder's input bound so that any value that can
# be stored can be decoded again with the default decoder.
BLOB_BYTES_MAX_DEFAULT = 64 * MIB
# Journal records in one batch (one transaction, one durable commit).
BATCH_RECORDS_MAX_DEFAULT = 10_000
# Bytes of everything one batch writes: records, blobs and meta values. LMDB caps the dirty
# pages of one write transaction (about 512 MiB with 4 KiB pages); this keeps a batch well
# below that so a batch never fails for a reason the caller cannot see.
BATCH_BYTES_MAX_DEFAULT = 256 * MIB
# A meta key, UTF-8 bytes. LMDB keys are at most 511 bytes.
META_KEY_BYTES_MAX_DEFAULT = 256
# A meta value, canonical bytes.
META_VALUE_BYTES_MAX_DEFAULT = 1 * MIB
# PostgreSQL only: how long a node's ownership lease of a world lasts unrenewed (it renews it
# every third), and the shortest one allowed (a renewal must fit in a third of it).
OWNER_LEASE_MS_DEFAULT = 10_000
OWNER_LEASE_MS_MIN = 300
# LMDB only: the memory map a new environment starts with, and the size it may grow to.
MAP_SIZE_BYTES_DEFAULT = 64 * MIB
MAP_SIZE_BYTES_MAX_DEFAULT = 1024 * GIB
# LMDB only: the store allocates its data file's blocks ahead of the writes in steps of this
# size (`lmdb_reserve.py`), so that a full disk is `store.full` and not a SIGBUS. Larger steps
# mean fewer fallocate calls and more allocated-but-unused disk (never more memory).
FALLOCATE_CHUNK_BYTES_DEFAULT = 16 * MIB


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """The limits one open store enforces. Build with keyword overrides, e.g.
    `StoreLimits(record_bytes_max=4096)`; the constructor refuses inconsistent limits."""

    record_bytes_max: int = RECORD_BYTES_MAX_DEFAULT
    blob_bytes_max: int = BLOB_BYTES_MAX_DEFAULT
    batch_records_max: int = BATCH_RECORDS_MAX_DEFAULT
    batch_bytes_max: int = BATCH_BYTES_MAX_DEFAULT
    meta_key_bytes_max: int = META_KEY_BYTES_MAX_DEFAULT
    meta_value_bytes_max: int = META_VALUE_BYTES_MAX_DEFAULT
    map_size_bytes_initial: int = MAP_SIZE_BYTES_DEFAULT
    map_size_bytes_max: int = MAP_SIZE_BYTES_MAX_DEFAULT
    fallocate_chunk_bytes: int = FALLOCATE_CHUNK_BYTES_DEFAULT

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if type(value) is not int or value <= 0:
                raise StoreUsageError(f"store limit {field.name} must be a positive integer")
        if self.map_size_bytes_initial > self.map_size_bytes_max:
            raise StoreUsageError("map_size_bytes_initial is larger than map_size_bytes_max")
        largest_item = max(self.record_bytes_max, self.blob_bytes_max, self.meta_value_bytes_max)
        # An item that passes its own limit must fit in a batch, or the edge would be a lie.
        if self.batch_bytes_max < largest_item:
            raise StoreUsageError(
                "batch_bytes_max must be at least the largest record, blob or meta value limit"
            )
