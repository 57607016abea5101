"""When a world writes its head checkpoint, which snapshots it keeps, and what retention lets
go (spec/05-snapshots-replay.md §1, §5.1).

The world owns the content of a head (it gathers every part's state); the checkpointer owns
the rest: whether a flush must checkpoint (`checkpoint_every_records`, or something the
journal tail cannot carry), storing the head blob and superseding the previous one, the
snapshot list and its retention, and the reclaim epoch the pending writes work in.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aos.kernel.errors import AosError
from aos.kernel.hashing import Hash
from aos.kernel.store.codec import SEQ_MAX
from aos.kernel.store.interface import Store
from aos.kernel.world.errors import WorldCorruptError
from aos.kernel.world.staged import StagedWrites
from aos.kernel.world.tables import reclaiming

if TYPE_CHECKING:  # the world's limits import its receipts' checks; a status read needs neither
    from aos.kernel.world.limits import WorldLimits

META_HEAD = "world.head"
META_SNAPSHOTS = "world.snapshots"


class Checkpointer:
    """The head checkpoint's cadence and blob, and the snapshots a world keeps."""

    def __init__(self, pending: StagedWrites, limits: WorldLimits, *, height: int) -> None:
        self._pending = pending
        self._limits = limits
        self.head_blob: Hash | None = None  # the stored head checkpoint this world wrote or read
        # The journal height of the stored head checkpoint; the records after it are the tail.
        self.height = height
        # Set when a record the tail cannot carry is appended: the next flush checkpoints.
        self.due = False
        self.snapshots: list[tuple[int, Hash]] = []  # (journal seq, snapshot hash), oldest first
        self._last_snapshot_s = _monotonic_s()

    # -- head checkpoints --------------------------------------------------------------------

    def wanted(self, height: int, queued: int) -> bool:
        """Whether the flush at journal `height` must checkpoint (a tail ends quiescent: the
        fold rebuilds no queue, so queued deliveries force one too)."""
        if self.due or self.head_blob is None or queued:
            return True
        every = self._limits.checkpoint_every_records
        return every is not None and height - self.height >= every

    def stage_head(self, head: dict[str, Any]) -> Hash:
        """Stage the head blob for the next commit, superseding the one it replaces."""
        with reclaiming(self._pending, self._limits.reclaim_superseded):
            head_blob = self._pending.put_value(head)
        if self._limits.reclaim_superseded and self.head_blob not in (None, head_blob):
            self._pending.superseded([self.head_blob])
        self._pending.meta[META_HEAD] = str(head_blob)
        return head_blob

    def committed(self, head_blob: Hash, height: int) -> None:
        """The commit that wrote `head_blob` (at journal `height`) is durable."""
        self.head_blob = head_blob
        self.height = height
        self.due = False
        self.sync_retention()

    def restored(self, height: int, head_blob: Hash | None = None) -> None:
        """The world took a head at `height` (its stored blob, when opened from one)."""
        self.height = height
        if head_blob is not None:
            self.head_blob = head_blob
            self.sync_retention()

    # -- snapshots and retention -------------------------------------------------------------

    def keep_snapshot(self, seq: int, snapshot_hash: Hash) -> None:
        """Add a snapshot; past `snapshots_kept_max` the oldest go, and with them (if
        reclaiming) what only they named."""
        self.snapshots.append((seq, snapshot_hash))
        kept = self._limits.snapshots_kept_max
        dropped = self.snapshots[:-kept] if kept is not None else []
        self.snapshots = self.snapshots[len(dropped) :]
        if self._limits.reclaim_superseded:
            self._pending.forget([h for _, h in dropped])
            self._pending.release_before = self.snapshots[0][0]
        self._pending.meta[META_SNAPSHOTS] = [[n, str(h)] for n, h in self.snapshots]
        self._last_snapshot_s = _monotonic_s()

    def snapshot_due(self, height: int) -> bool:
        every = self._limits.snapshot_every_records
        last = self.snapshots[-1][0] if self.snapshots else 0
        if every is not None and height - last >= every:
            return True
        seconds = self._limits.snapshot_every_s
        # The host clock decides only *when* a snapshot is taken, never what is in it, and a
        # replay follows the journaled snapshot records: determinism does not depend on it.
        return seconds is not None and _monotonic_s() - self._last_snapshot_s >= seconds

    def sync_retention(self) -> None:
        """Tell the pending view the current epoch (the newest snapshot) and what retention
        lets go (objects doomed with snapshots older than the oldest kept one)."""
        pending = self._pending
        pending.epoch = self.snapshots[-1][0] if self.snapshots else 0
        # No snapshot kept (gc --keep-snapshots 0): nothing doomed is named any more.
        pending.release_before = self.snapshots[0][0] if self.snapshots else SEQ_MAX
        pending.release_max = self._limits.release_objects_per_flush_max
        if not self._limits.reclaim_superseded:
            pending.release_before = 0


def head_usable(store: Store) -> bool:
    """The head checkpoint exists, reads back verified, matches the journal's height, and
    every index root it names is present."""
    try:
        head: Any = store.cas.get_value(Hash(str(store.meta.get(META_HEAD))))
        if head["height"] > store.journal.head():
            return False
        return all(store.cas.has(Hash(str(root))) for root in head["roots"].values())
    except (AosError, KeyError, TypeError):
        return False


def stored_snapshots(store: Store) -> list[tuple[int, Hash]]:
    """The snapshot list a store's meta keeps, oldest first."""
    value: Any = store.meta.get(META_SNAPSHOTS, [])
    if not isinstance(value, list):
        raise WorldCorruptError("the stored snapshot list is not a list")
    return [(int(seq), Hash(str(hash_))) for seq, hash_ in value]


def _monotonic_s() -> float:
    return time.monotonic()
