"""Shell injection refused at check time (flows/define/checks.py, spec/11 §1.6): a template in a
shell tool's command text, or in the script a shell runs with `-c`, is `flow.shell_templated`
with the fix, for canonical flows and playbooks alike, so `aos flow check` and a deploy refuse
it; fixed commands, argv with templates, and templates as a shell's positional parameters
pass; and the fix runs a hostile value as data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aos.cli.main import main
from aos.flows.define.document import load_flow
from aos.flows.errors import FlowCheckError
from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import run_tool
from aos.flows.tools.shell import ShellSettings

INJECTED = """\
format: aos.flow/1
name: examples/inject
steps:
  - name: greet
    tasks:
      - do: call
        tool: {kind: shell, command: "echo hello {{ workload.name }}"}
"""

SHELL = "aos/tool.shell@1"
PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: inject, path: tests/inject}
workload: {name: world}
workflow:
  - step: start
    tool: {kind: shell, command: "echo {{ workload.name }}"}
"""


def flow_with(tool: dict[str, Any], args: Any = None) -> str:
    task: dict[str, Any] = {"do": "call", "tool": tool}
    if args is not None:
        task["args"] = args
    document = {
        "format": "aos.flow/1",
        "name": "t/shell",
        "steps": [{"name": "s", "tasks": [task]}],
    }
    return json.dumps(document)


def problems(text: str, source: str = "t.yaml") -> list[tuple[str, str]]:
    try:
        load_flow(text, source=source)
    except FlowCheckError as error:
        return [(p.code, p.path) for p in error.problems]
    return []


def test_aos_flow_check_refuses_a_templated_command_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "inject.flow.yaml"
    path.write_text(INJECTED)
    result = CliRunner().invoke(main, ["flow", "check", str(path), "--json"])
    assert result.exit_code == 1
    [problem] = json.loads(result.stdout)[0]["problems"]
    assert problem["code"] == "flow.shell_templated"
    assert problem["path"] == "$.steps[0].tasks[0].tool.command"
    assert "args" in problem["message"] and "argv" in problem["message"]


def test_a_playbook_shell_task_is_refused_too() -> None:
    # The path is the playbook's own: its problems are mapped back to where they were written.
    assert problems(PLAYBOOK, "inject.yaml") == [
        ("flow.shell_templated", "$.workflow[0].tool[0].tool.command")
    ]


@pytest.mark.parametrize(
    ("tool", "path"),
    [
        ({"kind": "shell", "spec": {"command": "ls {{ workload.dir }}"}}, "tool.spec.command"),
        ({"kind": "shell", "argv": ["/bin/bash", "-ec", "echo {{ workload.x }}"]}, "tool.argv[2]"),
        ({"kind": "shell", "argv": ["sh", "-e", "-c", "{% if x %}rm{% endif %}"]}, "tool.argv[3]"),
        ({"kind": "shell", "argv": ["dash", "-c", "--", "echo {{ x }}"]}, "tool.argv[3]"),
    ],
)
def test_every_shell_parsed_template_is_refused(tool: dict[str, Any], path: str) -> None:
    assert problems(flow_with(tool)) == [("flow.shell_templated", f"$.steps[0].tasks[0].{path}")]


@pytest.mark.parametrize(
    "tool",
    [
        {"kind": "shell", "command": 'printf "%s" "$name" | wc -c'},
        {"kind": "shell", "argv": ["echo", "{{ workload.name }}"]},
        {"kind": "shell", "argv": ["sh", "-c", 'echo "$1"', "sh", "{{ workload.name }}"]},
        {"kind": "shell", "argv": ["/usr/bin/env", "-c", "{{ workload.name }}"]},
        {"kind": "shell", "command": "echo fixed", "env": {"X": "{{ workload.name }}"}},
        # Another kind's `command` (SQL here) is not the shell's: the echo tool that stood
        # here has no `command` field since tool fields are checked.
        {"kind": "postgres", "auth": "pg", "command": "select {{ workload.name }}"},
    ],
)
def test_commands_that_no_shell_parses_with_a_template_pass(tool: dict[str, Any]) -> None:
    assert problems(flow_with(tool, {"name": "{{ workload.name }}"})) == []


def test_the_fix_runs_a_hostile_value_as_data(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    hostile = f"x; touch {marker}; $(touch {marker})"
    context = ToolContext(intent="i", shell=ShellSettings(enabled=True))
    for tool in (
        {"kind": "shell", "command": 'printf "%s" "$name"'},
        {"kind": "shell", "argv": ["printf", "%s", hostile]},
        {"kind": "shell", "argv": ["sh", "-c", 'printf "%s" "$1"', "sh", hostile]},
    ):
        outcome = run_tool(SHELL, {"tool": tool, "args": {"name": hostile}}, context=context)
        assert outcome.status == "ok", outcome.payload
        assert isinstance(outcome.payload, dict) and outcome.payload["stdout"] == hostile
    assert not marker.exists()
