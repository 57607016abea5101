"""Canonical encode/decode of a typical event, and hashing, against plain cbor2 as baseline."""

from __future__ import annotations

import cbor2

from aos.kernel import cbor, hashing
from bench.harness import Row, row

# A typical domain event: a keyed order event with a few nested fields (~200 bytes encoded).
EVENT = {
    "$tag": "OrderPlaced",
    "$value": {
        "order_id": "ord-000042",
        "customer": {"id": "cust-7", "tier": "gold"},
        "items": [
            {"sku": "sku-1", "qty": 2, "price": "19.99"},
            {"sku": "sku-2", "qty": 1, "price": "5.00"},
        ],
        "placed_at_ns": 1_763_800_000_000_000_000,
        "note": "leave at the door",
    },
}


def run(quick: bool) -> list[Row]:
    rounds = 5 if quick else 15
    number = 2_000 if quick else 10_000
    data = cbor.encode(EVENT)
    body = data[3:]
    blob = bytes(range(256)) * 256  # 64 KiB
    rows = [
        row(
            "encode",
            "cbor2.dumps canonical (no checks)",
            lambda: cbor2.dumps(EVENT, canonical=True),
            number=number,
            rounds=rounds,
            baseline=True,
            bytes=len(data),
        ),
        row("encode", "aos cbor.encode", lambda: cbor.encode(EVENT), number=number, rounds=rounds),
        row(
            "decode",
            "cbor2.loads (no checks)",
            lambda: cbor2.loads(body),
            number=number,
            rounds=rounds,
            baseline=True,
        ),
        row(
            "decode",
            "aos cbor.decode strict canonical",
            lambda: cbor.decode(data),
            number=number,
            rounds=rounds,
        ),
        row(
            "decode",
            "aos cbor.decode strict, structure only",
            lambda: cbor.decode(data, canonical=False),
            number=number,
            rounds=rounds,
        ),
        row(
            "hash",
            "hash_bytes 200 B event",
            lambda: hashing.hash_bytes(data),
            number=number,
            rounds=rounds,
            baseline=True,
        ),
        row(
            "hash",
            "hash_value (encode + hash)",
            lambda: hashing.hash_value(EVENT),
            number=number,
            rounds=rounds,
        ),
        row(
            "hash",
            "hash_bytes 64 KiB blob",
            lambda: hashing.hash_bytes(blob),
            number=max(number // 20, 50),
            rounds=rounds,
        ),
    ]
    return rows
