"""The DBOS Transact side of `bench/bench_peers.py`. It runs in the bench's own virtualenv
(`.venv-bench`, with `dbos` pinned by the Makefile), never in the project's, and imports
nothing from aos.

The workload matches the aos effect chain (bench/worlds/effect_chain): a workflow `chain(n)`
does n durable steps one after another, each a noop returning a small dict, as a cell started
with n does n `bench/noop@1` effects, each receipt resuming it.

    python bench/peers/dbos_workload.py serve --db PATH|URL [--synchronous off]
        First line: {"ready": ..., the settings DBOS runs with}; then one JSON command
        per stdin line, one JSON answer per stdout line:
        {"op": "sequential", "steps": N}                 one chain(N), called directly
        {"op": "fanout", "workflows": M, "steps": K}     M chain(K) by DBOS.start_workflow
        {"op": "quit"}
    python bench/peers/dbos_workload.py recover-start --db PATH --workflows W --steps N
        Starts W chain(N) whose last step blocks; prints {"blocked": W} once every workflow
        is inside its last step (its N - 1 earlier steps recorded), then waits to be killed.
    python bench/peers/dbos_workload.py recover --db PATH --workflows W --steps N
        Times DBOS(config) + DBOS.launch() (which recovers the pending workflows of this
        executor) and then until all W workflows have completed.

`--db` is a SQLite file, or a `postgresql://` URL (bench_postgres: DBOS on PostgreSQL, its
recommended production setup; DBOS creates the database if it is missing).

Answers carry seconds measured inside this process (interpreter start-up and imports
excluded) and the number of SQLite commits DBOS made (a SQLAlchemy `commit` event count).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from importlib import metadata
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig, SetWorkflowID

APP = "aos-bench-peer"
RECOVER_PREFIX = "recover-"
POLL_S = 0.005  # how often `recover` polls a recovered workflow's status
SYNCHRONOUS = ("default", "off", "normal", "full")

_commits = 0
_commits_lock = threading.Lock()
_block_at: int | None = None  # recover-start: the step index that blocks forever
_blocked = 0
_blocked_lock = threading.Lock()
_all_blocked = threading.Event()
_workflows = 0
_first_step_at: float | None = None  # recover: when a recovered workflow first ran a step


@sa.event.listens_for(sa.engine.Engine, "commit")
def _count_commit(_connection: Any) -> None:
    global _commits
    with _commits_lock:
        _commits += 1


@DBOS.step()
def noop(i: int) -> dict[str, Any]:
    global _first_step_at
    if _first_step_at is None:
        _first_step_at = time.perf_counter()
    if i == _block_at:
        _report_blocked()
        threading.Event().wait()  # until the process is killed
    return {"ok": True}


@DBOS.workflow()
def chain(n: int) -> int:
    done = 0
    for i in range(n):
        assert noop(i)["ok"]
        done += 1
    return done


def _report_blocked() -> None:
    global _blocked
    with _blocked_lock:
        _blocked += 1
        if _blocked == _workflows:
            _all_blocked.set()


def _configure(db: str, synchronous: str) -> DBOS:
    """DBOS on a SQLite system database, as it ships unless `synchronous` says otherwise."""
    if synchronous != "default":

        @sa.event.listens_for(sa.engine.Engine, "connect")
        def _pragma(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.execute(f"PRAGMA synchronous={synchronous.upper()}")

    config: DBOSConfig = {
        "name": APP,
        "system_database_url": db if _is_postgres(db) else f"sqlite:///{db}",
        "application_version": APP,
        "log_level": "WARNING",
    }
    return DBOS(config=config)


def _is_postgres(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


def _postgres_settings(dbos: DBOS) -> dict[str, Any]:
    engine = dbos._sys_db.engine  # private, read only to report what DBOS's connections use
    with engine.connect() as connection:
        commit = connection.exec_driver_sql("SHOW synchronous_commit").scalar()
        fsync = connection.exec_driver_sql("SHOW fsync").scalar()
        version = connection.exec_driver_sql("SHOW server_version").scalar()
    return {"synchronous_commit": commit, "fsync": fsync, "postgres": version}


def _sqlite_settings(dbos: DBOS) -> dict[str, Any]:
    engine = dbos._sys_db.engine  # private, read only to report what DBOS's connections use
    with engine.connect() as connection:
        journal_mode = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
        synchronous = connection.exec_driver_sql("PRAGMA synchronous").scalar()
        version = connection.exec_driver_sql("SELECT sqlite_version()").scalar()
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    return {
        "journal_mode": journal_mode,
        "synchronous": names.get(int(synchronous or 0), synchronous),
        "sqlite": version,
    }


def _timed(fn: Any, *args: int) -> dict[str, Any]:
    commits_before = _commits
    started = time.perf_counter()
    fn(*args)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "commits": _commits - commits_before}


def _sequential(steps: int) -> None:
    assert chain(steps) == steps


def _fanout(workflows: int, steps: int) -> None:
    handles = [DBOS.start_workflow(chain, steps) for _ in range(workflows)]
    assert all(handle.get_result() == steps for handle in handles)


def _serve(db: str, synchronous: str) -> None:
    dbos = _configure(db, synchronous)
    DBOS.launch()
    settings = _postgres_settings(dbos) if _is_postgres(db) else _sqlite_settings(dbos)
    ready = {"ready": True, "dbos": metadata.version("dbos"), **settings}
    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "quit":
            break
        if command["op"] == "sequential":
            answer = _timed(_sequential, command["steps"])
        elif command["op"] == "fanout":
            answer = _timed(_fanout, command["workflows"], command["steps"])
        else:
            raise ValueError(f"unknown op {command['op']!r}")
        print(json.dumps(answer), flush=True)
    DBOS.destroy()


def _recover_start(db: str, workflows: int, steps: int) -> None:
    global _block_at, _workflows
    _block_at, _workflows = steps - 1, workflows
    _configure(db, "default")
    DBOS.launch()
    for w in range(workflows):
        with SetWorkflowID(f"{RECOVER_PREFIX}{w}"):
            DBOS.start_workflow(chain, steps)
    _all_blocked.wait()
    print(json.dumps({"blocked": workflows}), flush=True)
    threading.Event().wait()  # until the bench kills this process


def _recover(db: str, workflows: int, steps: int) -> None:
    commits_before = _commits
    started = time.perf_counter()
    _configure(db, "default")
    DBOS.launch()
    launched = time.perf_counter()
    for w in range(workflows):
        handle = DBOS.retrieve_workflow(f"{RECOVER_PREFIX}{w}")
        assert handle.get_result(polling_interval_sec=POLL_S) == steps
    done = time.perf_counter()
    assert _first_step_at is not None
    answer = {
        "open_s": launched - started,
        "done_s": done - started,
        "first_step_s": round(_first_step_at - started, 4),
        "commits": _commits - commits_before,
    }
    print(json.dumps(answer), flush=True)
    DBOS.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["serve", "recover-start", "recover"])
    parser.add_argument(
        "--db", required=True, help="the SQLite system database file, or a postgresql:// URL"
    )
    parser.add_argument("--synchronous", choices=SYNCHRONOUS, default="default")
    parser.add_argument("--workflows", type=int, default=1)
    parser.add_argument("--steps", type=int, default=1)
    options = parser.parse_args()
    if options.mode == "serve":
        _serve(options.db, options.synchronous)
    elif options.mode == "recover-start":
        _recover_start(options.db, options.workflows, options.steps)
    else:
        _recover(options.db, options.workflows, options.steps)


if __name__ == "__main__":
    main()
