"""The server store: many worlds in one PostgreSQL database, one fenced writer per world.

Layout (spec/07-storage.md §PostgreSQL): every table is keyed by the world id first, so that a
world's rows sit together (and on one shard if the tables are distributed by `world` with
Citus). `aos_worlds` holds one row per world: its writer `epoch` and its journal `head`.
`aos_journal` (world, seq) -> canonical record; `aos_cas` (world, digest) -> raw bytes (the
CAS is per world, not global); `aos_meta` (world, key) -> canonical value; `aos_marks`
(world, digest) -> reclaim mark; `aos_doomed` (world, seq, digest): rows of doomed marks.

Fencing: opening a world for writing takes it by incrementing its epoch. Every batch commit
is one call of the server-side function `aos_flush_v1` (created with the schema), one round
trip and one transaction: it first runs
`UPDATE aos_worlds SET head = new WHERE world = w AND epoch = mine AND head = old`; no row
updated means another writer took the world, and it returns false having written nothing
(`store.fenced`), so a fenced writer writes nothing. Then it applies the batch's writes from
arrays. The row lock that UPDATE takes also orders a takeover after an in-flight commit. No
advisory locks.

All SQL of the backend lives in this module.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, LiteralString

import psycopg

from aos.kernel import cbor, hashing
from aos.kernel.hashing import Hash
from aos.kernel.store import codec, pg_owner
from aos.kernel.store.batch import PendingBatch
from aos.kernel.store.errors import (
    StoreClosedError,
    StoreError,
    StoreFencedError,
    StoreFullError,
    StoreIoError,
    StoreJournalGapError,
    StoreMissingError,
    StoreNotFoundError,
    StoreReadonlyError,
    StoreUnavailableError,
    StoreUsageError,
)
from aos.kernel.store.interface import CommitTimes, Mark
from aos.kernel.store.limits import MIB, StoreLimits
from aos.kernel.store.views import (
    CasWrites,
    JournalWrites,
    MetaWrites,
    decoded,
    read_journal_encoded,
)

# bigint is signed: the last sequence number PostgreSQL can hold.
PG_SEQ_MAX = 2**63 - 1
# A btree entry is at most about 2.7 KB; meta keys are index keys.
PG_META_KEY_BYTES_MAX = 2048
CONNECT_TIMEOUT_S_DEFAULT = 10
# Connecting retries a server that refuses or is restarting (`pg_ctl restart`, a failover)
# for at most this long before `store.unavailable`; the wait between attempts doubles from
# CONNECT_BACKOFF_MS_MIN up to `connect_backoff_ms_max`.
CONNECT_WAIT_MS_MAX_DEFAULT = 15_000
CONNECT_BACKOFF_MS_MIN = 25
CONNECT_BACKOFF_MS_MAX_DEFAULT = 1_000
_READ_CHUNK = 1024
# The writer's cache of its own CAS (see `_WriterCache`).
CACHE_BLOB_BYTES_MAX = 32 * MIB
CACHE_DIGESTS_MAX = 1_000_000

SCHEMA: Final[tuple[LiteralString, ...]] = (
    """CREATE TABLE IF NOT EXISTS aos_worlds (
        world text PRIMARY KEY, epoch bigint NOT NULL, head bigint NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS aos_journal (
        world text NOT NULL, seq bigint NOT NULL, record bytea NOT NULL,
        PRIMARY KEY (world, seq))""",
    """CREATE TABLE IF NOT EXISTS aos_cas (
        world text NOT NULL, digest bytea NOT NULL, data bytea NOT NULL,
        PRIMARY KEY (world, digest))""",
    """CREATE TABLE IF NOT EXISTS aos_meta (
        world text NOT NULL, key bytea NOT NULL, value bytea NOT NULL,
        PRIMARY KEY (world, key))""",
    """CREATE TABLE IF NOT EXISTS aos_marks (
        world text NOT NULL, digest bytea NOT NULL, mark bytea NOT NULL,
        PRIMARY KEY (world, digest))""",
    """CREATE TABLE IF NOT EXISTS aos_doomed (
        world text NOT NULL, seq bigint NOT NULL, digest bytea NOT NULL,
        PRIMARY KEY (world, seq, digest))""",
    pg_owner.SCHEMA,
)


def _put_and_delete_sql(
    table: LiteralString, key: LiteralString, value: LiteralString, arg: LiteralString
) -> LiteralString:
    """The flush function's deletes then upserts of a key -> value table, from its arguments
    `{arg}_gone`, `{arg}_keys` and `{arg}_values`."""
    return f"""    IF cardinality({arg}_gone) > 0 THEN
        DELETE FROM {table} WHERE world = w AND {key} = ANY({arg}_gone);
    END IF;
    IF cardinality({arg}_keys) > 0 THEN
        INSERT INTO {table} (world, {key}, {value})
            SELECT w, k, v FROM unnest({arg}_keys, {arg}_values) AS t(k, v)
            ON CONFLICT (world, {key}) DO UPDATE SET {value} = EXCLUDED.{value};
    END IF;
"""


# A whole batch commit in one call, so one round trip (and, in autocommit, one transaction):
# the epoch claim and head move first (no row updated: nothing is written and it returns
# false), then each kind of write from arrays, in the order a batch applies them. Its name
# carries a version: a changed body gets a new name, so writers of both versions can share a
# database while they are rolled over. With Citus, distribute it by its first argument,
# colocated with `aos_worlds`.
_FLUSH_SIGNATURE: Final = (
    "aos_flush_v1(text, bigint, bigint, bigint, boolean, bytea[], bytea[], bytea[], "
    "bigint[], bytea[], bigint[], bytea[], bytea[], bytea[], bytea[], bytea[], bytea[], "
    "bytea[], bigint, bytea[])"
)
_CREATE_FLUSH: Final = (
    """CREATE FUNCTION aos_flush_v1(
    w text, epoch_mine bigint, head_old bigint, head_new bigint, clear_marks boolean,
    mark_keys bytea[], mark_values bytea[], mark_gone bytea[],
    doomed_seqs bigint[], doomed_digests bytea[], undoomed_seqs bigint[], undoomed_digests bytea[],
    cas_keys bytea[], cas_values bytea[], cas_gone bytea[],
    meta_keys bytea[], meta_values bytea[], meta_gone bytea[],
    journal_first bigint, journal bytea[]) RETURNS boolean LANGUAGE plpgsql AS $flush$
BEGIN
    UPDATE aos_worlds SET head = head_new
        WHERE world = w AND epoch = epoch_mine AND head = head_old;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF clear_marks THEN
        DELETE FROM aos_marks WHERE world = w;
    END IF;
"""
    + _put_and_delete_sql("aos_marks", "digest", "mark", "mark")
    + """    IF cardinality(doomed_seqs) > 0 THEN
        INSERT INTO aos_doomed (world, seq, digest)
            SELECT w, s, d FROM unnest(doomed_seqs, doomed_digests) AS t(s, d)
            ON CONFLICT DO NOTHING;
    END IF;
    IF cardinality(undoomed_seqs) > 0 THEN
        DELETE FROM aos_doomed WHERE world = w AND (seq, digest) IN
            (SELECT s, d FROM unnest(undoomed_seqs, undoomed_digests) AS t(s, d));
    END IF;
    IF cardinality(cas_gone) > 0 THEN
        -- A deleted blob loses its mark with it.
        WITH gone AS (DELETE FROM aos_cas WHERE world = w AND digest = ANY(cas_gone)
                RETURNING world, digest)
            DELETE FROM aos_marks m USING gone
                WHERE m.world = gone.world AND m.digest = gone.digest;
    END IF;
    IF cardinality(cas_keys) > 0 THEN
        -- Equal digests mean equal bytes, unless the stored copy rotted: the put repairs it.
        INSERT INTO aos_cas (world, digest, data)
            SELECT w, k, v FROM unnest(cas_keys, cas_values) AS t(k, v)
            ON CONFLICT (world, digest) DO UPDATE SET data = EXCLUDED.data
            WHERE aos_cas.data IS DISTINCT FROM EXCLUDED.data;
    END IF;
"""
    + _put_and_delete_sql("aos_meta", "key", "value", "meta")
    + """    IF cardinality(journal) > 0 THEN
        INSERT INTO aos_journal (world, seq, record)
            SELECT w, journal_first + n - 1, r FROM unnest(journal) WITH ORDINALITY AS t(r, n);
    END IF;
    RETURN true;
END
$flush$"""
)
_FLUSH: Final = (
    "SELECT aos_flush_v1(%s, %s, %s, %s, %s, %s::bytea[], %s::bytea[], %s::bytea[], "
    "%s::bigint[], %s::bytea[], %s::bigint[], %s::bytea[], %s::bytea[], %s::bytea[], "
    "%s::bytea[], %s::bytea[], %s::bytea[], %s::bytea[], %s, %s::bytea[])"
)

_TAKE: Final = """INSERT INTO aos_worlds (world, epoch, head) VALUES (%s, 1, 0)
    ON CONFLICT (world) DO UPDATE SET epoch = aos_worlds.epoch + 1 RETURNING epoch, head"""
_WORLD_ROW: Final = "SELECT epoch, head FROM aos_worlds WHERE world = %s"
_JOURNAL_EXTENT: Final = "SELECT count(*), coalesce(max(seq), 0) FROM aos_journal WHERE world = %s"


class _UnclaimedError(Exception):
    """The flush function's epoch claim updated no row: it wrote nothing."""


class _Absent:
    """Marks a parameter that was not given (None is a valid stored value)."""


_ABSENT: Final = _Absent()


def open_pg_store(
    conninfo: str,
    world: str,
    *,
    world_dir: Path | None = None,
    sync: bool = True,
    readonly: bool = False,
    limits: StoreLimits | None = None,
    connect_timeout_s: int = CONNECT_TIMEOUT_S_DEFAULT,
    connect_wait_ms_max: int = CONNECT_WAIT_MS_MAX_DEFAULT,
    connect_backoff_ms_max: int = CONNECT_BACKOFF_MS_MAX_DEFAULT,
) -> PgStore:
    """Open `world` in the database at `conninfo` (a libpq URI or key=value string).

    A writer creates the schema and the world's row if needed and takes the world (its epoch
    goes up by one: any earlier writer is fenced from then on). `readonly=True` takes nothing
    and needs an existing world (`store.missing`). `sync=False` turns off
    `synchronous_commit` for this connection: a server crash may lose the last commits, never
    tear one. A server that refuses connections is retried for `connect_wait_ms_max` (it may
    be restarting); one still unreachable then is `store.unavailable`.
    """
    limits = limits if limits is not None else StoreLimits()
    if limits.meta_key_bytes_max > PG_META_KEY_BYTES_MAX:
        raise StoreUsageError(
            f"meta_key_bytes_max {limits.meta_key_bytes_max} exceeds the PostgreSQL backend's "
            f"{PG_META_KEY_BYTES_MAX}"
        )
    if connect_wait_ms_max < 0 or connect_backoff_ms_max < CONNECT_BACKOFF_MS_MIN:
        raise StoreUsageError(
            f"connect_wait_ms_max must be >= 0 and connect_backoff_ms_max >= "
            f"{CONNECT_BACKOFF_MS_MIN} (got {connect_wait_ms_max}, {connect_backoff_ms_max})"
        )

    def connect() -> psycopg.Connection:
        return _connect(
            conninfo,
            sync=sync,
            readonly=readonly,
            timeout_s=connect_timeout_s,
            wait_ms_max=connect_wait_ms_max,
            backoff_ms_max=connect_backoff_ms_max,
        )

    conn = connect()
    try:
        epoch, head = _take(conn, world) if not readonly else _existing(conn, world)
        store = PgStore(conn, world, epoch, head, world_dir, limits, readonly=readonly)
        store.reconnect = connect
    except BaseException:
        conn.close()
        raise
    return store


def _connect(
    conninfo: str,
    *,
    sync: bool,
    readonly: bool,
    timeout_s: int,
    wait_ms_max: int = CONNECT_WAIT_MS_MAX_DEFAULT,
    backoff_ms_max: int = CONNECT_BACKOFF_MS_MAX_DEFAULT,
) -> psycopg.Connection:
    """A configured connection. A server that refuses (down, starting up, shutting down) is
    tried again after a backoff doubling up to `backoff_ms_max`, for at most `wait_ms_max`
    in all. Every refusal is retried: libpq gives no SQLSTATE for a failed connection, so a
    wrong password or database is told from a restarting server only by its message, which
    `store.unavailable` carries once the wait is over."""
    deadline = time.monotonic() + wait_ms_max / 1000
    backoff_ms = CONNECT_BACKOFF_MS_MIN
    while True:
        try:
            return _connect_once(conninfo, sync=sync, readonly=readonly, timeout_s=timeout_s)
        except StoreUnavailableError:
            if time.monotonic() + backoff_ms / 1000 > deadline:
                raise
        time.sleep(backoff_ms / 1000)
        backoff_ms = min(backoff_ms * 2, backoff_ms_max)


def _connect_once(
    conninfo: str, *, sync: bool, readonly: bool, timeout_s: int
) -> psycopg.Connection:
    with _mapped("connect to the store's database"):
        conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=timeout_s)
    try:
        with _mapped("configure the store's connection"):
            if not sync:
                conn.execute("SET synchronous_commit = off")
            if readonly:
                conn.execute("SET default_transaction_read_only = on")
    except BaseException:
        conn.close()
        raise
    return conn


def _take(conn: psycopg.Connection, world: str) -> tuple[int, int]:
    """Create the schema and the world's row if missing, and take the world (epoch + 1)
    unless its owner's lease forbids it (pg_owner.admit)."""
    with _mapped(f"take world {world!r}"):
        try:
            _create_schema(conn)
        except psycopg.errors.UniqueViolation:
            # Two first openers raced creating the same table: the other one made it.
            _create_schema(conn)
        with conn.transaction():
            # A live owner's world is refused before anything changes (`store.owned`).
            pg_owner.admit(conn, world)
            row = conn.execute(_TAKE, (world,)).fetchone()
            if row is not None:
                pg_owner.register(conn, world, int(row[0]))
            count, last = _one(conn, _JOURNAL_EXTENT, (world,))
    if row is None:
        raise StoreIoError(f"taking world {world!r} returned no row")
    epoch, head = int(row[0]), int(row[1])
    if last != head or count != head:
        raise StoreJournalGapError(
            f"world {world!r} records head {head}; its journal ends at {last} and holds "
            f"{count} records: refusing to append",
            world=world,
            head=head,
            entries=count,
        )
    return epoch, head


def _create_schema(conn: psycopg.Connection) -> None:
    with conn.transaction():
        for statement in SCHEMA:
            conn.execute(statement)
        _create_flush_function(conn)


def _create_flush_function(conn: psycopg.Connection) -> None:
    """Create `aos_flush_v1` if missing (never replaced: a new body is a new version)."""
    if _one(conn, "SELECT to_regprocedure(%s) IS NOT NULL", (_FLUSH_SIGNATURE,))[0]:
        return
    try:
        with conn.transaction():
            conn.execute(_CREATE_FLUSH)
    except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateFunction):
        pass  # another opener created it at the same moment


def _existing(conn: psycopg.Connection, world: str) -> tuple[int, int]:
    with _mapped(f"read world {world!r}"):
        exists = conn.execute("SELECT to_regclass('aos_worlds') IS NOT NULL").fetchone()
        row = conn.execute(_WORLD_ROW, (world,)).fetchone() if exists and exists[0] else None
    if row is None:
        raise StoreMissingError(f"no world {world!r} in the database", world=world)
    return int(row[0]), int(row[1])


def _one(conn: psycopg.Connection, sql: LiteralString, params: Sequence[Any]) -> tuple[Any, ...]:
    row = conn.execute(sql, params).fetchone()
    if row is None:
        raise StoreIoError("an aggregate query returned no row")
    return tuple(row)


@contextmanager
def _mapped(what: str) -> Iterator[None]:
    """psycopg's errors as `store.*` ones: a lost or refused connection is
    `store.unavailable`, anything else the server refuses is `store.io`."""
    try:
        yield
    except StoreError:
        raise
    except psycopg.OperationalError as exc:
        raise StoreUnavailableError(f"cannot {what}: {_first_line(exc)}") from exc
    except psycopg.Error as exc:
        raise StoreIoError(f"cannot {what}: {_first_line(exc)}", sqlstate=exc.sqlstate) from exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class _WriterCache:
    """What the writer knows of its own world's CAS without asking the server: which blobs
    are present, recent blobs' bytes, and marks. Only the writer changes its world (a
    fenced writer's reads may go stale, but it can write nothing), so its own commits keep
    this exact; readers keep no cache. Updated only after a commit succeeds."""

    def __init__(self) -> None:
        self.present: dict[bytes, bool] = {}
        # While every stored digest is in `present` (loaded at open, then kept by commits), a
        # digest missing from it is absent: `has` of a new blob costs no round trip.
        self.present_complete = False
        self.blobs: OrderedDict[bytes, bytes] = OrderedDict()
        self.blob_bytes = 0
        self.marks: dict[bytes, Mark | None] = {}
        # After a commit that cleared every mark, a digest missing from `marks` has none.
        self.marks_complete = False
        # Every doomed row with a sequence below `doomed_below` (the rows at or above it are
        # not known): each flush asks for the rows below retention's horizon, which stays put
        # from one snapshot to the next, so one read per horizon instead of one per flush.
        self.doomed_below = 0
        self.doomed_rows: set[tuple[int, bytes]] = set()

    def saw(self, digest: bytes, data: bytes | None) -> None:
        self.present[digest] = data is not None
        if data is not None and len(data) <= CACHE_BLOB_BYTES_MAX // 16:
            self._keep(digest, data)
        if len(self.present) > CACHE_DIGESTS_MAX:
            self.present.clear()
            self.present_complete = False

    def load(self, digests: list[bytes]) -> None:
        """Every digest of the world, if there are not too many to keep."""
        if len(digests) <= CACHE_DIGESTS_MAX:
            self.present = dict.fromkeys(digests, True)
            self.present_complete = True

    def has(self, digest: bytes) -> bool | None:
        known = self.present.get(digest)
        return False if known is None and self.present_complete else known

    def mark(self, digest: bytes) -> Mark | _Absent | None:
        if digest in self.marks:
            return self.marks[digest]
        return None if self.marks_complete else _ABSENT

    def doomed(self, before_seq: int, limit: int | None) -> list[tuple[int, bytes]] | None:
        """The answer of `PgCas.doomed` if known."""
        if before_seq > self.doomed_below:
            return None
        return sorted(row for row in self.doomed_rows if row[0] < before_seq)[:limit]

    def saw_doomed(self, before_seq: int, limit: int | None, rows: list[tuple[int, bytes]]) -> None:
        """The server's rows below `before_seq`: all of them unless `limit` cut the list."""
        complete = limit is None or len(rows) < limit
        if complete and before_seq > self.doomed_below and len(rows) <= CACHE_DIGESTS_MAX:
            self.doomed_below = before_seq
            self.doomed_rows = set(rows)

    def committed(self, pending: PendingBatch) -> None:
        self._committed_doomed(pending.doomed)
        if pending.clear_marks:
            self.marks.clear()
            self.marks_complete = True
        for digest, raw_mark in pending.marks.items():
            self.marks[digest] = None if raw_mark is None else codec.decode_mark(raw_mark)
        for digest, data in pending.cas.items():
            self.saw(digest, data)
            if data is None:
                self.marks[digest] = None
                self._drop(digest)
        if len(self.marks) > CACHE_DIGESTS_MAX:
            self.marks.clear()
            self.marks_complete = False

    def _committed_doomed(self, rows: dict[bytes, bool]) -> None:
        split = codec.SEQ_KEY_BYTES
        for row, write in rows.items():
            seq = codec.seq_from_key(row[:split])
            if seq >= self.doomed_below:
                continue
            if write:
                self.doomed_rows.add((seq, row[split:]))
            else:
                self.doomed_rows.discard((seq, row[split:]))
        if len(self.doomed_rows) > CACHE_DIGESTS_MAX:
            self.doomed_below = 0
            self.doomed_rows.clear()

    def _keep(self, digest: bytes, data: bytes) -> None:
        self._drop(digest)
        self.blobs[digest] = data
        self.blob_bytes += len(data)
        while self.blob_bytes > CACHE_BLOB_BYTES_MAX:
            _, evicted = self.blobs.popitem(last=False)
            self.blob_bytes -= len(evicted)

    def _drop(self, digest: bytes) -> None:
        old = self.blobs.pop(digest, None)
        if old is not None:
            self.blob_bytes -= len(old)


# --------------------------------------------------------------------------------------------
# The store


class PgStore:
    """A world's store on PostgreSQL. Build it with `open_pg_store` (or `open_store` on a
    world directory that points at a database, see `aos.kernel.store.url`)."""

    def __init__(
        self,
        conn: psycopg.Connection,
        world: str,
        epoch: int,
        head: int,
        world_dir: Path | None,
        limits: StoreLimits,
        *,
        readonly: bool,
    ) -> None:
        self._conn = conn
        self._world = world
        self._epoch = epoch
        self._head = head
        self._world_dir = world_dir if world_dir is not None else Path(f"postgresql:{world}")
        self._limits = limits
        self._readonly = readonly
        self._closed = False
        # A commit whose outcome is unknown (the connection died in it) leaves the writer's
        # idea of the head unreliable: it refuses further batches until reopened.
        self._broken = False
        self._pinned = False
        self._lock = threading.RLock()
        self._batch_thread: int | None = None
        self.reconnect: Callable[[], psycopg.Connection] | None = None
        # Statements sent to the server, each one round trip (the bench reports them).
        self.round_trips = 0
        self.cache: _WriterCache | None = None
        self._commit_times = CommitTimes()
        if not readonly:
            self.cache = _WriterCache()
            digests = self.rows(
                "SELECT digest FROM aos_cas WHERE world = %s LIMIT %s",
                (world, CACHE_DIGESTS_MAX + 1),
            )
            self.cache.load([bytes(row[0]) for row in digests])
        self._journal = PgJournal(self)
        self._cas = PgCas(self)
        self._meta = PgMeta(self)

    @property
    def journal(self) -> PgJournal:
        return self._journal

    @property
    def cas(self) -> PgCas:
        return self._cas

    @property
    def meta(self) -> PgMeta:
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
    def world(self) -> str:
        """The world's id in the database (the key of every row it has)."""
        return self._world

    @property
    def epoch(self) -> int:
        """The writer epoch this store took (or, read-only, saw when it opened)."""
        return self._epoch

    @property
    def commit_times(self) -> CommitTimes:
        return self._commit_times

    @contextmanager
    def batch(self) -> Iterator[PendingBatch]:
        """Group writes into one transaction; see `Store.batch`. The commit checks the epoch
        in the same transaction (`store.fenced` and nothing written if the world was taken)."""
        self._check_writable()
        if self._batch_thread == threading.get_ident():
            raise StoreUsageError("batches do not nest; write through the batch that is open")
        with self._lock:
            self._batch_thread = threading.get_ident()
            try:
                pending = PendingBatch(self._limits, self._head)
                yield pending
                self._commit(pending)
            finally:
                self._batch_thread = None

    @contextmanager
    def consistent(self) -> Iterator[None]:
        """Serve every read in the block from one REPEATABLE READ snapshot."""
        if not self._readonly:
            raise StoreUsageError("consistent reads are for read-only stores")
        with self._lock:
            self._check_open()
            if self._pinned:
                raise StoreUsageError("consistent reads do not nest")
            with _mapped("begin a consistent read"):
                conn = self._connection()
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                # The snapshot is taken by the first query, not by BEGIN: take it now.
                conn.execute("SELECT 1")
            self._pinned = True
            try:
                yield
            finally:
                self._pinned = False
                with _mapped("end a consistent read"):
                    self._conn.execute("COMMIT")

    def close(self) -> None:
        """Close the connection; idempotent. Commits were durable as they returned."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()

    def __enter__(self) -> PgStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------------
    # Queries

    def rows(self, sql: LiteralString, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run one read query for this world (its first parameter is the world id)."""
        with self._lock:
            self._check_open()
            self.round_trips += 1
            with _mapped("read the store"):
                return [tuple(row) for row in self._connection().execute(sql, params)]

    def _connection(self) -> psycopg.Connection:
        """The connection, replaced by a new one (through `_connect`'s retries) if the old one
        was lost, outside a consistent read. A writer may reconnect too: its next commit's
        epoch claim still fences it; a commit cut off in flight breaks the store instead."""
        if self._conn.closed and not self._pinned and self.reconnect is not None:
            self._conn = self.reconnect()
        return self._conn

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the store of world {self._world!r} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._readonly:
            raise StoreReadonlyError(f"the store of world {self._world!r} is open read-only")
        if self._broken:
            raise StoreUnavailableError(
                f"a commit to world {self._world!r} was cut off with its outcome unknown; "
                "reopen the store"
            )

    # ----------------------------------------------------------------------------------------
    # Commit

    def _commit(self, pending: PendingBatch) -> None:
        if pending.is_empty():
            return
        if pending.last_seq > PG_SEQ_MAX:
            raise StoreFullError("the journal has no sequence numbers left", head=self._head)
        conn = self._connection()
        with self._commit_times.timing():
            self._flush(conn, pending)
        self._head = pending.last_seq
        if self.cache is not None:
            self.cache.committed(pending)

    def _flush(self, conn: psycopg.Connection, pending: PendingBatch) -> None:
        """Claim the world at its epoch and head, write and commit: one round trip."""
        try:
            # One statement in autocommit: claim, writes and commit in one round trip.
            self.round_trips += 1
            claimed = conn.execute(_FLUSH, _flush_params(self._world, self._epoch, pending))
            row = claimed.fetchone()
            if row is None or row[0] is not True:
                raise _UnclaimedError
        except _UnclaimedError:
            raise self._refusal(pending.head_before) from None
        except psycopg.OperationalError as exc:
            self._broken = True
            raise StoreUnavailableError(
                f"the commit to world {self._world!r} was cut off: {_first_line(exc)}"
            ) from exc
        except psycopg.Error as exc:
            # Whatever failed, a changed epoch is the reason to report.
            refusal = self._refusal(pending.head_before)
            if isinstance(refusal, StoreFencedError):
                raise refusal from exc
            raise StoreIoError(
                f"the commit to world {self._world!r} failed: {_first_line(exc)}",
                sqlstate=exc.sqlstate,
            ) from exc

    def _refusal(self, head_before: int) -> StoreError:
        """Why a commit was refused: another writer's epoch, or a head that moved."""
        rows = self.rows(_WORLD_ROW, (self._world,))
        epoch = int(rows[0][0]) if rows else None
        if epoch != self._epoch:
            return StoreFencedError(
                f"world {self._world!r} was taken by another writer (epoch {epoch}; this "
                f"writer has {self._epoch}): nothing of the batch was written",
                world=self._world,
                epoch=self._epoch,
                current_epoch=epoch,
            )
        head = int(rows[0][1]) if rows else None
        return StoreJournalGapError(
            f"world {self._world!r} has head {head}; the batch was built on {head_before}",
            world=self._world,
            head=head,
        )


def _flush_params(world: str, epoch: int, pending: PendingBatch) -> tuple[Any, ...]:
    """The arguments of `_FLUSH` for a batch: each kind of write as arrays."""
    return (
        *(world, epoch, pending.head_before, pending.last_seq, pending.clear_marks),
        *_puts_and_deletes(pending.marks),
        *_doomed_rows(pending.doomed, write=True),
        *_doomed_rows(pending.doomed, write=False),
        *_puts_and_deletes(pending.cas),
        *_puts_and_deletes(pending.meta),
        *(pending.first_seq, pending.journal),
    )


def _puts_and_deletes(
    writes: dict[bytes, bytes | None],
) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """Keys and values to put, and keys to delete."""
    puts = [(key, value) for key, value in writes.items() if value is not None]
    gone = [key for key, value in writes.items() if value is None]
    return [key for key, _ in puts], [value for _, value in puts], gone


def _doomed_rows(rows: dict[bytes, bool], *, write: bool) -> tuple[list[int], list[bytes]]:
    """The sequences and digests of the doomed rows to write (or to remove)."""
    split = codec.SEQ_KEY_BYTES
    chosen = [row for row, kept in rows.items() if kept is write]
    return [codec.seq_from_key(row[:split]) for row in chosen], [row[split:] for row in chosen]


# --------------------------------------------------------------------------------------------
# Views


class PgJournal(JournalWrites):
    """The world's rows of `aos_journal`. Sequence numbers start at 1; `head()` is 0 when
    empty."""

    _store: PgStore

    def __init__(self, store: PgStore) -> None:
        self._store = store

    def head(self) -> int:
        """The last sequence number, or 0 for an empty journal."""
        rows = self._store.rows(_WORLD_ROW, (self._store.world,))
        return int(rows[0][1]) if rows else 0

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
            self._chunk, from_seq, to_seq, limit, seq_max=PG_SEQ_MAX, chunk_records=_READ_CHUNK
        )

    def _chunk(self, start: int, last: int, count: int) -> list[tuple[int, bytes]]:
        rows = self._store.rows(
            "SELECT seq, record FROM aos_journal WHERE world = %s AND seq >= %s "
            "AND seq <= %s ORDER BY seq LIMIT %s",
            (self._store.world, start, last, count),
        )
        return [(int(seq), bytes(raw)) for seq, raw in rows]


class PgCas(CasWrites):
    """The world's rows of `aos_cas`: BLAKE3 digest -> raw bytes, verified on every read."""

    _store: PgStore

    def __init__(self, store: PgStore) -> None:
        self._store = store

    def get(self, content_hash: Hash | str) -> bytes:
        """The blob, checked against its hash (the writer's cache holds checked bytes)."""
        checked = hashing.parse(content_hash)
        cache = self._store.cache
        if cache is not None and checked.digest in cache.blobs:
            return cache.blobs[checked.digest]
        rows = self._store.rows(
            "SELECT data FROM aos_cas WHERE world = %s AND digest = %s",
            (self._store.world, checked.digest),
        )
        if not rows:
            if cache is not None:
                cache.saw(checked.digest, None)
            raise StoreNotFoundError(f"no blob {checked}", hash=str(checked))
        data = codec.verify_blob(checked, bytes(rows[0][0]))
        if cache is not None:
            cache.saw(checked.digest, data)
        return data

    def has(self, content_hash: Hash | str) -> bool:
        """Whether a blob is stored under this hash (its bytes are not read)."""
        checked = hashing.parse(content_hash)
        cache = self._store.cache
        known = None if cache is None else cache.has(checked.digest)
        if known is not None:
            return known
        found = bool(
            self._store.rows(
                "SELECT 1 FROM aos_cas WHERE world = %s AND digest = %s",
                (self._store.world, checked.digest),
            )
        )
        if cache is not None:
            cache.present[checked.digest] = found
        return found

    def hashes(self) -> Iterator[Hash]:
        """Every stored hash in digest order, read in chunks."""
        start = b""
        while True:
            chunk = self._store.rows(
                "SELECT digest FROM aos_cas WHERE world = %s AND digest > %s "
                "ORDER BY digest LIMIT %s",
                (self._store.world, start, _READ_CHUNK),
            )
            yield from (Hash.from_digest(bytes(row[0])) for row in chunk)
            if len(chunk) < _READ_CHUNK:
                return
            start = bytes(chunk[-1][0])

    def mark(self, content_hash: Hash | str) -> Mark | None:
        """The blob's reclaim mark, if any."""
        checked = hashing.parse(content_hash)
        cache = self._store.cache
        if cache is not None:
            known = cache.mark(checked.digest)
            if not isinstance(known, _Absent):
                return known
        rows = self._store.rows(
            "SELECT mark FROM aos_marks WHERE world = %s AND digest = %s",
            (self._store.world, checked.digest),
        )
        found = codec.decode_mark(bytes(rows[0][0])) if rows else None
        if cache is not None:
            cache.marks[checked.digest] = found
        return found

    def marks_count(self) -> int:
        """How many blobs carry a mark."""
        rows = self._store.rows(
            "SELECT count(*) FROM aos_marks WHERE world = %s", (self._store.world,)
        )
        return int(rows[0][0])

    def doomed(self, before_seq: int, limit: int | None = None) -> list[tuple[int, Hash]]:
        """The first `limit` doomed rows with a sequence below `before_seq`, in (sequence,
        digest) order."""
        before_seq = min(before_seq, PG_SEQ_MAX)
        cache = self._store.cache
        known = None if cache is None else cache.doomed(before_seq, limit)
        if known is None:
            read = self._store.rows(
                "SELECT seq, digest FROM aos_doomed WHERE world = %s AND seq < %s "
                "ORDER BY seq, digest LIMIT %s",
                (self._store.world, before_seq, limit),
            )
            known = [(int(seq), bytes(digest)) for seq, digest in read]
            if cache is not None:
                cache.saw_doomed(before_seq, limit, known)
        return [(seq, Hash.from_digest(digest)) for seq, digest in known]


class PgMeta(MetaWrites):
    """The world's rows of `aos_meta`: UTF-8 text key -> canonical value."""

    _store: PgStore

    def __init__(self, store: PgStore) -> None:
        self._store = store

    def get(self, key: str, default: cbor.Value | _Absent = _ABSENT) -> cbor.Value:
        """The value of `key`; `default` if absent and given, else `store.not_found`."""
        raw_key = codec.meta_key(key, self._store.limits)
        rows = self._store.rows(
            "SELECT value FROM aos_meta WHERE world = %s AND key = %s",
            (self._store.world, raw_key),
        )
        if rows:
            return codec.decode_meta_value(key, bytes(rows[0][0]))
        if isinstance(default, _Absent):
            raise StoreNotFoundError(f"no meta key {key!r}", key=key)
        return default

    def has(self, key: str) -> bool:
        """Whether `key` is set."""
        raw_key = codec.meta_key(key, self._store.limits)
        return bool(
            self._store.rows(
                "SELECT 1 FROM aos_meta WHERE world = %s AND key = %s",
                (self._store.world, raw_key),
            )
        )

    def keys(self) -> list[str]:
        """Every key in UTF-8 byte order (bytea compares bytewise)."""
        rows = self._store.rows(
            "SELECT key FROM aos_meta WHERE world = %s ORDER BY key", (self._store.world,)
        )
        return [bytes(row[0]).decode("utf-8") for row in rows]
