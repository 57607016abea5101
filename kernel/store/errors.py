"""The `store.*` errors. Codes are stable; tests and users match on them, never on wording."""

from __future__ import annotations

from aos.kernel.errors import AosError


class StoreError(AosError):
    """Base of every store error."""

    code = "store.error"


class StoreUsageError(StoreError):
    code = "store.usage"
    hint = "a store API was called with arguments that cannot work; see its docstring"


class StoreNotFoundError(StoreError):
    code = "store.not_found"
    hint = "the object or key is not in the store; check the hash or key, or write it first"


class StoreMissingError(StoreError):
    code = "store.missing"
    hint = "there is no store at this world directory; open it for writing once to create it"


class StoreLockedError(StoreError):
    code = "store.locked"
    hint = (
        "another process writes this world (aos node up?): read commands work beside it; "
        "write through its HTTP API, or stop it first"
    )


class StoreReadonlyError(StoreError):
    code = "store.readonly"
    hint = "this store was opened with readonly=True; open it for writing to change it"


class StoreClosedError(StoreError):
    code = "store.closed"
    hint = "the store was closed; open it again"


class StoreCorruptBlobError(StoreError):
    code = "store.corrupt_blob"
    hint = "a CAS blob does not match its hash; restore it from a replica or a backup"


class StoreCorruptRecordError(StoreError):
    code = "store.corrupt_record"
    hint = "a journal record is not canonical CBOR; restore the journal from a replica or a backup"


class StoreCorruptMetaError(StoreError):
    code = "store.corrupt_meta"
    hint = "a meta value is not canonical CBOR; rewrite the key or restore from a backup"


class StoreJournalGapError(StoreError):
    code = "store.journal_gap"
    hint = "journal sequence numbers must be contiguous; records are missing from the journal"


class StoreFullError(StoreError):
    code = "store.full"
    hint = "free disk space or raise map_size_bytes_max; nothing of the failed batch was written"


class StoreIoError(StoreError):
    code = "store.io"
    hint = "the storage layer reported an I/O error; nothing of the failed batch was written"


class StoreLimitError(StoreError):
    """Base of the over-limit errors; `detail` names the limit, its value and the size seen."""

    code = "store.limit"


class StoreRecordTooLargeError(StoreLimitError):
    code = "store.record_too_large"
    hint = "a journal record is larger than record_bytes_max; store large payloads in CAS"


class StoreBlobTooLargeError(StoreLimitError):
    code = "store.blob_too_large"
    hint = "a blob is larger than blob_bytes_max; split it or raise the limit"


class StoreBatchTooLargeError(StoreLimitError):
    code = "store.batch_too_large"
    hint = "a batch exceeds batch_records_max or batch_bytes_max; flush in smaller batches"


class StoreMetaKeyTooLargeError(StoreLimitError):
    code = "store.meta_key_too_large"
    hint = "a meta key is longer than meta_key_bytes_max (UTF-8 bytes)"


class StoreMetaValueTooLargeError(StoreLimitError):
    code = "store.meta_value_too_large"
    hint = "a meta value is larger than meta_value_bytes_max; keep large values in CAS"


class StoreFencedError(StoreError):
    code = "store.fenced"
    hint = (
        "another writer took this world (a newer epoch): this one wrote nothing of the batch; "
        "stop writing here and let the new owner serve the world"
    )


class StoreOwnedError(StoreError):
    """Opening a PostgreSQL world for writing was refused: a node owns it (detail
    `node_url`, `node_id`, `live`, `lease_ms_left`). Nothing changed: no epoch was taken."""

    code = "store.owned"
    hint = (
        "a node serves this world: write through it (its URL is in the message); a node that "
        "died releases the world when its lease lapses, and `aos node up --takeover` takes it"
    )


class StoreLeaseLostError(StoreError):
    code = "store.lease_lost"
    hint = (
        "this node's ownership lease of the world could not be renewed (another writer took "
        "the world, or the database was unreachable for a whole lease): the node stopped "
        "serving it; find where it is served now (GET /v1/worlds/{world_id}/node)"
    )


class StoreUnavailableError(StoreError):
    code = "store.unavailable"
    hint = (
        "the store's database server cannot be reached or dropped the connection; check it "
        "runs and the URL, then reopen the world (a cut-off commit may or may not have landed)"
    )


class StoreUrlError(StoreError):
    code = "store.url"
    hint = (
        "a store URL is postgresql://[user@]host[:port]/database?world=ID (ID: letters, digits, "
        "'.', '_', '-'); an LMDB store is a world directory, not a URL"
    )
