"""Shared test fixtures."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.pg_cluster import PgCluster, PgClusterError
from tests.store_backends import (
    BACKENDS,
    STORE_TEST_DATABASE,
    StoreOpener,
    lmdb_opener,
    pg_opener,
)

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"

# Hypothesis profiles, chosen by HYPOTHESIS_PROFILE: `ci` in `make test` and .ci/run, `dev`
# otherwise. A test's own `@settings` inherits the profile loaded here (this file is imported
# before any test module). Neither profile times anything, no deadline and no `too_slow`
# health check: speed is measured in bench/, never asserted in a test, and a shared machine's
# timings are noise.
HYPOTHESIS_CI_EXAMPLES = 200
HYPOTHESIS_DEV_EXAMPLES = 500
_UNTIMED: dict[str, Any] = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile(
    "ci",
    max_examples=HYPOTHESIS_CI_EXAMPLES,
    # The same examples on every run, so a CI failure is one anyone can run again; no example
    # database (a derandomized run has nothing to replay from it, and CI keeps no files).
    derandomize=True,
    database=None,
    # A failure prints `@reproduce_failure(...)`: the failing example, to paste into the test.
    print_blob=True,
    **_UNTIMED,
)
# More examples, random each run, and the local example database (.hypothesis/), so that a
# failure found once is tried first the next time.
settings.register_profile("dev", max_examples=HYPOTHESIS_DEV_EXAMPLES, **_UNTIMED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def shared_file(*parts: str) -> Path:
    """A file under ../shared (public vectors and corpora); fail loudly when it is missing,
    because a conformance test that silently finds nothing proves nothing."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"missing {path}: the conformance tests need ../shared beside the repository")
    return path


def shared_json(*parts: str) -> Any:
    return json.loads(shared_file(*parts).read_text())


@contextmanager
def readable_folder() -> Iterator[Path]:
    """A folder for the modules a python task imports, which the user python tasks run as
    can read (`nobody`, when the tests run as root: kernel/adapters/builtin/python_limits.py);
    `tmp_path` is root's alone."""
    folder = Path(tempfile.mkdtemp(prefix="aos-modules-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(name="module_folder")
def module_folder_fixture() -> Iterator[Path]:
    with readable_folder() as folder:
        yield folder


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """A throwaway PostgreSQL server for the session (tests/pg_cluster.py), stopped at the
    end even when tests fail; missing binaries fail the tests that use it, naming the
    package to install."""
    try:
        cluster = PgCluster.start()
    except PgClusterError as error:
        pytest.fail(str(error))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def pg_store_dsn(pg_cluster: PgCluster) -> str:
    """A database of the session's cluster for store tests (many worlds in one database, as
    in production: each test's world has its own id)."""
    import psycopg

    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {STORE_TEST_DATABASE}")
    return pg_cluster.dsn(STORE_TEST_DATABASE)


@pytest.fixture(scope="session", params=BACKENDS)
def open_any(request: pytest.FixtureRequest) -> StoreOpener:
    """A store opener for each backend (tests/store_backends.py): the test runs on both."""
    if request.param == "lmdb":
        return lmdb_opener()
    return pg_opener(request.getfixturevalue("pg_store_dsn"))
