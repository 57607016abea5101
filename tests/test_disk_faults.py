"""Disk faults beyond "full" (issue 16 item 8): an I/O error on write, a failing fsync (before
and after the data reached the file), a full disk, at the store's commit. Each is a typed
error (`store.io`, `store.full`), no acknowledged input is lost, the world reopens and
`replay --verify` passes, in process and through the node.

The faults are injected where LMDB reports them: `lmdb.open` is wrapped for the test so that
write transactions of the environments it opens fail at commit as the planned fault says
(with the exception py-lmdb raises for that errno, or a bare `OSError`). Nothing else of the
store, the world or the node is replaced.

The writer maps the store with `MDB_WRITEMAP` and allocates the file's blocks ahead of each
transaction (`lmdb_reserve.py`); there a full disk is modelled at the file system call itself:
`os.posix_fallocate` refuses any range that still has a hole, as a disk without free blocks
does (blocks already allocated stay usable). A real full file system (tmpfs with `size=`)
is `bench/full_disk.py`, which needs root."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb
import pytest

from aos.kernel.audit import replay
from aos.kernel.errors import AosError
from aos.kernel.store.lmdb_store import DATA_FILE_NAME, STORE_DIR_NAME
from aos.kernel.world.world import World
from tests.fs_extents import has_hole
from tests.test_node import make_world, open_node, send, signed_client
from tests.test_world import create, inc, ping, reopen

COUNTER = "demo/counter@1"


@dataclass(frozen=True)
class Fault:
    """What the next write commit does: `raise_` an error, after committing first when
    `written` (the fsync that failed came after the data reached the file)."""

    raise_: Callable[[], BaseException]
    written: bool = False


FAULTS: dict[str, tuple[Fault, str]] = {
    "eio on write": (
        Fault(lambda: lmdb.Error("mdb_txn_commit: Input/output error", errno.EIO)),
        "store.io",
    ),
    "fsync fails before the commit": (
        Fault(lambda: lmdb.Error("mdb_env_sync: Input/output error", errno.EIO)),
        "store.io",
    ),
    "fsync fails after the write": (
        Fault(lambda: lmdb.Error("mdb_env_sync: Input/output error", errno.EIO), written=True),
        "store.io",
    ),
    "disk full": (
        Fault(lambda: lmdb.DiskError("mdb_txn_commit: No space left on device", errno.ENOSPC)),
        "store.full",
    ),
    "OSError EIO": (Fault(lambda: OSError(errno.EIO, "Input/output error")), "store.io"),
    "OSError ENOSPC": (Fault(lambda: OSError(errno.ENOSPC, "No space left")), "store.full"),
}


@dataclass
class Disk:
    """The faults planned for the next write commits, in order (empty: commits succeed)."""

    planned: list[Fault] = field(default_factory=list)
    injected: int = 0

    def take(self) -> Fault | None:
        if not self.planned:
            return None
        self.injected += 1
        return self.planned.pop(0)


class _FaultyTxn:
    def __init__(self, txn: Any, disk: Disk) -> None:
        self.txn = txn
        self.disk = disk

    def __getattr__(self, name: str) -> Any:
        return getattr(self.txn, name)

    def __enter__(self) -> _FaultyTxn:
        return self

    def __exit__(self, kind: object, *_: object) -> bool:
        if kind is not None:
            self.txn.abort()
            return False
        fault = self.disk.take()
        if fault is None or fault.written:
            self.txn.commit()
        else:
            self.txn.abort()
        if fault is not None:
            raise fault.raise_()
        return False


class _FaultyEnv:
    def __init__(self, env: Any, disk: Disk) -> None:
        self.env = env
        self.disk = disk

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def begin(self, *args: Any, **kwargs: Any) -> Any:
        txn = self.env.begin(*args, **kwargs)
        return _FaultyTxn(txn, self.disk) if kwargs.get("write") else txn

    def open_db(self, *args: Any, txn: Any = None, **kwargs: Any) -> Any:
        real = txn.txn if isinstance(txn, _FaultyTxn) else txn
        return self.env.open_db(*args, txn=real, **kwargs)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    planned = Disk()
    real_open = lmdb.open
    monkeypatch.setattr(lmdb, "open", lambda *a, **k: _FaultyEnv(real_open(*a, **k), planned))
    return planned


@dataclass
class Blocks:
    """The file system's free blocks: none once `full` names the errno to refuse with."""

    full: int | None = None
    refused: int = 0


@pytest.fixture
def blocks(monkeypatch: pytest.MonkeyPatch) -> Blocks:
    state = Blocks()
    real_fallocate = os.posix_fallocate

    def fallocate(fd: int, offset: int, length: int) -> None:
        if state.full is not None and has_hole(fd, offset, length):
            state.refused += 1
            raise OSError(state.full, os.strerror(state.full))
        real_fallocate(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    return state


def _as_written_without_writemap(path: Path) -> None:
    """Cut the data file to its used pages, as a writer without MDB_WRITEMAP leaves it: the
    reopened writer's map is then a hole past them, with no block for the next transaction."""
    store_dir = path / STORE_DIR_NAME
    env = lmdb.open(str(store_dir), readonly=True, max_dbs=8)
    used_bytes = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    env.close()
    os.truncate(store_dir / DATA_FILE_NAME, used_bytes)


def _journal(world: World) -> list[Any]:
    return [record for _, record in world.store.journal.read(1, world.height)]


def _count(world: World, key: str) -> int:
    state = world.reader.state(COUNTER, key)
    return 0 if state is None else int(state["count"])


@pytest.mark.parametrize("name", list(FAULTS))
def test_a_failed_commit_is_typed_loses_nothing_acknowledged_and_reopens(
    tmp_path: Path, disk: Disk, name: str
) -> None:
    fault, code = FAULTS[name]
    path = tmp_path / "w"
    with create(path, sync=True) as world:
        for by in (1, 2, 3):  # acknowledged: durable when send returns
            world.send("demo/CounterEvent@1", inc("a", by))
        acknowledged = _journal(world)
        disk.planned.append(fault)
        with pytest.raises(AosError) as raised:
            world.send("demo/CounterEvent@1", inc("a", 100))
        assert raised.value.code == code
        assert disk.injected == 1
        # The failed flush closed the store: nothing more is taken until it is reopened.
        with pytest.raises(AosError) as closed:
            world.send("demo/CounterEvent@1", inc("a", 1000))
        assert closed.value.code in {"store.closed", "world.closed"}
    with reopen(path, sync=True) as world:
        kept = _journal(world)
        assert kept[: len(acknowledged)] == acknowledged  # nothing acknowledged lost
        # The unacknowledged event is there only if its batch reached the file whole.
        expected = 6 + (100 if fault.written and len(kept) > len(acknowledged) else 0)
        if not fault.written:
            assert kept == acknowledged
        assert _count(world, "a") == expected
        world.send("demo/CounterEvent@1", inc("a", 7))  # and the world goes on
        assert _count(world, "a") == expected + 7
    report = replay.verify_replay(path)
    assert report.ok, report.divergence


@pytest.mark.parametrize(
    ("refused", "code"),
    [(errno.ENOSPC, "store.full"), (errno.EDQUOT, "store.full"), (errno.EIO, "store.io")],
)
def test_no_free_block_for_the_writable_map_is_typed_and_the_world_reopens_and_verifies(
    tmp_path: Path, blocks: Blocks, refused: int, code: str
) -> None:
    path = tmp_path / "w"
    with create(path, sync=True) as world:
        for by in (1, 2, 3):
            world.send("demo/CounterEvent@1", inc("a", by))
        acknowledged = _journal(world)
    _as_written_without_writemap(path)
    blocks.full = refused
    # The reopened writer reserves blocks past the used pages before its first write
    # transaction (at open, or the first flush), and is refused before LMDB wrote into the
    # map (a SIGBUS would end the test run).
    with pytest.raises(AosError) as raised, reopen(path, sync=True) as world:
        world.send("demo/CounterEvent@1", inc("a", 100))
    assert raised.value.code == code
    assert blocks.refused >= 1
    blocks.full = None  # space was freed
    with reopen(path, sync=True) as world:
        assert _journal(world) == acknowledged
        assert _count(world, "a") == 6
        world.send("demo/CounterEvent@1", inc("a", 7))
        assert _count(world, "a") == 13
    report = replay.verify_replay(path)
    assert report.ok, report.divergence


def test_a_failed_flush_through_the_node_answers_typed_and_the_node_goes_on(
    tmp_path: Path, disk: Disk
) -> None:
    path = make_world(tmp_path / "w")
    with open_node(path) as node:
        client = signed_client(node)
        answers = [send(client, "x") for _ in range(3)]
        height = client.get("/v1/world").json()["height"]
        disk.planned.append(FAULTS["eio on write"][0])
        failed = client.post(
            "/v1/events", json={"schema": "demo/Ping@1", "value": ping("x", "effect", 1)}
        )
        error = failed.json()["error"]
        assert failed.status_code >= 400 and error["code"] == "store.io"
        assert "seq" not in error.get("detail", {})  # not admitted: nothing to not resend
        # The host discarded the unflushed work and reopened the world: the height is the
        # durable one, and the next event is taken as if the failed one was never sent.
        assert client.get("/v1/world").json()["height"] == height
        later = send(client, "x")
        assert later["seq"] == height + 1
        assert [a["seq"] for a in answers] == sorted(a["seq"] for a in answers)
    report = replay.verify_replay(path)
    assert report.ok, report.divergence


@pytest.fixture(autouse=True)
def _no_leftover_faults(disk: Disk) -> Iterator[None]:
    yield
    assert disk.planned == []  # every planned fault was met
