"""`aos schedule` through click's CliRunner (spec/11-flows.md §12.4): the guide's "Run a
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
SECTION = "## Run a playbook every night"


def readme_commands() -> list[list[str]]:
    text = (ROOT / "docs" / "flows.md").read_text()
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


def test_trigger_commands_start_once_per_key(tmp_path: Path) -> None:
    runner = CliRunner()
    world = str(tmp_path / "w")
    flow = tmp_path / "quick.yaml"
    flow.write_text("name: t/quick\nsteps: [{name: a, tasks: [{do: noop}]}]\n")
    steps = [
        ["flow", "world", "create", world, "--clock", "manual"],
        ["flow", "deploy", str(flow), "--world", world],
        ["trigger", "create", "hook", "--flow", "t/quick", "--key", "$.id", "--world", world],
    ]
    for args in steps:
        assert runner.invoke(main, args).exit_code == 0, args
    deliver = ["trigger", "deliver", "hook", "--value", '{"id": "o1"}', "--world", world, "--json"]
    first = json.loads(runner.invoke(main, deliver).output)
    again = json.loads(runner.invoke(main, deliver).output)
    assert (first["exec"], first["duplicate"], again["duplicate"]) == ("trig~hook~o1", False, True)
    listed = runner.invoke(main, ["flow", "ls", "--world", world]).output
    assert "trig~hook~o1" in listed and "trigger hook" in listed
    shown = json.loads(runner.invoke(main, ["trigger", "ls", "--world", world, "--json"]).output)
    assert shown["triggers"][0]["fired"] == 1
    bad = runner.invoke(main, ["trigger", "deliver", "hook", "--value", "{", "--world", world])
    assert bad.exit_code == 1 and "error[schedule.invalid]" in bad.output
    assert runner.invoke(main, ["trigger", "delete", "hook", "--world", world]).exit_code == 0
    gone = runner.invoke(main, ["trigger", "delete", "hook", "--world", world])
    assert gone.exit_code == 1 and "error[schedule.unknown]" in gone.output
