"""The throwaway PostgreSQL of the tests (tests/pg_cluster.py): it serves on loopback, is
stopped and removed at the end, and missing binaries fail naming the package."""

from __future__ import annotations

import psycopg
import pytest

from tests.pg_cluster import INSTALL_HINT, PgCluster, PgClusterError, pg_bin


def test_the_session_cluster_serves_on_loopback(pg_cluster: PgCluster) -> None:
    with psycopg.connect(pg_cluster.dsn(), connect_timeout=10) as conn:
        row = conn.execute("SELECT current_setting('listen_addresses'), version()").fetchone()
    assert row is not None
    assert row[0] == "127.0.0.1"
    assert str(row[1]).startswith("PostgreSQL 15")


def test_a_cluster_stops_and_leaves_nothing_behind() -> None:
    cluster = PgCluster.start()
    root, dsn = cluster.root, cluster.dsn()
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    cluster.stop()
    cluster.stop()  # twice is harmless
    assert not root.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=2)


def test_missing_binaries_fail_naming_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv("AOS_PG_BIN", str(tmp_path))
    with pytest.raises(PgClusterError, match=INSTALL_HINT):
        pg_bin()
