"""The transfer tool (`aos/tool.transfer@1`, spec/11 §1.2, spec/12 §4.1): NoETL's `kind:
transfer`, rows read from a source and written into a table, in one call.

    {kind: transfer,
     source: {type: http, url | endpoint, method, headers, params, data_path}
           | {type: postgres, auth, query}  |  {type: duckdb, database, query},
     target: {type: postgres, auth, table | query, mapping}
           | {type: duckdb, database, table | query, mapping},
     mode: append | insert | replace | upsert, chunk_size, timeout_ms}
      -> {status: success, direction, source_type, target_type, mode, rows_transferred,
          chunks_processed, records_fetched, target_table, columns}

As NoETL 2.13.1 reads it (`noetl/tools/transfer/executor.py`, `execute_transfer_action`):
the side's kind is `tool`, `kind` or `type`; an http source's JSON body (at the dotted
`data_path`, when given) is a list of records (a single record is one); a database source's
rows are its `query`'s. A `mapping` `{column: field}` picks each column's value from a record
by a dotted field path (a missing field is null); without one the columns are the source
query's, or the keys of an http source's first record. The target's `table` gets one INSERT
per row (`replace` empties the table first, `upsert` updates the row whose first column
conflicts); a target `query` is run once per row instead, with one placeholder per column in
column order (`%s` for postgres, `?` for duckdb).

Where aos differs: every row is written in one transaction (NoETL commits per chunk of
`chunk_size`, so a failure there leaves the chunks before it written; here nothing is), and
http -> duckdb, postgres -> duckdb and duckdb -> either are supported besides NoETL's
http -> postgres and postgres -> postgres. Table and column names are identifiers
(`schema.table`), quoted; the rows read are bounded by the target tool's `rows_max`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from aos.flows.define.tool_schema import TOOL_SCHEMAS
from aos.flows.tools.duckdb import DuckdbSettings, on_duckdb
from aos.flows.tools.keychain import Keychain
from aos.flows.tools.outcomes import ToolInvalidError, ToolOutcome, check_fields, failure
from aos.flows.tools.postgres import PostgresSettings, on_postgres
from aos.flows.tools.rows import RowBudget, plain_value

TRANSFER_FIELDS = TOOL_SCHEMAS["transfer"].accepted
SOURCE_TYPES = ("http", "postgres", "duckdb")
TARGET_TYPES = ("postgres", "duckdb")
MODES = ("append", "insert", "replace", "upsert")
TRANSFER_TIMEOUT_S_DEFAULT = 60.0
CHUNK_SIZE_DEFAULT = 1000
CHUNK_SIZE_MAX = 100_000
SOURCE_FIELDS = {
    "http": frozenset({"url", "endpoint", "method", "headers", "params", "query", "data_path"}),
    "postgres": frozenset({"auth", "credential", "query", "command"}),
    "duckdb": frozenset({"database", "query", "command"}),
}
TARGET_FIELDS = {
    "postgres": frozenset({"auth", "credential", "table", "query", "mapping"}),
    "duckdb": frozenset({"database", "table", "query", "mapping"}),
}
KIND_NAMES = ("tool", "kind", "type")
"""The names NoETL reads a side's kind under, first found wins."""
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

Fetch = Callable[[dict[str, Any]], ToolOutcome]
"""Performs an http request (`{kind: http, url, method, headers, query}`): the http tool."""


@dataclass(frozen=True)
class TransferSettings:
    """What the transfer's two sides may use: the postgres and duckdb tools' bounds, the
    keychain, and the call's timeout (each side's statements are bounded by it)."""

    postgres: PostgresSettings
    duckdb: DuckdbSettings
    keychain: Keychain | None
    timeout_s: float


@dataclass(frozen=True)
class _Plan:
    source_type: str
    source: dict[str, Any]
    target_type: str
    target: dict[str, Any]
    mode: str
    chunk_size: int

    @property
    def direction(self) -> str:
        return f"{self.source_type}_to_{self.target_type}"


@dataclass(frozen=True)
class _Rows:
    records: list[Any]
    columns: list[str]


def run_transfer(tool: dict[str, Any], settings: TransferSettings, fetch: Fetch) -> ToolOutcome:
    """Read the source's rows and write them into the target (see the module's doc)."""
    plan = _plan(tool)
    read = _read(plan, settings, fetch)
    if read.status != "ok":
        return read
    rows: _Rows = read.payload
    columns = list(plan.target.get("mapping") or {}) or rows.columns
    if not columns:
        raise ToolInvalidError("target.mapping names the columns (the source gave none)")
    for column in columns:
        _identifier(column, "a target column")
    values = [_values(plan, record, columns) for record in rows.records]
    written = _write(plan, settings, columns, values)
    if written.status != "ok":
        return written
    chunks = -(-len(values) // plan.chunk_size)
    return ToolOutcome(
        "ok",
        {
            "status": "success",
            "direction": plan.direction,
            "source_type": plan.source_type,
            "target_type": plan.target_type,
            "mode": plan.mode if plan.target.get("query") is None else "custom",
            "rows_transferred": len(values),
            "chunks_processed": chunks,
            "records_fetched": len(rows.records),
            "target_table": plan.target.get("table") or "custom_query",
            "columns": columns,
        },
    )


# -- the plan


def _plan(tool: dict[str, Any]) -> _Plan:
    check_fields(tool, TRANSFER_FIELDS)
    source_type, source = _side(tool.get("source"), "source", SOURCE_TYPES, SOURCE_FIELDS)
    target_type, target = _side(tool.get("target"), "target", TARGET_TYPES, TARGET_FIELDS)
    if (target.get("table") is None) == (target.get("query") is None):
        raise ToolInvalidError("target has a `table` or a `query`, one of them")
    if target.get("table") is not None:
        _table(target["table"])
    mapping = target.get("mapping")
    if mapping is not None and not (
        isinstance(mapping, dict) and all(isinstance(v, str) and v for v in mapping.values())
    ):
        raise ToolInvalidError("target.mapping maps a column to a field path (text)")
    mode = tool.get("mode") or "append"
    if mode not in MODES:
        raise ToolInvalidError(f"mode {mode!r} is one of {', '.join(MODES)}")
    chunk_size = tool.get("chunk_size", CHUNK_SIZE_DEFAULT)
    if type(chunk_size) is not int or not 1 <= chunk_size <= CHUNK_SIZE_MAX:
        raise ToolInvalidError(f"chunk_size is a whole number in 1..{CHUNK_SIZE_MAX}")
    return _Plan(source_type, source, target_type, target, mode, chunk_size)


def _side(
    value: Any, name: str, types: tuple[str, ...], fields: dict[str, frozenset[str]]
) -> tuple[str, dict[str, Any]]:
    """A side's kind (under `tool`, `kind` or `type`) and its fields, checked."""
    if not isinstance(value, dict):
        raise ToolInvalidError(f"{name} is a map with a `type` ({', '.join(types)})")
    kind = next((value[key] for key in KIND_NAMES if value.get(key) is not None), None)
    kind = kind.lower() if isinstance(kind, str) else kind
    if kind not in types:
        raise ToolInvalidError(f"{name}.type is one of {', '.join(types)}, not {kind!r}")
    unknown = sorted(str(key) for key in value if key not in KIND_NAMES and key not in fields[kind])
    if unknown:
        takes = ", ".join(sorted(fields[kind]))
        raise ToolInvalidError(f"{name} ({kind}) does not take {', '.join(unknown)} ({takes})")
    return kind, value


def _table(name: Any) -> list[str]:
    """A table name's parts (`schema.table` or `table`), each an identifier."""
    if not isinstance(name, str) or not 1 <= len(name.split(".")) <= 2:
        raise ToolInvalidError(f"target.table {name!r} is `table` or `schema.table`")
    return [_identifier(part, "target.table") for part in name.split(".")]


def _identifier(name: Any, what: str) -> str:
    if not isinstance(name, str) or _IDENTIFIER.fullmatch(name) is None:
        raise ToolInvalidError(f"{what} {name!r} is an identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return name


def _query(side: dict[str, Any], name: str) -> str:
    given = [key for key in ("query", "command") if side.get(key) is not None]
    if len(given) != 1 or not isinstance(side[given[0]], str) or not side[given[0]].strip():
        raise ToolInvalidError(f"{name} has its SQL in `query` (text)")
    return str(side[given[0]])


# -- reading


def _read(plan: _Plan, settings: TransferSettings, fetch: Fetch) -> ToolOutcome:
    """The source's records (`_Rows` as the payload), or the failure."""
    if plan.source_type == "http":
        return _read_http(plan.source, fetch)
    query = _query(plan.source, "source")
    budget = RowBudget(settings.postgres.rows_max, settings.postgres.result_bytes_max)
    if plan.source_type == "postgres":
        auth = plan.source.get("auth", plan.source.get("credential"))

        def read_postgres(conn: psycopg.Connection[dict[str, Any]]) -> _Rows:
            with conn.cursor() as cursor:
                cursor.execute(query, prepare=False)
                return _fetched([c.name for c in cursor.description or []], cursor, budget)

        return on_postgres(auth, settings.keychain, settings.timeout_s, read_postgres)

    def read_duckdb(conn: duckdb.DuckDBPyConnection) -> _Rows:
        conn.execute(query)
        columns = [str(column[0]) for column in conn.description or []]
        return _fetched(columns, conn, budget)

    return on_duckdb(plan.source.get("database"), settings.duckdb, settings.timeout_s, read_duckdb)


def _fetched(columns: list[str], cursor: Any, budget: RowBudget) -> _Rows:
    records = []
    while batch := cursor.fetchmany(256):
        for row in batch:
            values = row.values() if isinstance(row, dict) else row
            record = {name: plain_value(v) for name, v in zip(columns, values, strict=True)}
            budget.take(record)
            records.append(record)
    return _Rows(records, columns)


def _read_http(source: dict[str, Any], fetch: Fetch) -> ToolOutcome:
    request = {"kind": "http"}
    for name in ("url", "endpoint", "method", "headers", "params", "query"):
        if source.get(name) is not None:
            request[name] = source[name]
    fetched = fetch(request)
    if fetched.status != "ok":
        return fetched
    data = fetched.payload.get("json") if isinstance(fetched.payload, dict) else None
    if data is None:
        return failure("transfer.source", "the http source's answer is not a JSON body")
    path = source.get("data_path")
    if path is not None:
        if not isinstance(path, str) or not path:
            raise ToolInvalidError("source.data_path is a dotted path (say `data.items`)")
        for part in path.split("."):
            if not isinstance(data, dict):
                break  # NoETL's walk: a list reached before the path ends is the records
            data = data.get(part, [])
    records = data if isinstance(data, list) else [data]
    first = records[0] if records and isinstance(records[0], dict) else {}
    return ToolOutcome("ok", _Rows(records, [str(key) for key in first]))


def _values(plan: _Plan, record: Any, columns: list[str]) -> list[Any]:
    """A record's values in column order: by the mapping's field paths, else by name."""
    mapping = plan.target.get("mapping") or {}
    found = []
    for column in columns:
        value = record
        for part in str(mapping.get(column, column)).split("."):
            value = value.get(part) if isinstance(value, dict) else None
        found.append(value)
    return found


# -- writing


def _write(
    plan: _Plan, settings: TransferSettings, columns: list[str], values: list[list[Any]]
) -> ToolOutcome:
    custom = plan.target.get("query")
    if plan.target_type == "postgres":
        statement: Any = _postgres_insert(plan, columns) if custom is None else _custom(custom)
        auth = plan.target.get("auth", plan.target.get("credential"))

        def write_postgres(conn: psycopg.Connection[dict[str, Any]]) -> int:
            rows = [[_pg_value(value) for value in row] for row in values]
            with conn.transaction(), conn.cursor() as cursor:
                if plan.mode == "replace" and custom is None:
                    cursor.execute(sql.SQL("DELETE FROM {}").format(_pg_table(plan)))
                if rows:
                    cursor.executemany(statement, rows)
            return len(rows)

        return on_postgres(auth, settings.keychain, settings.timeout_s, write_postgres)
    text = _duckdb_insert(plan, columns) if custom is None else _custom(custom)

    def write_duckdb(conn: duckdb.DuckDBPyConnection) -> int:
        conn.begin()
        if plan.mode == "replace" and custom is None:
            conn.execute(f"DELETE FROM {_duck_table(plan)}")
        if values:
            conn.executemany(text, values)
        conn.commit()
        return len(values)

    return on_duckdb(plan.target.get("database"), settings.duckdb, settings.timeout_s, write_duckdb)


def _custom(query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise ToolInvalidError("target.query is SQL text with one placeholder per column")
    return query


def _pg_value(value: Any) -> Any:
    """A record's value as a parameter: maps and lists as JSON (a json or jsonb column)."""
    return Jsonb(value) if isinstance(value, dict | list) else value


def _pg_table(plan: _Plan) -> sql.Composable:
    return sql.Identifier(*_table(plan.target["table"]))


def _postgres_insert(plan: _Plan, columns: list[str]) -> sql.Composable:
    names = sql.SQL(", ").join(sql.Identifier(column) for column in columns)
    holes = sql.SQL(", ").join(sql.Placeholder() for _ in columns)
    insert = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(_pg_table(plan), names, holes)
    if plan.mode != "upsert" or len(columns) < 2:
        return insert
    updates = sql.SQL(", ").join(
        sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
        for c in columns[1:]
    )
    key = sql.Identifier(columns[0])
    return sql.SQL("{} ON CONFLICT ({}) DO UPDATE SET {}").format(insert, key, updates)


def _duck_table(plan: _Plan) -> str:
    return ".".join(f'"{part}"' for part in _table(plan.target["table"]))


def _duckdb_insert(plan: _Plan, columns: list[str]) -> str:
    names = ", ".join(f'"{column}"' for column in columns)
    holes = ", ".join("?" for _ in columns)
    insert = f"INSERT INTO {_duck_table(plan)} ({names}) VALUES ({holes})"
    if plan.mode != "upsert" or len(columns) < 2:
        return insert
    updates = ", ".join(f'"{c}" = EXCLUDED."{c}"' for c in columns[1:])
    return f'{insert} ON CONFLICT ("{columns[0]}") DO UPDATE SET {updates}'
