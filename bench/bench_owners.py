"""What the owner registry of PostgreSQL worlds costs (spec/07 §11.5), on a durable throwaway
cluster (tests/pg_cluster.py):

* `owners.take`: opening a world for writing as a one-shot writer (the registry is read in the
  take's transaction) against opening it as a node (the registration written too). Per open.
* `owners.renew`: one lease renewal on the node's own connection, against one `SELECT 1`
  round trip. Per renewal (a node sends one every `owner_lease_ms / 3`).
* `owners.handover`: from stopping the node that serves a world to another `aos node up`
  process answering `GET /v1/health` for it: after SIGTERM (the world is released, no wait),
  and after SIGKILL with `--takeover` (it waits for the lease, here `LEASE_MS`, to lapse).
  Each includes starting a node process; the difference is the lease.

Left out, with a note, when PostgreSQL's binaries are missing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg

from aos.kernel.store import pg_owner
from aos.kernel.store.pg_store import open_pg_store
from aos.kernel.store.url import write_store_url
from aos.kernel.world_store import create_world
from bench.harness import Contender, Row, interleaved
from tests import pg_cluster

DATABASE = "aos"
OPENS = {True: 20, False: 100}
RENEWALS = {True: 200, False: 1000}
ROUNDS = {True: 5, False: 9}
HANDOVER_ROUNDS = {True: 3, False: 5}
LEASE_MS = 1000
COUNTER_C = Path(__file__).resolve().parent.parent / "manifests" / "counter-c"
AOS = [sys.executable, "-c", "from aos.cli.main import main; main()"]
START_TIMEOUT_S = 60.0


def run(quick: bool) -> list[Row]:
    if pg_cluster.find_bin_dir() is None:
        print("# bench_owners: no PostgreSQL binaries: left out", file=sys.stderr, flush=True)
        return []
    with (
        pg_cluster.start(durable=True) as cluster,
        tempfile.TemporaryDirectory(prefix="aos-bench-owners-") as name,
    ):
        cluster.psql(f"CREATE DATABASE {DATABASE}")
        dsn = cluster.dsn(DATABASE)
        root = Path(name)
        create_world(root / "a", COUNTER_C, store_url=f"{dsn}?world=bench", sync=False).close()
        rows = _take_rows(quick, dsn)
        rows += _renew_rows(quick, dsn)
        rows += _handover_rows(quick, dsn, root)
    return rows


def _take_rows(quick: bool, dsn: str) -> list[Row]:
    opens = OPENS[quick]

    def opening(claim: pg_owner.OwnerClaim | None) -> Callable[[int], float]:
        def round_(_: int) -> float:
            if claim is not None:
                pg_owner.serve_as("bench", claim)
            started = time.perf_counter()
            for _ in range(opens):
                open_pg_store(dsn, "bench", sync=True).close()
            took = (time.perf_counter() - started) / opens
            pg_owner.stop_serving("bench")
            _release(dsn)  # the one-shot writer's rounds find the world free
            return took

        return round_

    contenders = [
        Contender("open for writing, one-shot (registry read)", opening(None)),
        Contender(
            "open for writing as a node (registration written)",
            opening(pg_owner.OwnerClaim("bench-node")),
        ),
    ]
    return interleaved("owners.take", "open", contenders, ROUNDS[quick])


def _renew_rows(quick: bool, dsn: str) -> list[Row]:
    count = RENEWALS[quick]
    claim = pg_owner.OwnerClaim("bench-node")
    pg_owner.serve_as("bench", claim)
    open_pg_store(dsn, "bench", sync=True).close()
    pg_owner.stop_serving("bench")
    keeper = pg_owner.OwnerLease(dsn, "bench", claim, lambda _: None)
    conn = psycopg.connect(dsn, autocommit=True)

    def select(_: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            conn.execute("SELECT 1").fetchone()
        return (time.perf_counter() - started) / count

    def renew(_: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            if not keeper.renew():
                raise RuntimeError("the bench's lease was lost")
        return (time.perf_counter() - started) / count

    try:
        contenders = [Contender("SELECT 1", select), Contender("one lease renewal", renew)]
        return interleaved("owners.renew", "renewal", contenders, ROUNDS[quick])
    finally:
        keeper.stop(release=True)
        conn.close()


def _handover_rows(quick: bool, dsn: str, root: Path) -> list[Row]:
    directories = [root / "a", root / "b"]
    write_store_url(directories[1], f"{dsn}?world=bench")
    # The node serving the world now, and which directory it serves it from.
    state = {"index": 0}
    serving = [_node(directories[0])]

    def handover(stop: signal.Signals, *options: str) -> Callable[[int], float]:
        def round_(_: int) -> float:
            started = time.perf_counter()
            serving[0].send_signal(stop)
            serving[0].wait()
            state["index"] = 1 - state["index"]
            serving[0] = _node(directories[state["index"]], *options)
            return time.perf_counter() - started

        return round_

    contenders = [
        Contender("SIGTERM, then a node on another directory", handover(signal.SIGTERM)),
        Contender(
            f"SIGKILL, then --takeover (lease {LEASE_MS} ms)",
            handover(signal.SIGKILL, "--takeover"),
        ),
    ]
    try:
        return interleaved("owners.handover", "handover", contenders, HANDOVER_ROUNDS[quick])
    finally:
        serving[0].send_signal(signal.SIGTERM)
        serving[0].wait()


def _node(directory: Path, *options: str) -> subprocess.Popen[str]:
    """`aos node up` on `directory`, returned once it answers for its world."""
    process = subprocess.Popen(
        [*AOS, "node", "up", "--world", str(directory), "--bind", "127.0.0.1:0", "--json",
         "--owner-lease-ms", str(LEASE_MS), *options],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"the node on {directory} did not start")
    url = json.loads(line)["url"]
    httpx.get(f"{url}/v1/health", timeout=START_TIMEOUT_S).raise_for_status()
    return process


def _release(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM aos_owners WHERE world = 'bench'")
