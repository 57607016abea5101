"""Which byte ranges of a file have blocks (Linux FIEMAP), fallocated-but-unwritten included.

`SEEK_HOLE` cannot tell: ext4 reports unwritten extents as holes. The tests of the LMDB
writer's block reservation need the truth, so they ask the file system for its extents."""

from __future__ import annotations

import fcntl
import os
import struct

_FS_IOC_FIEMAP = 0xC020660B
_FIEMAP_FLAG_SYNC = 0x1
_HEADER = struct.Struct("=QQLLLL")  # fm_start, fm_length, fm_flags, mapped, count, reserved
_EXTENT = struct.Struct("=QQQQQLLLL")  # logical, physical, length, 2 reserved, flags, 3 reserved
_EXTENT_LAST = 0x1
_EXTENTS_PER_CALL = 256


def allocated_ranges(fd: int) -> list[tuple[int, int]]:
    """The file's extents as merged `(start, end)` byte ranges, in order."""
    ranges: list[tuple[int, int]] = []
    start = 0
    while True:
        request = bytearray(_HEADER.size + _EXTENT.size * _EXTENTS_PER_CALL)
        _HEADER.pack_into(
            request, 0, start, 2**64 - 1 - start, _FIEMAP_FLAG_SYNC, 0, _EXTENTS_PER_CALL, 0
        )
        fcntl.ioctl(fd, _FS_IOC_FIEMAP, request)
        mapped = _HEADER.unpack_from(request, 0)[3]
        last = False
        for index in range(mapped):
            logical, _, length, _, _, flags, *_ = _EXTENT.unpack_from(
                request, _HEADER.size + index * _EXTENT.size
            )
            _merge(ranges, logical, logical + length)
            start = logical + length
            last = bool(flags & _EXTENT_LAST)
        if mapped == 0 or last:
            return ranges


def _merge(ranges: list[tuple[int, int]], start: int, end: int) -> None:
    if ranges and ranges[-1][1] >= start:
        ranges[-1] = (ranges[-1][0], max(ranges[-1][1], end))
    else:
        ranges.append((start, end))


def has_hole(fd: int, offset: int, length: int) -> bool:
    """Whether some byte of `[offset, offset + length)` has no block."""
    end = offset + length
    for start, stop in allocated_ranges(fd):
        if start <= offset < stop:
            offset = stop
        if offset >= end:
            return False
    return True


def first_hole(path: str | os.PathLike[str]) -> int:
    """The offset of the first byte without a block (the file size if none)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        offset = 0
        for start, stop in allocated_ranges(fd):
            if start > offset:
                return offset
            offset = max(offset, stop)
        return min(offset, os.fstat(fd).st_size)
    finally:
        os.close(fd)
