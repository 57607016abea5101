"""A seccomp user-notification supervisor that makes a build tool's run reproducible
(Linux x86_64/aarch64).

componentize-py snapshots an interpreter, and the snapshot keeps what the interpreter saw
while it initialized: its hash seed and PRNG state (from the host's `getrandom`, which the
tool also issues from inline assembly, so no library shim can answer it) and the times and
inode numbers of the files it imported (unpacked afresh on every run). Here the kernel hands
those calls to this process instead:

* `getrandom`: every call gets the first `length` bytes of a BLAKE3 XOF stream keyed by the
  caller's key (the build key). Every call, not a running position: the tool's worker
  threads race for their first bytes, so only an answer that depends on nothing but the key
  and the length is the same on every run.
* `statx` on a directory fd (the guest's file system; the tool's own lookups use AT_FDCWD
  and pass through): run here on the caller's fd, answered with every time set to
  `FIXED_TIME_S` and one identity for every file (device 0:0, inode 1).
* `getdents64`: a directory is listed in byte order of its names (`.` and `..` first), every
  entry with inode 1. The kernel lists in the file system's own order (ext4: a hash of the
  name keyed by a seed chosen when the file system was made; tmpfs: creation order), and the
  interpreter keeps the order it listed its import folders in. The caller's position in the
  listing is its open file's offset (read and moved on a duplicate of its descriptor, so
  `rewinddir`, `dup` and a reused descriptor number behave as the kernel's own would) and
  counts entries.

The clock is the one source a filter cannot see (the vDSO answers it without a syscall):
`aos.kernel.wasm.fixed_clock` covers it.

    with EntropySupervisor(key) as supervisor:
        proc = subprocess.Popen(supervisor.wrap(command), pass_fds=supervisor.pass_fds, ...)
        supervisor.attach()          # True when the filter is in place, False when refused
        out, err = proc.communicate(timeout=...)

The child side is `python -m aos.kernel.wasm.seccomp <socket fd> <command...>`: it sets
`no_new_privs`, turns off address-space randomization for the tool, installs the filter
with a new listener, passes the listener over the socket and execs the command. When
seccomp is refused (old kernel, a sandbox that forbids it) it says so over the socket and
execs anyway: the caller then knows the run was not supervised. Struct layouts and ioctl
numbers are those of <linux/seccomp.h> and <linux/stat.h>.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import platform
import select
import socket
import stat
import struct
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import blake3

# x86_64 and aarch64: (AUDIT_ARCH_*, __NR_seccomp, __NR_getrandom, __NR_statx,
# __NR_getdents64)
_ARCHES = {
    "x86_64": (0xC000003E, 317, 318, 332, 217),
    "aarch64": (0xC00000B7, 277, 278, 291, 61),
}
_NR_PIDFD_GETFD = 438  # the same on every architecture
_PR_SET_NO_NEW_PRIVS = 38
_ADDR_NO_RANDOMIZE = 0x0040000
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_USER_NOTIF = 0x7FC00000
_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_RET_K = 0x06
_DATA_NR_OFFSET = 0
_DATA_ARCH_OFFSET = 4
# struct seccomp_notif {u64 id; u32 pid; u32 flags; struct seccomp_data {int nr; u32 arch;
# u64 ip; u64 args[6]}} = 80 bytes; struct seccomp_notif_resp {u64 id; s64 val; s32 error;
# u32 flags} = 24 bytes. _IOWR('!', 0|1, ...) and _IOW('!', 2, u64).
_NOTIF = struct.Struct("=QIIiIQ6Q")
_NOTIF_RESP = struct.Struct("=QqiI")
_IOCTL_NOTIF_RECV = 0xC0502100
_IOCTL_NOTIF_SEND = 0xC0182101
_IOCTL_NOTIF_ID_VALID = 0x40082102
_GRND_FLAGS = 0x1 | 0x2 | 0x4  # GRND_NONBLOCK | GRND_RANDOM | GRND_INSECURE
GETRANDOM_BYTES_MAX = (1 << 25) - 1  # what one Linux getrandom call returns at most
# struct statx: 256 bytes; stx_atime, stx_btime, stx_ctime, stx_mtime at 64/80/96/112, each
# {s64 tv_sec; u32 tv_nsec; s32 reserved}.
_STATX_BYTES = 256
_STATX_TIME_OFFSETS = (64, 80, 96, 112)
_STATX_TIME = struct.Struct("=qI")
_STATX_BLKSIZE_OFFSET = 4
_STATX_NLINK_OFFSET = 16
_STATX_MODE_OFFSET = 28
_STATX_INO_OFFSET = 32
_STATX_SIZE_OFFSET = 40
_STATX_BLOCKS_OFFSET = 48
_STATX_DEV_OFFSET = 136  # stx_dev_major, stx_dev_minor
_U64 = struct.Struct("=Q")
_U32 = struct.Struct("=I")
_U16 = struct.Struct("=H")
_DEVICE = struct.Struct("=II")
FIXED_INODE = 1
FIXED_DIRECTORY_BYTES = 4096  # a directory's size, and every file's block size
FIXED_TIME_S = 315532800  # 1980-01-01T00:00:00Z, the earliest time a zip entry can carry
_AT_FDCWD = 0xFFFFFF9C  # -100 as the low 32 bits of the dirfd argument
_ARG0_LOW_OFFSET = 16  # seccomp_data.args[0], little-endian low half
_PATH_BYTES_MAX = 4096
_PAGE_BYTES = 4096
ATTACH_TIMEOUT_S_DEFAULT = 30.0
POLL_INTERVAL_MS = 200
_DOMAIN = b"aos.build.entropy/1"
# struct linux_dirent64 {u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]},
# each record padded to 8 bytes.
_DIRENT = struct.Struct("=QqHB")
_DT_DIR = 4
_SECCOMP_USER_NOTIF_FLAG_CONTINUE = 1
# What a getdents64 of the caller's own would fail with too (the caller is gone: ESRCH).
_CALLER_ERRORS = frozenset({errno.EBADF, errno.ENOTDIR, errno.EINVAL, errno.ESRCH})


def supported() -> bool:
    """Whether this platform can run the supervisor at all (the kernel may still refuse)."""
    return sys.platform == "linux" and platform.machine() in _ARCHES


class EntropyStream:
    """The bytes `getrandom` hands out: a BLAKE3 XOF stream keyed by `key` (32 bytes)."""

    def __init__(self, key: bytes) -> None:
        hasher = blake3.blake3(key=key)
        hasher.update(_DOMAIN)
        self._hasher = hasher

    def first(self, length: int) -> bytes:
        return self._hasher.digest(length=length)


class EntropySupervisor:
    """Answers the `getrandom` and `statx` calls of one command tree (see the module doc)."""

    def __init__(self, key: bytes, *, attach_timeout_s: float = ATTACH_TIMEOUT_S_DEFAULT) -> None:
        self.stream = EntropyStream(key)
        self.calls = 0
        self.refusal: str | None = None
        self.failure: str | None = None
        self._attach_timeout_s = attach_timeout_s
        self._parent, self._child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nrs = _ARCHES.get(platform.machine(), (0, 0, -1, -1, -1))[2:]

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self._child.fileno(),)

    def wrap(self, command: Sequence[str]) -> list[str]:
        """The command run through the launcher that installs the filter."""
        return [sys.executable, "-m", __name__, str(self._child.fileno()), *command]

    def attach(self) -> bool:
        """Take the listener from the launched child and start answering; False (with
        `refusal` saying why) when the child could not install the filter."""
        self._child.close()
        self._parent.settimeout(self._attach_timeout_s)
        try:
            message, fds, _, _ = socket.recv_fds(self._parent, 512, 1)
        except OSError as error:
            message, fds = f"no:{error}".encode(), []
        if message != b"ok" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            self.refusal = message.decode("utf-8", "replace").removeprefix("no:") or "no answer"
            return False
        self._listener = fds[0]
        self._thread = threading.Thread(target=self._serve, name="aos-entropy", daemon=True)
        self._thread.start()
        return True

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._listener is not None:
            os.close(self._listener)
            self._listener = None
        self._parent.close()
        self._child.close()

    def __enter__(self) -> EntropySupervisor:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def intact(self) -> bool:
        """Whether every call of the run was answered as the module doc says (attached and
        never failed); a build is reproducible only then."""
        return self._thread is not None and self.failure is None

    def _serve(self) -> None:
        listener = self._listener
        assert listener is not None
        poller = select.poll()
        poller.register(listener, select.POLLIN)
        # The listener hangs up when no task uses the filter any more (the tree exited).
        try:
            while not self._stop.is_set():
                for _, events in poller.poll(POLL_INTERVAL_MS):
                    if events & select.POLLIN:
                        self._answer_one(listener)
                    elif events & (select.POLLHUP | select.POLLERR):
                        return
        except OSError as error:
            # Closing the listener fails the unanswered calls (ENOSYS) rather than leaving
            # them waiting: the run goes on, unsupervised, and says so through `intact`.
            self.failure = str(error)
            os.close(listener)
            self._listener = None

    def _answer_one(self, listener: int) -> None:
        buffer = bytearray(_NOTIF.size)
        try:
            fcntl.ioctl(listener, _IOCTL_NOTIF_RECV, buffer, True)
        except OSError as error:
            if error.errno in (errno.ENOENT, errno.EINTR):
                return  # the caller died or was interrupted before we read it
            raise
        notif_id, pid, _, nr, _, _, *args = _NOTIF.unpack(buffer)
        if nr == self._nrs[0]:
            self._getrandom(listener, notif_id, pid, args)
        elif nr == self._nrs[1]:
            self._statx(listener, notif_id, pid, args)
        elif nr == self._nrs[2]:
            self._getdents(listener, notif_id, pid, args)
        else:
            self._reply(listener, notif_id, 0, errno.ENOSYS)

    def _getrandom(self, listener: int, notif_id: int, pid: int, args: list[int]) -> None:
        address, length, flags = args[:3]
        if flags & ~_GRND_FLAGS:
            self._reply(listener, notif_id, 0, errno.EINVAL)
            return
        count = min(length, GETRANDOM_BYTES_MAX)
        failure = _write_memory(listener, notif_id, pid, address, self.stream.first(count))
        if failure == errno.ESRCH:
            return
        if self._reply(listener, notif_id, 0 if failure else count, failure) and not failure:
            self.calls += 1

    def _statx(self, listener: int, notif_id: int, pid: int, args: list[int]) -> None:
        """Run the caller's statx here, on its own directory fd, and hand back the result
        with fixed times and identity: the files a build tool unpacks or stages get the time
        of the build and fresh inodes, which the snapshot would otherwise keep."""
        dirfd, path_address, flags, mask, address = args[:5]
        result, failure = _statx_as(pid, _signed32(dirfd), path_address, flags, mask)
        if failure == 0:
            failure = _write_memory(listener, notif_id, pid, address, _normalized(result))
        if failure != errno.ESRCH:
            self._reply(listener, notif_id, 0, failure)

    def _getdents(self, listener: int, notif_id: int, pid: int, args: list[int]) -> None:
        """Answer the caller's getdents64 from its directory's names in byte order, starting
        at the entry its file offset counts to, and move the offset past what was written."""
        fd, address, count = _signed32(args[0]), args[1], args[2] & 0xFFFFFFFF
        try:
            own = _descriptor_of(pid, fd)
        except OSError as error:
            self._refuse(listener, notif_id, error)
            return
        try:
            self._list_into(listener, notif_id, pid, own, address, count)
        finally:
            os.close(own)

    def _list_into(
        self, listener: int, notif_id: int, pid: int, own: int, address: int, count: int
    ) -> None:
        try:
            answer = _listing_answer(own, count)
        except OSError as error:
            self._refuse(listener, notif_id, error)
            return
        failure = _write_memory(listener, notif_id, pid, address, answer.data)
        if failure == 0:
            try:
                os.lseek(own, answer.next_position, os.SEEK_SET)
            except OSError as error:
                self._pass_through(listener, notif_id, error)
                return
        if failure != errno.ESRCH:
            self._reply(listener, notif_id, 0 if failure else len(answer.data), failure)

    def _refuse(self, listener: int, notif_id: int, error: OSError) -> None:
        """Fail the caller's getdents64 as the kernel would have; an error that is not the
        caller's lets its call run unanswered."""
        if error.errno in _CALLER_ERRORS:
            self._reply(listener, notif_id, 0, error.errno or errno.EBADF)
        else:
            self._pass_through(listener, notif_id, error)

    def _pass_through(self, listener: int, notif_id: int, error: OSError) -> None:
        """Let a getdents64 this cannot answer run as the kernel would, and say the run is
        no longer reproducible."""
        self.failure = f"getdents64: {error}"
        self._reply(listener, notif_id, 0, 0, flags=_SECCOMP_USER_NOTIF_FLAG_CONTINUE)

    @staticmethod
    def _reply(listener: int, notif_id: int, value: int, error: int, *, flags: int = 0) -> bool:
        response = bytearray(_NOTIF_RESP.pack(notif_id, value, -error if error else 0, flags))
        try:
            fcntl.ioctl(listener, _IOCTL_NOTIF_SEND, response, True)
        except OSError as failure:
            if failure.errno == errno.ENOENT:
                return False  # the call is gone (caller killed or interrupted)
            raise
        return True


def _write_memory(listener: int, notif_id: int, pid: int, address: int, data: bytes) -> int:
    """Write `data` at `address` in task `pid`; 0, EFAULT for a bad buffer, or ESRCH when the
    call is no longer pending. The id is checked after opening the task's memory, so the pid
    cannot have been reused for another process (seccomp_unotify(2))."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return errno.ESRCH
    try:
        if not _id_valid(listener, notif_id):
            return errno.ESRCH
        if not data:
            return 0
        try:
            written = os.pwrite(fd, data, address)
        except OSError:
            return errno.EFAULT
        return 0 if written == len(data) else errno.EFAULT
    finally:
        os.close(fd)


@dataclass(frozen=True)
class _Listing:
    data: bytes
    next_position: int


def _descriptor_of(tid: int, fd: int) -> int:
    """A duplicate of descriptor `fd` of the process thread `tid` belongs to: the same open
    file, so the same offset (pidfd_getfd(2)). OSError as the caller's call would fail."""
    tgid = _thread_group(tid)
    pidfd = os.pidfd_open(tgid)
    try:
        own = int(_libc().syscall(ctypes.c_long(_NR_PIDFD_GETFD), pidfd, fd, 0))
    finally:
        os.close(pidfd)
    if own < 0:
        raise _errno_error("pidfd_getfd")
    return own


def _thread_group(tid: int) -> int:
    try:
        status = Path(f"/proc/{tid}/status").read_text()
    except OSError:
        raise OSError(errno.ESRCH, "the caller is gone") from None
    for line in status.splitlines():
        if line.startswith("Tgid:"):
            return int(line.split()[1])
    raise OSError(errno.ESRCH, "the caller has no thread group")


def _listing_answer(own: int, count: int) -> _Listing:
    """The dirent64 records, from the entry `own`'s offset counts to, that fit in `count`
    bytes; OSError as getdents64 would fail (EBADF, ENOTDIR, EINVAL for a buffer too small
    for the next entry)."""
    start = os.lseek(own, 0, os.SEEK_CUR)
    entries = _sorted_entries(f"/proc/self/fd/{own}".encode())
    data = bytearray()
    position = start
    for name, kind in entries[start:]:
        size = (_DIRENT.size + len(name) + 1 + 7) & ~7
        if len(data) + size > count:
            break
        record = bytearray(size)
        _DIRENT.pack_into(record, 0, FIXED_INODE, position + 1, size, kind)
        record[_DIRENT.size : _DIRENT.size + len(name)] = name
        data += record
        position += 1
    if not data and position < len(entries):
        raise OSError(errno.EINVAL, "the buffer cannot hold the next entry")
    return _Listing(bytes(data), position)


def _sorted_entries(folder: bytes) -> list[tuple[bytes, int]]:
    """(name, d_type) of every entry of `folder`, `.` and `..` first, then by name bytes."""
    entries = [(b".", _DT_DIR), (b"..", _DT_DIR)]
    with os.scandir(folder) as listing:
        found = [(entry.name, _dirent_type(entry)) for entry in listing]
    return entries + sorted(found)


def _dirent_type(entry: os.DirEntry[bytes]) -> int:
    """The entry's d_type: the file type bits of its mode (DT_* == S_IFMT >> 12)."""
    try:
        return stat.S_IFMT(entry.stat(follow_symlinks=False).st_mode) >> 12
    except OSError:
        return 0  # DT_UNKNOWN: gone since it was listed; the caller's stat will say so


def _statx_as(pid: int, dirfd: int, path_address: int, flags: int, mask: int) -> tuple[bytes, int]:
    """statx(dirfd, path, flags, mask) as task `pid` sees it: (the struct, 0) or (b"", errno).
    Only calls on a directory fd are sent here (the filter lets AT_FDCWD through)."""
    path, failure = _read_path(pid, path_address)
    if failure:
        return b"", failure
    try:
        local = os.open(f"/proc/{pid}/fd/{dirfd}", os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return b"", errno.EBADF if os.path.exists(f"/proc/{pid}") else errno.ESRCH
    except OSError as error:
        return b"", error.errno or errno.EBADF
    try:
        out = ctypes.create_string_buffer(_STATX_BYTES)
        rc = _libc().syscall(
            ctypes.c_long(_ARCHES[platform.machine()][3]),
            ctypes.c_int(local),
            ctypes.c_char_p(path),
            ctypes.c_int(flags & 0xFFFFFFFF),
            ctypes.c_uint(mask & 0xFFFFFFFF),
            out,
        )
        if rc != 0:
            return b"", ctypes.get_errno()
        return out.raw, 0
    finally:
        os.close(local)


def _normalized(result: bytes) -> bytes:
    """The statx result with fixed times and one fixed identity (device 0:0, inode 1): a
    fresh unpack gets fresh inodes, and numbering them in the order they are seen would race
    with the tool's own threads. The guest only hashes the identity (WASI metadata-hash).
    What else the guest sees that the file system, not the file, decides is fixed too: a
    directory's size and blocks (ext4: 4096 per block, tmpfs: 20 per entry) and the link
    count (1, as btrfs gives directories: "unknown" to tools that count subfolders by it)."""
    fixed = bytearray(result)
    for offset in _STATX_TIME_OFFSETS:
        _STATX_TIME.pack_into(fixed, offset, FIXED_TIME_S, 0)
    _U64.pack_into(fixed, _STATX_INO_OFFSET, FIXED_INODE)
    _DEVICE.pack_into(fixed, _STATX_DEV_OFFSET, 0, 0)
    _U32.pack_into(fixed, _STATX_NLINK_OFFSET, 1)
    _U32.pack_into(fixed, _STATX_BLKSIZE_OFFSET, FIXED_DIRECTORY_BYTES)
    (mode,) = _U16.unpack_from(fixed, _STATX_MODE_OFFSET)
    if stat.S_ISDIR(mode):
        _U64.pack_into(fixed, _STATX_SIZE_OFFSET, FIXED_DIRECTORY_BYTES)
        _U64.pack_into(fixed, _STATX_BLOCKS_OFFSET, FIXED_DIRECTORY_BYTES // 512)
    return bytes(fixed)


def _read_path(pid: int, address: int) -> tuple[bytes, int]:
    """The NUL-terminated path at `address` in task `pid` (at most PATH_MAX bytes)."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b"", errno.ESRCH
    try:
        path = b""
        while len(path) < _PATH_BYTES_MAX:
            # Never read past the page the path ends on: the next one may not be mapped.
            start = address + len(path)
            chunk = os.pread(fd, _PAGE_BYTES - start % _PAGE_BYTES, start)
            end = chunk.find(b"\0")
            if end >= 0:
                return path + chunk[:end], 0
            path += chunk
        return b"", errno.ENAMETOOLONG
    except OSError:
        return b"", errno.EFAULT
    finally:
        os.close(fd)


def _signed32(value: int) -> int:
    low = value & 0xFFFFFFFF
    return low - (1 << 32) if low & 0x80000000 else low


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _id_valid(listener: int, notif_id: int) -> bool:
    try:
        fcntl.ioctl(listener, _IOCTL_NOTIF_ID_VALID, struct.pack("=Q", notif_id))
    except OSError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# The launcher (child side)


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _filter_program(
    arch: int, getrandom_nr: int, statx_nr: int, getdents_nr: int
) -> list[tuple[int, int, int, int]]:
    """getrandom, getdents64, and statx on a directory fd, of the native ABI -> user
    notification; everything else (statx on AT_FDCWD included: the tool's own lookups) runs
    as usual."""
    return [
        (_BPF_LD_W_ABS, 0, 0, _DATA_ARCH_OFFSET),
        (_BPF_JEQ_K, 0, 7, arch),  # another ABI: allow
        (_BPF_LD_W_ABS, 0, 0, _DATA_NR_OFFSET),
        (_BPF_JEQ_K, 4, 0, getrandom_nr),  # -> notify
        (_BPF_JEQ_K, 3, 0, getdents_nr),  # -> notify
        (_BPF_JEQ_K, 0, 3, statx_nr),  # not statx: allow
        (_BPF_LD_W_ABS, 0, 0, _ARG0_LOW_OFFSET),
        (_BPF_JEQ_K, 1, 0, _AT_FDCWD),  # AT_FDCWD: allow
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_USER_NOTIF),
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
    ]


def install_filter() -> int:
    """Install the filter on the calling process; the listener fd. OSError when refused."""
    machine = platform.machine()
    if sys.platform != "linux" or machine not in _ARCHES:
        raise OSError(errno.ENOSYS, f"no seccomp supervisor on {sys.platform}/{machine}")
    arch, seccomp_nr, getrandom_nr, statx_nr, getdents_nr = _ARCHES[machine]
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _errno_error("prctl(PR_SET_NO_NEW_PRIVS)")
    rows = _filter_program(arch, getrandom_nr, statx_nr, getdents_nr)
    program = (_SockFilter * len(rows))(*(_SockFilter(*row) for row in rows))
    fprog = _SockFprog(len(rows), program)
    listener = libc.syscall(
        ctypes.c_long(seccomp_nr),
        ctypes.c_ulong(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_ulong(_SECCOMP_FILTER_FLAG_NEW_LISTENER),
        ctypes.byref(fprog),
    )
    if listener < 0:
        raise _errno_error("seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER)")
    return int(listener)


def _fixed_layout() -> None:
    """Turn off address-space randomization for what this process execs next (best effort:
    a refusal leaves addresses random, which only matters if the tool writes them out)."""
    libc = _libc()
    current = libc.personality(0xFFFFFFFF)
    if current >= 0:
        libc.personality(current | _ADDR_NO_RANDOMIZE)


def _errno_error(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")


def launch(channel_fd: int, command: Sequence[str]) -> None:
    """Install the filter, hand the listener to the supervisor, exec `command` (never returns
    unless exec fails)."""
    channel = socket.socket(fileno=channel_fd)
    _fixed_layout()
    try:
        listener = install_filter()
    except OSError as error:
        channel.sendall(f"no:{error.strerror or error}".encode())
    else:
        socket.send_fds(channel, [b"ok"], [listener])
        os.close(listener)
    channel.close()
    os.execvp(command[0], list(command))


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: python -m aos.kernel.wasm.seccomp <socket fd> <command...>", file=sys.stderr)
        return 2
    launch(int(argv[0]), argv[1:])
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
