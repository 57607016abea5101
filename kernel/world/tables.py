"""The cell tables of a world, one per workflow it has touched, and the CellIndex roots its
head checkpoint names (spec/05-snapshots-replay.md §1)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager

from aos.kernel.hashing import Hash
from aos.kernel.world.cellindex import NODES_CACHED_MAX_DEFAULT, CellIndex
from aos.kernel.world.cells import CellTable
from aos.kernel.world.scheduler import CellId
from aos.kernel.world.staged import StagedWrites


class CellTables:
    """Cell tables by workflow name. `check_workflow` raises for a name the manifest does not
    have, so an unknown name never reaches a checkpoint."""

    def __init__(
        self,
        pending: StagedWrites,
        *,
        cache_cells_max: int,
        resident_state_bytes_max: int,
        reclaim: bool,
        check_workflow: Callable[[str], object],
        index_nodes_cached_max: int = NODES_CACHED_MAX_DEFAULT,
    ) -> None:
        self._pending = pending
        self._index = CellIndex(pending, nodes_cached_max=index_nodes_cached_max)
        self._tables: dict[str, CellTable] = {}
        self._stored_roots: dict[str, str] = {}
        # Tail states replaced before a checkpoint named them: reclaimed at the next flush.
        self._tail_superseded: set[Hash] = set()
        self._cache_cells_max = cache_cells_max
        self._resident_state_bytes_max = resident_state_bytes_max
        self._reclaim = reclaim
        self._check_workflow = check_workflow

    def get(self, workflow: str) -> CellTable:
        table = self._tables.get(workflow)
        if table is None:
            self._check_workflow(workflow)
            root = self._stored_roots.get(workflow)
            table = CellTable(
                self._pending,
                self._index,
                Hash(root) if root else self._index.empty_root,
                cache_cells_max=self._cache_cells_max,
                resident_state_bytes_max=self._resident_state_bytes_max,
                superseded=self._tail_superseded if self._reclaim else None,
            )
            self._tables[workflow] = table
        return table

    def store_states(self) -> None:
        """Write the dirty states (a flush between checkpoints: no index update)."""
        with reclaiming(self._pending, self._reclaim):
            for _, table in sorted(self._tables.items()):
                table.store_states()

    def materialize(self) -> dict[str, str]:
        """Fold every table's dirty cells into its index; the roots by workflow."""
        superseded: set[Hash] = set()
        with reclaiming(self._pending, self._reclaim):
            roots = {
                name: str(table.materialize(superseded if self._reclaim else None))
                for name, table in sorted(self._tables.items())
            }
        self._pending.superseded(superseded)
        return roots

    def head_roots(self, materialized: dict[str, str]) -> dict[str, str]:
        """The roots a head names (and remembers): the stored ones updated by `materialized`.
        A workflow with no cells has no entry, so that reading a world (which opens cell
        tables) never changes what its head says."""
        roots = {**self._stored_roots, **materialized}
        empty = str(self._index.empty_root)
        self._stored_roots = {name: root for name, root in roots.items() if root != empty}
        return dict(self._stored_roots)

    def restore(self, roots: dict[str, str]) -> None:
        self._stored_roots = dict(roots)

    def keep(self, workflows: Collection[str]) -> None:
        """Drop the tables and roots of workflows a new manifest no longer has."""
        self._tables = {k: v for k, v in self._tables.items() if k in workflows}
        self._stored_roots = {k: v for k, v in self._stored_roots.items() if k in workflows}

    def put_folded(self, cells: Mapping[CellId, tuple[Hash | None, int]]) -> None:
        """Take the cell states a journal tail's fold found (tail.py): deleted when None."""
        for (workflow, key), (state_hash, seq) in cells.items():
            table = self.get(workflow)
            if state_hash is None:
                table.put(key, None, seq)
            else:
                table.put_stored(key, state_hash, len(self._pending.get(state_hash)), seq)

    def release_tail_superseded(self) -> None:
        """Hand the flush the tail states superseded since the last one."""
        self._pending.superseded(self._tail_superseded)
        self._tail_superseded.clear()


@contextmanager
def reclaiming(pending: StagedWrites, reclaim: bool) -> Iterator[None]:
    """What is written inside is young (reclaimable once superseded), if reclaiming."""
    if not reclaim:
        yield
        return
    with pending.young():
        yield
