"""The journal chain's own cost per flush (spec/05 §1.2): advancing the chain over the
records one flush of a batch of 100 C counter events appends (their canonical bytes, as the
world has them at append), beside the whole flush of the same batch (ingress, steps, commit;
sync off) for scale. The chain also adds two small meta writes to the flush's batch, which
the whole-flush row includes.
"""

from __future__ import annotations

from aos.kernel import cbor
from aos.kernel.world.chain import JournalChain
from bench.bench_world import COUNTER_C, _batcher, _counter, counter_world
from bench.harness import Row, measure


def run(quick: bool) -> list[Row]:
    rounds = 7 if quick else 15
    with counter_world(COUNTER_C, sync=False) as world:
        batch = _batcher(world, _counter(1000, 100))
        first = world.height + 1
        batch()
        raws = [cbor.encode(record) for _, record in world.store.journal.read(first)]
        flush_s, flush_samples = measure(batch, number=1, rounds=rounds)

    def advance() -> None:
        chain = JournalChain(0, bytes(32))
        for raw in raws:
            chain.advance(raw)

    chain_s, chain_samples = measure(advance, number=20, rounds=rounds)
    extra = {"records": len(raws), "bytes": sum(len(raw) for raw in raws), "batch_events": 100}
    return [
        Row(
            "world.chain",
            "whole flush of a batch of 100, sync off",
            flush_s,
            per="flush",
            rounds=rounds,
            baseline=True,
            samples_s=flush_samples,
            extra=extra,
        ),
        Row(
            "world.chain",
            f"chain over that flush's {len(raws)} records",
            chain_s,
            per="flush",
            rounds=rounds,
            samples_s=chain_samples,
            extra={**extra, "share_of_flush": round(chain_s / flush_s, 4)},
        ),
    ]
