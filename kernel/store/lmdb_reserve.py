"""Disk blocks under LMDB's writable map: what makes `MDB_WRITEMAP` safe on a full disk.

With `MDB_WRITEMAP` LMDB writes a transaction's pages straight into its shared memory map of
`data.mdb` instead of into malloc'd buffers it then `pwrite`s (the buffers it keeps for reuse
were most of the writer's anonymous memory growth, issue 15). It also `ftruncate`s the file
to the map size, so the file is sparse past the used pages. A store into a page whose block
is not allocated makes the kernel allocate it at that moment, and on a full disk the only way
it can refuse is SIGBUS: the process dies instead of getting `store.full`.

So before each write transaction the writer makes sure every block that transaction may write
is allocated (`posix_fallocate`, mode 0: it allocates the holes in a range and leaves the
allocated blocks alone). A failure there (ENOSPC, EDQUOT, EIO) is raised as `store.full` or
`store.io` before LMDB wrote anything. Which blocks may a transaction write?

* Meta pages 0 and 1 and every page below the committed `me_last_pgno` (`env.info()`): LMDB
  reuses freed pages first, and a freed page may be a hole if an earlier writer (without
  WRITEMAP) never wrote it. The first reservation of an open store covers `[0, used)`.
* New pages, which LMDB only takes at `mt_next_pgno`, i.e. right after `me_last_pgno`: at most
  `txn_pages_bound` of them (below), so the reservation reaches `(me_last_pgno + 1 + bound)`
  pages, rounded up to `fallocate_chunk_bytes`, and never past the map (LMDB cannot use a page
  beyond it: it fails the transaction with MDB_MAP_FULL, the store grows the map and reserves
  again before retrying).

The bound counts every page a transaction can dirty, as if none came from the free list.
Per tree (each named database, its sub-database record in the main tree, and the free list),
from LMDB 0.9's B-tree rules:

* Copy-on-write: a page is copied at most once per transaction (after that it is dirty and
  written in place). A put or delete copies its path from the root; a delete's rebalance may
  copy one neighbour per level. Existing pages copied <= all branch pages + min(leaf pages,
  puts + 2 * deletes) (the neighbours at branch levels are branch pages).
* Splits: a put splits at most one leaf (LMDB picks the split point so that the new node
  fits), and every split inserts one separator into the level above, where it may split one
  branch page or make a new root (at most `DEPTH_MAX` new roots: LMDB's cursor stack). In a
  tree whose keys all have one size (journal, cas, reclaim, doomed, the free list) a split
  leaves halves of at least `r + 1` nodes of a page that holds `c >= 2r + 2`, so a half takes
  `r` more separators before it splits again: branch splits <= branch pages (first splits)
  + new roots + all splits / r, hence all splits <= (puts + branch pages + DEPTH_MAX)
  * r / (r - 1) (a delete there moves or rewrites separators of the same size, which always
  fit). In a tree of keys of varying size (meta, main) the halves need not be even, and a
  delete may rewrite a separator with a longer key, so every put and delete is charged a
  split at every level: (puts + deletes) * (depth after + 1), with the depth after at most
  the depth before + the puts.
* Overflow pages: a value whose node does not fit half a page goes to
  `OVPAGES = (16 - 1 + size) // psize + 1` pages of its own; counted for any node larger than
  a quarter page (over-counting is safe).
* Dropping a database (`clear_marks`) only frees pages.
* The free list: at commit LMDB writes the page numbers this transaction freed and the rest
  of the reclaimed list as records of 8-byte ids; every id is a page below the new
  `mt_next_pgno` and appears once, so their bytes are at most `16 * (used + new)` plus a
  header per record, and LMDB splits the reclaimed list into records of at most one page.
  Each record written copies and may split its path in the free tree (depth <= 1 + log2 of
  its records: every branch page has two children or more); the save loop may write them
  again as the list changes under it, counted twice. The records the transaction consumed
  (LMDB loads one whenever its reclaimed list runs dry, while committing too) are deleted
  from the front of the free tree: at most two pages copied per record (a leaf holds two
  records or more; its branch path and a rebalance neighbour), and there are at most as many
  records as free page ids, `used + new`. This last term is what makes the bound grow with
  the file: for a world past a few MiB the bound exceeds the map, and the whole map is
  allocated.

The bound is loose (many times what a transaction really takes; the store records both for
each commit and the tests compare them), which costs only allocated-but-unused blocks below
the map size, never memory: fallocated blocks are not resident.
"""

from __future__ import annotations

import errno
import math
import os
from dataclasses import dataclass
from pathlib import Path

from aos.kernel.hashing import DIGEST_BYTES
from aos.kernel.store.batch import PendingBatch
from aos.kernel.store.codec import SEQ_KEY_BYTES
from aos.kernel.store.errors import StoreFullError, StoreIoError

# LMDB's CURSOR_STACK: a tree deeper than this fails with MDB_CURSOR_FULL, so no transaction
# adds more new roots than this to one tree.
DEPTH_MAX = 32
# MDB's page header (PAGEHDRSZ) and the size of one page number (pgno_t) in a free-list record.
_PAGE_HEADER_BYTES = 16
_PGNO_BYTES = 8
# A node's header, and the 2-byte index entry each node has in its page.
_NODE_HEADER_BYTES = 8
_INDEX_BYTES = 2
# The named databases a batch touches, whose records in the main tree are rewritten at commit.
_NAMED_TREES_MAX = 8
# Pages that no term above names but a commit writes: the two meta pages.
_SLACK_PAGES = 2


@dataclass(frozen=True, slots=True)
class TreeStat:
    """A tree's shape before the transaction (`txn.stat(db)` / `env.stat()`)."""

    depth: int
    branch_pages: int
    leaf_pages: int


@dataclass(slots=True)
class TreeWrites:
    """What a transaction does to one tree: its puts (with their overflow pages) and deletes.
    `key_bytes` is the size of every key of the tree, or None when keys vary in size."""

    psize: int
    key_bytes: int | None
    puts: int = 0
    deletes: int = 0
    overflow_pages: int = 0

    def put(self, key_bytes: int, value_bytes: int) -> None:
        self.puts += 1
        if _NODE_HEADER_BYTES + key_bytes + value_bytes > self.psize // 4:
            self.overflow_pages += (_PAGE_HEADER_BYTES - 1 + value_bytes) // self.psize + 1

    def delete(self) -> None:
        self.deletes += 1


def tree_pages_bound(writes: TreeWrites, stat: TreeStat) -> int:
    """New pages one transaction's writes to one tree can take (module docstring)."""
    if writes.puts == 0 and writes.deletes == 0:
        return 0
    copied = stat.branch_pages + min(stat.leaf_pages, writes.puts + 2 * writes.deletes)
    refill = _refill_separators(writes.psize, writes.key_bytes)
    if refill is None:
        depth_after = min(DEPTH_MAX, stat.depth + writes.puts)
        splits = (writes.puts + writes.deletes) * (depth_after + 1)
    else:
        started = writes.puts + stat.branch_pages + DEPTH_MAX
        splits = -(-started * refill // (refill - 1))
    return copied + splits + writes.overflow_pages


def _refill_separators(psize: int, key_bytes: int | None) -> int | None:
    """Separators a half of a split branch page takes before it splits again (one less, for
    any off-by-one in LMDB's split index), or None when it cannot be relied on."""
    if key_bytes is None:
        return None
    node_bytes = _NODE_HEADER_BYTES + key_bytes + (key_bytes & 1) + _INDEX_BYTES
    capacity = (psize - _PAGE_HEADER_BYTES) // node_bytes
    refill = (capacity + 1) // 2 - 1
    return refill if refill >= 2 else None


def freelist_pages_bound(ids_max: int, psize: int) -> int:
    """Pages the free list can take in one transaction, with `ids_max` page numbers in use:
    writing its records (doubled for the rewrites of the save loop) and deleting the records
    the transaction consumed (module docstring)."""
    ids_per_page = (psize - _PAGE_HEADER_BYTES) // _PGNO_BYTES - 1
    records = 2 + math.ceil(2 * ids_max / ids_per_page)
    record_pages = math.ceil(2 * ids_max * _PGNO_BYTES / (psize - _PAGE_HEADER_BYTES)) + 2 * records
    depth = 2 + max(1, ids_max).bit_length()
    tree_pages = records * (2 * depth + 1)
    consumed_pages = 2 * ids_max + 2 * depth + 4
    return 2 * (record_pages + tree_pages) + consumed_pages


def txn_pages_bound(
    trees: list[tuple[TreeWrites, TreeStat]], main: TreeStat, used_pages: int, psize: int
) -> int:
    """New pages (past `me_last_pgno`) one write transaction can take, at most."""
    named = sum(tree_pages_bound(writes, stat) for writes, stat in trees)
    main_writes = TreeWrites(psize, None, puts=_NAMED_TREES_MAX)
    new = named + tree_pages_bound(main_writes, main) + _SLACK_PAGES
    return new + freelist_pages_bound(used_pages + new, psize)


def batch_writes(pending: PendingBatch, psize: int) -> dict[str, TreeWrites]:
    """The writes `LmdbStore` makes for a batch, per named database (keyed by its name)."""
    journal = TreeWrites(psize, SEQ_KEY_BYTES)
    cas = TreeWrites(psize, DIGEST_BYTES)
    reclaim = TreeWrites(psize, DIGEST_BYTES)
    doomed = TreeWrites(psize, SEQ_KEY_BYTES + DIGEST_BYTES)
    meta = TreeWrites(psize, None)
    for raw in pending.journal:
        journal.put(SEQ_KEY_BYTES, len(raw))
    for digest, data in pending.cas.items():
        if data is None:
            cas.delete()
            reclaim.delete()
        else:
            cas.put(len(digest), len(data))
    for digest, mark in pending.marks.items():
        _write(reclaim, len(digest), None if mark is None else len(mark))
    for row, write in pending.doomed.items():
        _write(doomed, len(row), 0 if write else None)
    for key, value in pending.meta.items():
        _write(meta, len(key), None if value is None else len(value))
    return {"journal": journal, "cas": cas, "reclaim": reclaim, "doomed": doomed, "meta": meta}


def _write(tree: TreeWrites, key_bytes: int, value_bytes: int | None) -> None:
    if value_bytes is None:
        tree.delete()
    else:
        tree.put(key_bytes, value_bytes)


class Reservation:
    """The allocated prefix of `data.mdb`, grown in chunks of `chunk_bytes` by fallocate.

    `reserved_bytes` is what this store has allocated since it opened: 0 at first, so the
    first `ensure` also fills any hole among the used pages."""

    def __init__(self, path: Path, chunk_bytes: int) -> None:
        self._path = path
        self._chunk_bytes = chunk_bytes
        self.reserved_bytes = 0

    def ensure(self, needed_bytes: int, map_bytes: int) -> None:
        """Allocate the file's blocks up to `needed_bytes` (rounded up to a chunk, capped at
        the map); `store.full` / `store.io` if the file system refuses."""
        if needed_bytes <= self.reserved_bytes:
            return
        # LMDB writes no page past the map (the transaction fails with MDB_MAP_FULL, and the
        # store reserves again after growing the map), so the map caps what is needed.
        chunk = self._chunk_bytes
        target = min(-(-needed_bytes // chunk) * chunk, map_bytes)
        if target <= self.reserved_bytes:
            return
        fd = self._open()
        try:
            start = self.reserved_bytes
            while start < target:
                length = min(chunk, target - start)
                os.posix_fallocate(fd, start, length)
                start += length
                self.reserved_bytes = start
        except OSError as exc:
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            kind = StoreFullError if full else StoreIoError
            raise kind(
                f"cannot allocate the store's file up to {target} bytes: {exc}",
                path=str(self._path),
            ) from exc
        finally:
            os.close(fd)

    def _open(self) -> int:
        try:
            return os.open(self._path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            raise StoreIoError(f"cannot open {self._path}: {exc}", path=str(self._path)) from exc
