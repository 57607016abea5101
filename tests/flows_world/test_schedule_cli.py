"""`aos schedule` through click's CliRunner (spec/11-flows.md §12.4): the README's "Run a
playbook every night" as written, and refusals that exit 1 with their code."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from aos.cli.main import main
from aos.kernel.world.world import World

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### Run a playbook every night"


def readme_commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    block = text.split(SECTION, 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [re.sub(r"\s+#.*$", "", line.removeprefix("$ ")) for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line.strip()]


def test_the_readme_nightly_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    runner = CliRunner()
    world = str(tmp_path / "nightly")
    env: dict[str, str] = {}
    for words in readme_commands():
        if words[0] == "export":
            key, value = words[1].split("=", 1)
            env[key] = value.replace("/tmp/nightly", world)
            continue
        assert words[0] == "aos"
        args = [w.replace("/tmp/nightly", world) for w in words[1:]]
        result = runner.invoke(main, args, env=env, catch_exceptions=False)
        assert result.exit_code == 0, (args, result.output)
    shown = runner.invoke(main, ["schedule", "show", "nightly", "--json"], env=env)
    found = json.loads(shown.output)
    assert found["fired"] == 1
    assert found["recent"][0]["exec"] == "sched~nightly~19700101T010000Z"
    with World.reading(world) as opened:
        assert opened.height > 0


def test_refusals_exit_1_with_their_code(tmp_path: Path) -> None:
    runner = CliRunner()
    world = str(tmp_path / "w")
    assert (
        runner.invoke(main, ["flow", "world", "create", world, "--clock", "manual"]).exit_code == 0
    )
    bad = [
        (["schedule", "pause", "nope"], "schedule.unknown"),
        (["schedule", "create", "a", "--flow", "x", "--cron", "* * *"], "schedule.invalid"),
        (["schedule", "create", "a", "--flow", "x", "--every", "soon"], "schedule.invalid"),
        (["schedule", "create", "a", "--flow", "x", "--cron", "* * * * *"], "flow.unknown"),
        (
            ["schedule", "create", "a", "--flow", "x", "--cron", "* * * * *", "--workload", "{"],
            "schedule.invalid",
        ),
    ]
    for args, code in bad:
        result = runner.invoke(main, [*args, "--world", world])
        assert result.exit_code == 1, (args, result.output)
        assert f"error[{code}]" in result.output
