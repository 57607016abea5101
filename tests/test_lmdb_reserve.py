"""The LMDB writer's block reservation under MDB_WRITEMAP (kernel/store/lmdb_reserve.py): the
pages a transaction really takes stay within the bound reserved for it, on real LMDB, for
batches of every shape the store writes; no hole is left below the reservation; the
fallocate step is a limit tested at its edges. Full-disk behaviour is in test_disk_faults.py
(modelled at fallocate) and bench/full_disk.py (a real tmpfs)."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from aos.kernel.hashing import Hash
from aos.kernel.store import LmdbStore, StoreLimits, errors, open_lmdb_store
from aos.kernel.store.interface import Mark
from aos.kernel.store.lmdb_reserve import TreeStat, TreeWrites, tree_pages_bound
from aos.kernel.store.lmdb_store import DATA_FILE_NAME, STORE_DIR_NAME
from tests.fs_extents import first_hole, has_hole

KIB = 1024
PSIZE = 4096


def _data_file(world: Path) -> Path:
    return world / STORE_DIR_NAME / DATA_FILE_NAME


def _first_hole(world: Path) -> int:
    return first_hole(_data_file(world))


def _check_commit(store: LmdbStore, world: Path) -> None:
    """What the last commit took fits its bound, and every used page has its block."""
    assert 0 <= store.last_commit_pages_new <= store.last_commit_pages_bound
    used_bytes = _data_file(world).stat().st_blocks * 512
    assert store.reserved_bytes <= used_bytes + PSIZE  # st_blocks may round
    assert _first_hole(world) >= store.reserved_bytes


def _random_blobs(rng: random.Random, count: int, sizes: tuple[int, ...]) -> list[bytes]:
    return [rng.randbytes(rng.choice(sizes)) for _ in range(count)]


def test_every_shape_of_batch_takes_no_more_pages_than_reserved(tmp_path: Path) -> None:
    rng = random.Random(15)
    stored: list[Hash] = []
    with open_lmdb_store(tmp_path, sync=False) as store:
        for round_ in range(30):
            with store.batch() as batch:
                size = rng.choice((10, 1000, 3000, 20 * KIB))
                batch.journal_append([{"n": n, "pad": "p" * size} for n in range(40)])
                for blob in _random_blobs(rng, 200, (40, 900, 2100, 70 * KIB)):
                    content_hash = batch.cas_put(blob)
                    stored.append(content_hash)
                    batch.cas_mark(content_hash, Mark("young", round_))
                for n in range(20):
                    batch.meta_put(f"{'k' * rng.randrange(1, 200)}/{round_}/{n}", "v" * 500)
            _check_commit(store, tmp_path)
            with store.batch() as batch:
                rng.shuffle(stored)
                for content_hash in stored[:100]:
                    batch.cas_mark(content_hash, Mark("doomed", round_ + 1))
                for content_hash in stored[100:150]:
                    batch.cas_delete(content_hash)
                del stored[100:150]
                if round_ % 7 == 6:
                    batch.cas_clear_marks()
                for n in range(0, 20, 2):
                    batch.meta_delete(f"{'k' * 1}/{round_}/{n}")
            _check_commit(store, tmp_path)


def test_one_batch_at_the_batch_byte_limit_fits_its_reservation(tmp_path: Path) -> None:
    limits = StoreLimits(batch_bytes_max=64 * 1024 * KIB, map_size_bytes_initial=1024 * KIB)
    rng = random.Random(7)
    with open_lmdb_store(tmp_path, sync=False, limits=limits) as store:
        with store.batch() as batch:
            for blob in _random_blobs(rng, 2500, (100, 2000, 5000, 60 * KIB)):
                batch.cas_put(blob)
            batch.journal_append([{"n": n} for n in range(5000)])
        assert store.map_growths > 0  # reserved again after each growth
        _check_commit(store, tmp_path)


def test_a_reopened_writer_fills_the_holes_below_the_used_pages(tmp_path: Path) -> None:
    with open_lmdb_store(tmp_path, sync=True) as store:
        store.journal.append([{"n": n, "pad": "x" * 3000} for n in range(200)])
    # A store written without MDB_WRITEMAP may have holes among its freed pages: punch one.
    data = _data_file(tmp_path)
    fd = os.open(data, os.O_RDWR)
    try:
        _punch_hole(fd, 8 * PSIZE, 8 * PSIZE)
        assert has_hole(fd, 8 * PSIZE, PSIZE)
    finally:
        os.close(fd)
    with open_lmdb_store(tmp_path, sync=True) as store:
        store.journal.append([{"n": 200}])
        assert _first_hole(tmp_path) >= store.reserved_bytes > 16 * PSIZE


def _punch_hole(fd: int, offset: int, length: int) -> None:
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    punch_hole_keep_size = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, punch_hole_keep_size, offset, length) != 0:
        raise OSError(ctypes.get_errno(), "fallocate(PUNCH_HOLE)")


@pytest.mark.parametrize("chunk_bytes", [PSIZE, 3 * PSIZE, 16 * 1024 * KIB])
def test_the_reservation_grows_in_steps_of_fallocate_chunk_bytes(
    tmp_path: Path, chunk_bytes: int
) -> None:
    limits = StoreLimits(fallocate_chunk_bytes=chunk_bytes, map_size_bytes_initial=8 * 1024 * KIB)
    with open_lmdb_store(tmp_path, sync=False, limits=limits) as store:
        for n in range(5):
            store.journal.append([{"n": n, "pad": "x" * 20 * KIB}])
            reserved = store.reserved_bytes
            # A whole number of steps, or the whole map when the next step would pass it.
            assert reserved % chunk_bytes == 0 or reserved == store.map_size_bytes
            assert reserved <= store.map_size_bytes
            _check_commit(store, tmp_path)


def test_fallocate_chunk_bytes_must_be_positive() -> None:
    assert StoreLimits(fallocate_chunk_bytes=1).fallocate_chunk_bytes == 1
    with pytest.raises(errors.StoreUsageError):
        StoreLimits(fallocate_chunk_bytes=0)


def test_a_read_only_store_reserves_nothing(tmp_path: Path) -> None:
    with open_lmdb_store(tmp_path, sync=False) as store:
        store.journal.append([{"n": 1}])
    size = _data_file(tmp_path).stat().st_size
    with open_lmdb_store(tmp_path, readonly=True) as reader:
        assert reader.reserved_bytes == 0
        assert reader.journal.head() == 1
    assert _data_file(tmp_path).stat().st_size == size


def test_the_tree_bound_charges_varying_keys_a_split_per_level() -> None:
    fixed = TreeWrites(PSIZE, 8)
    varying = TreeWrites(PSIZE, None)
    for tree in (fixed, varying):
        for _ in range(100):
            tree.put(8, 100)
    stat = TreeStat(depth=3, branch_pages=10, leaf_pages=1000)
    assert tree_pages_bound(fixed, stat) < tree_pages_bound(varying, stat)
    assert tree_pages_bound(TreeWrites(PSIZE, 8), stat) == 0  # nothing written, nothing new


def test_an_unrefusable_errno_is_not_store_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    # One-page steps: the append needs more than the open reserved.
    limits = StoreLimits(fallocate_chunk_bytes=PSIZE)
    with open_lmdb_store(tmp_path, sync=False, limits=limits) as store:
        monkeypatch.setattr(os, "posix_fallocate", refuse)
        with pytest.raises(errors.StoreIoError):
            store.journal.append([{"n": 1}])
        monkeypatch.undo()
        assert store.journal.head() == 0
        assert store.journal.append([{"n": 1}]) == (1, 1)


def test_a_writer_opened_on_a_full_disk_is_store_full_and_leaves_nothing_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(errors.StoreFullError):
        open_lmdb_store(tmp_path, sync=False)  # creating the databases writes into the map
    monkeypatch.undo()
    with open_lmdb_store(tmp_path, sync=False) as store:  # not locked, not claimed
        assert store.journal.append([{"n": 1}]) == (1, 1)
