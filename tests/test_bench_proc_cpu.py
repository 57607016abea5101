"""bench/proc_cpu.py: CPU time of a process tree from /proc (the playbook bench's CPU column)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import proc_cpu

# A command with spaces and parentheses, as /proc prints it: fields count from the last `)`.
_STAT = "42 (a (b) c) S 7 42 42 0 -1 4194304 100 0 0 0 30 12 5 3 20 0 1 0 99 0 0"


def test_parse_stat_reads_parent_and_ticks_after_the_command() -> None:
    assert proc_cpu.parse_stat(_STAT) == (7, 30 + 12 + 5 + 3)


def _fake_proc(tmp_path: Path, rows: dict[int, tuple[int, int]]) -> Path:
    for pid, (ppid, ticks) in rows.items():
        (tmp_path / str(pid)).mkdir()
        line = f"{pid} (p{pid}) S {ppid} 0 0 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0 1 0 0"
        (tmp_path / str(pid) / "stat").write_text(line)
    (tmp_path / "self").mkdir()  # not a pid: skipped
    return tmp_path


def test_tree_cpu_counts_roots_and_live_descendants_once(tmp_path: Path) -> None:
    # 10 -> 11 -> 12, and 20 apart; ticks are utime only here.
    proc = _fake_proc(tmp_path, {10: (1, 100), 11: (10, 50), 12: (11, 25), 20: (1, 1000)})
    ticks = os.sysconf("SC_CLK_TCK")
    assert proc_cpu.tree_cpu_s([10], proc=proc) == pytest.approx(175 / ticks)
    assert proc_cpu.tree_cpu_s([11, 12], proc=proc) == pytest.approx(75 / ticks)
    assert proc_cpu.tree_cpu_s([10, 20, 999], proc=proc) == pytest.approx(1175 / ticks)
    assert proc_cpu.tree_cpu_s([], proc=proc) == 0.0


def test_tree_cpu_of_a_live_child_grows_while_it_computes() -> None:
    spin = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    child = subprocess.Popen([sys.executable, "-c", spin + "\ntime.sleep(5)"])
    try:
        deadline = time.monotonic() + 10
        while proc_cpu.tree_cpu_s([child.pid]) < 0.25 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc_cpu.tree_cpu_s([child.pid]) >= 0.25
        assert proc_cpu.tree_cpu_s([os.getpid()]) >= proc_cpu.tree_cpu_s([child.pid])
    finally:
        child.kill()
        child.wait()
