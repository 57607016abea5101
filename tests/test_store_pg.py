"""The PostgreSQL store beyond the shared conformance tests (those run on both backends in
test_store.py and test_store_properties.py): the epoch fence, many worlds in one database,
corruption written behind the store's back, a lost server, store URLs, and a counter world
made, driven and replay-verified on PostgreSQL through the CLI. A real server throughout."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from aos.cli.main import main
from aos.kernel import cbor
from aos.kernel.hashing import hash_bytes
from aos.kernel.store import (
    StoreCorruptBlobError,
    StoreFencedError,
    StoreJournalGapError,
    StoreMissingError,
    StoreNotFoundError,
    StoreUnavailableError,
    StoreUrlError,
    StoreUsageError,
    open_store,
)
from aos.kernel.store.interface import Mark
from aos.kernel.store.limits import MIB, StoreLimits
from aos.kernel.store.pg_store import (
    PG_META_KEY_BYTES_MAX,
    PgStore,
    open_pg_store,
)
from aos.kernel.store.url import parse_store_url, store_url_path, write_store_url
from aos.kernel.world.world import World
from tests.pg_cluster import free_port
from tests.store_backends import world_id

REPO = Path(__file__).resolve().parent.parent
COUNTER_C = REPO / "manifests" / "counter-c"


def event(n: int) -> dict[str, Any]:
    return {"kind": "domain_event", "n": n}


@pytest.fixture
def world(tmp_path: Path) -> str:
    return world_id(tmp_path)


@pytest.fixture
def writer(pg_store_dsn: str, world: str) -> Iterator[PgStore]:
    with open_pg_store(pg_store_dsn, world, sync=False) as store:
        yield store


def snapshot(store: PgStore) -> tuple[Any, ...]:
    """Everything a reader sees of a world."""
    return (
        store.journal.head(),
        list(store.journal.read()),
        {h: store.cas.get(h) for h in store.cas.hashes()},
        {key: store.meta.get(key) for key in list(store.meta.keys())},
    )


def sql(dsn: str, statement: str, *params: Any) -> None:
    """Write behind the store's back (a fault, or another tool)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement, params)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# The fence


def test_a_second_opener_fences_the_first_and_the_journal_is_unchanged(
    pg_store_dsn: str, world: str, writer: PgStore
) -> None:
    writer.journal.append([event(1), event(2)])
    writer.meta.put("head", 2)
    with open_pg_store(pg_store_dsn, world, sync=False) as newer:
        assert newer.epoch == writer.epoch + 1
        before = snapshot(newer)
        with pytest.raises(StoreFencedError) as refused, writer.batch() as batch:
            batch.journal_append([event(3)])
            batch.cas_put(b"from the old owner")
            batch.meta_put("head", 3)
        assert refused.value.code == "store.fenced"
        assert refused.value.detail["current_epoch"] == newer.epoch
        assert snapshot(newer) == before
        # The new owner goes on where the journal really ends.
        assert newer.journal.append([event(3)]) == (3, 3)


def test_a_fenced_writer_stays_fenced_for_every_kind_of_write(
    pg_store_dsn: str, world: str, writer: PgStore
) -> None:
    writer.journal.append([event(1)])
    kept = writer.cas.put(b"kept")
    newer = open_pg_store(pg_store_dsn, world, sync=False)
    newer.journal.append([event(2)])
    newer.close()  # the new owner leaving does not give the world back
    for write in (
        lambda: writer.cas.put(b"blob"),
        lambda: writer.cas.delete(kept),
        lambda: writer.meta.put("k", 1),
        lambda: writer.journal.append([event(9)]),
    ):
        with pytest.raises(StoreFencedError):
            write()
    with open_pg_store(pg_store_dsn, world, readonly=True) as reader:
        assert [seq for seq, _ in reader.journal.read()] == [1, 2]
        assert reader.cas.has(kept)
        assert not reader.cas.has(hash_bytes(b"blob"))
        assert not reader.meta.has("k")


def test_readers_do_not_take_the_world(pg_store_dsn: str, world: str, writer: PgStore) -> None:
    writer.journal.append([event(1)])
    with open_pg_store(pg_store_dsn, world, readonly=True) as reader:
        assert reader.epoch == writer.epoch
        with reader.consistent():
            writer.journal.append([event(2)])
            assert reader.journal.head() == 1  # one snapshot for the whole block
        assert reader.journal.head() == 2
    assert writer.journal.append([event(3)]) == (3, 3)


def test_a_missing_world_opens_only_for_writing(pg_store_dsn: str, world: str) -> None:
    with pytest.raises(StoreMissingError):
        open_pg_store(pg_store_dsn, world, readonly=True)
    with open_pg_store(pg_store_dsn, world, sync=False) as store:
        assert store.journal.head() == 0
        assert store.epoch == 1


# --------------------------------------------------------------------------------------------
# Many worlds in one database


def test_worlds_in_one_database_are_independent(pg_store_dsn: str, tmp_path: Path) -> None:
    first = open_pg_store(pg_store_dsn, world_id(tmp_path / "a"), sync=False)
    second = open_pg_store(pg_store_dsn, world_id(tmp_path / "b"), sync=False)
    with first, second:
        shared = first.cas.put(b"same bytes")
        assert second.cas.put(b"same bytes") == shared
        first.journal.append([event(1)])
        second.journal.append([event(10), event(11)])
        second.cas.delete(shared)  # the CAS is per world
        first.meta.put("k", "first")
        assert first.cas.get(shared) == b"same bytes"
        assert not second.cas.has(shared)
        assert list(first.journal.read()) == [(1, event(1))]
        assert second.journal.head() == 2
        assert not second.meta.has("k")


# --------------------------------------------------------------------------------------------
# Faults behind the store's back


def test_a_rotten_blob_is_detected_and_a_put_repairs_it(
    pg_store_dsn: str, world: str, writer: PgStore
) -> None:
    h = writer.cas.put(b"important bytes")
    sql(pg_store_dsn, "UPDATE aos_cas SET data = %s WHERE world = %s", b"important bytez", world)
    with open_pg_store(pg_store_dsn, world, readonly=True) as reader:
        with pytest.raises(StoreCorruptBlobError):
            reader.cas.get(h)
        writer.cas.put(b"important bytes")
        assert reader.cas.get(h) == b"important bytes"


def test_a_journal_gap_is_refused_at_open_and_on_read(pg_store_dsn: str, world: str) -> None:
    with open_pg_store(pg_store_dsn, world, sync=False) as store:
        store.journal.append([event(n) for n in range(1, 5)])
    sql(pg_store_dsn, "DELETE FROM aos_journal WHERE world = %s AND seq = 2", world)
    with pytest.raises(StoreJournalGapError):
        open_pg_store(pg_store_dsn, world)
    with open_pg_store(pg_store_dsn, world, readonly=True) as reader:
        with pytest.raises(StoreJournalGapError) as gap:
            list(reader.journal.read())
        assert gap.value.detail == {"expected": 2, "found": 3}


def test_an_unreachable_server_is_unavailable() -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    with pytest.raises(StoreUnavailableError) as refused:
        open_pg_store(dsn, "w", connect_timeout_s=2, connect_wait_ms_max=0)
    assert refused.value.code == "store.unavailable"


def test_a_lost_connection_fails_the_commit_and_the_store_stays_refused(
    pg_store_dsn: str, world: str, writer: PgStore
) -> None:
    writer.journal.append([event(1)])
    with psycopg.connect(pg_store_dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND datname = current_database() "
            "AND application_name = ''"
        )
    with pytest.raises(StoreUnavailableError):
        writer.journal.append([event(2)])
    with pytest.raises(StoreUnavailableError):
        writer.journal.append([event(2)])  # the outcome of a cut-off commit is unknown
    with open_pg_store(pg_store_dsn, world, sync=False) as again:
        assert list(again.journal.read()) == [(1, event(1))]


def test_meta_key_limit_above_the_index_entry_size_is_refused(pg_store_dsn: str) -> None:
    with pytest.raises(StoreUsageError):
        open_pg_store(
            pg_store_dsn,
            "w",
            limits=StoreLimits(meta_key_bytes_max=PG_META_KEY_BYTES_MAX + 1),
        )


# --------------------------------------------------------------------------------------------
# Store URLs and world directories


def test_store_urls_name_a_database_and_a_world() -> None:
    location = parse_store_url("postgresql://u@h:5/db?world=orders&sslmode=disable")
    assert location.world == "orders"
    assert location.conninfo == "postgresql://u@h:5/db?sslmode=disable"
    assert parse_store_url("postgres://h/db", default_world="dir-name").world == "dir-name"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://h/db",  # no world id and no directory to take it from
        "postgresql://h/db?world=",
        "postgresql://h/db?world=a/b",
        "postgresql://h/db?world=" + "w" * 201,
        "mysql://h/db?world=w",
        "/some/path",
    ],
)
def test_bad_store_urls_are_typed_errors(url: str) -> None:
    with pytest.raises(StoreUrlError) as refused:
        parse_store_url(url)
    assert refused.value.code == "store.url"


def test_a_password_never_shows_in_an_error() -> None:
    with pytest.raises(StoreUrlError) as refused:
        parse_store_url("postgresql://u:s3cret@h/db?world=a/b")
    assert "s3cret" not in str(refused.value)
    assert "s3cret" not in json.dumps(refused.value.to_dict())


def test_a_world_directory_points_at_its_server_world(pg_store_dsn: str, tmp_path: Path) -> None:
    directory = tmp_path / "orders"
    write_store_url(directory, f"{pg_store_dsn}?world={world_id(tmp_path)}")
    assert store_url_path(directory).stat().st_mode & 0o777 == 0o600
    with open_store(directory, sync=False) as store:
        assert isinstance(store, PgStore)
        assert store.world == world_id(tmp_path)
        assert store.world_dir == directory
        store.journal.append([event(1)])
    with open_store(directory, readonly=True) as reader:
        assert list(reader.journal.read()) == [(1, event(1))]


# --------------------------------------------------------------------------------------------
# A world on PostgreSQL, through the CLI


def cli(*args: str) -> Any:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if result.stdout.strip() else None


def increment(key: str, by: int) -> str:
    return json.dumps({"$tag": "Increment", "$value": {"id": key, "by": by}})


def test_a_counter_world_on_postgresql_replays_and_verifies(
    pg_store_dsn: str, tmp_path: Path
) -> None:
    directory = tmp_path / "counter"
    url = f"{pg_store_dsn}?world={world_id(tmp_path)}"
    cli("world", "create", str(directory), "--manifest", str(COUNTER_C), "--store", url)
    assert not (directory / "store" / "data.mdb").exists()  # nothing embedded
    for key, by in (("a", 7), ("a", 5), ("b", 3)):
        cli("world", "send", "demo/CounterEvent@1", "--value-json", increment(key, by),
            "--world", str(directory))  # fmt: skip
    with World.open(directory, sync=False) as world:  # reopened from the database
        height = world.height
        assert height > 3
    cli("world", "replay", "--verify", "--world", str(directory))
    with psycopg.connect(pg_store_dsn) as conn:
        row = conn.execute(
            "SELECT head FROM aos_worlds WHERE world = %s", (world_id(tmp_path),)
        ).fetchone()
    assert row == (height,)


def test_create_refuses_a_world_id_already_in_the_database(
    pg_store_dsn: str, tmp_path: Path
) -> None:
    url = f"{pg_store_dsn}?world={world_id(tmp_path)}"
    made = cli(
        "world", "create", str(tmp_path / "one"), "--manifest", str(COUNTER_C), "--store", url
    )
    result = CliRunner().invoke(
        main,
        ["world", "create", str(tmp_path / "two"), "--manifest", str(COUNTER_C), "--store", url],
    )
    assert result.exit_code == 1
    assert "world.exists" in result.output
    assert not (tmp_path / "two").exists()
    with World.open(tmp_path / "one", sync=False) as world:
        assert world.height == made["height"]


def test_create_with_a_bad_store_url_creates_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "world", "create", str(tmp_path / "w"), "--manifest", str(COUNTER_C),
            "--store", "postgresql://h/db?world=no/slash", "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["code"] == "store.url"
    assert list(tmp_path.iterdir()) == []


def test_a_batch_of_megabytes_commits_and_is_fenced_alike(
    pg_store_dsn: str, world: str, writer: PgStore
) -> None:
    big = bytes(range(256)) * (8 * MIB // 256)
    with writer.batch() as batch:
        stored = batch.cas_put(big)
        batch.journal_append([event(1)])
    assert writer.cas.get(stored) == big
    with open_pg_store(pg_store_dsn, world, sync=False), pytest.raises(StoreFencedError):
        writer.cas.put(big + b"more")
    assert not writer.cas.has(hash_bytes(big + b"more"))


def test_store_record_bytes_survive_the_server_exactly(writer: PgStore) -> None:
    records = [{"bytes": b"\x00\xff", "nat": 2**64 - 1, "text": "é"}, [1.5, None, True]]
    writer.journal.append(records)
    assert [cbor.encode(r) for _, r in writer.journal.read()] == [cbor.encode(r) for r in records]


def test_the_writers_cache_agrees_with_a_reader_through_marks_and_deletes(
    pg_store_dsn: str, world: str, writer: PgStore
) -> None:
    first, second = writer.cas.put(b"first"), writer.cas.put(b"second")
    with open_pg_store(pg_store_dsn, world, readonly=True) as reader:

        def agree() -> None:
            for h in (first, second, hash_bytes(b"never")):
                assert writer.cas.has(h) == reader.cas.has(h)
                assert writer.cas.mark(h) == reader.cas.mark(h)
            assert writer.cas.doomed(100) == reader.cas.doomed(100)

        with writer.batch() as batch:
            batch.cas_mark(first, Mark("young", 3))
            batch.cas_mark(second, Mark("doomed", 4))
        agree()
        with writer.batch() as batch:
            batch.cas_clear_marks()
            batch.cas_mark(second, Mark("young", 5))
        agree()
        assert writer.cas.mark(first) is None
        with writer.batch() as batch:
            batch.cas_delete(second)
        agree()
        assert not writer.cas.has(second)
        with pytest.raises(StoreNotFoundError):
            writer.cas.get(second)
        assert writer.cas.get(first) == b"first"
