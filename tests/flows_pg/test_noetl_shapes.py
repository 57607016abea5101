"""What NoETL's postgres and transfer tools answer, against the real throwaway server of
tests/pg_cluster.py (spec/12 §4.1, §6): the postgres result's `command_N` per statement (the
upstream fixtures read `STEP.command_0.rows`) beside aos's own fields, `{{ execution_id }}`
written unquoted into SQL and a BIGINT column, and `kind: transfer` moving rows from a local
http server, from postgres and into duckdb, on a flow world that replays byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest

from aos.flows.serve import flow_operations as ops
from aos.flows.serve.numbers import execution_number
from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import run_tool
from aos.flows.tools.duckdb import DuckdbSettings
from aos.flows.tools.outcomes import ToolOutcome
from aos.kernel.audit import replay
from tests.flows_pg.support import secrets_world
from tests.flows_pg.test_postgres_tool import call, keychain_for, ok
from tests.pg_cluster import PgCluster
from tests.playbooks.server import RECORDS, serving

TRANSFER = "aos/tool.transfer@1"


def test_a_result_has_noetls_command_n_beside_aos_fields(
    pg_cluster: PgCluster, database: str
) -> None:
    sql = "CREATE TABLE t (n int); INSERT INTO t VALUES (1), (2); SELECT n FROM t ORDER BY n"
    result = ok(call(keychain_for(pg_cluster, database), {"command": sql}))
    assert result["command_0"] == {
        "status": "success",
        "row_count": 0,
        "message": "Command executed. 0 rows affected.",
    }
    assert result["command_1"]["row_count"] == 2
    assert result["command_2"] == {
        "status": "success",
        "rows": [{"n": 1}, {"n": 2}],
        "row_count": 2,
        "columns": ["n"],
    }
    assert (result["status"], result["row_count"], result["statement_count"]) == ("success", 2, 3)
    assert result["rows"] == [{"n": 1}, {"n": 2}] and len(result["results"]) == 3  # aos's own


PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: shapes, path: tests/noetl_shapes}
workload: {pg_auth: pg_local}
workflow:
  - step: save
    tool:
      kind: postgres
      auth: "{{ pg_auth }}"
      command: |
        CREATE TABLE runs (execution_id BIGINT PRIMARY KEY, note text);
        INSERT INTO runs VALUES ({{ execution_id }}, 'exec {{ execution_id }}');
        SELECT execution_id, note FROM runs;
    next: {arcs: [{step: show}]}
  - step: show
    tool:
      kind: python
      args: {saved: "{{ save.command_2.rows[0] }}", id: "{{ execution_id }}"}
      code: |
        result = {"same": saved["execution_id"] == int(id), "note": saved["note"]}
"""


def test_a_playbook_writes_its_execution_id_unquoted_and_reads_command_n(
    tmp_path: Path, pg_cluster: PgCluster, database: str
) -> None:
    flows = secrets_world(tmp_path / "w", {"pg_local": pg_cluster.dsn(database)})
    with flows.world:
        state = flows.run(PLAYBOOK, exec_id="tests-shapes-0f1ae2a0b0b6")
        shown = ops.shown_status(flows.world, "tests-shapes-0f1ae2a0b0b6")
    number = execution_number("tests-shapes-0f1ae2a0b0b6")
    assert state["status"] == "completed", state["engine"].get("error")
    assert state["business"]["steps"]["show"] == {"same": True, "note": f"exec {number}"}
    assert shown["number"] == number  # `aos flow status` shows it beside the aos id
    assert replay.verify_replay(tmp_path / "w").ok


TRANSFER_PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: transfer, path: tests/transfer}
workload: {pg_auth: pg_local}
workflow:
  - step: create
    tool:
      kind: postgres
      auth: "{{ pg_auth }}"
      command: "CREATE TABLE posts (post_id int PRIMARY KEY, user_id int, title text, tag text)"
    next: {arcs: [{step: move}]}
  - step: move
    tool:
      kind: transfer
      source: {type: http, url: "{{ workload.api }}/records", method: GET, data_path: data.items}
      target:
        type: postgres
        auth: {source: credential, key: "{{ pg_auth }}"}
        table: public.posts
        mapping: {post_id: id, user_id: userId, title: title, tag: meta.tag}
    next: {arcs: [{step: count}]}
  - step: count
    tool:
      kind: postgres
      auth: "{{ pg_auth }}"
      command: "SELECT COUNT(*) AS records, MAX(tag) AS tag FROM posts"
"""


def test_a_transfer_moves_http_records_into_postgres(
    tmp_path: Path, pg_cluster: PgCluster, database: str
) -> None:
    flows = secrets_world(tmp_path / "w", {"pg_local": pg_cluster.dsn(database)})
    with serving() as url, flows.world:
        state = flows.run(TRANSFER_PLAYBOOK, workload={"api": url}, exec_id="t1")
    assert state["status"] == "completed", state["engine"].get("error")
    steps = state["business"]["steps"]
    moved = steps["move"]
    assert (moved["direction"], moved["rows_transferred"], moved["records_fetched"]) == (
        "http_to_postgres",
        len(RECORDS),
        len(RECORDS),
    )
    # a definition's maps are canonical CBOR: the mapping's columns in its key order
    assert moved["columns"] == ["tag", "title", "post_id", "user_id"]
    assert steps["count"]["command_0"]["rows"] == [{"records": len(RECORDS), "tag": "t5"}]
    assert replay.verify_replay(tmp_path / "w").ok


def transfer(tool: dict[str, Any], context: ToolContext) -> ToolOutcome:
    return run_tool(TRANSFER, {"tool": {"kind": "transfer", **tool}, "args": None}, context=context)


def test_postgres_to_postgres_and_to_duckdb_with_replace_and_upsert(
    tmp_path: Path, pg_cluster: PgCluster, database: str
) -> None:
    keychain = keychain_for(pg_cluster, database)
    ok(
        call(
            keychain,
            {
                "command": "CREATE TABLE a (id int PRIMARY KEY, v text); "
                "INSERT INTO a VALUES (1, 'x'), (2, 'y');"
                "CREATE TABLE b (id int PRIMARY KEY, v text); "
                "INSERT INTO b VALUES (1, 'old'), (9, 'gone');"
            },
        )
    )
    (tmp_path / "db").mkdir()
    context = ToolContext(
        intent="blake3:" + "cd" * 32,
        keychain=keychain,
        duckdb=DuckdbSettings(data_dir=tmp_path / "db"),
    )
    source = {"type": "postgres", "auth": "pg", "query": "SELECT id, v FROM a ORDER BY id"}
    upserted = transfer(
        {
            "source": source,
            "target": {"type": "postgres", "auth": "pg", "table": "b"},
            "mode": "upsert",
        },
        context,
    )
    assert upserted.status == "ok", upserted.payload
    assert ok(call(keychain, {"query": "SELECT id, v FROM b ORDER BY id"}))["rows"] == [
        {"id": 1, "v": "x"},
        {"id": 2, "v": "y"},
        {"id": 9, "v": "gone"},
    ]
    with duckdb.connect(str(tmp_path / "db" / "w.duckdb")) as conn:
        conn.execute("CREATE TABLE c (id INTEGER, v VARCHAR)")
        conn.execute("INSERT INTO c VALUES (7, 'before')")
    target = {"type": "duckdb", "database": "w.duckdb", "table": "c"}
    replaced = transfer(
        {"source": source, "target": target, "mode": "replace", "chunk_size": 1}, context
    )
    assert replaced.status == "ok", replaced.payload
    assert (replaced.payload["rows_transferred"], replaced.payload["chunks_processed"]) == (2, 2)
    with duckdb.connect(str(tmp_path / "db" / "w.duckdb")) as conn:
        assert conn.execute("SELECT id, v FROM c ORDER BY id").fetchall() == [(1, "x"), (2, "y")]


def test_a_failing_write_leaves_the_target_as_it_was(pg_cluster: PgCluster, database: str) -> None:
    keychain = keychain_for(pg_cluster, database)
    ok(call(keychain, {"command": "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (2)"}))
    context = ToolContext(intent="blake3:" + "ef" * 32, keychain=keychain)
    source = {"type": "postgres", "auth": "pg", "query": "SELECT * FROM (VALUES (1), (2)) AS v(id)"}
    failed = transfer(
        {"source": source, "target": {"type": "postgres", "auth": "pg", "table": "t"}}, context
    )
    assert failed.status == "error" and failed.payload["code"] == "postgres.error"
    assert failed.payload["error_kind"] == "db_constraint"
    assert ok(call(keychain, {"query": "SELECT id FROM t"}))["rows"] == [
        {"id": 2}
    ]  # one transaction


@pytest.mark.parametrize(
    ("tool", "says"),
    [
        ({"target": {"type": "postgres", "auth": "pg", "table": "t"}}, "source"),
        (
            {"source": {"type": "ftp", "url": "x"}, "target": {"type": "postgres", "table": "t"}},
            "source.type",
        ),
        (
            {
                "source": {"type": "http", "url": "http://x", "sql": 1},
                "target": {"type": "postgres", "table": "t"},
            },
            "sql",
        ),
        (
            {
                "source": {"type": "http", "url": "http://x"},
                "target": {"type": "http", "table": "t"},
            },
            "target.type",
        ),
        (
            {
                "source": {"type": "http", "url": "http://x"},
                "target": {"type": "postgres", "auth": "pg"},
            },
            "table",
        ),
        (
            {
                "source": {"type": "http", "url": "http://x"},
                "target": {"type": "postgres", "auth": "pg", "table": "t; DROP"},
            },
            "target.table",
        ),
        (
            {
                "source": {"type": "http", "url": "http://x"},
                "target": {"type": "postgres", "auth": "pg", "table": "t"},
                "mode": "merge",
            },
            "mode",
        ),
        (
            {
                "source": {"type": "http", "url": "http://x"},
                "target": {"type": "postgres", "auth": "pg", "table": "t"},
                "chunk_size": 0,
            },
            "chunk_size",
        ),
        (
            {
                "source": {"type": "http", "url": "http://x"},
                "target": {"type": "postgres", "auth": "pg", "table": "t", "mapping": {"a": 1}},
            },
            "mapping",
        ),
        (
            {
                "source": {"type": "http", "url": "http://x"},
                "target": {"type": "postgres", "auth": "pg", "table": "t"},
                "chunks": 3,
            },
            "chunks",
        ),
    ],
)
def test_a_malformed_transfer_is_refused_and_touches_nothing(
    tool: dict[str, Any], says: str
) -> None:
    refused = transfer(tool, ToolContext(intent="blake3:" + "00" * 32))
    assert refused.status == "error" and refused.payload["code"] == "tool.invalid", refused.payload
    assert says in refused.payload["message"]


def test_an_unmapped_http_column_must_be_an_identifier(
    pg_cluster: PgCluster, database: str
) -> None:
    context = ToolContext(intent="blake3:" + "01" * 32, keychain=keychain_for(pg_cluster, database))
    with serving() as url:
        refused = transfer(
            {
                "source": {
                    "type": "http",
                    "url": f"{url}/get",
                    "params": {"a b": 1},
                    "data_path": "args",
                },
                "target": {"type": "postgres", "auth": "pg", "table": "t"},
            },
            context,
        )
    assert refused.status == "error" and "a target column" in refused.payload["message"]
    with psycopg.connect(pg_cluster.dsn(database)) as conn:
        assert conn.execute("SELECT to_regclass('t')").fetchone() == (None,)
