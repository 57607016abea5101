"""What a signed adapter request costs (kernel/signing/request_auth.py): signing one on the adapter's
side, checking one on the node's (headers, skew, Ed25519 over the request, the nonce
remembered), beside the Ed25519 receipt signature every receipt already carries."""

from __future__ import annotations

from collections.abc import Iterator

from aos.kernel.signing.request_auth import RequestVerifier, request_headers
from aos.kernel.signing.signatures import public_key_of, sign_body
from bench.harness import Row, row

SEED = bytes(range(32))
ADAPTER = "bench/adapter@1"
WORLD = "blake3:" + "ab" * 32
BODY = b'{"receipt": {"body": {"payload": "' + b"x" * 300 + b'"}}}'  # a ~350 B receipt post
NOW_MS = 1_763_800_000_000
RECEIPT_BODY = {
    "world": WORLD,
    "intent": "blake3:" + "cd" * 32,
    "status": "ok",
    "payload": {"status": 200, "body": b"x" * 256},
    "adapter": ADAPTER,
    "started_ns": 1,
    "finished_ns": 2,
}


def _sign() -> dict[str, str]:
    return request_headers(
        SEED, world=WORLD, adapter=ADAPTER, method="POST", target="/v1/receipts", body=BODY,
        at_ms=NOW_MS,
    )  # fmt: skip


def run(quick: bool) -> list[Row]:
    rounds = 5 if quick else 15
    number = 300 if quick else 2_000
    keys = {ADAPTER: public_key_of(SEED)}
    verifier = RequestVerifier(
        world=lambda: WORLD, keys=lambda: keys, clock_ms=lambda: NOW_MS, nonces_max=10**9
    )
    # Fresh requests (a nonce is good once), signed before the clock starts.
    signed: Iterator[dict[str, str]] = iter([_sign() for _ in range(number * rounds + 1)])

    def verify() -> str:
        return verifier.verify(
            method="POST", target="/v1/receipts", body=BODY, headers=next(signed)
        )

    return [
        row(
            "auth",
            "receipt signature (Ed25519, existing)",
            lambda: sign_body(SEED, RECEIPT_BODY),
            number=number,
            rounds=rounds,
            baseline=True,
        ),
        row("auth", "sign a request (adapter)", _sign, number=number, rounds=rounds),
        row("auth", "verify a request (node)", verify, number=number, rounds=rounds),
    ]
