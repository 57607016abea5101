"""Backend-neutral encodings and checks: what a key looks like, what a stored value must be.

Every backend writes and reads through these, so the checks done on the way in and on the
way out are the same whatever holds the bytes.
"""

from __future__ import annotations

from aos.kernel import cbor, hashing
from aos.kernel.hashing import Hash
from aos.kernel.store.errors import (
    StoreBlobTooLargeError,
    StoreCorruptBlobError,
    StoreCorruptMetaError,
    StoreCorruptRecordError,
    StoreFullError,
    StoreMetaKeyTooLargeError,
    StoreMetaValueTooLargeError,
    StoreRecordTooLargeError,
    StoreUsageError,
)
from aos.kernel.store.interface import Mark
from aos.kernel.store.limits import StoreLimits

# Sequence numbers start at 1, so `head() == 0` means an empty journal and the head is also
# the number of records.
SEQ_FIRST = 1
SEQ_MAX = 2**64 - 1
SEQ_KEY_BYTES = 8


def seq_key(seq: int) -> bytes:
    """u64 big-endian, so that the byte order of keys is the numeric order of sequences."""
    return seq.to_bytes(SEQ_KEY_BYTES, "big")


def seq_from_key(key: bytes) -> int:
    """The sequence number a journal key stands for; a malformed key is corruption."""
    if len(key) != SEQ_KEY_BYTES:
        raise StoreCorruptRecordError(
            f"journal key {key.hex()} is {len(key)} bytes, not {SEQ_KEY_BYTES}", key=key
        )
    return int.from_bytes(key, "big")


def check_seq_room(head: int, count: int) -> None:
    """Refuse an append that would run past the last sequence number a key can hold."""
    if head + count > SEQ_MAX:
        raise StoreFullError("the journal has no sequence numbers left", head=head)


def encode_record(record: object, limits: StoreLimits) -> bytes:
    """Canonical bytes of a journal record, within `record_bytes_max`."""
    return check_record_size(cbor.encode(record), limits)


def check_record_size(raw: bytes, limits: StoreLimits) -> bytes:
    """An encoded journal record, refused above `record_bytes_max`."""
    if len(raw) > limits.record_bytes_max:
        raise StoreRecordTooLargeError(
            f"journal record is {len(raw)} bytes; the limit is {limits.record_bytes_max}",
            limit="record_bytes_max",
            limit_value=limits.record_bytes_max,
            size_bytes=len(raw),
        )
    return raw


def decode_chained_record(seq: int, raw: bytes) -> cbor.Value:
    """`decode_record` for a record whose bytes the journal chain has just checked
    (`cbor.decode_chained`)."""
    try:
        return cbor.decode_chained(raw)
    except cbor.CborError as exc:
        raise StoreCorruptRecordError(
            f"journal record {seq} is corrupt: {exc}", seq=seq, cause=exc.code
        ) from exc


def decode_record(seq: int, raw: bytes) -> cbor.Value:
    """The value of a stored record; anything but canonical CBOR is corruption at `seq`."""
    try:
        return cbor.decode(raw, bytes_max=len(raw))
    except cbor.CborError as exc:
        raise StoreCorruptRecordError(
            f"journal record {seq} is corrupt: {exc}", seq=seq, cause=exc.code
        ) from exc


def check_blob(data: bytes, limits: StoreLimits) -> bytes:
    """`data` as immutable bytes, within `blob_bytes_max`."""
    if type(data) is not bytes:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise StoreUsageError(f"a blob is bytes, not {type(data).__name__}")
        data = bytes(data)
    if len(data) > limits.blob_bytes_max:
        raise StoreBlobTooLargeError(
            f"blob is {len(data)} bytes; the limit is {limits.blob_bytes_max}",
            limit="blob_bytes_max",
            limit_value=limits.blob_bytes_max,
            size_bytes=len(data),
        )
    return data


def verify_blob(content_hash: Hash, data: bytes) -> bytes:
    """Return `data` only if it hashes to `content_hash`."""
    if hashing.digest_bytes(data) != content_hash.digest:
        raise StoreCorruptBlobError(
            f"blob {content_hash} does not match its hash", hash=str(content_hash)
        )
    return data


def meta_key(key: str, limits: StoreLimits) -> bytes:
    """The stored form of a meta key: non-empty UTF-8 within `meta_key_bytes_max`."""
    if type(key) is not str or not key:
        raise StoreUsageError("a meta key is non-empty text")
    raw = key.encode("utf-8")
    if len(raw) > limits.meta_key_bytes_max:
        raise StoreMetaKeyTooLargeError(
            f"meta key is {len(raw)} bytes; the limit is {limits.meta_key_bytes_max}",
            limit="meta_key_bytes_max",
            limit_value=limits.meta_key_bytes_max,
            size_bytes=len(raw),
        )
    return raw


def encode_meta_value(value: object, limits: StoreLimits) -> bytes:
    """Canonical bytes of a meta value, within `meta_value_bytes_max`."""
    raw = cbor.encode(value)
    if len(raw) > limits.meta_value_bytes_max:
        raise StoreMetaValueTooLargeError(
            f"meta value is {len(raw)} bytes; the limit is {limits.meta_value_bytes_max}",
            limit="meta_value_bytes_max",
            limit_value=limits.meta_value_bytes_max,
            size_bytes=len(raw),
        )
    return raw


def decode_meta_value(key: str, raw: bytes) -> cbor.Value:
    """The value stored under a meta key; anything but canonical CBOR is corruption."""
    try:
        return cbor.decode(raw, bytes_max=len(raw))
    except cbor.CborError as exc:
        raise StoreCorruptMetaError(
            f"meta value of {key!r} is corrupt: {exc}", key=key, cause=exc.code
        ) from exc


_MARK_KINDS = {"young": b"y", "doomed": b"d"}


def encode_mark(mark: Mark) -> bytes:
    """A mark as stored: one kind byte, then the sequence as a journal key."""
    return _MARK_KINDS[mark.kind] + seq_key(mark.seq)


def decode_mark(raw: bytes) -> Mark:
    kind = {code: name for name, code in _MARK_KINDS.items()}.get(bytes(raw[:1]))
    if kind is None or len(raw) != 9:
        raise StoreCorruptMetaError(f"a reclaim mark reads {bytes(raw).hex()}")
    return Mark(kind, seq_from_key(bytes(raw[1:])))  # type: ignore[arg-type]
