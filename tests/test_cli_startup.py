"""`aos --help` and `aos cbor` start without the heavy libraries (the command modules are
imported on first use), and the help lines `aos --help` shows match the commands' own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from aos.cli.main import COMMANDS, load_command, main

HEAVY = ("wasmtime", "pydantic", "fastapi", "httpx", "uvicorn", "lmdb")

_PROBE = """
import json, sys
from aos.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _modules_after(*args: str) -> tuple[str, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=60
    )
    return done.stdout, set(json.loads(done.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("cbor", "encode", '{"b": 2, "a": 1}'),
        ("cbor", "decode", "--diag", "d9d9f7a2616101616202"),
    ],
)
def test_light_commands_import_no_heavy_library(args: tuple[str, ...]) -> None:
    out, modules = _modules_after(*args)
    assert out.strip()
    loaded = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert loaded == []


def test_a_world_command_still_loads_its_module() -> None:
    _, modules = _modules_after("world", "--help")
    assert "aos.cli.world_cmd" in modules
    assert "aos.cli.audit_cmd" in modules  # attaches snapshot, replay, gc, time
    assert "aos.cli.ops_cmd" in modules  # attaches explain, cell, intent


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_lines_match_the_commands(name: str) -> None:
    command = load_command(name)
    assert command.name == name
    assert command.get_short_help_str(limit=200) == COMMANDS[name].help


def test_help_lists_every_command_and_unknown_ones_are_usage_errors() -> None:
    runner = CliRunner()
    shown = runner.invoke(main, ["--help"])
    assert shown.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in shown.output
    unknown = runner.invoke(main, ["nosuch"])
    assert unknown.exit_code == 2
    assert "No such command 'nosuch'" in unknown.output
