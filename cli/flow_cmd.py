"""`aos flow`: check, compile, draw, deploy and run flows; status, history, explain, signals,
cancel (spec/11-flows.md §9).

Commands that touch a world open it (`--world DIR`, env `AOS_WORLD`: reads read-only, so they
work beside a node that serves it; writes through that node when one does) or ask a node
(`--node URL`, env `AOS_NODE`), through one client (flows/serve/flow_client.py) whose answers they
render; which one is cli/remote.py's precedence (an option wins over the environment; both
is `cli.target_conflict`). `aos flow run FILE --local` needs neither: it runs on a scratch
world (or a new one kept at `--keep DIR`, or the existing flow world `--world DIR`), the
adapters in process, and prints the execution's end and history.

A command that waits for an execution exits with what it saw (cli/common.py): 0 completed,
3 failed, 4 cancelled, 5 still running.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from aos.cli.common import (
    EXIT_CODES_HELP,
    F,
    emit_json,
    exit_for_execution,
    handles_errors,
    json_option,
    pass_settings,
    table,
    world_option,
)
from aos.cli.identity_cmd import echo_first_admin, first_admin_token
from aos.cli.remote import NODE_ENV, client_token, credentials_options, node_target
from aos.flows.define import flowlang
from aos.flows.define.cfd import FlowDefinition, canonical_value
from aos.flows.define.document import load_flow, source_warnings
from aos.flows.define.draw import to_mermaid, to_text
from aos.flows.define.positions import SourcePositions
from aos.flows.errors import FlowCheckError, FlowDecodeError, FlowError
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_client import FlowClient, LocalFlows, NodeFlows
from aos.flows.serve.flow_world import (
    create_flow_world,
    default_keys_dir,
)
from aos.flows.serve.numbers import execution_number
from aos.flows.serve.schedules.origin import started_by
from aos.flows.serve.signals import NOT_DELIVERED
from aos.flows.tools.config import load_config
from aos.kernel import cbor
from aos.kernel.errors import AosError
from aos.kernel.hashing import hash_value
from aos.kernel.node import models
from aos.kernel.world.world import CLOCK_MANUAL, CLOCK_WALL

WORKLOAD_BYTES_MAX = 1024 * 1024
WAIT_S_MAX = 24 * 3600.0
MESSAGE_CHARS_MAX = 2000
"""How much of an error's message a text line shows (`--json` has it whole)."""


def node_option(fn: Any) -> Any:
    fn = credentials_options(fn)
    return click.option(
        "--node",
        "node_url",
        envvar=NODE_ENV,
        default=None,
        metavar="URL",
        help=f"Ask the node serving the world (env {NODE_ENV}) instead of opening it; "
        "--world and --node both given is an error.",
    )(fn)


def flow_client(world_path: str, node_url: str | None) -> FlowClient:
    """The client a flow command uses: the node, or the world opened here (cli/remote.py's
    precedence), sending the caller's token."""
    url = node_target(world_path, node_url)
    if url is not None:
        return NodeFlows(url, token=client_token())
    return LocalFlows(world_path, token=client_token())


def read_definition(path: Path, workbook: Path | None = None) -> FlowDefinition:
    if workbook is not None and flowlang.is_flow_source(str(path)):
        entries = _workbook_entries(workbook)
        text = _read_text(path)
        definition: FlowDefinition = flowlang.load_flow(text, source=str(path), workbook=entries)
        return definition
    return load_flow(_read_bytes(path), source=str(path))


def _workbook_entries(workbook: Path) -> list[dict[str, Any]]:
    return flowlang.read_workbook(_read_bytes(workbook), source=str(workbook))


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise FlowError(f"cannot read {path}: {error.strerror}", path=str(path)) from None


def workbook_option(fn: Any) -> Any:
    return click.option(
        "--workbook",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="For .flow files: a YAML/JSON list of {name, tool} binding task names to work.",
    )(fn)


@click.group("flow")
def flow_group() -> None:
    """Declarative flows: definitions, executions, their history (spec/11-flows.md)."""


# --------------------------------------------------------------------------------------------
# Definitions: check, compile, draw


@flow_group.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@workbook_option
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 on warnings too (template references nothing provides).",
)
@json_option
def check_command(
    files: tuple[Path, ...], workbook: Path | None, strict: bool, as_json: bool
) -> None:
    """Check flow definitions: every problem of each file, each where it is written
    (FILE:LINE:COLUMN), and warnings of template references no step, task or namespace
    provides. Exit 1 if any problem (with --strict: or warning)."""
    results = [_check_file(path, workbook) for path in files]
    _print_checks(results, as_json)
    if any(not r["ok"] or (strict and r["warnings"]) for r in results):
        raise SystemExit(1)


def _check_file(path: Path, workbook: Path | None) -> dict[str, Any]:
    try:
        definition = read_definition(path, workbook)
        data = _read_bytes(path)
        warnings = source_warnings(data, definition, source=str(path))
    except FlowCheckError as error:
        problems: list[dict[str, Any]] = [p.to_dict() for p in error.problems]
        return _located(path, {"file": str(path), "ok": False, "problems": problems})
    except flowlang.FlowLangError as error:
        found = _flow_errors(path, workbook) or [error]
        problems = [{**_problem(e), "line": e.line, "column": e.column} for e in found]
        return {"file": str(path), "ok": False, "problems": problems, "warnings": []}
    except AosError as error:
        return {"file": str(path), "ok": False, "problems": [_problem(error)], "warnings": []}
    digest = cbor_hash(canonical_value(definition))
    checked = {"file": str(path), "ok": True, "name": definition.name, "hash": digest}
    return _located(path, {**checked, "warnings": [w.to_dict() for w in warnings]})


def _flow_errors(path: Path, workbook: Path | None) -> list[flowlang.FlowLangError]:
    """Every error of a `.flow` file (a `.flow` text's errors come one at a time)."""
    entries = _workbook_entries(workbook) if workbook is not None else []
    return flowlang.errors_of(_read_text(path), source=str(path), workbook=entries)


def _located(path: Path, result: dict[str, Any]) -> dict[str, Any]:
    """`result` with the line and column of each problem and warning, where the file (YAML
    or JSON) says them."""
    result.setdefault("problems", [])
    result.setdefault("warnings", [])
    found = result["problems"] + result["warnings"]
    if not found or flowlang.is_flow_source(str(path)):
        return result
    try:
        positions = SourcePositions(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return result
    for problem in found:
        position = positions.of(problem["path"])
        if position is not None:
            problem.update(line=position.line, column=position.column)
    return result


def cbor_hash(value: Any) -> str:
    """The hash that names a canonical definition value (the BLAKE3 of its canonical CBOR)."""
    return str(hash_value(value))


def _problem(error: AosError) -> dict[str, Any]:
    if error.path:  # a .flow error's FILE:LINE:COLUMN, say
        return {"code": error.code, "path": error.path, "message": error.message}
    return {"code": error.code, "path": str(error.detail.get("path", "$")), "message": str(error)}


def _print_checks(results: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        emit_json(results)
        return
    for result in results:
        if result["ok"]:
            click.echo(f"ok    {result['file']}  {result['name']}  {result['hash']}")
        else:
            click.echo(f"error {result['file']}: {len(result['problems'])} problem(s)")
            click.echo(_found_table(result["file"], result["problems"]))
        if result.get("warnings"):
            click.echo(f"warn  {result['file']}: {len(result['warnings'])} warning(s)")
            click.echo(_found_table(result["file"], result["warnings"]))


def _found_table(file: str, found: list[dict[str, Any]]) -> str:
    rows = [
        [
            f"{file}:{p['line']}:{p['column']}" if "line" in p else "",
            p["code"],
            p["path"],
            p["message"],
        ]
        for p in found
    ]
    return table(["WHERE", "CODE", "PATH", "MESSAGE"], rows)


@flow_group.command("compile")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path), default=None)
@workbook_option
@json_option
@handles_errors
def compile_command(file: Path, out: Path | None, workbook: Path | None, as_json: bool) -> None:
    """The canonical definition: JSON on stdout, or canonical CBOR into OUT when it ends in
    .cbor (JSON otherwise)."""
    value = canonical_value(read_definition(file, workbook))
    if out is not None and out.suffix == ".cbor":
        out.write_bytes(cbor.encode(value))
        click.echo(f"wrote {out}  {cbor_hash(value)}")
        return
    text = json.dumps(cbor.to_json(value), indent=2, sort_keys=True, ensure_ascii=False)
    if out is not None:
        out.write_text(text + "\n")
        click.echo(f"wrote {out}  {cbor_hash(value)}")
        return
    click.echo(text)


@flow_group.command("draw")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["mermaid", "text"]), default="mermaid")
@workbook_option
@json_option
@handles_errors
def draw_command(file: Path, fmt: str, workbook: Path | None, as_json: bool) -> None:
    """The flow's graph: a Mermaid stateDiagram-v2, or an indented outline. A `.flow` file's
    Mermaid is its invocation graph in seed 004's layout (fork/join states for subflows)."""
    if fmt == "mermaid" and flowlang.is_flow_source(str(file)):
        text = flowlang.to_mermaid(flowlang.graph_of(_read_text(file), source=str(file)))
    else:
        definition = read_definition(file, workbook)
        text = to_mermaid(definition) if fmt == "mermaid" else to_text(definition)
    if as_json:
        emit_json({"format": fmt, "text": text})
        return
    click.echo(text)


@flow_group.command("fmt")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--write", "-w", is_flag=True, help="Rewrite FILE in place instead of printing.")
@json_option
@handles_errors
def fmt_command(file: Path, write: bool, as_json: bool) -> None:
    """Print a `.flow` file in the canonical layout (spec/11 §11.6)."""
    text = flowlang.format_text(_read_text(file), source=str(file))
    if write:
        file.write_text(text)
    if as_json:
        emit_json({"file": str(file), "text": text, "written": write})
    elif not write:
        click.echo(text, nl=False)


def _read_text(path: Path) -> str:
    data = _read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FlowDecodeError(f"{path}: not UTF-8 (byte {error.start})", path=str(path)) from None


# --------------------------------------------------------------------------------------------
# A flow world


@flow_group.group("world")
def flow_world_group() -> None:
    """Create a world that runs flows."""


@flow_world_group.command("create")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--keys",
    "keys_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Adapter key folder (made if missing; default DIRECTORY.keys beside the world).",
)
@click.option("--clock", type=click.Choice([CLOCK_WALL, CLOCK_MANUAL]), default=CLOCK_WALL)
@click.option("--no-sync", is_flag=True, help="Skip fsync on commit (scratch worlds, tests).")
@json_option
@handles_errors
def flow_world_create(
    directory: Path, keys_dir: Path | None, clock: str, no_sync: bool, as_json: bool
) -> None:
    """Create a flow world in DIRECTORY with its own adapter keys (echo, http, python, human):
    run `aos node up --human-adapter aos/human@1 --human-key KEYS/human.key` and `aos adapter
    run tool-echo --key KEYS/echo.key ...` against it."""
    keys_dir = keys_dir if keys_dir is not None else default_keys_dir(directory)
    world, keys = create_flow_world(directory, keys_dir=keys_dir, clock=clock, sync=not no_sync)
    admin_token = first_admin_token(directory)
    with world:
        body = {
            "world": str(directory),
            "keys": str(keys.folder),
            "manifest": str(world.manifest_hash),
            "admin_token": admin_token,
        }
    if as_json:
        emit_json(body)
        return
    click.echo(f"created   {body['world']}\nkeys      {body['keys']}\nmanifest  {body['manifest']}")
    echo_first_admin(admin_token)


# --------------------------------------------------------------------------------------------
# deploy, ls, run


@flow_group.command("deploy")
@click.argument("file", type=click.Path(path_type=Path))
@workbook_option
@world_option
@node_option
@json_option
@handles_errors
def deploy_command(
    file: Path, workbook: Path | None, world_path: str, node_url: str | None, as_json: bool
) -> None:
    """Check FILE and journal it as a new version of its flow (the same definition as the
    latest version changes nothing). Prints name, version and definition hash."""
    definition = read_definition(file, workbook)
    with flow_client(world_path, node_url) as client:
        body = client.deploy(definition, source=str(file))
    if as_json:
        emit_json(body.model_dump())
        return
    note = "" if body.changed else "  (unchanged: already the latest version)"
    click.echo(f"deployed  {body.name} v{body.version}  {body.definition}{note}")


@flow_group.command("ls")
@click.option("--flow", "flow", default=None, help="Only this flow's executions.")
@click.option(
    "--status",
    type=click.Choice(ops.LISTED_STATUSES),
    default=None,
    help="Only executions in this status.",
)
@click.option("--after", default=None, help="Go on after this key hash (a page's next_after).")
@click.option(
    "--limit",
    type=click.IntRange(1, ops.EXECUTIONS_PER_PAGE_MAX),
    default=ops.EXECUTIONS_PER_PAGE_DEFAULT,
    show_default=True,
    help="At most this many executions.",
)
@world_option
@node_option
@json_option
@handles_errors
def ls_command(
    flow: str | None,
    status: str | None,
    after: str | None,
    limit: int,
    world_path: str,
    node_url: str | None,
    as_json: bool,
) -> None:
    """Deployed flows and their versions; a page of executions and their status, in key-hash
    order (the next page: --after the key hash it names)."""
    wanted, page = ops.ExecutionFilter(flow, status), ops.Page(after, limit)
    with flow_client(world_path, node_url) as client:
        body = client.listing(wanted, page)
    if as_json:
        emit_json(body.model_dump())
        return
    rows = [[f.name, len(f.versions), f.versions[-1].definition] for f in body.flows]
    click.echo(table(["FLOW", "VERSIONS", "LATEST"], rows))
    click.echo("")
    rows = [
        [e.exec, e.flow, e.version, e.status, started_by(e.exec) or ""] for e in body.executions
    ]
    click.echo(table(["EXECUTION", "FLOW", "VERSION", "STATUS", "STARTED BY"], rows))
    if body.next_after is not None:
        click.echo(f"\n{body.count} executions in all; more: --after {body.next_after}")


def _workload(text: str | None, option: str = "--workload") -> Any:
    if text is None:
        return {}
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            if path.stat().st_size > WORKLOAD_BYTES_MAX:
                raise ops.FlowRequestInvalidError(f"{path} is over {WORKLOAD_BYTES_MAX} bytes")
            text = path.read_text()
        except OSError as error:
            raise ops.FlowRequestInvalidError(
                f"{option}: cannot read {path}: {error.strerror}"
            ) from None
    if len(text) > WORKLOAD_BYTES_MAX:
        raise ops.FlowRequestInvalidError(f"{option} is over {WORKLOAD_BYTES_MAX} bytes")
    try:
        return cbor.from_json(json.loads(text))
    except (ValueError, cbor.CborError) as error:
        raise ops.FlowRequestInvalidError(f"{option} is not JSON: {error}") from None


def _wait_option(what: str) -> Callable[[F], F]:
    return click.option(
        "--wait",
        "wait_s",
        type=click.FloatRange(0, WAIT_S_MAX),
        default=None,
        help=f"Wait up to this many seconds for the execution to end{what} (a node serving "
        "the world moves it; a world opened here moves only while the command holds it).",
    )


@dataclass(frozen=True)
class _RunSettings:
    """What `aos flow run` was given."""

    target: str
    workload: str | None
    exec_id: str | None
    version: int | None
    local: bool
    keep: Path | None
    children: tuple[Path, ...]
    wait_s: float | None
    python_allow: tuple[str, ...]
    config_file: Path | None
    file_base: Path | None
    workbook: Path | None
    world_path: str
    node_url: str | None
    as_json: bool


@flow_group.command("run", epilog=EXIT_CODES_HELP)
@click.argument("target")
@click.option("--workload", default=None, help="The workload: JSON, or @FILE.")
@click.option("--id", "exec_id", default=None, help="The execution id (default: generated).")
@click.option("--version", "version", type=int, default=None, help="A deployed version.")
@click.option(
    "--local",
    is_flag=True,
    help="Run to its end here, adapters in process: on a scratch world, a new one kept at "
    "--keep DIR, or the existing flow world --world DIR.",
)
@click.option(
    "--keep",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="--local: make the world at DIR (its keys in DIR.keys) and keep it.",
)
@click.option(
    "--with",
    "children",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="--local: deploy this definition first (a `kind: playbook` child, a subflow; "
    "repeatable, in order).",
)
@_wait_option("")
@click.option(
    "--python-allow",
    multiple=True,
    help="Module prefix the python tool may import (--local; repeatable).",
)
@click.option(
    "--config",
    "config_file",
    envvar="AOS_FLOW_TOOLS",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="--local: the tool config (keychain source, shell.enabled, limits; spec/11 §2.1; "
    "env AOS_FLOW_TOOLS).",
)
@click.option(
    "--file-base",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="--local: the folder the file tool (flow resources <data.json>) works in "
    "[the flow file's folder].",
)
@workbook_option
@world_option
@node_option
@json_option
@handles_errors
@pass_settings(_RunSettings)
def run_command(settings: _RunSettings) -> None:
    """Start an execution of TARGET: a deployed flow's name, or a definition file (deployed
    first). With --wait, wait for its end. With --local, run it to its end (or its first wait
    for a person or a signal) here: on a scratch world, a new one kept at --keep DIR, or the
    flow world --world names (its deployed flows, such as a `kind: playbook` task's children,
    are there to run)."""
    value = _workload(settings.workload)
    if settings.local:
        _run_local(settings, value)
        return
    if settings.keep is not None or settings.children:
        raise click.UsageError("--keep and --with are for --local")
    target, wait_s = settings.target, settings.wait_s
    with flow_client(settings.world_path, settings.node_url) as client:
        name = target
        if Path(target).is_file():
            name = client.deploy(
                read_definition(Path(target), settings.workbook), source=target
            ).name
        body = client.run(
            name, value, exec_id=settings.exec_id, version=settings.version, wait_s=wait_s or 0.0
        )
    if settings.as_json:
        emit_json(body.model_dump())
    else:
        click.echo(
            f"started   {body.exec}  number {execution_number(body.exec)}  ({body.flow} v{body.version})"
        )
        click.echo(f"status    {body.status}")
        _echo_error(body.error)
    exit_for_execution(body.status, waited=wait_s is not None)


def _run_local(options: _RunSettings, workload: Any) -> None:
    from aos.flows.serve.local import LocalAdapters, local_world, run_here

    context = click.get_current_context()
    if context.get_parameter_source("node_url") == ParameterSource.COMMANDLINE:
        raise click.UsageError("--local runs here: leave --node out")
    given = context.get_parameter_source("world_path") == ParameterSource.COMMANDLINE
    config = load_config(options.config_file)
    definition = read_definition(Path(options.target), options.workbook)
    children = tuple(read_definition(child, options.workbook) for child in options.children)
    base = options.file_base or Path(options.target).resolve().parent
    world_dir = Path(options.world_path) if given else None
    with local_world(world_dir=world_dir, keep=options.keep) as (world, keys, kept):
        adapters = LocalAdapters(
            world, keys, python_allow=options.python_allow, config=config, file_base=base
        )
        body = run_here(
            world,
            adapters,
            definition,
            children=children,
            workload=workload,
            exec_id=options.exec_id,
        )
    body = body.model_copy(update={"world": None if kept is None else str(kept)})
    if options.as_json:
        emit_json(body.model_dump())
    else:
        for event in body.events:
            click.echo(_event_line(event))
        number = execution_number(body.exec)
        click.echo(f"status    {body.status}  ({body.exec}, number {number})")
        _echo_error(body.error)
        if body.human_tasks:
            click.echo(f"waiting   {len(body.human_tasks)} human task(s)")
        if kept is None:
            click.echo("world     a scratch world, gone now (--keep DIR keeps it)")
        else:
            click.echo(f"world     {kept}  (aos flow events {body.exec} --world {kept})")
    exit_for_execution(body.status, waited=True)


# --------------------------------------------------------------------------------------------
# status, explain, events, signal, cancel


def _echo_error(error: models.TaskError | None) -> None:
    for line in error_lines(error):
        click.echo(line)


def error_lines(error: models.TaskError | None) -> list[str]:
    """An error as people read it: its code, what failed (kind) and its message, whether a
    retry may help, and the python traceback when the tool sent one (bounded by the answer)."""
    if error is None:
        return []
    kind = f" ({error.kind})" if error.kind else ""
    lines = [f"error     {error.code}{kind}: {error.message}"[:MESSAGE_CHARS_MAX]]
    if error.retryable:
        lines.append("          retryable")
    if error.traceback:
        lines.append("traceback")
        lines += [f"  {line}" for line in error.traceback.rstrip().splitlines()]
    return lines


@flow_group.command("status", epilog=EXIT_CODES_HELP)
@click.argument("exec_id", metavar="EXEC")
@_wait_option(" (then exit as its status says)")
@world_option
@node_option
@json_option
@handles_errors
def status_command(
    exec_id: str, wait_s: float | None, world_path: str, node_url: str | None, as_json: bool
) -> None:
    """An execution's status, version, business state and waits; why it failed, when it has
    (its error and traceback: `aos flow explain EXEC` says where). EXEC is an execution id or
    a unique prefix of one. Exits 0 once it answered, unless it waited (--wait)."""
    with flow_client(world_path, node_url) as client:
        state = client.status(exec_id, wait_s=wait_s or 0.0)
    if as_json:
        emit_json(state.model_dump())
    else:
        number = execution_number(state.exec)
        click.echo(f"execution {state.exec}  number {number}  ({state.flow} v{state.version})")
        click.echo(f"status    {state.status}  version {state.engine_version}")
        _echo_error(state.error)
        click.echo("business  " + json.dumps(state.business, sort_keys=True)[:MESSAGE_CHARS_MAX])
        waits = (state.engine or {}).get("waits") or {}
        for token, wait in sorted(waits.items()):
            click.echo(f"waiting   {token}  {json.dumps(wait, sort_keys=True)[:200]}")
    if wait_s is not None:
        exit_for_execution(state.status, waited=True)


@flow_group.command("explain")
@click.argument("exec_id", metavar="EXEC")
@world_option
@node_option
@json_option
@handles_errors
def explain_command(exec_id: str, world_path: str, node_url: str | None, as_json: bool) -> None:
    """Why an execution failed (the step, the task and attempt, the policy rule that decided,
    the error and its traceback), or what it waits on (each open wait: its kind, since when
    in logical time, its attempt, the intent, a retry's due time and last error)."""
    with flow_client(world_path, node_url) as client:
        found = client.explain(exec_id)
    if as_json:
        emit_json(found.model_dump())
        return
    for line in _explanation_lines(found):
        click.echo(line)
    _echo_error(found.error)


def _explanation_lines(found: models.ExecutionExplanation) -> list[str]:
    lines = [
        f"execution {found.exec}  ({found.flow} v{found.version})",
        f"status    {found.status}  at logical time {found.logical_ns} ns",
    ]
    point = found.failed_at
    if point is not None:
        where = ".".join(p for p in (point.step, point.task) if p) or "-"
        attempt = f" attempt {point.attempt}" if point.attempt is not None else ""
        lines.append(f"failed    {where}{attempt}  ({point.event} at seq {point.seq})")
        if point.rule is not None:
            lines.append(f"policy    rule {point.rule} fired: {point.action}")
        elif point.action is not None:
            lines.append(f"policy    no rule matched: the default ({point.action})")
    for wait in found.waits:
        lines += _wait_lines(wait, found.logical_ns)
    if found.status == ops.STATUS_RUNNING and not found.waits:
        lines.append("waiting   nothing: it runs at the next input")
    if not found.history_complete:
        lines.append("(the history read stopped at its bound: older events are not shown)")
    return lines


def _wait_lines(wait: models.WaitBody, now_ns: int) -> list[str]:
    where = ".".join(p for p in (wait.step, wait.task) if p) or "-"
    on = wait.signal or wait.child or wait.intent or ""
    lines = [
        f"waiting   {wait.wait} {wait.kind} {where} attempt {wait.attempt}  since {wait.since_ns}"
        f" ns{f'  on {on}' if on else ''}"
    ]
    if wait.due_ns is not None:
        lines.append(f"          due at {wait.due_ns} ns (in {max(0, wait.due_ns - now_ns)} ns)")
    if wait.last_error is not None:
        error = wait.last_error
        lines.append(f"          last error {error.code} ({error.kind}): {error.message}"[:500])
    return lines


def _event_line(event: models.HistoryEvent) -> str:
    body = event.model_dump()
    return f"{event.seq:>6}  {ops.describe_event(body)}"


@flow_group.command("events")
@click.argument("exec_id", metavar="EXEC")
@click.option("--follow", is_flag=True, help="Print new events until it ends (needs a node).")
@world_option
@node_option
@json_option
@handles_errors
def events_command(
    exec_id: str, follow: bool, world_path: str, node_url: str | None, as_json: bool
) -> None:
    """An execution's history in journal order, each event with the journal sequence of the
    step record that carries it. With --follow, each new event once its step is durable
    (long-polls of the node that serves the world), until the execution has ended."""
    with flow_client(world_path, node_url) as client:
        if follow:
            for event in client.follow(exec_id):
                line = json.dumps(event.model_dump(), sort_keys=True)
                click.echo(line if as_json else _event_line(event))
            return
        events = client.events(exec_id)
    if as_json:
        emit_json([event.model_dump() for event in events])
        return
    for event in events:
        click.echo(_event_line(event))


@flow_group.command("signal")
@click.argument("exec_id", metavar="EXEC")
@click.argument("name")
@click.option("--payload", default=None, help="The signal's payload as JSON.")
@click.option(
    "--expect-version",
    type=int,
    default=None,
    help="Only for a wait of NAME opened at this engine version: never buffered, refused "
    "when no such wait is open.",
)
@world_option
@node_option
@json_option
@handles_errors
def signal_command(
    exec_id: str,
    name: str,
    payload: str | None,
    expect_version: int | None,
    world_path: str,
    node_url: str | None,
    as_json: bool,
) -> None:
    """Send the signal NAME to a running execution: a wait takes it now, or the execution
    keeps it until one opens (`buffered`). One that can never be delivered is refused and
    exits 1, as does one journaled but not delivered (`stale`, `dropped`, `faulted`)."""
    value = _workload(payload, "--payload") if payload is not None else None
    with flow_client(world_path, node_url) as client:
        body = client.signal(exec_id, name, value, expect_version)
    if as_json:
        emit_json(body.model_dump())
    else:
        outcome = f"{body.outcome} (seq {body.seq})"
        click.echo(f"signalled {body.exec} {name}: {outcome}; status {body.status}")
    if body.outcome in NOT_DELIVERED:
        sys.exit(1)


@flow_group.command("cancel")
@click.argument("exec_id", metavar="EXEC")
@click.option("--reason", default=None)
@world_option
@node_option
@json_option
@handles_errors
def cancel_command(
    exec_id: str, reason: str | None, world_path: str, node_url: str | None, as_json: bool
) -> None:
    """Cancel a running execution: its open intents, waits and children."""
    with flow_client(world_path, node_url) as client:
        body = client.cancel(exec_id, reason)
    if as_json:
        emit_json(body.model_dump())
        return
    click.echo(f"cancelled {body.exec}; status {body.status}")
