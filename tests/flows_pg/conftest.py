"""Fixtures of the PostgreSQL tests: a fresh database per test on the session's throwaway
server (tests/conftest.py `pg_cluster`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.pg_cluster import PgCluster


@pytest.fixture
def database(pg_cluster: PgCluster) -> Iterator[str]:
    """A fresh database per test, dropped afterwards (the cluster is the session's)."""
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield name
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
