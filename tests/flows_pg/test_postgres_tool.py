"""The postgres tool (flows/tools/postgres.py, spec/11 §1.2) against the real throwaway server
of tests/pg_cluster.py: several statements and their rows, parameters from args, server
errors with their SQLSTATE, timeouts, credentials from the keychain (a wrong password is
refused by the server: it checks passwords on loopback), bounds at their edge, and bad tool
specs refused as `tool.invalid`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import run_tool
from aos.flows.tools.keychain import Keychain
from aos.flows.tools.outcomes import ToolOutcome
from aos.flows.tools.postgres import PostgresSettings
from aos.kernel import cbor
from tests.pg_cluster import PgCluster

POSTGRES = "aos/tool.postgres@1"


def keychain_for(cluster: PgCluster, database: str, **more: str) -> Keychain:
    return Keychain(env_prefix="T_", environ={"T_pg": cluster.dsn(database), **more})


def call(
    keychain: Keychain, tool: dict[str, Any], args: Any = None, **settings: Any
) -> ToolOutcome:
    context = ToolContext(
        intent="blake3:" + "ab" * 32, keychain=keychain, postgres=PostgresSettings(**settings)
    )
    params = {"tool": {"kind": "postgres", "auth": "pg", **tool}, "args": args}
    return run_tool(POSTGRES, params, context=context)


def ok(outcome: ToolOutcome) -> Any:
    assert outcome.status == "ok", outcome.payload
    return outcome.payload


def error(outcome: ToolOutcome, status: str = "error") -> dict[str, Any]:
    assert outcome.status == status, outcome.payload
    assert isinstance(outcome.payload, dict)
    return outcome.payload


SCHEMA = """
CREATE TABLE items (id int PRIMARY KEY, name text, price numeric, tags jsonb, at date);
INSERT INTO items VALUES (1, 'a', 1.50, '{"x": 1}', '2024-01-02'), (2, 'b', 2, NULL, NULL);
SELECT * FROM items ORDER BY id;
"""


def test_several_statements_give_one_result_each_and_the_last_rows(
    pg_cluster: PgCluster, database: str
) -> None:
    result = ok(call(keychain_for(pg_cluster, database), {"command": SCHEMA}))
    assert [r["status"] for r in result["results"]] == ["CREATE TABLE", "INSERT 0 2", "SELECT 2"]
    assert result["results"][1]["rowcount"] == 2
    assert result["columns"] == ["id", "name", "price", "tags", "at"]
    assert result["rows"] == [
        {"id": 1, "name": "a", "price": "1.50", "tags": {"x": 1}, "at": "2024-01-02"},
        {"id": 2, "name": "b", "price": 2, "tags": None, "at": None},
    ]
    assert result["rowcount"] == 2


def test_parameters_come_from_args_or_params(pg_cluster: PgCluster, database: str) -> None:
    keychain = keychain_for(pg_cluster, database)
    ok(call(keychain, {"command": SCHEMA}))
    named = ok(call(keychain, {"query": "SELECT name FROM items WHERE id = %(id)s"}, {"id": 2}))
    assert named["rows"] == [{"name": "b"}]
    # An injection attempt stays a value: parameters are bound by the server.
    hostile = {"name": "x'); DROP TABLE items; --"}
    ok(call(keychain, {"command": "INSERT INTO items (id, name) VALUES (3, %(name)s)"}, hostile))
    listed = ok(call(keychain, {"query": "SELECT name FROM items WHERE id = %s", "params": [3]}))
    assert listed["rows"] == [{"name": hostile["name"]}]


def test_a_failed_statement_rolls_back_the_whole_command(
    pg_cluster: PgCluster, database: str
) -> None:
    keychain = keychain_for(pg_cluster, database)
    ok(call(keychain, {"command": SCHEMA}))
    failed = error(
        call(
            keychain,
            {"command": "INSERT INTO items (id) VALUES (7); INSERT INTO items (id) VALUES (1)"},
        )
    )
    assert failed["code"] == "postgres.error"
    assert failed["pg"] == {"code": "23505", "sqlstate": "23505"}
    assert failed["kind"] == "transport" and failed["retryable"] is False
    assert "duplicate key" in failed["message"]
    count = ok(call(keychain, {"query": "SELECT count(*) AS n FROM items"}))
    assert count["rows"] == [{"n": 2}]


def test_a_statement_over_its_timeout_is_a_timeout(pg_cluster: PgCluster, database: str) -> None:
    timed = error(
        call(
            keychain_for(pg_cluster, database), {"query": "SELECT pg_sleep(5)", "timeout_ms": 200}
        ),
        "timeout",
    )
    assert timed["code"] == "postgres.timeout" and timed["retryable"] is True


def test_rows_max_and_result_bytes_max_at_their_edge(pg_cluster: PgCluster, database: str) -> None:
    keychain = keychain_for(pg_cluster, database)
    three = {"query": "SELECT g AS n FROM generate_series(1, 3) AS g"}
    assert len(ok(call(keychain, three, rows_max=3))["rows"]) == 3
    over = error(call(keychain, three, rows_max=2))
    assert over["code"] == "postgres.too_large" and "rows_max" in over["message"]
    row_bytes = len(cbor.encode({"n": 1}))  # each row's canonical CBOR counts
    assert ok(call(keychain, three, result_bytes_max=3 * row_bytes))["rowcount"] == 3
    over = error(call(keychain, three, result_bytes_max=3 * row_bytes - 1))
    assert over["code"] == "postgres.too_large" and "result_bytes_max" in over["message"]


def test_credentials_are_a_keychain_map_with_noetl_names(
    pg_cluster: PgCluster, database: str
) -> None:
    secret = {
        "db_host": "127.0.0.1",
        "db_port": str(pg_cluster.port),
        "db_user": "postgres",
        "db_password": pg_cluster.password,
        "db_name": database,
    }
    keychain = Keychain(env_prefix="T_", environ={"T_pg": json.dumps(secret)})
    assert ok(call(keychain, {"query": "SELECT current_database() AS db"}))["rows"] == [
        {"db": database}
    ]
    # The rendered placeholder of `{{ keychain.pg }}` names the entry as well as NAME does.
    placeholder = {"db_user": "${keychain:pg.db_user}"}
    assert ok(call(keychain, {"auth": placeholder, "query": "SELECT 1 AS one"}))["rows"] == [
        {"one": 1}
    ]


def test_a_wrong_password_is_refused_by_the_server_as_authorization(
    pg_cluster: PgCluster, database: str
) -> None:
    wrong = Keychain(
        env_prefix="T_", environ={"T_pg": pg_cluster.dsn(database, password="not-the-password")}
    )
    refused = error(call(wrong, {"query": "SELECT 1"}))
    assert refused["kind"] == "authorization" and refused["code"] == "postgres.auth"
    assert refused["pg"]["sqlstate"] == "28P01"
    assert "not-the-password" not in refused["message"]


def test_a_missing_entry_or_no_keychain_is_authorization(
    pg_cluster: PgCluster, database: str
) -> None:
    missing = error(
        call(keychain_for(pg_cluster, database), {"auth": "other", "query": "SELECT 1"})
    )
    assert missing["kind"] == "authorization" and missing["code"] == "keychain.missing"
    context = ToolContext(intent="i")
    params = {"tool": {"kind": "postgres", "auth": "pg", "query": "SELECT 1"}, "args": None}
    assert error(run_tool(POSTGRES, params, context=context))["kind"] == "authorization"


def test_an_unreachable_server_is_a_retryable_transport_error() -> None:
    keychain = Keychain(env_prefix="T_", environ={"T_pg": "postgresql://u:p@127.0.0.1:1/x"})
    refused = error(call(keychain, {"query": "SELECT 1"}))
    assert refused["code"] == "postgres.connect" and refused["retryable"] is True


@pytest.mark.parametrize(
    ("tool", "says"),
    [
        ({"query": "SELECT 1", "command": "SELECT 2"}, "it has 2"),
        ({}, "it has 0"),
        ({"query": "  "}, "SQL text"),
        ({"query": "SELECT 1", "sql": "x"}, "unknown field"),
        ({"query": "SELECT 1", "params": "x"}, "params is a map"),
        ({"query": "SELECT 1", "auth": "no such name!"}, "auth names a keychain entry"),
        ({"query": "SELECT 1", "timeout_ms": 0}, "timeout_ms"),
        ({"query": "x" * (1024 * 1024 + 1)}, "at most"),
    ],
)
def test_bad_tool_specs_are_tool_invalid(tool: dict[str, Any], says: str) -> None:
    refused = error(call(Keychain(environ={}), tool))
    assert refused["code"] == "tool.invalid"
    assert says in refused["message"]


@pytest.mark.parametrize(
    "secret",
    [
        "postgresql://u:hunter2-pw@[bad/x",
        "host=127.0.0.1 password=hunter2-pw port",
        "postgresql://u:hunter2-pw@127.0.0.1:1/x?bad=1",
    ],
)
def test_a_malformed_connection_secret_is_never_quoted(secret: str) -> None:
    keychain = Keychain(env_prefix="T_", environ={"T_pg": secret})
    outcome = call(keychain, {"query": "SELECT 1"})
    assert outcome.status == "error"
    assert b"hunter2" not in cbor.encode(outcome.payload)


def test_a_broken_secrets_file_is_keychain_source(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text("pg: [postgresql://u:hunter2@h/db")
    refused = error(call(Keychain(file=secrets, env_prefix=None), {"query": "SELECT 1"}))
    assert refused["kind"] == "authorization" and refused["code"] == "keychain.source"
    assert "hunter2" not in refused["message"]


def test_fields_may_come_in_noetl_spec(pg_cluster: PgCluster, database: str) -> None:
    """As the corpus's weather_loop_v2: `{kind: postgres, spec: {auth, command, policy}}`;
    the fields beside `spec` win, the policy is the interpreter's and ignored here."""
    keychain = keychain_for(pg_cluster, database)
    spec = {"auth": "pg", "command": "SELECT 1 AS one", "policy": {"rules": []}}
    tool = {"kind": "postgres", "spec": spec}
    outcome = run_tool(
        POSTGRES, {"tool": tool, "args": None}, context=ToolContext(intent="i", keychain=keychain)
    )
    assert ok(outcome)["rows"] == [{"one": 1}]
    slow = {"kind": "postgres", "spec": {"auth": "pg", "query": "SELECT pg_sleep(5)"}}
    slow["spec"]["timeout_ms"] = 100  # read from spec too: the statement is cancelled
    timed = run_tool(
        POSTGRES, {"tool": slow, "args": None}, context=ToolContext(intent="i", keychain=keychain)
    )
    assert error(timed, "timeout")["code"] == "postgres.timeout"
    beside = {"kind": "postgres", "query": "SELECT 2 AS two", "spec": {"auth": "pg", "query": "x"}}
    outcome = run_tool(
        POSTGRES, {"tool": beside, "args": None}, context=ToolContext(intent="i", keychain=keychain)
    )
    assert ok(outcome)["rows"] == [{"two": 2}]
    bad = {"kind": "postgres", "auth": "pg", "query": "SELECT 1", "spec": "x"}
    outcome = run_tool(POSTGRES, {"tool": bad, "args": None}, context=ToolContext(intent="i"))
    assert error(outcome)["code"] == "tool.invalid"


def test_noetl_fields_credential_pool_and_commands_run(
    pg_cluster: PgCluster, database: str
) -> None:
    # NoETL's older `credential` is `auth`, `pool` needs nothing, `commands` is the SQL.
    context = ToolContext(intent="blake3:" + "cd" * 32, keychain=keychain_for(pg_cluster, database))
    tool = {
        "kind": "postgres",
        "credential": "pg",
        "pool": {"name": "p", "max_size": 2},
        "commands": ["CREATE TABLE n (a int);", "INSERT INTO n VALUES (7);", "SELECT a FROM n;"],
    }
    outcome = run_tool(POSTGRES, {"tool": tool, "args": None}, context=context)
    assert ok(outcome)["rows"] == [{"a": 7}]
