"""aos on PostgreSQL, next to aos on LMDB and DBOS Transact on the same PostgreSQL server.

One throwaway cluster (tests/pg_cluster.py) started durable, as PostgreSQL ships: fsync on,
synchronous_commit on, so a commit costs what it costs in production (on this machine's disk).
Its databases: `aos` holds the aos worlds (many worlds in one database), `dbos` DBOS's system
database (DBOS on PostgreSQL is its recommended production setup).

The workloads are bench_peers' (the effect chain: a cell started with n does n noop effects
one after another; a DBOS workflow does n noop steps), rounds interleaved, medians and per-round
ratios to the first row of each group, aos on PostgreSQL:

* `postgres.sequential`: one chain of N steps, one flush (one transaction) per effect.
* `postgres.fanout`: M chains of K steps started together; receipts of all open intents, then
  one flush (aos) / M `DBOS.start_workflow` (DBOS).
* `postgres.recovery`: bench_peers' recovery: W workflows, each with its last step in flight,
  the process SIGKILLed, then a fresh process opens the world (aos on PostgreSQL / on LMDB) or
  launches DBOS on a system database of its own on the same server, and runs them to the end;
  `postgres.recovery.open` times the open alone.
* `postgres.round_trip`: what one server round trip costs on this machine (`SELECT 1` on an
  open connection). The aos-on-PostgreSQL rows carry `round_trips_per_step` (statements the
  store sent, reads included; a flush is one: a call of the store's flush function).

Left out, with a note, when PostgreSQL's binaries are missing (`apt-get install
postgresql-15`) or `.venv-bench` is (`make bench-setup`; DBOS rows only).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import psycopg

from aos.kernel.store.pg_store import PgStore
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World
from aos.kernel.world_store import create_world
from bench.bench_effects import CHAIN, run_chains
from bench.bench_peers import (
    RECOVERY_STEPS,
    RECOVERY_WORKFLOWS,
    DbosWorkload,
    Recovery,
    aos_recovery,
    dbos_available,
    dbos_recovery,
    recovery_rows,
    warm,
)
from bench.harness import Contender, Row, interleaved, sampled
from tests import pg_cluster

SEQUENTIAL_STEPS = {True: 50, False: 200}  # by quick
SEQUENTIAL_ROUNDS = {True: 5, False: 9}
FANOUT_WORKFLOWS = {True: 100, False: 200}
FANOUT_STEPS = {True: 3, False: 5}
FANOUT_ROUNDS = {True: 5, False: 5}
ROUND_TRIPS = {True: 200, False: 1000}
ROUND_TRIP_ROUNDS = 5
RECOVERY_ROUNDS = {True: 3, False: 5}
AOS_DATABASE = "aos"
DBOS_DATABASE = "dbos"

SEQUENTIAL = "postgres.sequential"
FANOUT = "postgres.fanout"
ROUND_TRIP = "postgres.round_trip"
RECOVERY = "postgres.recovery"
RECOVERY_OPEN = "postgres.recovery.open"

_environment: dict[str, Any] = {}


def environment() -> dict[str, Any]:
    return dict(_environment)


@contextmanager
def _worlds(cluster: pg_cluster.PgCluster, tmp: Path) -> Iterator[Callable[[str], World]]:
    """Make chain worlds, on PostgreSQL (`pg-...` names) or LMDB; all closed at the end."""
    with ExitStack() as stack:

        def make(name: str) -> World:
            directory = tmp / name
            url = f"{cluster.dsn(AOS_DATABASE)}?world={name}" if name.startswith("pg") else None
            world = create_world(
                directory, CHAIN, store_url=url, sync=True, stamps=PinnedStampSource()
            )
            return stack.enter_context(world)

        yield make


def _aos(
    name: str, world: World, keys: Callable[[int], list[str]], steps: int, **how: bool
) -> Contender:
    store = world.store
    counted = {"steps": 0, "round_trips": 0}

    def run(r: int) -> float:
        chains = keys(r)
        before = store.round_trips if isinstance(store, PgStore) else 0
        seconds = run_chains(world, chains, steps, **how)
        if isinstance(store, PgStore) and r >= 0:
            counted["round_trips"] += store.round_trips - before
            counted["steps"] += len(chains) * steps
        return seconds / (len(chains) * steps)

    def extra() -> dict[str, Any]:
        if not counted["steps"]:
            return {}
        return {"round_trips_per_step": round(counted["round_trips"] / counted["steps"], 2)}

    return Contender(name, run, extra)


def _dbos(dbos: DbosWorkload, command: dict[str, Any], steps: int, what: str) -> Contender:
    ready = dbos.ready
    name = f"DBOS {ready['dbos']} on PostgreSQL {ready['postgres']} "
    name += f"(synchronous_commit={ready['synchronous_commit']}), {what}"
    return Contender(name, lambda r: dbos.run(command, steps) / steps)


def _sequential_rows(quick: bool, make: Callable[[str], World], dbos_url: str | None) -> list[Row]:
    steps, rounds = SEQUENTIAL_STEPS[quick], SEQUENTIAL_ROUNDS[quick]
    size = f"1 x {steps} steps, 1 flush per effect"

    def keys(r: int) -> list[str]:
        return [f"seq-{r}"]

    with ExitStack() as stack:
        contenders = [
            _aos(f"aos on PostgreSQL, {size}", make("pg-seq"), keys, steps, flush_each=True),
            _aos(f"aos on LMDB (fsync), {size}", make("lmdb-seq"), keys, steps, flush_each=True),
        ]
        if dbos_url is not None:
            dbos = stack.enter_context(DbosWorkload(dbos_url, "default"))
            command = {"op": "sequential", "steps": steps}
            contenders.append(_dbos(dbos, command, steps, f"1 x {steps} steps"))
        return interleaved(SEQUENTIAL, "step", warm(contenders), rounds)


def _fanout_rows(quick: bool, make: Callable[[str], World], dbos_url: str | None) -> list[Row]:
    workflows, steps, rounds = FANOUT_WORKFLOWS[quick], FANOUT_STEPS[quick], FANOUT_ROUNDS[quick]
    size = f"{workflows} x {steps} steps"
    group = "receipts of all open intents then 1 flush"

    def keys(r: int) -> list[str]:
        return [f"fan-{r}-{n}" for n in range(workflows)]

    with ExitStack() as stack:
        contenders = [
            _aos(
                f"aos on PostgreSQL, {group}, {size}", make("pg-fan"), keys, steps, flush_each=False
            ),
            _aos(
                f"aos on LMDB (fsync), {group}, {size}",
                make("lmdb-fan"),
                keys,
                steps,
                flush_each=False,
            ),
        ]
        if dbos_url is not None:
            dbos = stack.enter_context(DbosWorkload(dbos_url, "default"))
            command = {"op": "fanout", "workflows": workflows, "steps": steps}
            what = f"DBOS.start_workflow x {workflows}, {steps} steps each"
            contenders.append(_dbos(dbos, command, workflows * steps, what))
        rows = interleaved(FANOUT, "step", warm(contenders), rounds)
    for r in rows:
        r.extra.update(workflows=workflows, steps=steps)
    return rows


def _recovery_rows(quick: bool, cluster: pg_cluster.PgCluster, tmp: Path, dbos: bool) -> list[Row]:
    """bench_peers' recovery (W workflows killed with their last step in flight, then opened
    in a fresh process and run to the end); every round a new world / system database."""
    workflows, rounds = RECOVERY_WORKFLOWS[quick], RECOVERY_ROUNDS[quick]
    what = f"{workflows} in flight at step {RECOVERY_STEPS} of {RECOVERY_STEPS}"
    for side in ("pg", "lmdb", "dbos"):
        (tmp / side).mkdir(parents=True)

    def pg_world(path: Path) -> str:
        return f"{cluster.dsn(AOS_DATABASE)}?world=recovery-{path.name}"

    def dbos_database(path: Path) -> str:
        return cluster.dsn(f"dbos_recovery_{path.name.replace('-', '_').lower()}")

    sides = [
        Recovery(
            f"aos on PostgreSQL: World.open, then settle the open intents (1 flush), {what}",
            f"aos on PostgreSQL: World.open, {what}",
            aos_recovery(workflows, pg_world),
            tmp / "pg",
        ),
        Recovery(
            f"aos on LMDB (fsync): World.open, then settle the open intents, {what}",
            f"aos on LMDB: World.open, {what}",
            aos_recovery(workflows),
            tmp / "lmdb",
        ),
    ]
    if dbos:
        sides.append(
            Recovery(
                f"DBOS on PostgreSQL: DBOS(config), DBOS.launch(), its recovery, {what}",
                f"DBOS on PostgreSQL: DBOS(config), DBOS.launch(), {what}",
                dbos_recovery(workflows, dbos_database),
                tmp / "dbos",
            )
        )
    rows = recovery_rows(sides, rounds, (RECOVERY, RECOVERY_OPEN))
    for r in rows:
        r.extra.update(workflows=workflows, steps=RECOVERY_STEPS)
    return rows


def _round_trip_row(quick: bool, cluster: pg_cluster.PgCluster) -> Row:
    count = ROUND_TRIPS[quick]
    samples = []
    with psycopg.connect(cluster.dsn(AOS_DATABASE), autocommit=True) as conn:
        conn.execute("SELECT 1")
        for _ in range(ROUND_TRIP_ROUNDS):
            started = time.perf_counter()
            for _ in range(count):
                conn.execute("SELECT 1").fetchone()
            samples.append((time.perf_counter() - started) / count)
    name = "one round trip to the server on loopback (SELECT 1 on an open connection)"
    return sampled(ROUND_TRIP, name, samples, "round trip", baseline=True, count=count)


def run(quick: bool) -> list[Row]:
    if pg_cluster.find_bin_dir() is None:
        print(
            "# bench_postgres: no PostgreSQL binaries (apt-get install postgresql-15): left out",
            file=sys.stderr,
            flush=True,
        )
        return []
    with_dbos = dbos_available()
    with (
        pg_cluster.start(durable=True) as cluster,
        tempfile.TemporaryDirectory(prefix="aos-bench-postgres-") as name,
    ):
        cluster.psql(f"CREATE DATABASE {AOS_DATABASE}")
        dbos_url = cluster.dsn(DBOS_DATABASE) if with_dbos else None
        with _worlds(cluster, Path(name)) as make:
            rows = _sequential_rows(quick, make, dbos_url)
            rows += _fanout_rows(quick, make, dbos_url)
        rows += _recovery_rows(quick, cluster, Path(name) / "recovery", with_dbos)
        rows.append(_round_trip_row(quick, cluster))
        _environment.update(postgres=cluster.psql("SHOW server_version").strip())
    _environment["round_trip_median_us"] = round(statistics.median(rows[-1].samples_s) * 1e6, 1)
    return rows
