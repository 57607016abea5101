"""A bounded slice of the fault-injection run (`make fault` and `make fault-ci` run more), and
the harness's checker shown to see what it must see."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from aos.kernel.wasm import WasmEngine
from tests.fault import harness

pytestmark = pytest.mark.fault

KILLS = 10
FRESH_EVERY = 5  # two worlds: creation, growth across kills and retirement are all covered


def test_sigkill_at_random_and_named_points_loses_nothing(tmp_path: Path) -> None:
    # A fresh seed each run widens coverage over time; a failure names it (AOS_FAULT_SEED=...).
    seed = int(os.environ.get("AOS_FAULT_SEED", random.SystemRandom().getrandbits(32)))
    summary = harness.run(KILLS, seed=seed, work=tmp_path, fresh_every=FRESH_EVERY, quiet=True)
    assert not summary.failures, summary.render()
    assert summary.kills == KILLS, summary.render()
    assert summary.acked_ops > 0


def _workload(world: Path, ack: Path, ops: int) -> None:
    command = [sys.executable, "-m", "tests.fault.workload", "--world", str(world)]
    command += ["--ack", str(ack), "--seed", "7", "--ops-max", str(ops)]
    env = {k: v for k, v in os.environ.items() if k != "AOS_FAULT_POINT"}
    subprocess.run(command, cwd=harness.REPO, env=env, check=True, capture_output=True)


def test_the_checker_sees_a_lost_or_altered_acknowledged_record(tmp_path: Path) -> None:
    world, ack = tmp_path / "world", tmp_path / "ack.jsonl"
    _workload(world, ack, 30)
    acks = harness.read_acks(ack)
    engine = WasmEngine()
    assert harness.check_world(world, acks, engine, from_seq=None).problems == []
    [seq, record_hash] = next(a for a in acks if a["records"])["records"][0]
    altered = [{"op": "send", "records": [[seq, "blake3:" + "0" * 64]]}]
    lost = [{"op": "send", "records": [[10**6, record_hash]]}]
    unsettled = [{"op": "settle", "records": [], "intents": ["blake3:" + "1" * 64]}]
    for bad, says in ((altered, "differs"), (lost, "missing"), (unsettled, "not journaled")):
        problems = harness.check_world(world, acks + bad, engine, from_seq=None).problems
        assert len(problems) == 1 and says in problems[0], problems


def test_a_torn_ack_line_is_cut_off(tmp_path: Path) -> None:
    ack = tmp_path / "ack.jsonl"
    ack.write_bytes(b'{"op": "send", "records": []}\n{"op": "se')
    assert harness.read_acks(ack) == [{"op": "send", "records": []}]
    assert ack.read_bytes() == b'{"op": "send", "records": []}\n'
