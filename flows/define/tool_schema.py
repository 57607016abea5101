"""One schema per tool kind (spec/11 §1.2, spec/12 §4.1): the fields a kind accepts, the
ones it needs one of, and the fields of NoETL's worker it refuses by name with a fix.

Check and run read this one table: `aos flow check` refuses an unknown field at its path
(`flows/define/checks.py` for a canonical definition, `flows/define/playbook/tasks.py` for a playbook), and
every tool refuses it at run time too (`outcomes.check_fields`), so no field passes the check
and fails when the task runs. `python_args_problems` is the python tool's rule for the keys of
its `args` (spec/12 §6), read the same way by the check and by the tool. spec/12's field table
is `markdown_table()`, and a test keeps the two equal."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

COMMON_FIELDS = {
    "kind": "the tool kind",
    "spec": "a playbook task's layered spec (spec/12 §4); fields of the kind's may sit in it",
}
COMMON_REFUSED = {
    "output_select": (
        "NoETL's pick of the fields kept inline when it stores a large result elsewhere; aos "
        "stores large results by reference and templates read them whole (spec/11 §7): remove it"
    ),
}
SQL_TEXT = ("command", "commands", "query", "queries", "cmd", "cmds")
"""NoETL's names for a SQL tool's statements; a task gives one of them."""
_SQL_DOC = "the SQL (text, or a list of texts joined by newlines); NoETL's aliases, one of them"
_SCRIPT = (
    "NoETL loads `script` from a file, bucket or URL when the task runs, which aos does not "
    "(a definition is the whole of what runs): write the {what} inline in `{into}`"
)
_BASE64 = "decode it and write the {what} inline in `{into}`"


def _sql_refused() -> dict[str, str]:
    refused = {"script": _SCRIPT.format(what="SQL", into="command")}
    for name in ("command_b64", "commands_b64", "query_b64"):
        refused[name] = _BASE64.format(what="SQL", into="command")
    return refused


@dataclass(frozen=True)
class ToolSchema:
    """A kind's own fields (name -> what it is), the groups of which a task needs one,
    and the upstream fields it refuses (name -> why, and the fix)."""

    kind: str
    fields: dict[str, str]
    required: tuple[str, ...] = ()
    refused: dict[str, str] = field(default_factory=dict)

    @property
    def accepted(self) -> frozenset[str]:
        return frozenset(COMMON_FIELDS) | frozenset(self.fields)

    def refusal(self, name: str) -> str | None:
        return self.refused.get(name) or COMMON_REFUSED.get(name)


TOOL_SCHEMAS: dict[str, ToolSchema] = {
    schema.kind: schema
    for schema in (
        ToolSchema("echo", {}),
        ToolSchema(
            "http",
            {
                "method": "GET (default), POST, PUT, PATCH, DELETE, HEAD or OPTIONS",
                "url": "http(s)://...",
                "endpoint": "NoETL's name of `url`",
                "headers": "map of text",
                "query": "map: the query string",
                "params": "NoETL's name of `query`",
                "json": "a JSON body",
                "body": "a text or bytes body (a map or a list is sent as JSON, as NoETL does)",
                "payload": "NoETL's name of `body`",
                "timeout_ms": "the request's timeout",
                "expect": "the statuses that are a success (default 2xx)",
                "follow_redirects": "true or false (default)",
            },
            required=("url", "endpoint"),
            refused={
                "data": (
                    "NoETL routes `data` to the query or the body by the method: write the "
                    "query in `params` and the body in `body` or `json`"
                ),
                "timeout": "give `timeout_ms` (milliseconds), or the task's `spec.timeout_s`",
            },
        ),
        ToolSchema(
            "python",
            {
                "code": "inline source run by a reused worker (spec/12 §6)",
                "function": "package.module:function, for modules the adapter allows",
                "libs": (
                    "map alias -> module (or NoETL's {from: module, import: name}), imported "
                    "for `code`; NoETL's list of package names is accepted and imports nothing"
                ),
                "timeout_ms": "the call's timeout",
            },
            required=("code", "function"),
            refused={
                "script": _SCRIPT.format(what="code", into="code"),
                "code_b64": _BASE64.format(what="code", into="code"),
                "code_base64": _BASE64.format(what="code", into="code"),
            },
        ),
        ToolSchema(
            "postgres",
            {
                "auth": "the keychain entry to connect with (its name, or {{ keychain.NAME }})",
                "credential": "NoETL's older name of `auth`",
                **dict.fromkeys(SQL_TEXT, _SQL_DOC),
                "params": "map for %(name)s, list for %s",
                "timeout_ms": "the statement's timeout",
                "pool": (
                    "NoETL's connection pool (true, false, or {name, min_size, max_size, "
                    "max_waiting, timeout}): checked, then not needed (each call connects once)"
                ),
            },
            required=SQL_TEXT,
            refused=_sql_refused(),
        ),
        ToolSchema(
            "duckdb",
            {
                **dict.fromkeys(SQL_TEXT, _SQL_DOC),
                "params": "map for $name, list for ?",
                "database": "a file in the adapter's data_dir (default: in memory)",
                "timeout_ms": "the statement's timeout",
            },
            required=SQL_TEXT,
            refused=_sql_refused(),
        ),
        ToolSchema(
            "shell",
            {
                "command": "text run by /bin/sh -c",
                "argv": "a program and its arguments, no shell",
                "env": "map: environment variables",
                "timeout_ms": "the command's timeout",
            },
            required=("command", "argv"),
            refused={
                "cmds": "NoETL's list of shell programs is not supported: run one with `argv`",
                "cmd": "NoETL's name is not supported: run the program with `argv`",
            },
        ),
        ToolSchema(
            "file",
            {"op": "read or write", "path": "a path inside the adapter's base directory"},
            required=("path",),
            refused={
                "method": (
                    "a file resource is read where it begins a statement and written "
                    "elsewhere: remove `method` (it applies to http(s) resources)"
                ),
            },
        ),
        ToolSchema(
            "transfer",
            {
                "source": (
                    "{type: http, url, method, headers, params, data_path} or {type: postgres, "
                    "auth, query} or {type: duckdb, database, query}: the rows read"
                ),
                "target": (
                    "{type: postgres, auth, table or query, mapping} or {type: duckdb, "
                    "database, table or query, mapping}: where they are written"
                ),
                "mode": "append (default), insert, replace or upsert",
                "chunk_size": "NoETL's rows per commit (default 1000): reported, all rows "
                "commit at once",
                "timeout_ms": "each side's timeout",
            },
            required=("source",),
        ),
    )
}
"""Every tool kind a `call` may name (spec/11 §1.2)."""
TOOL_KINDS: tuple[str, ...] = tuple(TOOL_SCHEMAS)
"""Supported `tool.kind`s, one schema each, in the schemas' order; each becomes the effect
`aos/tool.KIND@1` (§1.2). The guest keeps its own copy
(`modules/flow/aos_flow/definition.py`), which cannot import the host: a test keeps them equal."""


@dataclass(frozen=True)
class FieldProblem:
    """A field its kind does not take: why, and the fields the kind takes."""

    name: str
    why: str
    kind: str
    takes: str

    def __str__(self) -> str:
        return f"{self.why} (a {self.kind} tool takes {self.takes})"


def field_problems(tool: dict[str, Any]) -> list[FieldProblem]:
    """Every field of `tool` its kind does not accept, in the tool's order (an unknown kind
    is not judged here)."""
    schema = TOOL_SCHEMAS.get(str(tool.get("kind")))
    if schema is None:
        return []
    takes = ", ".join(sorted(schema.accepted))
    problems = []
    for name in tool:
        if name in schema.accepted:
            continue
        text = str(name)
        refusal = schema.refusal(text)
        why = f"`{text}` is not supported; {refusal}" if refusal else f"unknown field `{text}`"
        problems.append(FieldProblem(text, why, schema.kind, takes))
    return problems


def missing_required(tool: dict[str, Any]) -> tuple[str, ...]:
    """The fields of which `tool` needs one and has none (empty: nothing is missing)."""
    schema = TOOL_SCHEMAS.get(str(tool.get("kind")))
    if schema is None or not schema.required:
        return ()
    if any(tool.get(name) is not None for name in schema.required):
        return ()
    return schema.required


PYTHON_ARGS_RESERVED_PREFIX = "__"


def python_args_problems(args: Any, libs: Any) -> list[tuple[str, str]]:
    """(key, why) for each key of a python call's `args` that no code could receive as
    given (spec/12 §6): a key that is not text, a `__name` Python keeps for itself (it
    would replace the code's builtins), a name a `libs` alias also takes. Every other key
    reaches the code: a variable when it is a name, and always in `input_data`."""
    if not isinstance(args, dict):
        return []
    aliases = set(libs) if isinstance(libs, dict) else set()
    problems = []
    for key in args:
        if not isinstance(key, str):
            problems.append((str(key), f"args key {key!r} is not text"))
        elif key.startswith(PYTHON_ARGS_RESERVED_PREFIX):
            why = f"args key `{key}` starts with `__`, which Python keeps for its own names"
            problems.append((key, why + "; rename it"))
        elif key in aliases:
            why = f"args key `{key}` is also a `libs` alias; one would hide the other"
            problems.append((key, why + "; rename one"))
    return problems


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def python_libs_problem(libs: Any) -> str | None:
    """What is wrong with a python tool's `libs` (None: nothing). A map names, per alias, a
    module (`np: numpy`) or NoETL's `{from: MODULE, import: NAME}`; a list of package names
    (NoETL's other form, which its worker ignores) is accepted and imports nothing."""
    if isinstance(libs, list):
        if all(isinstance(item, str) for item in libs):
            return None
        return "libs as a list names packages (text)"
    if not isinstance(libs, dict):
        return "libs maps a variable name to a module (say `np: numpy`)"
    for alias, module in libs.items():
        if not isinstance(alias, str) or not alias.isidentifier():
            return f"libs alias {alias!r} is not a variable name"
        if isinstance(module, dict):
            source, name = module.get("from"), module.get("import")
            if set(module) != {"from", "import"} or not _is_dotted(source) or not _is_dotted(name):
                return f"libs.{alias} is a module name or {{from: MODULE, import: NAME}}"
        elif not _is_dotted(module):
            return f"libs.{alias} is a module name (say `numpy` or `google.cloud.storage`)"
    return None


def _is_dotted(value: Any) -> bool:
    return isinstance(value, str) and _DOTTED.fullmatch(value) is not None


def markdown_table(kinds: Iterable[str] = TOOL_SCHEMAS) -> str:
    """spec/12 §4.1's table: per kind, what it accepts and what it refuses by name."""
    lines = ["| kind | fields (besides `kind`, `spec`) | one of | refused, with the fix |"]
    lines.append("|---|---|---|---|")
    for kind in kinds:
        schema = TOOL_SCHEMAS[kind]
        fields = "<br>".join(f"`{name}`: {doc}" for name, doc in schema.fields.items())
        required = ", ".join(f"`{name}`" for name in schema.required)
        refused = "<br>".join(f"`{name}`: {why}" for name, why in schema.refused.items())
        lines.append(f"| `{kind}` | {fields or '-'} | {required or '-'} | {refused or '-'} |")
    common = "; ".join(f"`{name}`: {why}" for name, why in COMMON_REFUSED.items())
    lines.append("")
    lines.append(f"Every kind refuses {common}.")
    return "\n".join(lines) + "\n"
