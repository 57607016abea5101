"""The duckdb tool (`aos/tool.duckdb@1`, spec/11 §1.2): SQL on an embedded DuckDB.

    {kind: duckdb, command: SQL, params: MAP | LIST, database: NAME, timeout_ms}

The SQL may be in any of NoETL's names for it (`commands`, `query`, ..., flows/tools/rows.py).
      -> {results: [{status, rowcount, columns, rows}], rows, columns, rowcount}

The database is in memory (a fresh one per call) unless `database` names a file, which must
lie in the adapter's `data_dir` (no folder configured: files are refused). The command may
hold several statements; each gives one entry of `results` (a DML statement's `rowcount` is
the rows it changed). With parameters (`params`, else the call's `args` when a non-empty map
or list) the command is one statement naming them DuckDB's way (`$name`, `?`). External
access (reading files or URLs, loading extensions) is off unless the adapter allows it. Rows
and bytes are bounded like the postgres tool's; a statement over `timeout_ms` is interrupted
(a `timeout`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from aos.flows.define.tool_schema import TOOL_SCHEMAS
from aos.flows.tools.outcomes import (
    ToolInvalidError,
    ToolOutcome,
    check_fields,
    failure,
    timed_out,
)
from aos.flows.tools.rows import (
    RowBudget,
    RowsTooLargeError,
    call_result,
    params_of,
    plain_value,
    sql_of,
    statement_result,
)

DUCKDB_FIELDS = TOOL_SCHEMAS["duckdb"].accepted
DUCKDB_TIMEOUT_S_DEFAULT = 30.0
DUCKDB_TIMEOUT_S_MAX = 3600.0
DUCKDB_ROWS_MAX_DEFAULT = 10_000
DUCKDB_RESULT_BYTES_MAX_DEFAULT = 8 * 1024 * 1024
DUCKDB_THREADS_DEFAULT = 2
COMMAND_BYTES_MAX = 1024 * 1024
FETCH_ROWS = 256
MEMORY = ":memory:"
_DATABASE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_CHANGES = frozenset({"INSERT", "UPDATE", "DELETE"})


@dataclass(frozen=True)
class DuckdbSettings:
    """An adapter's bounds and what it lets SQL reach: `data_dir` holds the database files
    `database` may name (None: in memory only); `external_access` lets SQL read files and
    URLs and load extensions."""

    timeout_s_max: float = DUCKDB_TIMEOUT_S_MAX
    rows_max: int = DUCKDB_ROWS_MAX_DEFAULT
    result_bytes_max: int = DUCKDB_RESULT_BYTES_MAX_DEFAULT
    data_dir: Path | None = None
    external_access: bool = False
    threads: int = DUCKDB_THREADS_DEFAULT


def run_duckdb(
    tool: dict[str, Any], args: Any, settings: DuckdbSettings, timeout_s: float
) -> ToolOutcome:
    check_fields(tool, DUCKDB_FIELDS)
    try:
        sql, params = sql_of(tool, COMMAND_BYTES_MAX), params_of(tool, args)
    except ValueError as error:
        raise ToolInvalidError(str(error)) from None
    return on_duckdb(
        tool.get("database"),
        settings,
        timeout_s,
        lambda conn: _execute(conn, sql, params, settings),
    )


def on_duckdb(
    name: Any,
    settings: DuckdbSettings,
    timeout_s: float,
    work: Callable[[duckdb.DuckDBPyConnection], Any],
) -> ToolOutcome:
    """`work(connection)` on the database `name` (None: in memory), interrupted past
    `timeout_s`; its answer is the outcome's result, and every failure an outcome."""
    database = _database(name, settings)
    config: dict[str, str | bool | int | float | list[str]] = {
        "enable_external_access": settings.external_access,
        "threads": settings.threads,
    }
    try:
        conn = duckdb.connect(database, config=config)
    except duckdb.Error as error:
        return failure("duckdb.open", f"{type(error).__name__}: {error}", retryable=True)
    timer = threading.Timer(timeout_s, conn.interrupt)
    timer.start()
    try:
        return ToolOutcome("ok", work(conn))
    except RowsTooLargeError as error:
        return failure("duckdb.too_large", str(error))
    except duckdb.InterruptException:
        return timed_out("duckdb.timeout", f"the statement ran over {timeout_s:g} s")
    except duckdb.PermissionException as error:
        return failure("duckdb.permission", str(error), kind="authorization")
    except duckdb.Error as error:
        return failure(
            "duckdb.error",
            f"{type(error).__name__}: {error}",
            duckdb={"error": type(error).__name__},
        )
    finally:
        timer.cancel()
        conn.close()


def _database(name: Any, settings: DuckdbSettings) -> str:
    if name is None or name == MEMORY:
        return MEMORY
    if not isinstance(name, str) or not _DATABASE_NAME.fullmatch(name) or ".." in name:
        raise ToolInvalidError(f"database {name!r} is a file name ([A-Za-z0-9_.-], no folders)")
    if settings.data_dir is None:
        raise ToolInvalidError(
            "database files need the adapter's duckdb data_dir; without one, leave database "
            "out (in memory)"
        )
    return str(settings.data_dir / name)


def _execute(
    conn: duckdb.DuckDBPyConnection, sql: str, params: Any, settings: DuckdbSettings
) -> dict[str, Any]:
    budget = RowBudget(settings.rows_max, settings.result_bytes_max)
    statements = duckdb.extract_statements(sql)
    if not statements:
        raise ToolInvalidError("command holds no SQL statement")
    if params is not None and len(statements) > 1:
        raise ToolInvalidError("with parameters, command is one statement")
    results = []
    for statement in statements:
        if params is None:
            conn.execute(statement)
        else:
            conn.execute(statement, params)
        results.append(_statement_result(conn, statement.type.name, budget))
    return call_result(results)


def _statement_result(
    conn: duckdb.DuckDBPyConnection, kind: str, budget: RowBudget
) -> dict[str, Any]:
    columns = [str(column[0]) for column in conn.description or []]
    if kind in _CHANGES:
        found = conn.fetchone()
        count = int(found[0]) if found and isinstance(found[0], int) else 0
        return statement_result(kind, count, [], [])
    rows: list[dict[str, Any]] = []
    if conn.description is not None:
        while batch := conn.fetchmany(FETCH_ROWS):
            for values in batch:
                row = {
                    name: plain_value(value) for name, value in zip(columns, values, strict=True)
                }
                budget.take(row)
                rows.append(row)
    return statement_result(kind, len(rows), columns, rows)
