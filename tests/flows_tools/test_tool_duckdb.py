"""The duckdb tool (flows/tools/duckdb.py, spec/11 §1.2): statements and rows on an embedded
DuckDB, parameters, database files only inside the adapter's data_dir, external access off
unless allowed, rows/bytes bounds at their edge, timeouts, and bad specs as tool.invalid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import run_tool
from aos.flows.tools.duckdb import DuckdbSettings
from aos.flows.tools.outcomes import ToolOutcome
from aos.kernel import cbor

DUCKDB = "aos/tool.duckdb@1"


def call(tool: dict[str, Any], args: Any = None, **settings: Any) -> ToolOutcome:
    context = ToolContext(intent="i", duckdb=DuckdbSettings(**settings))
    return run_tool(DUCKDB, {"tool": {"kind": "duckdb", **tool}, "args": args}, context=context)


def ok(outcome: ToolOutcome) -> Any:
    assert outcome.status == "ok", outcome.payload
    return outcome.payload


def error(outcome: ToolOutcome, status: str = "error") -> dict[str, Any]:
    assert outcome.status == status, outcome.payload
    assert isinstance(outcome.payload, dict)
    return outcome.payload


def test_statements_give_results_and_the_last_rows() -> None:
    sql = """
        CREATE TABLE t (id INTEGER, name VARCHAR, price DECIMAL(6, 2), day DATE);
        INSERT INTO t VALUES (1, 'a', 1.50, DATE '2024-01-02'), (2, 'b', 2, NULL);
        UPDATE t SET name = 'B' WHERE id = 2;
        SELECT * FROM t ORDER BY id;
    """
    result = ok(call({"command": sql}))
    assert [r["status"] for r in result["results"]] == ["CREATE", "INSERT", "UPDATE", "SELECT"]
    assert [r["rowcount"] for r in result["results"]] == [0, 2, 1, 2]
    assert result["columns"] == ["id", "name", "price", "day"]
    assert result["rows"] == [
        {"id": 1, "name": "a", "price": "1.50", "day": "2024-01-02"},
        {"id": 2, "name": "B", "price": 2, "day": None},
    ]


def test_parameters_from_args_or_params() -> None:
    assert ok(call({"query": "SELECT $x + 1 AS y"}, {"x": 41}))["rows"] == [{"y": 42}]
    hostile = "'; DROP TABLE t; --"
    rows = ok(call({"query": "SELECT ? AS v", "params": [hostile]}))["rows"]
    assert rows == [{"v": hostile}]
    refused = error(call({"command": "SELECT 1; SELECT 2", "params": [1]}))
    assert refused["code"] == "tool.invalid" and "one statement" in refused["message"]


def test_database_files_live_in_the_data_dir_only(tmp_path: Path) -> None:
    write = {"command": "CREATE TABLE k (v INT); INSERT INTO k VALUES (5)", "database": "a.db"}
    ok(call(write, data_dir=tmp_path))
    read = ok(call({"query": "SELECT v FROM k", "database": "a.db"}, data_dir=tmp_path))
    assert read["rows"] == [{"v": 5}]
    assert (tmp_path / "a.db").is_file()
    assert error(call({"query": "SELECT 1", "database": "a.db"}))["code"] == "tool.invalid"
    for name in ("../a.db", "/etc/x.db", "sub/a.db", 7):
        refused = error(call({"query": "SELECT 1", "database": name}, data_dir=tmp_path))
        assert refused["code"] == "tool.invalid"


def test_external_access_is_off_unless_allowed(tmp_path: Path) -> None:
    csv = tmp_path / "x.csv"
    csv.write_text("a,b\n1,2\n")
    query = {"query": f"SELECT * FROM read_csv('{csv}')"}
    refused = error(call(query))
    assert refused["code"] == "duckdb.permission" and refused["kind"] == "authorization"
    assert ok(call(query, external_access=True))["rows"] == [{"a": 1, "b": 2}]


def test_rows_max_and_result_bytes_max_at_their_edge() -> None:
    three = {"query": "SELECT range AS n FROM range(3)"}
    assert ok(call(three, rows_max=3))["rowcount"] == 3
    assert error(call(three, rows_max=2))["code"] == "duckdb.too_large"
    size = sum(len(cbor.encode({"n": n})) for n in range(3))
    assert ok(call(three, result_bytes_max=size))["rowcount"] == 3
    assert error(call(three, result_bytes_max=size - 1))["code"] == "duckdb.too_large"


def test_a_query_over_its_timeout_is_interrupted() -> None:
    slow = {"query": "SELECT count(*) FROM range(100000000000) a", "timeout_ms": 200}
    timed = error(call(slow), "timeout")
    assert timed["code"] == "duckdb.timeout"


def test_a_sql_error_is_a_transport_error() -> None:
    failed = error(call({"query": "SELECT * FROM no_such_table"}))
    assert failed["code"] == "duckdb.error" and failed["kind"] == "transport"
    assert failed["duckdb"] == {"error": "CatalogException"}


@pytest.mark.parametrize(
    "tool",
    [{}, {"query": "SELECT 1", "command": "SELECT 1"}, {"query": ""}, {"query": "x", "z": 1}],
)
def test_bad_specs_are_tool_invalid(tool: dict[str, Any]) -> None:
    assert error(call(tool))["code"] == "tool.invalid"
