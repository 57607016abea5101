"""Recovery: rebuild a world's head checkpoint from its journal (spec/05-snapshots-replay.md §4).

A world whose head checkpoint is missing, corrupt or out of step with its journal opens by
rebuilding it (`World.open`, opening.py): from the newest usable snapshot, or genesis, the
journal after it is replayed record by record (replayer.py) into a replaying world, and the
head that replay reaches is stored, with the blobs it wrote, in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aos.kernel.hashing import Hash
from aos.kernel.store import StoreError, open_store
from aos.kernel.store.memory_store import MemoryStore
from aos.kernel.wasm import WasmEngine
from aos.kernel.world.errors import WorldCorruptError
from aos.kernel.world.replayer import (
    DivergedError,
    GovernanceFeed,
    Replayer,
    snapshot_records,
)


@dataclass
class Recovery:
    """How `recover` rebuilt a world's head."""

    start: str  # "genesis" or the snapshot hash replay started from
    skipped: list[str]  # snapshots that could not be used, and why
    records: int


def recover(
    world_dir: str | Path,
    *,
    engine: WasmEngine | None = None,
    governance: GovernanceFeed | None = None,
) -> Recovery:
    """Rebuild a world's head from the newest usable snapshot (or genesis) and its journal
    tail, verifying every tail record, and store it. For a world whose head checkpoint is
    missing, corrupt or does not match the journal; a snapshot whose roots are missing is
    skipped for the one before it. Recorded governance actions are taken as `governance`
    takes them (replay.recover checks them as governance does), or applied as recorded."""
    root = Path(world_dir)
    skipped: list[str] = []
    with open_store(root, readonly=True) as source, source.consistent():
        replayer = Replayer(
            source, engine or WasmEngine(), None, keep_all_blobs=True, governance=governance
        )
        candidates: list[tuple[int, Hash] | None] = [*reversed(snapshot_records(source)), None]
        for candidate in candidates:
            replayer.produced.clear()
            replayer.produced_bytes.clear()
            try:
                world, report = replayer.start(candidate)
                replayer.replay(world, report, compare_head=False)
            except (WorldCorruptError, StoreError) as error:
                skipped.append(f"{'genesis' if candidate is None else candidate[1]}: {error}")
                continue
            except DivergedError as diverged:
                raise WorldCorruptError(
                    f"the journal does not replay: {diverged.divergence.message}",
                    seq=diverged.divergence.seq,
                ) from None
            world.commit(checkpoint=True)
            scratch = world.store
            assert isinstance(scratch, MemoryStore)
            blobs = dict(scratch.cas.blobs)
            head = str(scratch.meta.get("world.head"))
            start = "genesis" if candidate is None else str(candidate[1])
            break
        else:
            raise WorldCorruptError(
                f"no snapshot and not genesis could rebuild the head: {skipped}"
            )
    with open_store(root) as store, store.batch() as batch:
        for data in blobs.values():
            batch.cas_put(data)
        # Which objects only the lost head named is unknown: reclaim nothing until the next
        # snapshot (`aos world gc` still finds the garbage).
        batch.cas_clear_marks()
        batch.meta_put("world.head", head)
    return Recovery(start=start, skipped=skipped, records=report.records)
