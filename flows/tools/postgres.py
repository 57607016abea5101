"""The postgres tool (`aos/tool.postgres@1`, spec/11 §1.2): SQL against a real PostgreSQL
server with psycopg 3, connecting with a keychain entry.

    {kind: postgres, auth: NAME, command: SQL, params: MAP | LIST, timeout_ms, pool}
      -> {results: [{status, rowcount, columns, rows}], rows, columns, rowcount,
          command_0.., row_count, statement_count, status}

The field names are NoETL's (flows/define/tool_schema.py): `auth` names the keychain entry (also
accepted as its rendered placeholder, `{{ keychain.NAME }}`; `credential` is its older name),
`command` is the SQL (or one of NoETL's other names for it: `commands`, `query`, `queries`,
`cmd`, `cmds`; a list of texts is joined by newlines). NoETL's `pool` is checked for its
shape and has no other effect: each call opens one connection. Without parameters the
command may hold several statements; they run in one transaction (committed at the end,
rolled back on any error), and each gives one entry of `results`. With parameters (`params`,
else the call's `args` when it is a non-empty map or list) the command is one statement that
names them psycopg's way (`%(name)s`, `%s`; a literal percent is then `%%`). Rows are maps of
column name to plain data (numeric is an integer when whole, else its exact text; dates and
times ISO text; json as its value). The top-level `rows`, `columns` and `rowcount` are the
last statement's. NoETL's shape is there too (`noetl_shape`): playbooks read
`STEP.command_0.rows`.

The keychain entry is text (a libpq conninfo or a `postgresql://` URI) or a map of conninfo
fields (`host`, `port`, `user`, `password`, `dbname`, ...; NoETL's `db_host`, `db_port`,
`db_user`, `db_password`, `db_name` are read as those). A server error is an `error` outcome
with `pg: {code, sqlstate}` (the SQLSTATE, both; policies test `outcome.pg.code`), retryable
for serialization failures, deadlocks, lost connections and resource shortages; a statement
over its `timeout_ms` is a `timeout`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from aos.flows.define.tool_schema import TOOL_SCHEMAS
from aos.flows.tools.keychain import (
    Keychain,
    KeychainMissingError,
    KeychainSourceError,
    entry_name,
    keychain_failure,
    scrubbed,
)
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

POSTGRES_FIELDS = TOOL_SCHEMAS["postgres"].accepted
POOL_FIELDS = frozenset({"name", "min_size", "max_size", "max_waiting", "timeout"})
"""The settings of NoETL's postgres `pool`."""
POSTGRES_TIMEOUT_S_DEFAULT = 30.0
POSTGRES_TIMEOUT_S_MAX = 3600.0
POSTGRES_CONNECT_TIMEOUT_S = 10
POSTGRES_ROWS_MAX_DEFAULT = 10_000
POSTGRES_RESULT_BYTES_MAX_DEFAULT = 8 * 1024 * 1024
COMMAND_BYTES_MAX = 1024 * 1024
FETCH_ROWS = 256

RETRYABLE_SQLSTATE_PREFIXES = ("08", "40", "53", "57P")
"""Connection exceptions, transaction rollbacks (serialization, deadlock), insufficient
resources, operator intervention (a server shutting down): worth another attempt."""
AUTHORIZATION_SQLSTATE_PREFIXES = ("28", "42501")
QUERY_CANCELED = "57014"

CONNINFO_FIELDS = frozenset(
    {"host", "hostaddr", "port", "user", "password", "dbname", "sslmode", "application_name"}
    | {"options", "sslrootcert", "sslcert", "sslkey", "target_session_attrs"}
)
NOETL_CONNINFO_NAMES = {
    "db_host": "host",
    "db_port": "port",
    "db_user": "user",
    "db_password": "password",
    "db_name": "dbname",
    "database": "dbname",
    "username": "user",
}


@dataclass(frozen=True)
class PostgresSettings:
    """An adapter's bounds: a call's `timeout_ms` is at most `timeout_s_max`; more than
    `rows_max` rows, or more than `result_bytes_max` bytes of rows (canonical CBOR), is an
    error (`postgres.too_large`), never a silently cut result."""

    timeout_s_max: float = POSTGRES_TIMEOUT_S_MAX
    rows_max: int = POSTGRES_ROWS_MAX_DEFAULT
    result_bytes_max: int = POSTGRES_RESULT_BYTES_MAX_DEFAULT


def run_postgres(
    tool: dict[str, Any],
    args: Any,
    settings: PostgresSettings,
    keychain: Keychain | None,
    timeout_s: float,
) -> ToolOutcome:
    """Run the tool's SQL (see the module's doc); `timeout_s` is the call's, bounded."""
    command, params = _command(tool, args)
    _check_pool(tool.get("pool"))
    if tool.get("auth") is not None and tool.get("credential") is not None:
        raise ToolInvalidError("auth and credential (its older name) are one field: give one")
    auth = tool.get("auth") if tool.get("auth") is not None else tool.get("credential")
    return on_postgres(
        auth, keychain, timeout_s, lambda conn: _execute(conn, command, params, settings)
    )


Work = Callable[["psycopg.Connection[dict[str, Any]]"], Any]


def on_postgres(auth: Any, keychain: Keychain | None, timeout_s: float, work: Work) -> ToolOutcome:
    """`work(connection)` on a connection made with the keychain entry `auth` names (its
    name, a placeholder, or NoETL's `{source: credential, key: NAME}`), every statement
    bounded by `timeout_s`; its answer is the outcome's result, and every failure an outcome."""
    name = entry_name(auth)
    if name is None:
        raise ToolInvalidError("auth names a keychain entry (auth: NAME)")
    try:
        conninfo = _conninfo(name, keychain)
    except (KeychainMissingError, KeychainSourceError) as error:
        return keychain_failure(error)
    # libpq quotes a malformed connection string whole, password included: no text that
    # reaches a receipt may hold any part of the secret.
    return scrubbed(_run(conninfo, work, timeout_s), _secret_texts(conninfo))


def _run(conninfo: dict[str, Any], work: Work, timeout_s: float) -> ToolOutcome:
    timeout_ms = max(1, int(timeout_s * 1000))
    try:
        with psycopg.connect(
            **conninfo,
            connect_timeout=min(POSTGRES_CONNECT_TIMEOUT_S, max(1, math.ceil(timeout_s))),
            options=f"-c statement_timeout={timeout_ms}",
            row_factory=dict_row,
        ) as conn:
            return ToolOutcome("ok", work(conn))
    except RowsTooLargeError as error:
        return failure("postgres.too_large", str(error))
    except pg_errors.QueryCanceled as error:
        if error.sqlstate == QUERY_CANCELED:
            return timed_out("postgres.timeout", f"the statement ran over {timeout_ms} ms")
        return _server_error(error)
    except psycopg.Error as error:
        if error.sqlstate is None:
            return _connect_error(error)
        return _server_error(error)


def _secret_texts(conninfo: dict[str, Any]) -> list[str]:
    """The parts of a connection that are secret: the whole text, and any password in it."""
    text = str(conninfo.get("conninfo") or "")
    texts = [text, str(conninfo.get("password") or "")]
    with contextlib.suppress(ValueError):  # not a URI; the key=value form is tried next
        texts.append(str(urlsplit(text).password or ""))
    with contextlib.suppress(psycopg.Error):  # malformed: the whole text is scrubbed anyway
        texts.append(str(conninfo_to_dict(text).get("password") or ""))
    return [t for t in texts if t]


def _check_pool(pool: Any) -> None:
    """NoETL's `pool` (true, false, or its settings): checked for its shape, then not needed,
    since each call opens one connection and closes it."""
    if pool is None or isinstance(pool, bool):
        return
    if not isinstance(pool, dict) or not set(pool) <= POOL_FIELDS:
        raise ToolInvalidError(f"pool is true, false or a map of {sorted(POOL_FIELDS)}")


def _command(tool: dict[str, Any], args: Any) -> tuple[str, Any]:
    check_fields(tool, POSTGRES_FIELDS)
    try:
        return sql_of(tool, COMMAND_BYTES_MAX), params_of(tool, args)
    except ValueError as error:
        raise ToolInvalidError(str(error)) from None


def _conninfo(name: str, keychain: Keychain | None) -> dict[str, Any]:
    if keychain is None:
        raise KeychainMissingError("this adapter has no keychain configured")
    secret = keychain.require(name)
    if isinstance(secret, str):
        return {"conninfo": secret}
    found: dict[str, Any] = {}
    for key, value in secret.items():
        field_name = NOETL_CONNINFO_NAMES.get(key, key)
        if field_name not in CONNINFO_FIELDS:
            raise KeychainSourceError(
                f"keychain entry {name!r}: {key!r} is not a connection field "
                f"({sorted(CONNINFO_FIELDS | set(NOETL_CONNINFO_NAMES))})"
            )
        found[field_name] = value
    return found


def _execute(
    conn: psycopg.Connection[dict[str, Any]], sql: str, params: Any, settings: PostgresSettings
) -> dict[str, Any]:
    budget = RowBudget(settings.rows_max, settings.result_bytes_max)
    results: list[dict[str, Any]] = []
    returned: list[bool] = []  # per statement: did it return rows (a SELECT, a RETURNING)?
    with conn.cursor() as cursor:
        cursor.execute(sql, params, prepare=False)
        while True:
            returned.append(cursor.description is not None)
            results.append(_statement_result(cursor, budget))
            if not cursor.nextset():
                break
    return {**call_result(results), **noetl_shape(results, returned)}


def noetl_shape(results: list[dict[str, Any]], returned: list[bool]) -> dict[str, Any]:
    """What NoETL's postgres tool answers besides aos's fields (`noetl/tools/postgres/`,
    `execution.execute_sql_statements_async` and `response.collapse_results_to_last_command`):
    `command_N` per statement (`{status: success, rows, row_count, columns}` for one that
    returned rows, else `{status: success, row_count, message}`), and at the top the last
    one's `row_count`, the `statement_count` and `status: success`."""
    shaped: dict[str, Any] = {}
    for index, (result, rows) in enumerate(zip(results, returned, strict=True)):
        if rows:
            command = {
                "status": "success",
                "rows": result["rows"],
                "row_count": len(result["rows"]),
                "columns": result["columns"],
            }
        else:
            count = result["rowcount"]
            message = f"Command executed. {count} rows affected."
            command = {"status": "success", "row_count": count, "message": message}
        shaped[f"command_{index}"] = command
    last = shaped[f"command_{len(results) - 1}"]
    return {
        **shaped,
        "row_count": last["row_count"],
        "statement_count": len(results),
        "status": "success",
    }


def _statement_result(cursor: psycopg.Cursor[dict[str, Any]], budget: RowBudget) -> dict[str, Any]:
    columns = [column.name for column in cursor.description or []]
    rows: list[dict[str, Any]] = []
    if cursor.description is not None:
        while batch := cursor.fetchmany(FETCH_ROWS):
            for row in batch:
                plain = {key: plain_value(value) for key, value in row.items()}
                budget.take(plain)
                rows.append(plain)
    return statement_result(cursor.statusmessage or "", max(cursor.rowcount, 0), columns, rows)


def _server_error(error: psycopg.Error) -> ToolOutcome:
    sqlstate = error.sqlstate or ""
    diag = error.diag
    message = diag.message_primary or str(error).strip()
    if diag.message_detail:
        message += f" ({diag.message_detail})"
    kind = "authorization" if sqlstate.startswith(AUTHORIZATION_SQLSTATE_PREFIXES) else "transport"
    return failure(
        "postgres.error",
        f"SQLSTATE {sqlstate}: {message}",
        kind=kind,
        retryable=sqlstate.startswith(RETRYABLE_SQLSTATE_PREFIXES),
        pg={"code": sqlstate, "sqlstate": sqlstate},
    )


def _connect_error(error: psycopg.Error) -> ToolOutcome:
    """No SQLSTATE: the connection itself failed (refused, unreachable, bad credentials)."""
    text = str(error).strip()
    lowered = text.lower()
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        return failure(
            "postgres.auth", text, kind="authorization", pg={"code": "28P01", "sqlstate": "28P01"}
        )
    return failure("postgres.connect", text, retryable=True)
