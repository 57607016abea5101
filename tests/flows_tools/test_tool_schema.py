"""One schema per tool kind (flows/define/tool_schema.py), read by `aos flow check` and by the tools
alike: a field the check accepts never fails the call as unknown, a field it refuses is
refused before anything runs, at its path, with the fields the kind takes; NoETL's own
fields are supported (`credential`, `pool`, `commands`) or refused by name with a fix
(`script`, `output_select`, a file resource's `method`); spec/12's table is the schema's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from aos.flows.define import flowlang
from aos.flows.define.cfd import definition_from_value
from aos.flows.define.document import load_flow
from aos.flows.define.tool_schema import COMMON_FIELDS, TOOL_SCHEMAS, markdown_table
from aos.flows.errors import FlowCheckError
from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import EFFECT_OF_KIND, run_tool
from aos.flows.tools.keychain import Keychain

SPEC_12 = Path(__file__).resolve().parents[2] / "spec" / "12-playbooks.md"


def cfd(tool: dict[str, Any]) -> dict[str, Any]:
    task = {"name": "t", "do": "call", "tool": tool}
    return {"format": "aos.flow/1", "name": "f", "steps": [{"name": "s", "tasks": [task]}]}


def check_problems(tool: dict[str, Any]) -> list[Any]:
    try:
        definition_from_value(cfd(tool), source="f.yaml")
    except FlowCheckError as error:
        return list(error.problems)
    return []


def run_message(tool: dict[str, Any]) -> str:
    outcome = run_tool(
        EFFECT_OF_KIND[tool["kind"]], {"tool": tool, "args": {}}, context=ToolContext("i")
    )
    assert outcome.status == "error", outcome
    return str(outcome.payload["message"])


@pytest.mark.parametrize("kind", sorted(TOOL_SCHEMAS))
def test_an_unknown_field_is_refused_by_the_check_and_by_the_tool_alike(kind: str) -> None:
    tool = {"kind": kind, "bogus": 1}
    [problem] = check_problems(tool)
    assert problem.code == "flow.tool_field_unknown"
    assert problem.path == "$.steps[0].tasks[0].tool.bogus"
    for name in TOOL_SCHEMAS[kind].accepted:
        assert name in problem.message
    assert problem.message in run_message(tool)


@pytest.mark.parametrize("kind", sorted(TOOL_SCHEMAS))
def test_every_field_a_schema_accepts_passes_the_check_and_the_tool(kind: str) -> None:
    schema = TOOL_SCHEMAS[kind]
    for name in [*schema.fields, *COMMON_FIELDS]:
        tool = {"kind": kind, name: None} if name != "kind" else {"kind": kind}
        assert check_problems(tool) == [], name
        if name != "kind":
            assert "unknown field" not in run_message_or_ok(tool), name


def run_message_or_ok(tool: dict[str, Any]) -> str:
    outcome = run_tool(
        EFFECT_OF_KIND[tool["kind"]], {"tool": tool, "args": {}}, context=ToolContext("i")
    )
    return "" if outcome.status == "ok" else str(outcome.payload["message"])


@pytest.mark.parametrize(
    ("kind", "name", "words"),
    [
        ("python", "script", "inline in `code`"),
        ("python", "code_b64", "inline in `code`"),
        ("postgres", "script", "inline in `command`"),
        ("duckdb", "script", "inline in `command`"),
        ("shell", "cmds", "`argv`"),
        ("http", "output_select", "by reference"),
        ("file", "method", "http(s) resources"),
    ],
)
def test_upstream_fields_aos_does_not_take_are_refused_by_name_with_a_fix(
    kind: str, name: str, words: str
) -> None:
    [problem] = check_problems({"kind": kind, name: "x"})
    assert f"`{name}` is not supported" in problem.message
    assert words in problem.message


def _playbook(task: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "noetl.io/v2",
            "kind": "Playbook",
            "metadata": {"name": "t", "path": "t/fields"},
            "workflow": [{"step": "start", "tool": [task]}],
        },
        sort_keys=False,
    )


@pytest.mark.parametrize(
    ("task", "path"),
    [
        (
            {"kind": "postgres", "auth": "pg", "command": "select 1", "output_select": ["a"]},
            "$.workflow[0].tool[0].output_select",
        ),
        ({"kind": "python", "script": {"uri": "./x.py"}}, "$.workflow[0].tool[0].script"),
        ({"kind": "http", "url": "http://x", "methd": "GET"}, "$.workflow[0].tool[0].methd"),
    ],
)
def test_a_playbook_is_refused_at_check_time_at_the_fields_own_path(
    task: dict[str, Any], path: str
) -> None:
    with pytest.raises(FlowCheckError) as raised:
        load_flow(_playbook({"name": "a", **task}), source="t.yaml")
    found = [(p.code, p.path) for p in raised.value.problems]
    assert ("playbook.tool_field_unknown", path) in found
    assert "takes" in raised.value.problems[0].message


@pytest.mark.parametrize(
    "task",
    [
        {"kind": "postgres", "credential": "pg", "commands": ["select 1;"], "pool": True},
        {"kind": "postgres", "auth": "pg", "query": "select 1", "pool": {"max_size": 4}},
        {"kind": "duckdb", "commands": "select 1"},
        {"kind": "duckdb", "spec": {"queries": ["select 1;"]}},
        {"kind": "shell", "argv": ["true"]},
    ],
)
def test_the_fields_noetl_playbooks_use_pass_the_check(task: dict[str, Any]) -> None:
    load_flow(_playbook({"name": "a", **task}), source="t.yaml")


def test_duckdb_runs_commands_given_as_a_list() -> None:
    sql = ["CREATE TABLE t (a INTEGER);", "INSERT INTO t VALUES (1), (2);", "SELECT a FROM t;"]
    outcome = run_tool(
        EFFECT_OF_KIND["duckdb"],
        {"tool": {"kind": "duckdb", "commands": sql}, "args": {}},
        context=ToolContext("i"),
    )
    assert outcome.status == "ok", outcome
    assert outcome.payload["rows"] == [{"a": 1}, {"a": 2}]


def test_sql_in_two_of_its_names_is_refused() -> None:
    tool = {"kind": "duckdb", "command": "select 1", "query": "select 2"}
    assert "one of command, commands" in run_message(tool)


def test_postgres_reads_credential_as_auth_and_checks_pool() -> None:
    keychain = Keychain(env_prefix="T_", environ={})
    context = ToolContext("i", keychain=keychain)
    tool = {"kind": "postgres", "credential": "missing", "command": "select 1", "pool": False}
    outcome = run_tool(EFFECT_OF_KIND["postgres"], {"tool": tool, "args": {}}, context=context)
    assert outcome.payload["kind"] == "authorization", outcome  # it looked the entry up
    both = {**tool, "auth": "missing"}
    outcome = run_tool(EFFECT_OF_KIND["postgres"], {"tool": both, "args": {}}, context=context)
    assert outcome.payload["code"] == "tool.invalid" and "give one" in outcome.payload["message"]
    bad_pool = {**tool, "pool": {"size": 3}}
    outcome = run_tool(EFFECT_OF_KIND["postgres"], {"tool": bad_pool, "args": {}}, context=context)
    assert outcome.payload["code"] == "tool.invalid" and "pool is" in outcome.payload["message"]


def test_a_file_resource_with_a_method_is_refused_at_check_time() -> None:
    with pytest.raises(FlowCheckError) as raised:
        flowlang.load_flow("<data.json> (- method: PUT -) → echo", source="f.flow")
    [problem] = raised.value.problems
    assert problem.code == "flow.tool_field_unknown" and problem.path.endswith("tool.method")


def test_spec_12_holds_the_schemas_table() -> None:
    assert markdown_table() in SPEC_12.read_text()
