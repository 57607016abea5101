"""Rows as results (the postgres and duckdb tools): column values as plain data, and a
budget that ends a result over its rows or bytes with an error rather than cut it."""

from __future__ import annotations

import datetime
import decimal
import math
import uuid
from dataclasses import dataclass
from typing import Any

from aos.flows.define.tool_schema import SQL_TEXT
from aos.kernel import cbor


class RowsTooLargeError(Exception):
    """A result over `rows_max` rows or `result_bytes_max` bytes."""


@dataclass
class RowBudget:
    """Counts rows and their canonical CBOR bytes across a call's statements."""

    rows_max: int
    bytes_max: int
    rows: int = 0
    bytes: int = 0

    def take(self, row: dict[str, Any]) -> None:
        self.rows += 1
        self.bytes += len(cbor.encode(row))
        if self.rows > self.rows_max:
            raise RowsTooLargeError(f"the result is over {self.rows_max} rows (rows_max)")
        if self.bytes > self.bytes_max:
            raise RowsTooLargeError(f"the result is over {self.bytes_max} bytes (result_bytes_max)")


def plain_value(value: Any) -> Any:
    """A column value as plain data (what a receipt can hold): numeric is an integer when
    whole, else its exact text; dates and times ISO text; intervals seconds; UUIDs text."""
    if value is None or isinstance(value, bool | int | str | bytes):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value == value.to_integral_value():
            return int(value)
        return str(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, list | tuple):
        return [plain_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): plain_value(item) for key, item in value.items()}
    return str(value)


def statement_result(
    status: str, rowcount: int, columns: list[str], rows: list[dict[str, Any]]
) -> dict[str, Any]:
    return {"status": status, "rowcount": rowcount, "columns": columns, "rows": rows}


def call_result(results: list[dict[str, Any]]) -> dict[str, Any]:
    """`{results, rows, columns, rowcount}`: every statement's, then the last one's at the
    top level (what a flow usually reads)."""
    last = results[-1]
    return {
        "results": results,
        "rows": last["rows"],
        "columns": last["columns"],
        "rowcount": last["rowcount"],
    }


def sql_of(tool: dict[str, Any], bytes_max: int) -> str:
    """The tool's SQL: one of NoETL's names for it (`command`, `commands`, `query`,
    `queries`, `cmd`, `cmds`), text or a list of texts joined by newlines."""
    given = [name for name in SQL_TEXT if tool.get(name) is not None]
    if len(given) != 1:
        names = ", ".join(SQL_TEXT)
        raise ValueError(f"the tool has its SQL in one of {names}; it has {len(given)}")
    sql = tool[given[0]]
    if isinstance(sql, list) and sql and all(isinstance(part, str) for part in sql):
        sql = "\n".join(sql)
    if not isinstance(sql, str) or not sql.strip():
        raise ValueError(f"{given[0]} is SQL text, or a non-empty list of SQL texts")
    if len(sql.encode()) > bytes_max:
        raise ValueError(f"{given[0]} is at most {bytes_max} bytes")
    return sql


def params_of(tool: dict[str, Any], args: Any) -> Any:
    """The statement's parameters: `params`, else the call's `args` when it is a non-empty
    map or list, else none."""
    params = tool.get("params")
    if params is None and isinstance(args, dict | list) and args:
        params = args
    if params is not None and not isinstance(params, dict | list):
        raise ValueError("params is a map (named parameters) or a list (positional ones)")
    return params or None
