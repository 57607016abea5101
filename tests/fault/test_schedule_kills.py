"""SIGKILL around slot firing (spec/11-flows.md §12.2): a child fires a quarter-hourly
schedule over a simulated day on LMDB with `sync=True` and is killed at random points, then
run again, until it finishes; every slot of the day has exactly one execution, none missing,
none doubled, and the world replays (tests/fault/schedules.py)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fault.schedules import check

pytestmark = pytest.mark.fault

KILLS = 6
RUN_TIMEOUT_S = 300.0
KILL_AFTER_S = (1.0, 6.0)
"""A child takes ~2 s to open the world and ~6 s to fire a day: kills land in both."""


def test_sigkills_around_slot_firing_leave_one_execution_per_slot(tmp_path: Path) -> None:
    rng = random.Random(36)
    command = [
        sys.executable,
        "-m",
        "tests.fault.schedules",
        "--world",
        str(tmp_path / "w"),
        "--keys",
        str(tmp_path / "k"),
        "--days",
        "1",
    ]
    killed = 0
    for _ in range(KILLS):
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(*KILL_AFTER_S))
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            killed += 1
        child.communicate(timeout=RUN_TIMEOUT_S)
    finished = subprocess.run(command, capture_output=True, timeout=RUN_TIMEOUT_S, check=False)
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]
    assert killed > 0
    assert check(tmp_path / "w", 1) == []
