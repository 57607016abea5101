"""The store across processes: the writer lock, read-only readers beside a writer, a writer
killed mid-stream, and an I/O failure during commit. Each child is a fresh interpreter."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from aos.kernel.store import StoreLimits, errors, open_lmdb_store

KIB = 1024
CHILD_TIMEOUT_S = 60

PRELUDE = """
import json, sys
from aos.kernel.errors import AosError
from aos.kernel.store import StoreLimits, open_lmdb_store
world = sys.argv[1]
def say(value):
    print(json.dumps(value), flush=True)
"""


def spawn(body: str, world: Path) -> subprocess.Popen[str]:
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.Popen(
        [sys.executable, "-c", code, str(world)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def hear(child: subprocess.Popen[str]) -> Any:
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, f"child exited early with {child.wait(CHILD_TIMEOUT_S)}"
    return json.loads(line)


def tell(child: subprocess.Popen[str], text: str = "go") -> None:
    assert child.stdin is not None
    child.stdin.write(text + "\n")
    child.stdin.flush()


def finish(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.communicate(timeout=CHILD_TIMEOUT_S)
    assert child.returncode == 0


def test_second_writer_in_another_process_is_locked_out(tmp_path: Path) -> None:
    with open_lmdb_store(tmp_path, sync=False) as store:
        store.journal.append([{"n": 1}])
        child = spawn(
            """
            try:
                open_lmdb_store(world)
            except AosError as exc:
                say({"code": exc.code, "pid": exc.detail["pid"], "message": exc.message})
            with open_lmdb_store(world, readonly=True) as reader:
                say({"head": reader.journal.head()})
            """,
            tmp_path,
        )
        refused = hear(child)
        assert refused == {
            "code": "store.locked",
            "pid": os.getpid(),
            "message": f"world is locked by pid {os.getpid()}",
        }
        assert hear(child) == {"head": 1}
        finish(child)


def test_writer_in_another_process_locks_this_one_out(tmp_path: Path) -> None:
    child = spawn(
        """
        with open_lmdb_store(world, sync=False) as store:
            store.journal.append([{"n": 1}])
            say("ready")
            sys.stdin.readline()
        """,
        tmp_path,
    )
    assert hear(child) == "ready"
    with pytest.raises(errors.StoreLockedError) as excinfo:
        open_lmdb_store(tmp_path)
    assert excinfo.value.detail["pid"] == child.pid
    assert str(excinfo.value).endswith(f"world is locked by pid {child.pid}")
    tell(child)
    finish(child)
    with open_lmdb_store(tmp_path) as store:
        assert store.journal.head() == 1


def test_reader_process_follows_the_writer_through_map_growth(tmp_path: Path) -> None:
    tiny = StoreLimits(map_size_bytes_initial=64 * KIB)
    with open_lmdb_store(tmp_path, sync=False, limits=tiny) as store:
        store.journal.append([{"n": 1}])
        child = spawn(
            """
            tiny = StoreLimits(map_size_bytes_initial=64 * 1024)
            with open_lmdb_store(world, readonly=True, limits=tiny) as reader:
                say({"head": reader.journal.head()})
                sys.stdin.readline()
                records = list(reader.journal.read())
                say({"head": reader.journal.head(), "count": len(records), "last": records[-1]})
            """,
            tmp_path,
        )
        assert hear(child) == {"head": 1}
        store.journal.append([{"n": n, "pad": "x" * 300} for n in range(2, 3001)])
        assert store.map_growths > 0
        tell(child)
        assert hear(child) == {
            "head": 3000,
            "count": 3000,
            "last": [3000, {"n": 3000, "pad": "x" * 300}],
        }
        finish(child)


def test_killed_writer_loses_nothing_acknowledged_and_frees_the_world(tmp_path: Path) -> None:
    child = spawn(
        """
        with open_lmdb_store(world, sync=True) as store:
            while True:
                head = store.journal.head()
                first, last = store.journal.append(
                    [{"n": seq, "pad": "p" * 100} for seq in range(head + 1, head + 51)]
                )
                say(last)
        """,
        tmp_path,
    )
    acknowledged = [hear(child) for _ in range(20)]
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=CHILD_TIMEOUT_S)
    assert child.returncode == -signal.SIGKILL
    assert acknowledged == list(range(50, 1001, 50))
    with open_lmdb_store(tmp_path) as store:
        head = store.journal.head()
        assert head >= acknowledged[-1]
        assert head % 50 == 0  # batches are all or nothing
        for seq, record in store.journal.read():
            assert record == {"n": seq, "pad": "p" * 100}
        assert store.journal.append([{"n": head + 1}]) == (head + 1, head + 1)


def test_io_failure_during_commit_writes_nothing(tmp_path: Path) -> None:
    # RLIMIT_FSIZE makes the kernel refuse to grow data.mdb, as a failing disk would. With
    # MDB_WRITEMAP the file is as large as the map, so the batch is made to need a larger map.
    child = spawn(
        """
        import os, resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limits = StoreLimits(map_size_bytes_initial=1024 * 1024)
        with open_lmdb_store(world, sync=True, limits=limits) as store:
            store.journal.append([{"n": 1}])
            size = os.path.getsize(os.path.join(world, "store", "data.mdb"))
            resource.setrlimit(resource.RLIMIT_FSIZE, (size + 64 * 1024, resource.RLIM_INFINITY))
            try:
                with store.batch() as batch:
                    batch.journal_append([{"n": n, "pad": "x" * 1000} for n in range(2, 2002)])
                    batch.cas_put(b"never" * 1000)
                    batch.meta_put("k", "never")
            except AosError as exc:
                say({"code": exc.code})
            try:
                store.journal.head()
            except AosError as exc:
                say({"then": exc.code})
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        with open_lmdb_store(world, sync=True) as store:
            say({"head": store.journal.head(), "meta": store.meta.has("k")})
            say({"appended": store.journal.append([{"n": 2}])})
        """,
        tmp_path,
    )
    assert hear(child)["code"] in {"store.io", "store.full"}
    assert hear(child) == {"then": "store.closed"}  # the failed growth closed the store
    assert hear(child) == {"head": 1, "meta": False}
    assert hear(child) == {"appended": [2, 2]}
    finish(child)
    with open_lmdb_store(tmp_path) as store:
        assert list(store.journal.read()) == [(1, {"n": 1}), (2, {"n": 2})]
