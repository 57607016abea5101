"""CPU seconds a set of processes and all their descendants have used, read from /proc (Linux):
on a shared machine, where wall time grows with other people's load, CPU time says what a
workload itself cost.

A live process counts its own user + system time and `cutime + cstime`, the time of its
children that have ended and been waited for; the live descendants count themselves. So
nothing is counted twice, and a worker's short-lived children (an interpreter per call) are
in once their parent has reaped them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PPID, _UTIME, _STIME, _CUTIME, _CSTIME = 1, 11, 12, 13, 14  # after the command, 0-based


def parse_stat(line: str) -> tuple[int, int]:
    """`/proc/PID/stat` -> (parent pid, clock ticks of the process and its reaped children).
    The command (field 2) is in parentheses and may hold spaces or parentheses itself, so the
    fields are counted from the last `)`."""
    rest = line[line.rindex(")") + 2 :].split()
    ticks = sum(int(rest[i]) for i in (_UTIME, _STIME, _CUTIME, _CSTIME))
    return int(rest[_PPID]), ticks


def _processes(proc: Path) -> dict[int, tuple[int, int]]:
    """pid -> (ppid, ticks) of every process readable now."""
    found: dict[int, tuple[int, int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            found[int(entry.name)] = parse_stat((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue  # it ended while being read, or is not ours to read
    return found


def children(pid: int, *, proc: Path = PROC) -> list[int]:
    """The live child processes of `pid`."""
    return sorted(child for child, (ppid, _) in _processes(proc).items() if ppid == pid)


def tree_cpu_s(roots: Iterable[int], *, proc: Path = PROC) -> float:
    """CPU seconds used so far by the processes `roots` and every live descendant."""
    table = _processes(proc)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    seen: set[int] = set()
    stack = [pid for pid in roots if pid in table]
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(children.get(pid, ()))
    return sum(table[pid][1] for pid in seen) / _TICKS_PER_S
