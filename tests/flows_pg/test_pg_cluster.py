"""The throwaway PostgreSQL of the tests (tests/pg_cluster.py): it serves on loopback, is
stopped and removed at the end (also when its owner is killed), and missing binaries fail
naming the package."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

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


STARTER = """
import sys, time
from tests.pg_cluster import PgCluster
cluster = PgCluster.start()
print(cluster.port, cluster.root, flush=True)
time.sleep(600)
"""


def test_a_killed_owner_leaves_no_server_behind() -> None:
    """The process that started a cluster is SIGKILLed (no `stop`): its watchdog stops the
    server and removes the folder."""
    owner = subprocess.Popen(
        [sys.executable, "-c", STARTER],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert owner.stdout is not None
        port_text, root_text = owner.stdout.readline().split()
    finally:
        owner.kill()
        owner.wait()
    root = Path(root_text)
    deadline = time.monotonic() + 60
    while root.exists() or _listening(int(port_text)):
        assert time.monotonic() < deadline, "the server outlived its owner"
        time.sleep(0.2)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
