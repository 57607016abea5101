"""The PostgreSQL store's commit path: a batch is one call of the server-side function
`aos_flush_v1` (one round trip), a fenced call writes nothing of any kind of write, the
function is created by the first writer of a database (also of one made before it existed,
and when writers race), and retention's reads of doomed rows are answered from the writer's
memory while they agree with a reader. A real server throughout."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.store import StoreFencedError
from aos.kernel.store.interface import Mark
from aos.kernel.store.pg_store import PG_SEQ_MAX, PgStore, open_pg_store
from tests.pg_cluster import PgCluster
from tests.store_backends import world_id

FLUSH_SIGNATURE = (
    "aos_flush_v1(text, bigint, bigint, bigint, boolean, bytea[], bytea[], bytea[], "
    "bigint[], bytea[], bigint[], bytea[], bytea[], bytea[], bytea[], bytea[], bytea[], "
    "bytea[], bigint, bytea[])"
)


def event(n: int) -> dict[str, Any]:
    return {"kind": "domain_event", "n": n}


@pytest.fixture
def writer(pg_store_dsn: str, tmp_path: Path) -> Iterator[PgStore]:
    """A writer of a world of the test's own."""
    with open_pg_store(pg_store_dsn, world_id(tmp_path), sync=False) as store:
        yield store


def everything(store: PgStore) -> tuple[Any, ...]:
    """All a reader sees of a world, marks and doomed rows included."""
    hashes = list(store.cas.hashes())
    return (
        store.journal.head(),
        list(store.journal.read()),
        {h: (store.cas.get(h), store.cas.mark(h)) for h in hashes},
        store.cas.marks_count(),
        store.cas.doomed(PG_SEQ_MAX),
        {key: store.meta.get(key) for key in list(store.meta.keys())},
    )


def fill(store: PgStore) -> tuple[Hash, Hash]:
    """A world with a journal, blobs (one young, one doomed at 1) and meta."""
    with store.batch() as batch:
        batch.journal_append([event(1)])
        young, doomed = batch.cas_put(b"young"), batch.cas_put(b"doomed")
        batch.cas_mark(young, Mark("young", 1))
        batch.cas_mark(doomed, Mark("doomed", 1))
        batch.meta_put("kept", 1)
        batch.meta_put("dropped", 2)
    return young, doomed


def every_kind_of_write(store: PgStore, young: Hash, doomed: Hash) -> None:
    with store.batch() as batch:
        batch.journal_append([event(2), event(3)])
        fresh = batch.cas_put(b"fresh")
        batch.cas_clear_marks()
        batch.cas_mark(fresh, Mark("doomed", 2))
        batch.cas_mark(young, None)
        batch.cas_forget_doomed(1, doomed)
        batch.cas_delete(doomed)
        batch.meta_put("kept", 10)
        batch.meta_delete("dropped")


def test_a_batch_of_every_kind_of_write_is_one_round_trip(
    pg_store_dsn: str, writer: PgStore
) -> None:
    world = writer.world
    young, doomed = fill(writer)
    sent = writer.round_trips
    every_kind_of_write(writer, young, doomed)
    assert writer.round_trips == sent + 1
    with open_pg_store(pg_store_dsn, world, readonly=True) as reader:
        assert reader.journal.head() == 3
        assert reader.cas.mark(young) is None
        assert not reader.cas.has(doomed)
        fresh = hash_bytes(b"fresh")
        assert reader.cas.doomed(PG_SEQ_MAX) == [(2, fresh)]
        assert reader.cas.mark(fresh) == Mark("doomed", 2)
        assert reader.cas.marks_count() == 1
        assert {key: reader.meta.get(key) for key in list(reader.meta.keys())} == {"kept": 10}
        assert everything(writer) == everything(reader)


def test_a_fenced_batch_of_every_kind_of_write_writes_nothing(
    pg_store_dsn: str, writer: PgStore
) -> None:
    world = writer.world
    young, doomed = fill(writer)
    with open_pg_store(pg_store_dsn, world, sync=False) as newer:
        before = everything(newer)
        with pytest.raises(StoreFencedError) as refused:
            every_kind_of_write(writer, young, doomed)
        assert refused.value.detail["current_epoch"] == newer.epoch
        assert everything(newer) == before
        # The fenced writer's memory did not take the refused batch in either.
        assert writer.cas.has(doomed)
        assert writer.cas.doomed(PG_SEQ_MAX) == newer.cas.doomed(PG_SEQ_MAX)


def test_doomed_rows_below_a_horizon_are_read_once_and_agree_with_a_reader(
    pg_store_dsn: str, writer: PgStore
) -> None:
    world = writer.world
    blobs = [writer.cas.put(bytes([n])) for n in range(4)]
    with open_pg_store(pg_store_dsn, world, readonly=True) as reader:

        def agree(before: int, limit: int | None = None) -> None:
            assert writer.cas.doomed(before, limit) == reader.cas.doomed(before, limit)

        with writer.batch() as batch:
            for seq, blob in enumerate(blobs, start=3):
                batch.cas_mark(blob, Mark("doomed", seq))
        agree(6)  # read from the server: rows 3, 4, 5
        sent = writer.round_trips
        agree(6, 2)
        agree(4)
        agree(3)
        with writer.batch() as batch:
            batch.cas_forget_doomed(3, blobs[0])
            batch.cas_mark(blobs[0], Mark("doomed", 1))  # below the horizon: remembered
            batch.cas_mark(blobs[1], Mark("doomed", 9))  # above it: not known yet
        agree(6)
        agree(2, 1)
        assert writer.round_trips == sent + 1  # the batch, no read
        agree(10)  # a later horizon is read once
        agree(10)
        assert writer.round_trips == sent + 2


def test_a_list_cut_by_its_limit_is_read_again(pg_store_dsn: str, writer: PgStore) -> None:
    world = writer.world
    blobs = [writer.cas.put(bytes([n])) for n in range(3)]
    with writer.batch() as batch:
        for blob in blobs:
            batch.cas_mark(blob, Mark("doomed", 2))
    with open_pg_store(pg_store_dsn, world, readonly=True) as reader:
        cut = writer.cas.doomed(5, 2)
        assert cut == reader.cas.doomed(5, 2)
        sent = writer.round_trips
        # Two of three rows do not tell what lies below 5: the next question asks the server.
        assert writer.cas.doomed(5) == reader.cas.doomed(5)
        assert len(writer.cas.doomed(5)) == 3
        assert writer.round_trips == sent + 1


@pytest.fixture
def fresh_database(pg_cluster: PgCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A database of its own (the tests below drop or race to create the flush function)."""
    name = "aos_flush_" + world_id(request.node.name)[2:]
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
    yield pg_cluster.dsn(name)
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")  # type: ignore[arg-type]


def test_a_writer_creates_the_flush_function_in_a_database_made_without_it(
    fresh_database: str,
) -> None:
    with open_pg_store(fresh_database, "old", sync=False) as store:
        store.journal.append([event(1)])
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute(f"DROP FUNCTION {FLUSH_SIGNATURE}")  # type: ignore[arg-type]
    with open_pg_store(fresh_database, "old", sync=False) as store:
        assert store.journal.append([event(2)]) == (2, 2)
    with open_pg_store(fresh_database, "old", readonly=True) as reader:
        assert [seq for seq, _ in reader.journal.read()] == [1, 2]


def test_first_writers_racing_on_an_empty_database_all_open_and_commit(
    fresh_database: str,
) -> None:
    writers = 4
    start = threading.Barrier(writers)
    failures: list[BaseException] = []

    def open_and_commit(n: int) -> None:
        try:
            start.wait()
            with open_pg_store(fresh_database, f"w{n}", sync=False) as store:
                store.journal.append([event(n)])
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=open_and_commit, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    for n in range(writers):
        with open_pg_store(fresh_database, f"w{n}", readonly=True) as reader:
            assert [record for _, record in reader.journal.read()] == [event(n)]


def test_a_writer_waits_out_another_creating_the_flush_function(
    fresh_database: str,
) -> None:
    with open_pg_store(fresh_database, "first", sync=False):
        pass
    with psycopg.connect(fresh_database, autocommit=True) as other:
        definition = other.execute(
            "SELECT pg_get_functiondef(to_regprocedure(%s))", (FLUSH_SIGNATURE,)
        ).fetchone()
        assert definition is not None
        other.execute(f"DROP FUNCTION {FLUSH_SIGNATURE}")  # type: ignore[arg-type]
        other.execute("BEGIN")
        other.execute(definition[0])
        opened: list[int] = []

        def open_and_commit() -> None:
            with open_pg_store(fresh_database, "second", sync=False) as store:
                opened.append(store.journal.append([event(1)])[0])

        opener = threading.Thread(target=open_and_commit)
        opener.start()
        while opener.is_alive() and not waiting_on_a_lock(fresh_database):
            opener.join(0.01)  # until the opener's CREATE FUNCTION waits on ours
        other.execute("COMMIT")
        opener.join()
    assert opened == [1]


def waiting_on_a_lock(dsn: str) -> bool:
    """Whether a session of the database waits on a lock (asked in a transaction of its own:
    activity statistics stay fixed within one)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = (
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        return bool(conn.execute(query).fetchall())
