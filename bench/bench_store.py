"""The store: journal append per record in batches of 1, 100 and 1000 (group commit), with
sync on and off; CAS put and verified get of 1 KiB and 64 KiB blobs.

Journal rows are per record, so a batch row's figure is its commit cost spread over its
records; the baseline is the naive way (one durable commit per record).
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from aos.kernel import cbor
from aos.kernel.store import LmdbStore, open_lmdb_store
from bench.harness import Row, measure, row

# A journal record as the kernel writes it: kind, ingress stamp, schema and value.
RECORD = {
    "kind": "domain_event",
    "schema": "demo/OrderPlaced@1",
    "stamp": {
        "wall_ns": 1_763_800_000_000_000_000,
        "logical": 42,
        "entropy": bytes(range(32)),
        "height": 1_000_000,
    },
    "value": {
        "order_id": "ord-000042",
        "customer": "cust-7",
        "items": [{"sku": "sku-1", "qty": 2, "price": "19.99"}],
        "note": "leave at the door",
    },
}


@contextmanager
def _store(*, sync: bool) -> Iterator[LmdbStore]:
    with tempfile.TemporaryDirectory() as world, open_lmdb_store(world, sync=sync) as store:
        yield store


def _sync_label(sync: bool) -> str:
    return "sync on" if sync else "sync off"


def _journal_row(size: int, *, sync: bool, quick: bool, baseline: bool) -> Row:
    # Aim at a similar number of records per configuration, but a bounded number of commits.
    commits = (50 if quick else 200) if sync else (500 if quick else 2000)
    number = max(2, commits // size)
    rounds = 7 if quick else 15
    batch = [RECORD] * size
    with _store(sync=sync) as store:
        median_s, samples_s = measure(
            lambda: store.journal.append(batch), number=number, rounds=rounds
        )
    return Row(
        "store.journal",
        f"append, batch of {size}, {_sync_label(sync)}",
        median_s / size,
        per="record",
        rounds=rounds,
        baseline=baseline,
        samples_s=[s / size for s in samples_s],
        extra={"batch_records": size, "sync": sync, "record_bytes": len(cbor.encode(RECORD))},
    )


def _encode_row(*, quick: bool) -> Row:
    """What canonical encoding alone costs per record: the floor of any append."""
    return row(
        "store.journal",
        "reference: cbor.encode of the record only",
        lambda: cbor.encode(RECORD),
        number=2000 if quick else 10_000,
        rounds=7 if quick else 15,
        per="record",
    )


def _distinct_blobs(size_bytes: int, count: int) -> Callable[[], bytes]:
    """A supplier of `count` different blobs, so that every put really writes."""
    base = bytes(range(256)) * (size_bytes // 256)
    blobs = iter([n.to_bytes(8, "big") + base[8:] for n in range(count)])
    return lambda: next(blobs)


def _cas_rows(size_bytes: int, label: str, *, quick: bool, baseline: bool) -> list[Row]:
    rounds = 7 if quick else 15
    number = (500 if quick else 2000) if size_bytes <= 1024 else (100 if quick else 400)
    next_blob = _distinct_blobs(size_bytes, number * rounds + 1)
    with _store(sync=False) as store:
        put = row(
            "store.cas",
            f"put {label}, sync off",
            lambda: store.cas.put(next_blob()),
            number=number,
            rounds=rounds,
            baseline=baseline,
            blob_bytes=size_bytes,
        )
        stored = store.cas.put(bytes(size_bytes))
        get = row(
            "store.cas",
            f"get {label} (hash verified)",
            lambda: store.cas.get(stored),
            number=number,
            rounds=rounds,
            blob_bytes=size_bytes,
        )
    return [put, get]


def run(quick: bool) -> list[Row]:
    rows = [_journal_row(1, sync=True, quick=quick, baseline=True)]
    for sync, size in itertools.product((True, False), (1, 100, 1000)):
        if (sync, size) != (True, 1):
            rows.append(_journal_row(size, sync=sync, quick=quick, baseline=False))
    rows.append(_encode_row(quick=quick))
    rows.extend(_cas_rows(1024, "1 KiB", quick=quick, baseline=True))
    rows.extend(_cas_rows(64 * 1024, "64 KiB", quick=quick, baseline=False))
    return rows
