"""Reproducible builds (issue 16 item 6, issue 32 item 4): the same source and tools give the
same bytes whatever the cache and whatever else the source folder holds, because the build
tool runs on staged copies of the sources, under the seccomp supervisor
(`aos.kernel.wasm.seccomp`) with a fixed clock (`aos.kernel.wasm.fixed_clock`).

The supervisor is tested on small real programs (a Python child calling getrandom, statx and
getdents64); the builds are two real cold componentize-py runs into two fresh caches, one from
a clean copy of the module and one from a copy with `__pycache__`, editor files and backups.
The interpreter's two builds (clean and dirty copies of the checkout) are in
`make install-check`.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from aos.cli.main import main as aos_main
from aos.kernel.hashing import hash_bytes
from aos.kernel.wasm import fixed_clock, seccomp
from aos.kernel.wasm.build import BuildFailedError, BuildResult, build_c, build_python

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "modules" / "examples"
KEY = bytes(range(32))
GETRANDOM_NR = {"x86_64": 318, "aarch64": 278}[platform.machine()]
GETDENTS_NR = {"x86_64": 217, "aarch64": 61}[platform.machine()]

# A child that prints what getrandom and statx told it, as JSON.
PROBE = r"""
import ctypes, json, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
out = {"random": [os.getrandom(16).hex(), os.getrandom(16, os.GRND_NONBLOCK).hex()]}
out["longest"] = len(os.getrandom(1 << 25))
try:
    os.getrandom(4, 0x80)
except OSError as error:
    out["bad_flags"] = error.errno
folder = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
for name in ("present", "present", "missing", "sub"):
    buf = ctypes.create_string_buffer(256)
    rc = libc.statx(folder, name.encode(), 0, 0xFFF, buf)
    if rc != 0:
        out[name] = ctypes.get_errno()
        continue
    ino, size, blocks = struct.unpack_from("=QQQ", buf.raw, 32)
    dev = struct.unpack_from("=II", buf.raw, 136)
    nlink = struct.unpack_from("=I", buf.raw, 16)[0]
    times = [struct.unpack_from("=qI", buf.raw, at) for at in (64, 80, 96, 112)]
    seen = {"ino": ino, "dev": dev, "size": size, "times": times, "nlink": nlink}
    if name == "sub":
        seen["blocks"] = blocks
    out.setdefault(name + "_seen", []).append(seen)
print(json.dumps(out))
"""


def supervised(command: list[str], key: bytes = KEY) -> tuple[dict[str, object], int]:
    with seccomp.EntropySupervisor(key) as supervisor:
        process = subprocess.Popen(
            supervisor.wrap(command), pass_fds=supervisor.pass_fds, stdout=subprocess.PIPE
        )
        assert supervisor.attach(), supervisor.refusal
        stdout, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    return json.loads(stdout), supervisor.calls


def test_getrandom_and_statx_answers_are_fixed(tmp_path: Path) -> None:
    (tmp_path / "present").write_bytes(b"12345")
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    first, calls = supervised([sys.executable, "-c", PROBE, str(tmp_path)])
    expected = seccomp.EntropyStream(KEY).first(16).hex()
    assert first["random"] == [expected, expected]
    assert calls >= 2  # the interpreter's own hash seed comes first
    assert first["longest"] == seccomp.GETRANDOM_BYTES_MAX
    assert first["bad_flags"] == errno.EINVAL
    fixed = [[seccomp.FIXED_TIME_S, 0]] * 4
    seen = {"ino": seccomp.FIXED_INODE, "dev": [0, 0], "size": 5, "times": fixed, "nlink": 1}
    assert first["present_seen"] == [seen] * 2
    assert first["missing"] == errno.ENOENT
    # A folder's size and link count are the file system's (ext4: 4096 a block, tmpfs: 20
    # an entry; 2 + its subfolders), so they are fixed too.
    size = seccomp.FIXED_DIRECTORY_BYTES
    folder = {**seen, "size": size, "blocks": size // 512}
    assert first["sub_seen"] == [folder]
    (tmp_path / "present").touch()
    again, _ = supervised([sys.executable, "-c", PROBE, str(tmp_path)])
    assert again == first
    other, _ = supervised([sys.executable, "-c", PROBE, str(tmp_path)], key=bytes(32))
    assert other["random"] != first["random"]


# A child that lists folders: os.listdir (glibc readdir), os.scandir (inodes, types), a
# listing that needs many getdents64 calls, a rewind, a non-folder and an O_PATH descriptor.
LISTER = r"""
import errno, json, os, sys
root = sys.argv[1]
out = {"names": os.listdir(root), "many": os.listdir(os.path.join(root, "many"))}
out["entries"] = sorted(
    (e.name, e.inode(), e.is_dir(follow_symlinks=False), e.is_symlink()) for e in os.scandir(root)
)
fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
first = os.listdir(fd)
os.lseek(fd, 0, os.SEEK_SET)
out["rewound"] = os.listdir(fd) == first
for name, flags in (("file", os.O_RDONLY), (".", os.O_PATH | os.O_DIRECTORY)):
    try:
        os.listdir(os.open(os.path.join(root, name), flags))
    except OSError as error:
        out[name] = error.errno
print(json.dumps(out))
"""


def test_folders_list_in_name_order_with_one_inode(tmp_path: Path) -> None:
    names = ["zeta", "Alpha", "b_", "0x", "long-" + "x" * 200, "file"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to("sub")
    many = tmp_path / "many"
    many.mkdir()
    for n in range(3000):  # ~100 KB of records: several calls of the C library's 32 KB
        (many / f"f{(n * 7919) % 3000:05d}").write_bytes(b"")
    listed, _ = supervised([sys.executable, "-c", LISTER, str(tmp_path)])
    assert listed["names"] == sorted([*names, "sub", "link", "many"])
    assert listed["many"] == sorted(p.name for p in many.iterdir())
    kinds = {name: [is_dir, is_link] for name, _, is_dir, is_link in listed["entries"]}
    assert {inode for _, inode, _, _ in listed["entries"]} == {seccomp.FIXED_INODE}
    assert kinds["sub"] == [True, False] and kinds["link"] == [False, True]
    assert kinds["file"] == [False, False]
    assert listed["rewound"] is True
    assert listed["file"] == errno.ENOTDIR
    assert listed["."] == errno.EBADF


def test_a_too_small_buffer_is_refused_as_the_kernel_would(tmp_path: Path) -> None:
    (tmp_path / ("n" * 100)).write_bytes(b"")
    code = (
        "import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True); "
        "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY); "
        "buf = ctypes.create_string_buffer(64); "
        f"calls = [libc.syscall({GETDENTS_NR}, fd, buf, 64) for _ in range(2)]; "
        "print(*calls, ctypes.get_errno())"
    )
    with seccomp.EntropySupervisor(KEY) as supervisor:
        process = subprocess.Popen(
            supervisor.wrap([sys.executable, "-c", code, str(tmp_path)]),
            pass_fds=supervisor.pass_fds,
            stdout=subprocess.PIPE,
        )
        assert supervisor.attach()
        stdout, _ = process.communicate(timeout=60)
    # "." and ".." fit in 64 bytes; the long name does not: the second call is refused.
    assert stdout.split() == [b"48", b"-1", str(errno.EINVAL).encode()]
    assert supervisor.intact


def _blocked_in(pid: int, nr: int) -> bool:
    try:
        return Path(f"/proc/{pid}/syscall").read_text().split()[0] == str(nr)
    except (OSError, IndexError):
        return False


def test_a_child_killed_while_its_call_waits_ends_the_supervisor(tmp_path: Path) -> None:
    with seccomp.EntropySupervisor(KEY) as supervisor:
        # Nobody answers yet, so the interpreter blocks on its very first getrandom.
        process = subprocess.Popen(
            supervisor.wrap([sys.executable, "-c", "pass"]), pass_fds=supervisor.pass_fds
        )
        for _ in range(600_000):
            if _blocked_in(process.pid, GETRANDOM_NR):
                break
        assert _blocked_in(process.pid, GETRANDOM_NR)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=60) == -signal.SIGKILL
        assert supervisor.attach()
    assert supervisor.calls == 0


def test_a_refused_filter_is_reported_and_the_command_still_runs() -> None:
    # A second listener in one process tree is refused by the kernel (EBUSY).
    with seccomp.EntropySupervisor(KEY) as outer, seccomp.EntropySupervisor(KEY) as inner:
        command = outer.wrap(inner.wrap([sys.executable, "-c", "print('ran')"]))
        process = subprocess.Popen(
            command, pass_fds=(*outer.pass_fds, *inner.pass_fds), stdout=subprocess.PIPE
        )
        assert outer.attach()
        assert not inner.attach()
        stdout, _ = process.communicate(timeout=60)
    assert stdout == b"ran\n"
    assert inner.refusal is not None and os.strerror(errno.EBUSY) in inner.refusal


def test_a_child_that_never_launches_is_a_refusal() -> None:
    with seccomp.EntropySupervisor(KEY) as supervisor:
        process = subprocess.Popen([sys.executable, "-c", "pass"])
        assert not supervisor.attach()
        assert process.wait(timeout=60) == 0
    assert supervisor.refusal == "no answer"


def test_a_supervised_tool_failure_or_overrun_is_typed(tmp_path: Path) -> None:
    from aos.kernel.wasm import build

    key = hash_bytes(b"a build key")
    failing = [sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"]
    with pytest.raises(BuildFailedError, match="exited with 3:\nboom"):
        build._run_tool(
            failing, timeout_s=60, cwd=tmp_path, tool="failing", entropy=key, clock_dir=tmp_path
        )
    waiting = [sys.executable, "-c", "import signal; signal.pause()"]
    with pytest.raises(BuildFailedError, match=r"ran longer than 1\.0s"):
        build._run_tool(
            waiting, timeout_s=1.0, cwd=tmp_path, tool="waiting", entropy=key, clock_dir=tmp_path
        )
    ok = [sys.executable, "-c", "pass"]
    assert build._run_tool(
        ok, timeout_s=60, cwd=tmp_path, tool="ok", entropy=key, clock_dir=tmp_path
    )
    assert not build._run_tool(ok, timeout_s=60, cwd=tmp_path, tool="ok")


def test_the_launcher_needs_a_socket_and_a_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "aos.kernel.wasm.seccomp", "x"], capture_output=True, check=False
    )
    assert done.returncode == 2 and b"usage" in done.stderr


def test_the_fixed_clock_library_fixes_the_clock(tmp_path: Path) -> None:
    library = fixed_clock.library(tmp_path)
    assert library is not None and fixed_clock.library(tmp_path) == library
    done = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time(), time.monotonic())"],
        env={**os.environ, "LD_PRELOAD": str(library)},
        capture_output=True,
        check=True,
    )
    fixed = float(seccomp.FIXED_TIME_S)
    assert done.stdout.split() == [str(fixed).encode(), str(fixed).encode()]
    assert ctypes.sizeof(ctypes.c_long) == 8  # the library's structs assume LP64


# --------------------------------------------------------------------------------------------
# Two cold builds into two fresh caches


def _copy_module(into: Path, *, stray: bool) -> Path:
    """A fresh copy of the counter module; `stray`: with what a working folder gathers."""
    into.mkdir()
    shutil.copyfile(EXAMPLES / "counter_py" / "counter.py", into / "counter.py")
    if stray:
        (into / "__pycache__").mkdir()
        (into / "__pycache__" / "counter.cpython-311.pyc").write_bytes(b"host bytecode")
        (into / "__pycache__" / "counter.cpython-314.pyc").write_bytes(b"guest bytecode")
        (into / ".counter.py.swp").write_bytes(b"vim swap")
        (into / "counter.py~").write_text("# a backup\n")
        (into / ".#counter.py").write_text("emacs lock")
        (into / "README.md").write_text("notes\n")
    return into


# Two builds into empty caches (~30 s alone), charged to whichever test uses them first.
cold_builds_time = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def two_cold_builds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BuildResult]]:
    """The counter built from a clean copy and from a copy with stray files, each into a
    fresh cache (the build key ignores the stray files, so one cache would be a hit)."""
    root = tmp_path_factory.mktemp("sources")
    copies = [_copy_module(root / name, stray=name == "stray") for name in ("clean", "stray")]
    listings = [sorted(p.name for p in copy.rglob("*")) for copy in copies]
    built = [
        build_python(copy, cache_dir=tmp_path_factory.mktemp(f"cache{n}"))
        for n, copy in enumerate(copies)
    ]
    # The build reads the sources and writes nothing beside them (no __pycache__).
    assert [sorted(p.name for p in copy.rglob("*")) for copy in copies] == listings
    yield built


@cold_builds_time
def test_two_fresh_caches_give_the_same_bytes(two_cold_builds: list[BuildResult]) -> None:
    first, second = two_cold_builds
    assert not first.cached and not second.cached
    assert first.wasm_path.parent != second.wasm_path.parent
    assert first.reproducible and second.reproducible
    assert first.source_hash == second.source_hash
    assert first.wasm_hash == second.wasm_hash
    assert first.wasm_path.read_bytes() == second.wasm_path.read_bytes()
    record = json.loads(first.wasm_path.with_suffix(".json").read_text())
    assert record["reproducible"] is True


@cold_builds_time
def test_stray_files_are_not_in_the_component(two_cold_builds: list[BuildResult]) -> None:
    data = two_cold_builds[1].wasm_path.read_bytes()
    names = [b"counter.py~", b".counter.py.swp", b".#counter.py", b"cpython-311.pyc"]
    contents = [b"host bytecode", b"guest bytecode", b"vim swap", b"# a backup", b"emacs lock"]
    assert [stray for stray in [*names, *contents] if stray in data] == []


@cold_builds_time
def test_a_cache_hit_keeps_the_recorded_reproducibility(
    two_cold_builds: list[BuildResult],
) -> None:
    first = two_cold_builds[0]
    hit = build_python(EXAMPLES / "counter_py", cache_dir=first.wasm_path.parent)
    assert hit.cached and hit.reproducible and hit.wasm_hash == first.wasm_hash


@cold_builds_time
def test_the_cli_says_whether_a_build_is_reproducible(
    two_cold_builds: list[BuildResult],
) -> None:
    cache = two_cold_builds[0].wasm_path.parent
    args = ["module", "build", str(EXAMPLES / "counter_py"), "--cache-dir", str(cache)]
    result = CliRunner().invoke(aos_main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["reproducible"] is True
    record = cache / f"{two_cold_builds[0].source_hash.hex}.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "reproducible": False}))
    result = CliRunner().invoke(aos_main, args)
    assert result.exit_code == 0
    assert "NOT reproducible" in result.stderr


def test_c_builds_are_the_same_bytes_in_two_caches(tmp_path: Path) -> None:
    source = EXAMPLES / "counter_c" / "counter.c"
    first = build_c(source, cache_dir=tmp_path / "one")
    second = build_c(source, cache_dir=tmp_path / "two")
    assert first.reproducible and first.wasm_hash == second.wasm_hash
