"""`aos world time advance|jump-next` on development (manual-clock) worlds."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from aos.cli.main import main
from tests.test_world import SCRIPTED, create, ping


def run(*args: str, world: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [*args, "--world", str(world)])
    return result.exit_code, result.stdout, result.stderr


def test_advance_and_jump_next_settle_timers(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path, SCRIPTED, clock="manual") as world:
        world.send("demo/Ping@1", ping("t", "timer", 5_000_000_000))
        start = world.logical_ns
    code, out, _ = run("world", "time", "advance", "2s", "--json", world=path)
    assert code == 0
    assert json.loads(out)["logical_ns"] == start + 2_000_000_000
    assert json.loads(out)["report"]["steps"] == 0
    code, out, _ = run("world", "time", "jump-next", world=path)
    assert code == 0 and f"logical_ns {start + 5_000_000_000}: 1 steps" in out
    code, out, _ = run("world", "time", "jump-next", world=path)
    assert code == 0 and "no timer is pending" in out
    code, out, _ = run("world", "time", "advance", "1000", "--json", world=path)
    assert json.loads(out)["logical_ns"] == start + 5_000_001_000


def test_time_refusals(tmp_path: Path) -> None:
    manual, wall = tmp_path / "manual", tmp_path / "wall"
    create(manual, SCRIPTED, clock="manual").close()
    create(wall, SCRIPTED).close()
    code, _, err = run("world", "time", "advance", "soon", world=manual)
    assert code == 1 and err.startswith("error[air.value_invalid]")
    assert run("world", "time", "advance", "-5", world=manual)[0] == 2  # an option to click
    code, _, err = run("world", "time", "advance", "1s", world=wall)
    assert code == 1 and err.startswith("error[world.clock_manual_only]")
    assert run("world", "time", "advance", world=manual)[0] == 2
