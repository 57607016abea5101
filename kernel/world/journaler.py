"""The journaler: a world's journal and its one durable commit (spec/07-storage.md §3,
spec/05-snapshots-replay.md §1).

`append` encodes a record once, gives it the next sequence number and advances the journal
chain over its bytes; nothing is durable until `commit`, the one verb that writes: the cell
states (or, when a head checkpoint is due, the materialized cells and the head), the staged
CAS blobs and meta, and the appended records, in one store batch (one transaction, one
fsync: group commit). The path is

    Journaler.commit -> StagedWrites.write (staged.py) -> Store.batch (the backend's commit)

A checkpoint is due every `checkpoint_every_records`, after anything the journal tail cannot
carry, while deliveries are queued, or when the caller asks for one (closing, a replay
comparing heads). A failed commit closes the store: memory is ahead of it, and only
reopening gives a consistent world.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aos.kernel.errors import KernelInvariantError
from aos.kernel.store.interface import Store
from aos.kernel.world import chain as journal_chain
from aos.kernel.world import records, worldkey
from aos.kernel.world.checkpointer import Checkpointer
from aos.kernel.world.errors import WorldClosedError
from aos.kernel.world.limits import WorldLimits
from aos.kernel.world.staged import StagedWrites
from aos.kernel.world.tables import CellTables
from aos.kernel.world.tail import FOLDABLE_KINDS

# The head content of the world now, over the materialized index roots (World gathers it).
HeadContent = Callable[[dict[str, str]], dict[str, Any]]


class Journaler:
    """A world's journal height and chain, its staged writes, and their one commit."""

    def __init__(
        self,
        store: Store,
        staged: StagedWrites,
        cells: CellTables,
        limits: WorldLimits,
        *,
        head_content: HeadContent,
        queued: Callable[[], int],
    ) -> None:
        self._store: Store | None = store
        self.staged = staged
        self._cells = cells
        self._limits = limits
        self._head_content = head_content
        self._queued = queued
        self.height = store.journal.head()  # including records not yet committed
        # The height of the last record that was not a governance action or a snapshot (a
        # governance shadow is current while this has not moved).
        self.state_height = self.height
        self.checkpoints = Checkpointer(staged, limits, height=self.height)
        # The journal hash chain at the head (chain.py); None only reading a pre-chain world.
        self.chain: journal_chain.JournalChain | None = None
        self.key_seed: bytes | None = None  # signs the chain head at snapshots (worldkey.py)
        # Called with every record as it is appended, with its canonical bytes (a replay
        # compares them as they come; the fault harness keeps them).
        self.on_append: Callable[[int, records.Record, bytes], None] | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            raise WorldClosedError("the world is closed")
        return self._store

    @property
    def is_open(self) -> bool:
        return self._store is not None

    @property
    def uncommitted_records(self) -> int:
        return len(self.staged.records)

    def append(self, record: records.Record) -> int:
        """Journal a record (durable at the next commit); its sequence number. It is encoded
        here, once, by the record itself (`records.py`)."""
        kind = record.kind
        raw = record.encode()
        self.staged.append_record(record, raw)
        self.height += 1
        if self.chain is not None:
            self.chain.advance(raw)
        if kind not in FOLDABLE_KINDS:
            self.checkpoints.due = True
        # Governance actions and snapshots change no state: a shadow stays current across them.
        if kind not in (records.GOVERNANCE, records.SNAPSHOT):
            self.state_height = self.height
        if self.on_append is not None:
            self.on_append(self.height, record, raw)
        return self.height

    def commit(self, *, checkpoint: bool = False) -> None:
        """Make everything appended and staged durable in one transaction: the cell states
        and records, and, when a checkpoint is due or `checkpoint` asks for one, the
        materialized cells and a new head checkpoint."""
        self.store  # noqa: B018 - a closed world raises before anything is materialized
        if not (checkpoint or self.checkpoints.wanted(self.height, self._queued())):
            self._cells.store_states()
            self._write()
            return
        head_blob = self.checkpoints.stage_head(self._head_content(self._cells.materialize()))
        self._write()
        self.checkpoints.committed(head_blob, self.height)

    def _write(self) -> None:
        staged = self.staged
        self._cells.release_tail_superseded()
        expected_first = self.height - len(staged.records) + 1
        wrote_records = bool(staged.records)
        if wrote_records and self.chain is not None:
            staged.meta[journal_chain.META_CHAIN] = self.chain.to_value()
            staged.meta[journal_chain.mark_key(self.chain.seq)] = self.chain.head
        try:
            first, last = staged.write(expected_first)
        except BaseException:
            # Memory is now ahead of the store; only reopening gives a consistent world.
            self.close()
            raise
        if wrote_records and (first, last) != (expected_first, self.height):
            raise KernelInvariantError("journal sequence numbers drifted from the world's count")

    def sign_chain_head(self, world_id: str) -> None:
        """Sign the chain through the snapshot record (the snapshot itself carries the chain
        before it), if the world has a key (worldkey.py)."""
        if self.chain is None or self.key_seed is None:
            return
        signed = worldkey.sign(self.key_seed, world_id, self.chain)
        kept = worldkey.with_signed(self.store, signed, self._limits.signed_heads_kept_max)
        self.staged.meta[worldkey.META_SIGNED] = kept

    def close(self) -> None:
        """Close the store (nothing is written: a world commits before, if it should)."""
        if self._store is not None:
            store, self._store = self._store, None
            store.close()
