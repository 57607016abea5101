"""The bounds of one world (spec/03-world.md §11): every one named with its unit last,
defaulted, and overridable when the world is created or opened."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from aos.kernel.world import receipts, worldkey
from aos.kernel.world.cellindex import NODES_CACHED_MAX_DEFAULT
from aos.kernel.world.cells import CACHE_CELLS_MAX_DEFAULT, RESIDENT_STATE_BYTES_MAX_DEFAULT
from aos.kernel.world.idempotency import IDEMPOTENCY_KEYS_MAX_DEFAULT
from aos.kernel.world.router import KEY_BYTES_MAX_DEFAULT

EVENT_BYTES_MAX_DEFAULT = 256 * 1024
STEPS_PER_RUN_MAX_DEFAULT = 100_000
CHECKED_SAMPLE_RATE_DEFAULT = 0.05
SNAPSHOT_EVERY_RECORDS_DEFAULT = 50_000
SNAPSHOTS_KEPT_MAX_DEFAULT = 3
RELEASE_OBJECTS_PER_FLUSH_MAX_DEFAULT = 4096
FLUSH_RECORDS_MAX_DEFAULT = 4_096
CHECKPOINT_EVERY_RECORDS_DEFAULT = 2_000
OPEN_INTENTS_MAX_DEFAULT = 100_000


@dataclass(frozen=True)
class WorldLimits:
    """Bounds of one world; every one has a default and may be overridden at open."""

    event_bytes_max: int = EVENT_BYTES_MAX_DEFAULT
    # Idempotency keys of admitted events remembered (the newest; idempotency.py).
    idempotency_keys_max: int = IDEMPOTENCY_KEYS_MAX_DEFAULT
    steps_per_run_max: int = STEPS_PER_RUN_MAX_DEFAULT
    key_bytes_max: int = KEY_BYTES_MAX_DEFAULT
    cache_cells_max: int = CACHE_CELLS_MAX_DEFAULT
    resident_state_bytes_max: int = RESIDENT_STATE_BYTES_MAX_DEFAULT
    # Decoded CellIndex nodes kept in memory (a checkpoint reads what the last one wrote);
    # 0 decodes every node it reads from the CAS.
    index_nodes_cached_max: int = NODES_CACHED_MAX_DEFAULT
    checked_sample_rate: float = CHECKED_SAMPLE_RATE_DEFAULT
    receipt_bytes_max: int = receipts.RECEIPT_BYTES_MAX_DEFAULT
    # A flush happens at the next safe point (between steps, after an input) once this many
    # records are pending, so one flush never exceeds the store's batch limit however long a
    # run is. Where flushes fall does not change the journal, only when it is durable.
    flush_records_max: int = FLUSH_RECORDS_MAX_DEFAULT
    # Automatic snapshots after a run: once this many records were journaled since the last
    # one, or this many seconds passed (None turns a trigger off).
    snapshot_every_records: int | None = SNAPSHOT_EVERY_RECORDS_DEFAULT
    snapshot_every_s: float | None = None
    # Delete, in the flush that supersedes them, the index nodes, states and head checkpoints
    # nothing names any more (spec/05 §5.1). Off keeps them until `aos world gc`.
    reclaim_superseded: bool = True
    # Snapshots kept: taking one more drops the oldest, and with it what only it named
    # (None keeps every snapshot; replays from genesis never need one).
    snapshots_kept_max: int | None = SNAPSHOTS_KEPT_MAX_DEFAULT
    # What only dropped snapshots named is deleted at most this many objects per flush (the
    # rest in the next ones), so that one LMDB transaction stays small.
    release_objects_per_flush_max: int = RELEASE_OBJECTS_PER_FLUSH_MAX_DEFAULT
    # The CellIndex and the head checkpoint are materialized once this many records were
    # journaled since the last checkpoint (and at snapshots, on close, and whenever a flush
    # writes something the journal tail cannot carry: spec/05 §1.1); the flushes between
    # write only records and new states. 1 checkpoints at every flush; None only when forced.
    checkpoint_every_records: int | None = CHECKPOINT_EVERY_RECORDS_DEFAULT
    # Signed chain heads kept in meta (one per snapshot, newest kept): what an export carries.
    signed_heads_kept_max: int = worldkey.SIGNED_HEADS_KEPT_MAX_DEFAULT
    # Open intents of the whole world: a step that would leave more open faults
    # (`step.open_intents_exceeded`). It decides steps, so it is fixed when the world is
    # created (recorded in its config) and every open and replay uses the recorded value.
    open_intents_max: int = OPEN_INTENTS_MAX_DEFAULT

    def __post_init__(self) -> None:
        if self.open_intents_max < 1:
            raise ValueError("open_intents_max must be at least 1")
        if self.checkpoint_every_records is not None and self.checkpoint_every_records < 1:
            raise ValueError("checkpoint_every_records must be at least 1 (or None)")
        if self.snapshots_kept_max is not None and self.snapshots_kept_max < 1:
            raise ValueError("snapshots_kept_max must be at least 1 (or None)")
        if self.release_objects_per_flush_max < 1:
            raise ValueError("release_objects_per_flush_max must be at least 1")
        if self.index_nodes_cached_max < 0:
            raise ValueError("index_nodes_cached_max must be at least 0")


def world_config(clock: str, world_id: str, limits: WorldLimits) -> dict[str, Any]:
    """The world's stored config: its clock and id, and the limits that decide steps when
    they are not the defaults (so the config of a default world keeps its old form)."""
    config: dict[str, Any] = {"clock": clock, "id": world_id}
    if limits.open_intents_max != OPEN_INTENTS_MAX_DEFAULT:
        config["open_intents_max"] = limits.open_intents_max
    return config


def recorded_limits(config: dict[str, Any], limits: WorldLimits) -> WorldLimits:
    """`limits` with the step-deciding limits the world recorded at creation (a world opened
    or replayed with other limits still steps as it always did)."""
    recorded = int(config.get("open_intents_max", OPEN_INTENTS_MAX_DEFAULT))
    if recorded == limits.open_intents_max:
        return limits
    return dataclasses.replace(limits, open_intents_max=recorded)
