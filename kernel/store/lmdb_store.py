"""The embedded store: one LMDB environment per world directory.

Layout (spec/07-storage.md): `<world_dir>/store/` holds LMDB's `data.mdb` and `lock.mdb` and
our `writer.lock`. Named databases: `journal` (u64 big-endian sequence -> canonical record),
`cas` (32-byte BLAKE3 digest -> raw bytes), `meta` (UTF-8 key -> canonical value),
`reclaim` (32-byte digest -> reclaim mark of that CAS blob), `doomed` (sequence + digest ->
empty: the rows of doomed marks, by the snapshot they wait for).

Concurrency: one writing process per world (an exclusive `flock` on `writer.lock`), any number
of read-only processes beside it. Inside one process a store may be shared between threads:
LMDB transactions are short and serialized by a lock, which is what makes it safe to grow the
memory map (LMDB forbids resizing while this process has a transaction open).

The writer opens LMDB with `MDB_WRITEMAP`: a transaction writes its pages into the shared map
instead of malloc'd buffers that LMDB keeps and reuses (they were most of the writer's
anonymous memory), and a commit syncs the map. Each write transaction first has the file's
blocks it may touch allocated (`lmdb_reserve.py`), so that a full disk is `store.full`
before anything is written instead of a SIGBUS in the middle of a transaction.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Final, TypeAlias

import lmdb

from aos.kernel import cbor, hashing
from aos.kernel.errors import KernelInvariantError
from aos.kernel.hashing import Hash
from aos.kernel.store import codec
from aos.kernel.store.batch import PendingBatch
from aos.kernel.store.errors import (
    StoreBatchTooLargeError,
    StoreClosedError,
    StoreFullError,
    StoreIoError,
    StoreJournalGapError,
    StoreLockedError,
    StoreMissingError,
    StoreNotFoundError,
    StoreReadonlyError,
    StoreUsageError,
)
from aos.kernel.store.interface import CommitTimes, Mark
from aos.kernel.store.limits import MIB, StoreLimits
from aos.kernel.store.lmdb_reserve import (
    Reservation,
    TreeStat,
    TreeWrites,
    batch_writes,
    txn_pages_bound,
)
from aos.kernel.store.views import (
    CasWrites,
    JournalWrites,
    MetaWrites,
    decoded,
    read_journal_encoded,
)

STORE_DIR_NAME = "store"
WRITER_LOCK_NAME = "writer.lock"
DATA_FILE_NAME = "data.mdb"

_JOURNAL_DB = b"journal"
_CAS_DB = b"cas"
_META_DB = b"meta"
_RECLAIM_DB = b"reclaim"
_DOOMED_DB = b"doomed"
_MARK_DBS = (_RECLAIM_DB, _DOOMED_DB)
# Room for the databases later milestones add (cell index) without a format change.
_DBS_MAX = 8
# Reads are cut into chunks, each in its own short transaction, so that no transaction stays
# open while a caller holds an iterator (it would pin old pages and block map growth).
_READ_CHUNK_RECORDS = 1024
_READ_CHUNK_BYTES = 8 * MIB
# Doubling from the smallest map LMDB accepts to 2**64 bytes takes fewer steps than this.
_GROWTH_STEPS_MAX = 64

# The stubs make Transaction generic; the runtime class is not subscriptable.
_Txn: TypeAlias = "lmdb.Transaction[bytes]"

# Store directories open in this process, by (st_dev, st_ino). LMDB's locks are per process,
# so a second environment on the same files in one process would silently share and then
# release them; we refuse it up front with a clear error instead.
_OPEN_IN_PROCESS: set[tuple[int, int]] = set()
_OPEN_IN_PROCESS_LOCK = threading.Lock()


class _Absent:
    """Marks a parameter that was not given (None is a valid stored value)."""


_ABSENT: Final = _Absent()


# --------------------------------------------------------------------------------------------
# Opening


def open_lmdb_store(
    world_dir: str | os.PathLike[str],
    *,
    sync: bool = True,
    readonly: bool = False,
    limits: StoreLimits | None = None,
) -> LmdbStore:
    """Open the store of an existing world directory, creating `store/` when writing.

    `sync=True` makes every commit durable before it returns (LMDB `sync` and `metasync`);
    `sync=False` leaves flushing to the OS (tests, benches) and syncs once at `close()`.
    A writer takes the world's writer lock (`store.locked` if another process holds it);
    `readonly=True` takes no lock and needs an existing store (`store.missing`).
    """
    limits = limits if limits is not None else StoreLimits()
    world = Path(world_dir)
    if not world.is_dir():
        raise StoreMissingError(f"no world directory at {world}", path=str(world))
    store_dir = world / STORE_DIR_NAME
    if readonly and not (store_dir / DATA_FILE_NAME).is_file():
        raise StoreMissingError(f"no store in {world}", path=str(world))
    if not readonly:
        store_dir.mkdir(exist_ok=True)
    with ExitStack() as undo:
        identity = _claim_in_process(store_dir)
        undo.callback(_release_in_process, identity)
        if not readonly:
            undo.callback(_WriterLock(store_dir / WRITER_LOCK_NAME).release)
        env = _open_env(store_dir, limits, sync=sync, readonly=readonly)
        undo.callback(env.close)
        reservation = None
        if not readonly:
            # Creating the databases is a write transaction too: reserve for it first.
            reservation = Reservation(store_dir / DATA_FILE_NAME, limits.fallocate_chunk_bytes)
            _reserve(env, reservation, [])
        dbs = _open_dbs(env, create=not readonly)
        store = LmdbStore(env, dbs, world, limits, reservation, sync=sync)
        # From here on the store owns the environment, the writer lock and the claim.
        store._release = undo.pop_all().close
    return store


def _claim_in_process(store_dir: Path) -> tuple[int, int]:
    status = store_dir.stat()
    identity = (status.st_dev, status.st_ino)
    with _OPEN_IN_PROCESS_LOCK:
        if identity in _OPEN_IN_PROCESS:
            raise StoreLockedError(
                f"world store {store_dir} is already open in this process (pid {os.getpid()})",
                path=str(store_dir),
                pid=os.getpid(),
            )
        _OPEN_IN_PROCESS.add(identity)
    return identity


def _release_in_process(identity: tuple[int, int]) -> None:
    with _OPEN_IN_PROCESS_LOCK:
        _OPEN_IN_PROCESS.discard(identity)


class _WriterLock:
    """An exclusive `flock` on `writer.lock`, holding the owner's pid for error messages.

    The kernel drops a `flock` when its holder dies, so a crashed writer never leaves a stale
    lock behind; the file itself is never deleted (deleting a locked file races with openers).
    """

    def __init__(self, path: Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            # The holder writes its pid just after locking, so a racing reader may find none.
            holder = f"pid {pid}" if pid is not None else "another process"
            raise StoreLockedError(
                f"world is locked by {holder}", path=str(path.parent.parent), pid=pid
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _read_pid(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _open_env(
    store_dir: Path, limits: StoreLimits, *, sync: bool, readonly: bool
) -> lmdb.Environment:
    try:
        env = lmdb.open(
            str(store_dir),
            map_size=limits.map_size_bytes_initial,
            max_dbs=_DBS_MAX,
            readonly=readonly,
            sync=sync,
            metasync=sync,
            create=not readonly,
            # Readers map read-only whatever this says (LMDB ignores it with MDB_RDONLY).
            writemap=not readonly,
        )
    except lmdb.Error as exc:
        raise StoreIoError(
            f"cannot open the store in {store_dir}: {exc}", path=str(store_dir)
        ) from exc
    key_bytes_max = env.max_key_size()
    if key_bytes_max < limits.meta_key_bytes_max:
        env.close()
        raise StoreUsageError(
            f"meta_key_bytes_max {limits.meta_key_bytes_max} exceeds LMDB's key size limit "
            f"{key_bytes_max}"
        )
    return env


def _open_dbs(env: lmdb.Environment, *, create: bool) -> tuple[lmdb._Database | None, ...]:
    names = (_JOURNAL_DB, _CAS_DB, _META_DB)
    try:
        if not create:
            # A handle opened inside an explicit read transaction dies with it in py-lmdb;
            # without one, py-lmdb opens it so that it outlives the transaction.
            dbs = tuple(env.open_db(name, create=False) for name in names)
            marks: tuple[lmdb._Database | None, ...]
            try:
                marks = tuple(env.open_db(name, create=False) for name in _MARK_DBS)
            except lmdb.NotFoundError:
                marks = (None, None)  # no writer of this version has opened the store: no marks
            return (*dbs, *marks)
        with env.begin(write=True) as txn:
            return tuple(env.open_db(name, txn=txn, create=True) for name in (*names, *_MARK_DBS))
    except lmdb.NotFoundError:
        raise StoreMissingError(f"the store in {env.path()} lacks its databases") from None


def _reserve(
    env: lmdb.Environment, reservation: Reservation, trees: list[tuple[TreeWrites, TreeStat]]
) -> tuple[int, int]:
    """Allocate the blocks a write transaction with these tree writes may touch
    (`lmdb_reserve.py`); the pages in use before it, and the bound on the new ones."""
    info = env.info()
    main = env.stat()
    psize = int(main["psize"])
    used_pages = int(info["last_pgno"]) + 1
    main_stat = TreeStat(main["depth"], main["branch_pages"], main["leaf_pages"])
    bound = txn_pages_bound(trees, main_stat, used_pages, psize)
    reservation.ensure((used_pages + bound) * psize, int(info["map_size"]))
    return used_pages, bound


def _begin_read(env: lmdb.Environment) -> _Txn:
    try:
        return env.begin()
    except lmdb.MapResizedError:
        # The writer (another process) grew the map past ours: adopt the size it recorded.
        env.set_mapsize(0)
        return env.begin()


# --------------------------------------------------------------------------------------------
# The store


class LmdbStore:
    """A world's store on LMDB. Build it with `open_lmdb_store` (or `aos.kernel.store.open_store`)."""

    def __init__(
        self,
        env: lmdb.Environment,
        dbs: tuple[lmdb._Database | None, ...],
        world_dir: Path,
        limits: StoreLimits,
        reservation: Reservation | None,
        *,
        sync: bool,
    ) -> None:
        """`reservation` is the writer's (None: a read-only store)."""
        self._env = env
        journal_db, cas_db, meta_db, self._reclaim_db, self._doomed_db = dbs
        if journal_db is None or cas_db is None or meta_db is None:
            raise KernelInvariantError("the journal, cas and meta databases are required")
        self._journal_db, self._cas_db, self._meta_db = journal_db, cas_db, meta_db
        self._world_dir = world_dir
        self._limits = limits
        self._sync = sync
        self._readonly = reservation is None
        self._release: Callable[[], None] = lambda: None
        self._closed = False
        self._pinned: _Txn | None = None
        self._txn_lock = threading.Lock()
        self._commit_times = CommitTimes()
        self._batch_lock = threading.Lock()
        self._batch_thread: int | None = None
        self.map_growths = 0
        self._psize = int(env.stat()["psize"])
        self._reservation = reservation
        # The reservation of the last commit against what it really took (tests, bench).
        self.last_commit_pages_bound = 0
        self.last_commit_pages_new = 0
        # The writer's knowledge that the `doomed` database has no row (it is the only one
        # writing): most worlds never doom anything, and every flush asks (`LmdbCas.doomed`).
        self.doomed_empty = False
        self._journal = LmdbJournal(self)
        self._cas = LmdbCas(self)
        self._meta = LmdbMeta(self)
        # The writer is the only one appending, so it may keep the head in memory; the open
        # check refuses to append after a journal whose record count betrays a gap.
        self._head = 0 if self._readonly else self._checked_head()

    @property
    def journal(self) -> LmdbJournal:
        return self._journal

    @property
    def cas(self) -> LmdbCas:
        return self._cas

    @property
    def meta(self) -> LmdbMeta:
        return self._meta

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def limits(self) -> StoreLimits:
        return self._limits

    @property
    def world_dir(self) -> Path:
        return self._world_dir

    @property
    def map_size_bytes(self) -> int:
        """The current size of the memory map (it grows by doubling when a batch needs it)."""
        with self._reading():
            return self._env.info()["map_size"]

    @property
    def reserved_bytes(self) -> int:
        """How much of the data file this writer has made sure is allocated (0 when read-only)."""
        return 0 if self._reservation is None else self._reservation.reserved_bytes

    @property
    def commit_times(self) -> CommitTimes:
        return self._commit_times

    @contextmanager
    def batch(self) -> Iterator[PendingBatch]:
        """Group writes into one transaction and one durable commit; see `Store.batch`."""
        self._check_writable()
        if self._batch_thread == threading.get_ident():
            raise StoreUsageError("batches do not nest; write through the batch that is open")
        with self._batch_lock:
            self._batch_thread = threading.get_ident()
            try:
                pending = PendingBatch(self._limits, self._head)
                yield pending
                self._commit(pending)
            finally:
                self._batch_thread = None

    def close(self) -> None:
        """Release the environment and the writer lock; idempotent."""
        with self._txn_lock:
            if self._closed:
                return
            self._closed = True
            if self._pinned is not None:
                self._pinned.abort()
                self._pinned = None
            try:
                if not self._readonly and not self._sync:
                    self._env.sync(True)
            finally:
                self._release()

    def __enter__(self) -> LmdbStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------------
    # Transactions

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the store of {self._world_dir} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._readonly:
            raise StoreReadonlyError(f"the store of {self._world_dir} is open read-only")

    @contextmanager
    def consistent(self) -> Iterator[None]:
        """Serve every read inside the block from one read transaction: one point in time,
        however the writer (another process) moves on meanwhile, and however it reclaims
        what its new head no longer names. Outside such a block each read sees the latest
        commit. Keep the block short on a busy world: LMDB cannot reuse the pages an open
        read transaction still sees."""
        if not self._readonly:
            # The writer sees its own commits in order, and must be free to grow the map
            # (LMDB refuses while this process holds a transaction).
            raise StoreUsageError("consistent reads are for read-only stores")
        with self._txn_lock:
            self._check_open()
            if self._pinned is not None:
                raise StoreUsageError("consistent reads do not nest")
            try:
                self._pinned = _begin_read(self._env)
            except lmdb.Error as exc:
                raise StoreIoError(f"cannot read the store: {exc}") from exc
        try:
            yield
        finally:
            with self._txn_lock:
                pinned, self._pinned = self._pinned, None
                if pinned is not None:
                    pinned.abort()

    def _read_value(self, key: bytes, db: lmdb._Database) -> bytes | None:
        """One key's value: `_reading` for a single get, without a generator (the writer asks
        a few of these in every flush)."""
        with self._txn_lock:
            self._check_open()
            txn = self._pinned
            try:
                if txn is not None:
                    return txn.get(key, db=db)
                txn = _begin_read(self._env)
                try:
                    return txn.get(key, db=db)
                finally:
                    txn.abort()
            except lmdb.Error as exc:
                raise StoreIoError(f"cannot read the store: {exc}") from exc

    @contextmanager
    def _reading(self) -> Iterator[_Txn]:
        with self._txn_lock:
            self._check_open()
            if self._pinned is not None:
                try:
                    yield self._pinned
                except lmdb.Error as exc:
                    raise StoreIoError(f"cannot read the store: {exc}") from exc
                return
            try:
                txn = _begin_read(self._env)
            except lmdb.Error as exc:
                raise StoreIoError(f"cannot read the store: {exc}") from exc
            try:
                yield txn
            except lmdb.Error as exc:
                raise StoreIoError(f"cannot read the store: {exc}") from exc
            finally:
                txn.abort()

    def _commit(self, pending: PendingBatch) -> None:
        if pending.is_empty():
            return
        with self._txn_lock:
            self._check_open()
            with self._commit_times.timing():
                self._commit_growing(pending)

    def _commit_growing(self, pending: PendingBatch) -> None:
        """Apply the batch, growing the map and redoing it while it does not fit (under the
        transaction lock)."""
        for _ in range(_GROWTH_STEPS_MAX):
            try:
                used_pages = self._apply(pending)
            except lmdb.MapFullError:
                # The transaction was aborted: nothing of it is on disk. Grow and redo it.
                self._grow()
                continue
            self._head = pending.last_seq
            if any(pending.doomed.values()):
                self.doomed_empty = False
            self.last_commit_pages_new = self._env.info()["last_pgno"] + 1 - used_pages
            return
        raise KernelInvariantError("the map grew too many times for one batch")

    def _apply(self, pending: PendingBatch) -> int:
        """Write the batch in one transaction; the pages in use before it."""
        try:
            with self._env.begin(write=True) as txn:
                # Before the first put: until then LMDB has written nothing into the map, so
                # a refusal aborts a transaction that changed nothing.
                used_pages = self._reserve(txn, pending)
                self._put_pending(txn, pending)
        except lmdb.MapFullError:
            raise
        except lmdb.DiskError as exc:
            raise StoreFullError(f"the disk is full: {exc}", path=str(self._world_dir)) from exc
        except lmdb.TxnFullError as exc:
            raise StoreBatchTooLargeError(
                f"the batch has more dirty pages than one LMDB transaction holds: {exc}",
                limit="lmdb_dirty_pages",
            ) from exc
        except lmdb.KeyExistsError as exc:
            raise KernelInvariantError(f"journal append found an existing key: {exc}") from exc
        except lmdb.Error as exc:
            raise StoreIoError(f"commit failed: {exc}", path=str(self._world_dir)) from exc
        except OSError as exc:
            # The file layer under LMDB (a failing write or fsync), as an errno.
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            kind = StoreFullError if full else StoreIoError
            raise kind(f"commit failed: {exc}", path=str(self._world_dir)) from exc
        return used_pages

    def _reserve(self, txn: _Txn, pending: PendingBatch) -> int:
        """Allocate the blocks this transaction may write; the pages in use before it."""
        if self._reservation is None:
            raise KernelInvariantError("a read-only store does not write")
        info = self._env.info()
        used_pages = int(info["last_pgno"]) + 1
        map_pages = int(info["map_size"]) // self._psize
        if self._reservation.reserved_bytes >= map_pages * self._psize:
            # The whole map is allocated and LMDB writes nothing past it: whatever this
            # transaction takes is covered, so its bound need not be computed.
            self.last_commit_pages_bound = map_pages - used_pages
            return used_pages
        dbs = {
            "journal": self._journal_db,
            "cas": self._cas_db,
            "meta": self._meta_db,
            "reclaim": self._reclaim_db,
            "doomed": self._doomed_db,
        }
        trees = []
        for name, writes in batch_writes(pending, self._psize).items():
            if writes.puts or writes.deletes:
                stat = txn.stat(dbs[name])
                shape = TreeStat(stat["depth"], stat["branch_pages"], stat["leaf_pages"])
                trees.append((writes, shape))
        used_pages, self.last_commit_pages_bound = _reserve(self._env, self._reservation, trees)
        return used_pages

    def _put_pending(self, txn: _Txn, pending: PendingBatch) -> None:
        reclaim_db, doomed_db = self._reclaim_db, self._doomed_db
        if reclaim_db is None or doomed_db is None:
            raise KernelInvariantError("a writable store has the reclaim databases")
        if pending.clear_marks:
            txn.drop(reclaim_db, delete=False)
        for digest, mark in pending.marks.items():
            if mark is not None:
                txn.put(digest, mark, db=reclaim_db)
            else:
                txn.delete(digest, db=reclaim_db)
        for row, write in pending.doomed.items():
            if write:
                txn.put(row, b"", db=doomed_db)
            else:
                txn.delete(row, db=doomed_db)
        for digest, data in pending.cas.items():
            if data is None:
                txn.delete(digest, db=self._cas_db)
                txn.delete(digest, db=reclaim_db)
            elif (
                not txn.put(digest, data, overwrite=False, db=self._cas_db)
                and txn.get(digest, db=self._cas_db) != data
            ):
                # Equal keys mean equal bytes, unless the stored copy rotted: then this put
                # repairs it, at the price of one read when a blob is stored twice.
                txn.put(digest, data, db=self._cas_db)
        for key, value in pending.meta.items():
            if value is None:
                txn.delete(key, db=self._meta_db)
            else:
                txn.put(key, value, db=self._meta_db)
        self._append_journal(txn, pending)

    def _append_journal(self, txn: _Txn, pending: PendingBatch) -> None:
        """Check that the batch continues the journal exactly where it ends (so the journal
        has no gap), then append its records, through one cursor."""
        head = pending.head_before
        with txn.cursor(db=self._journal_db) as cursor:
            last = codec.seq_from_key(cursor.key()) if cursor.last() else 0
            if last != head:
                raise KernelInvariantError(f"journal head is {last}; the batch was built on {head}")
            entries = txn.stat(self._journal_db)["entries"]
            if entries != last:
                raise StoreJournalGapError(
                    f"the journal ends at {last} but holds {entries} records", head=last
                )
            if not pending.journal:
                return
            items = [
                (codec.seq_key(seq), raw)
                for seq, raw in enumerate(pending.journal, pending.first_seq)
            ]
            _, added = cursor.putmulti(items, overwrite=False, append=True)
        if added != len(items):
            raise KernelInvariantError(f"journal append stored {added} of {len(items)}")

    def _checked_head(self) -> int:
        with self._reading() as txn:
            with txn.cursor(db=self._journal_db) as cursor:
                head = codec.seq_from_key(cursor.key()) if cursor.last() else 0
            entries = txn.stat(self._journal_db)["entries"]
        if entries != head:
            raise StoreJournalGapError(
                f"the journal ends at {head} but holds {entries} records; refusing to append",
                path=str(self._world_dir),
                head=head,
                entries=entries,
            )
        return head

    def _grow(self) -> None:
        current = self._env.info()["map_size"]
        limit = self._limits.map_size_bytes_max
        if current >= limit:
            raise StoreFullError(
                f"the store reached map_size_bytes_max ({limit} bytes)",
                path=str(self._world_dir),
                limit="map_size_bytes_max",
                limit_value=limit,
            )
        try:
            self._env.set_mapsize(min(current * 2, limit))
        except lmdb.Error as exc:
            # The file could not be extended to the new map (with WRITEMAP LMDB ftruncates it
            # to the map size); py-lmdb has invalidated the environment, so the store closes:
            # nothing of the batch was written, and a reopen finds the last commit.
            self._closed = True
            self._release()
            kind = StoreFullError if isinstance(exc, lmdb.DiskError) else StoreIoError
            raise kind(f"cannot grow the map: {exc}", path=str(self._world_dir)) from exc
        self.map_growths += 1


# --------------------------------------------------------------------------------------------
# Views


class LmdbJournal(JournalWrites):
    """The `journal` database. Sequence numbers start at 1; `head()` is 0 when empty."""

    _store: LmdbStore

    def __init__(self, store: LmdbStore) -> None:
        self._store = store

    def head(self) -> int:
        """The last sequence number, or 0 for an empty journal."""
        store = self._store
        with store._reading() as txn, txn.cursor(db=store._journal_db) as cursor:
            return codec.seq_from_key(cursor.key()) if cursor.last() else 0

    def read(
        self, from_seq: int = codec.SEQ_FIRST, to_seq: int | None = None, limit: int | None = None
    ) -> Iterator[tuple[int, cbor.Value]]:
        """Yield `(seq, record)` from `from_seq` to `to_seq` (inclusive; the head when None),
        at most `limit` records, checking contiguity and canonical form of every record."""
        return decoded(self.read_encoded(from_seq, to_seq, limit))

    def read_encoded(
        self, from_seq: int = codec.SEQ_FIRST, to_seq: int | None = None, limit: int | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """`read`'s records as their stored bytes, checked for contiguity only."""
        return read_journal_encoded(
            self._chunk,
            from_seq,
            to_seq,
            limit,
            seq_max=codec.SEQ_MAX,
            chunk_records=_READ_CHUNK_RECORDS,
        )

    def _chunk(self, start: int, last: int, count: int) -> list[tuple[int, bytes]]:
        chunk: list[tuple[int, bytes]] = []
        size_bytes = 0
        store = self._store
        with store._reading() as txn, txn.cursor(db=store._journal_db) as cursor:
            if not cursor.set_range(codec.seq_key(start)):
                return chunk
            for key, raw in cursor:
                seq = codec.seq_from_key(key)
                if seq > last:
                    break
                chunk.append((seq, raw))
                size_bytes += len(raw)
                if len(chunk) >= count or size_bytes >= _READ_CHUNK_BYTES:
                    break
        return chunk


class LmdbCas(CasWrites):
    """The `cas` database: BLAKE3 digest -> raw bytes, verified on every read."""

    _store: LmdbStore

    def __init__(self, store: LmdbStore) -> None:
        self._store = store

    def get(self, content_hash: Hash | str) -> bytes:
        """The blob, checked against its hash."""
        checked = hashing.parse(content_hash)
        store = self._store
        data = store._read_value(checked.digest, store._cas_db)
        if data is None:
            raise StoreNotFoundError(f"no blob {checked}", hash=str(checked))
        return codec.verify_blob(checked, data)

    def has(self, content_hash: Hash | str) -> bool:
        """Whether a blob is stored under this hash (its bytes are not checked)."""
        checked = hashing.parse(content_hash)
        store = self._store
        return store._read_value(checked.digest, store._cas_db) is not None

    def hashes(self) -> Iterator[Hash]:
        """Every stored hash in digest order, read in chunks of short transactions."""
        start = b""
        while True:
            chunk = self._chunk(start)
            yield from (Hash.from_digest(digest) for digest in chunk)
            if len(chunk) < _READ_CHUNK_RECORDS:
                return
            # The smallest key greater than the last one seen.
            start = chunk[-1] + b"\x00"

    def mark(self, content_hash: Hash | str) -> Mark | None:
        """The blob's reclaim mark, if any."""
        checked = hashing.parse(content_hash)
        store = self._store
        if store._reclaim_db is None:
            return None
        raw = store._read_value(checked.digest, store._reclaim_db)
        return None if raw is None else codec.decode_mark(raw)

    def marks_count(self) -> int:
        """How many blobs carry a mark."""
        store = self._store
        if store._reclaim_db is None:
            return 0
        with store._reading() as txn:
            return int(txn.stat(store._reclaim_db)["entries"])

    def doomed(self, before_seq: int, limit: int | None = None) -> list[tuple[int, Hash]]:
        """The first `limit` doomed rows with a sequence below `before_seq`, in (sequence,
        digest) order."""
        store = self._store
        if store._doomed_db is None or store.doomed_empty:
            return []
        end = codec.seq_key(before_seq)
        rows: list[tuple[int, Hash]] = []
        with store._reading() as txn, txn.cursor(db=store._doomed_db) as cursor:
            if not store.readonly:
                store.doomed_empty = txn.stat(store._doomed_db)["entries"] == 0
            for key in cursor.iternext(keys=True, values=False):
                if key[: codec.SEQ_KEY_BYTES] >= end:
                    break
                if limit is not None and len(rows) >= limit:
                    break
                seq = codec.seq_from_key(key[: codec.SEQ_KEY_BYTES])
                rows.append((seq, Hash.from_digest(key[codec.SEQ_KEY_BYTES :])))
        return rows

    def _chunk(self, start: bytes) -> list[bytes]:
        store = self._store
        with store._reading() as txn, txn.cursor(db=store._cas_db) as cursor:
            if not cursor.set_range(start):
                return []
            keys: list[bytes] = []
            for key in cursor.iternext(keys=True, values=False):
                keys.append(key)
                if len(keys) >= _READ_CHUNK_RECORDS:
                    break
            return keys


class LmdbMeta(MetaWrites):
    """The `meta` database: UTF-8 text key -> canonical value."""

    _store: LmdbStore

    def __init__(self, store: LmdbStore) -> None:
        self._store = store

    def get(self, key: str, default: cbor.Value | _Absent = _ABSENT) -> cbor.Value:
        """The value of `key`; `default` if absent and given, else `store.not_found`."""
        store = self._store
        raw_key = codec.meta_key(key, store.limits)
        raw = store._read_value(raw_key, store._meta_db)
        if raw is not None:
            return codec.decode_meta_value(key, raw)
        if isinstance(default, _Absent):
            raise StoreNotFoundError(f"no meta key {key!r}", key=key)
        return default

    def has(self, key: str) -> bool:
        """Whether `key` is set."""
        store = self._store
        raw_key = codec.meta_key(key, store.limits)
        with store._reading() as txn:
            return txn.get(raw_key, db=store._meta_db) is not None

    def keys(self) -> list[str]:
        """Every key in UTF-8 byte order (meta is small by design, so this is one read)."""
        store = self._store
        with store._reading() as txn, txn.cursor(db=store._meta_db) as cursor:
            return [key.decode("utf-8") for key in cursor.iternext(keys=True, values=False)]
