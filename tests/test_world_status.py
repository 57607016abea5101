"""`aos world status` reads a world without opening it (kernel/world/world_status.py,
spec/03 §12): it must say exactly what opening the world for reading says, on worlds with a
journal tail after their head checkpoint, open intents and timers, failed cells; and the
command, in a process of its own, loads neither the definition model (pydantic) nor the
wasm engine, and counts a failed flow execution as failed (issue 32)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aos.cli.common import EXIT_FAILED
from aos.kernel.world.errors import WorldCorruptError, WorldMissingError
from aos.kernel.world.world import World
from aos.kernel.world.world_status import read_status
from tests.test_world_tail import EVERY_FLUSH, NEVER, _run

REPO = Path(__file__).resolve().parent.parent

# A flow whose only task raises: its execution ends failed without any step fault.
FAILING = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: failing
workflow:
  - step: start
    tool:
      kind: python
      code: |
        raise ValueError("boom")
    next:
      arcs:
        - step: end
  - step: end
    tool: {kind: noop}
"""


def _as_opened(path: Path) -> tuple[dict[str, object], list[dict[str, object]]]:
    with World.reading(path) as world:
        return world.reader.status(), world.reader.open_intents()


@pytest.mark.parametrize(("seed", "limits"), [(1, NEVER), (2, NEVER), (3, EVERY_FLUSH)])
def test_the_status_read_says_what_opening_the_world_says(
    tmp_path: Path, seed: int, limits: object
) -> None:
    path = tmp_path / "w"
    world = _run(path, limits, seed, 25)  # type: ignore[arg-type]
    height = world.height
    world.store.close()  # as a kill would: whatever the last checkpoint left is a tail
    status = read_status(path)
    assert (status.summary(), status.open_intents) == _as_opened(path)
    assert status.height == height
    if limits is NEVER:
        assert status.open_intents and any(
            counts["failed"] for counts in status.workflows.values()
        ), "the workload should leave open intents and failed cells to compare"


def test_the_status_read_refuses_what_is_no_world(tmp_path: Path) -> None:
    with pytest.raises(WorldMissingError):
        read_status(tmp_path / "nothing")
    path = tmp_path / "w"
    _run(path, EVERY_FLUSH, 4, 3).close()
    with World.open(path) as world:  # a head naming a root the store has lost
        world.store.meta.put("world.head", "blake3:" + "0" * 64)
    with pytest.raises(WorldCorruptError):
        read_status(path)


def test_the_command_loads_no_model_nor_engine_and_counts_a_failed_execution(
    tmp_path: Path,
) -> None:
    flow = tmp_path / "failing.yaml"
    flow.write_text(FAILING)
    world = tmp_path / "kept"
    aos = str(Path(sys.executable).with_name("aos"))
    ran = subprocess.run(
        [aos, "flow", "run", str(flow), "--local", "--keep", str(world)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert ran.returncode == EXIT_FAILED, ran.stderr  # the execution failed
    probe = (
        "import json, sys\n"
        "from aos.cli.main import main\n"
        "try:\n"
        f"    main(['world', 'status', '--world', {str(world)!r}, '--json'])\n"
        "except SystemExit as done:\n"
        "    loaded = [m for m in ('pydantic', 'wasmtime') if m in sys.modules]\n"
        "    print(json.dumps({'code': done.code, 'loaded': loaded}), file=sys.stderr)\n"
    )
    probed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    verdict = json.loads(probed.stderr.strip().splitlines()[-1])
    assert verdict == {"code": 0, "loaded": []}, probed.stderr
    status = json.loads(probed.stdout)
    assert status["workflows"]["aos/FlowExec@1"] == {"cells": 1, "failed": 1}
