"""What confines the process a python task runs in (spec/10-adapters.md §4.5): the inline
code's reused worker (flows/tools/pyworker.py) and the `function` form's child
(kernel/adapters/builtin/python_fn.py) alike.

- **No root.** An adapter running as root starts the process as `worker_user` (`nobody` by
  default; `--worker-user NAME`), with no supplementary groups, so it cannot read what only
  root may: the adapter's key file (mode 0600, `aos adapter keygen`) above all. The process
  must then be able to run its interpreter: when the adapter's own (`sys.executable`) sits
  where that user cannot reach (a Python under `/root`), the first of `INTERPRETERS_SHARED`
  it can run is used instead, and said once in the log. An adapter that is not root starts
  the process as itself: it can read what the adapter can (run such an adapter as a user of
  its own).
- **Memory.** `RLIMIT_AS` of `memory_bytes_max` (2 GiB), set by the process itself before it
  reads a request, soft and hard: code that allocates past it gets a `MemoryError`
  (`python.memory_exceeded`). A cgroup would also bound its page cache and children, but
  needs root and a delegated hierarchy; an address-space limit works for every user.
- **CPU.** A call may use `cpu_s_max` (60 s) of CPU time, all its threads together
  (`python.cpu_exceeded`); the wall-clock timeout of the call still holds. A `function`
  call's own process has it as `RLIMIT_CPU` (the kernel sends SIGXCPU, then SIGKILL a second
  later). A reused worker cannot have its limit moved per call (raising another process's
  limit needs CAP_SYS_RESOURCE, which a container's root often lacks, and the worker must not
  be able to raise its own), so the adapter watches the worker's CPU time while a call runs
  and kills it past the limit; its `RLIMIT_CPU` is `WORKER_CPU_S_MAX` over its life, and a
  worker near that is replaced before its next call.
- **Output**: each caller bounds what it reads back (`python.output_too_large`).

Crossing a limit ends the process (a worker is replaced); the adapter goes on serving.
"""

from __future__ import annotations

import functools
import logging
import os
import pwd
import signal
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos.kernel import limits_config
from aos.kernel.adapters.sdk import AdapterConfigInvalidError
from aos.kernel.limits_config import limit

log = logging.getLogger("aos.adapters.python")

MEMORY_BYTES_MAX_DEFAULT = 2 * 1024**3
"""Address space of a python task's process (RLIMIT_AS): the interpreter itself takes tens of
megabytes of it, a library with threads (numpy's BLAS) hundreds."""
MEMORY_BYTES_MIN = 64 * 1024**2
"""Below this the interpreter cannot start."""
CPU_S_MAX_DEFAULT = 60
"""CPU seconds one call may use (all its threads together)."""
CPU_KILL_GRACE_S = 1
"""After SIGXCPU at the soft limit, the kernel's SIGKILL at the hard limit this much later."""
WORKER_CPU_S_MAX = 3600
"""CPU seconds a reused worker may use over its life (its `RLIMIT_CPU`)."""
CPU_WATCH_S = 0.1
"""How often the adapter reads a worker's CPU time while a call runs."""
WORKER_USER_DEFAULT = "nobody"
INTERPRETERS_SHARED = ("/usr/bin/python3", "/usr/local/bin/python3")
"""Interpreters a worker user may run when the adapter's own is out of its reach."""
WORKER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
"""The whole environment of an inline-code worker: never the adapter's, which may hold
keychain secrets (`AOS_SECRET_*`) and database passwords."""
CPU_EXIT_CODE = -signal.SIGXCPU
"""How a process that crossed its CPU limit ends (the kernel's SIGXCPU, as an exit code; one
that ignored it gets SIGKILL a second later, which it could also have sent itself)."""


@dataclass(frozen=True)
class PythonLimits:
    """The limits of a python task's process, and the user it runs as under a root adapter;
    `aos adapter run python|tool-python` takes each as `--field-name` (generated from these
    fields), as `--limit NAME=VALUE` and from a settings file's `[limits]`."""

    memory_bytes_max: int = limit(
        MEMORY_BYTES_MAX_DEFAULT,
        "python, tool-python: address space of a task's process; past it the call fails with "
        "python.memory_exceeded.",
        minimum=MEMORY_BYTES_MIN,
    )
    cpu_s_max: int = limit(
        CPU_S_MAX_DEFAULT,
        "python, tool-python: CPU seconds one call may use; past it the call fails with "
        "python.cpu_exceeded.",
        minimum=1,
    )
    worker_user: str = limit(
        WORKER_USER_DEFAULT,
        "python, tool-python: the user a task's process runs as when the adapter runs as root "
        "(never root).",
    )

    def __post_init__(self) -> None:
        for problem in limits_config.problems(self):
            raise AdapterConfigInvalidError(problem)


@dataclass(frozen=True)
class Confinement:
    """How to start one python task's process: as whom, with which interpreter."""

    python: str
    user: pwd.struct_passwd | None
    """None: as the adapter's own user (it is not root)."""
    limits: PythonLimits

    def popen_options(self) -> dict[str, Any]:
        """`subprocess.Popen` arguments dropping root (none when the adapter is not root)."""
        if self.user is None:
            return {}
        return {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def prelude(self, cpu_s: int) -> str:
        """Python run first in the process, before anything it is asked to do: its memory
        limit, and `cpu_s` seconds of CPU (the kernel kills it a second past them)."""
        memory = self.limits.memory_bytes_max
        return (
            "import resource\n"
            f"resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))\n"
            f"resource.setrlimit(resource.RLIMIT_CPU, ({cpu_s}, {cpu_s + CPU_KILL_GRACE_S}))\n"
        )


def confine(python: str, limits: PythonLimits) -> Confinement:
    """The confinement of a process started by this adapter (a root one drops to the worker
    user, on an interpreter that user can run); a typed error when there is none."""
    if os.geteuid() != 0:
        return Confinement(python, None, limits)
    user = worker(limits.worker_user)
    return Confinement(_interpreter(python, user), user, limits)


def worker(name: str) -> pwd.struct_passwd:
    """The worker user of that name; a typed error for none, or for root."""
    try:
        user = pwd.getpwnam(name)
    except KeyError:
        raise AdapterConfigInvalidError(f"no user {name!r} to run python tasks as") from None
    if user.pw_uid == 0:
        raise AdapterConfigInvalidError(f"{name!r} is root: python tasks run without root")
    return user


@functools.lru_cache(maxsize=16)
def _interpreter(python: str, user: pwd.struct_passwd) -> str:
    if can_reach(python, user, os.X_OK):
        return python
    for shared in INTERPRETERS_SHARED:
        if can_reach(shared, user, os.X_OK):
            log.warning(
                "%s cannot run %s: python tasks run on %s (its standard library and packages)",
                user.pw_name,
                python,
                shared,
            )
            return shared
    raise AdapterConfigInvalidError(
        f"{user.pw_name} can run neither {python} nor any of {', '.join(INTERPRETERS_SHARED)}: "
        "install Python where it can, or choose another --worker-user"
    )


def can_reach(path: str | os.PathLike[str], user: pwd.struct_passwd, mode: int) -> bool:
    """Whether `user` (with its primary group only, as a worker has) may open `path` for
    `mode` (os.R_OK, os.X_OK), by the permission bits of the file and of every folder on the
    way to it. Without ACLs, which these bits do not see."""
    target = Path(os.path.realpath(path))
    if not target.exists():
        return False
    for folder in reversed(target.parents):
        if not _allows(folder.stat(), user, os.X_OK):
            return False
    return _allows(target.stat(), user, mode)


def _allows(found: os.stat_result, user: pwd.struct_passwd, mode: int) -> bool:
    read, execute = mode & os.R_OK, mode & os.X_OK
    if found.st_uid == user.pw_uid:
        bits = (stat.S_IRUSR if read else 0) | (stat.S_IXUSR if execute else 0)
    elif found.st_gid == user.pw_gid:
        bits = (stat.S_IRGRP if read else 0) | (stat.S_IXGRP if execute else 0)
    else:
        bits = (stat.S_IROTH if read else 0) | (stat.S_IXOTH if execute else 0)
    return found.st_mode & bits == bits


def cpu_seconds(pid: int) -> float:
    """CPU time a process has used, all its threads (Linux `/proc/PID/stat`; a process that
    exited but is not yet reaped still has it)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    # After the command's closing parenthesis: state is field 3; utime, stime are 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
