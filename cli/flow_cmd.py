"""`aos flow`: check, compile, draw, deploy and run flows; status, history, signals, cancel
(spec/11-flows.md §9).

Commands that touch a world open it directly (`--world`, like `aos world`), or talk to a node
serving it (`--node URL`, env `AOS_NODE`). `aos flow run FILE --local` needs neither: it
creates a flow world in a temporary folder (or at `--world` when that does not exist yet),
runs the adapters in process and prints the execution's end and history.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from aos.cli.common import emit_json, handles_errors, json_option, table, world_option
from aos.cli.identity_cmd import echo_first_admin, first_admin_token
from aos.cli.remote import client_token, credentials_options
from aos.flows import flowlang
from aos.flows import operations as ops
from aos.flows.cfd import FlowDefinition, canonical_value
from aos.flows.client import FlowNodeClient
from aos.flows.config import ToolConfig, load_config
from aos.flows.document import load_flow, source_warnings
from aos.flows.draw import to_mermaid, to_text
from aos.flows.errors import FlowCheckError, FlowDecodeError, FlowError, FlowLocalWorldError
from aos.flows.local import LocalAdapters
from aos.flows.numbers import execution_number
from aos.flows.positions import SourcePositions
from aos.flows.signals import NOT_DELIVERED
from aos.flows.world import (
    FlowKeys,
    create_flow_world,
    default_keys_dir,
    is_flow_world,
    load_or_make_keys,
)
from aos.kernel import cbor
from aos.kernel.errors import AosError
from aos.kernel.hashing import hash_value
from aos.kernel.world.world import CLOCK_MANUAL, CLOCK_WALL, World

WORKLOAD_BYTES_MAX = 1024 * 1024
WAIT_S_MAX = 24 * 3600.0


def node_option(fn: Any) -> Any:
    fn = credentials_options(fn)
    return click.option(
        "--node",
        "node_url",
        envvar="AOS_NODE",
        default=None,
        metavar="URL",
        help="Talk to the node serving the world (env AOS_NODE) instead of opening it.",
    )(fn)


def node_client(url: str) -> FlowNodeClient:
    """A client of the node at `url`, sending the caller's token (cli/remote.py)."""
    return FlowNodeClient(url, token=client_token())


@contextmanager
def _opened(world_path: str) -> Iterator[World]:
    world = World.open(world_path)
    try:
        yield world
    finally:
        world.close()


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
    if node_url is not None:
        text, source = sent_to_node(file, workbook, definition)
        body = node_client(node_url).deploy(text, source=source)
    else:
        with _opened(world_path) as world:
            body = ops.deploy(world, definition).to_json()
    if as_json:
        emit_json(body)
        return
    note = "" if body["changed"] else "  (unchanged: already the latest version)"
    click.echo(f"deployed  {body['name']} v{body['version']}  {body['definition']}{note}")


def sent_to_node(file: Path, workbook: Path | None, definition: FlowDefinition) -> tuple[str, str]:
    """The text and source name a node is sent to deploy FILE. The node compiles what it is
    sent and knows no workbook: a `.flow` file bound by one is sent as its definition."""
    if workbook is not None and flowlang.is_flow_source(str(file)):
        text = json.dumps(cbor.to_json(canonical_value(definition)))
        return text, f"{file}.json"
    return file.read_text(), str(file)


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
    if node_url is not None:
        body = node_client(node_url).listing(flow=flow, status=status, after=after, limit=limit)
    else:
        wanted, page = ops.ExecutionFilter(flow, status), ops.Page(after, limit)
        with _opened(world_path) as world:
            body = ops.listing(world, wanted, page)
    if as_json:
        emit_json(body)
        return
    rows = [[f["name"], len(f["versions"]), f["versions"][-1]["definition"]] for f in body["flows"]]
    click.echo(table(["FLOW", "VERSIONS", "LATEST"], rows))
    click.echo("")
    rows = [[e["exec"], e["flow"], e["version"], e["status"]] for e in body["executions"]]
    click.echo(table(["EXECUTION", "FLOW", "VERSION", "STATUS"], rows))
    if body["next_after"] is not None:
        click.echo(f"\n{body['count']} executions in all; more: --after {body['next_after']}")


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


@flow_group.command("run")
@click.argument("target")
@click.option("--workload", default=None, help="The workload: JSON, or @FILE.")
@click.option("--id", "exec_id", default=None, help="The execution id (default: generated).")
@click.option("--version", "version", type=int, default=None, help="A deployed version.")
@click.option("--local", is_flag=True, help="Run on an embedded world, adapters in process.")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0, WAIT_S_MAX),
    default=None,
    help="With --node: wait up to this many seconds for the execution to end.",
)
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
def run_command(
    target: str,
    workload: str | None,
    exec_id: str | None,
    version: int | None,
    local: bool,
    wait_s: float | None,
    python_allow: tuple[str, ...],
    config_file: Path | None,
    file_base: Path | None,
    workbook: Path | None,
    world_path: str,
    node_url: str | None,
    as_json: bool,
) -> None:
    """Start an execution of TARGET: a deployed flow's name, or a definition file (deployed
    first). With --local, run it to its end (or its first human task) on a fresh world, or on
    the flow world --world names (its deployed flows there to run); with --node and --wait,
    wait for it to end."""
    value = _workload(workload)
    if wait_s is not None and node_url is None:
        raise ops.FlowRequestInvalidError(
            "--wait needs --node: an embedded world moves only while a command holds it"
        )
    if local:
        config = load_config(config_file)
        definition = read_definition(Path(target), workbook)
        base = file_base if file_base is not None else Path(target).resolve().parent
        _run_local(
            definition, value, exec_id, python_allow, config, world_path, as_json, file_base=base
        )
        return
    if node_url is not None:
        client = node_client(node_url)
        name = target
        if Path(target).is_file():
            definition = read_definition(Path(target), workbook)
            text, source = sent_to_node(Path(target), workbook, definition)
            name = client.deploy(text, source=source)["name"]
        if wait_s is None:
            body = client.run(name, value, exec_id=exec_id, version=version)
        else:  # the node answers once it ended (long-polls, no polling interval)
            body = client.run_to_end(name, value, wait_s=wait_s, exec_id=exec_id, version=version)
    else:
        with _opened(world_path) as world:
            name = target
            if Path(target).is_file():
                name = ops.deploy(world, read_definition(Path(target), workbook)).name
            started = ops.start(world, name, workload=value, exec_id=exec_id, version=version)
            body = {**_started_json(started), "status": ops.status(world, started.exec)["status"]}
    _print_started(body, as_json)


def _started_json(started: ops.Started) -> dict[str, Any]:
    return {
        "exec": started.exec,
        "number": execution_number(started.exec),
        "flow": started.flow,
        "version": started.version,
        "definition": started.definition,
    }


def _print_started(body: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(body)
    else:
        number = body.get("number", execution_number(body["exec"]))
        flow = f"({body['flow']} v{body['version']})"
        click.echo(f"started   {body['exec']}  number {number}  {flow}")
        click.echo(f"status    {body.get('status', 'running')}")
    _exit_if_failed(body.get("status"))


def _exit_if_failed(status: Any) -> None:
    """A run that saw its execution end `failed` exits 1 (what it printed stands)."""
    if status == ops.STATUS_FAILED:
        sys.exit(1)


def _echo_failure(state: dict[str, Any]) -> None:
    found = ops.failure(state)
    if found is not None:
        click.echo(f"error     {found.get('code')}: {found.get('message')}"[:2000])


def _run_local(
    definition: FlowDefinition,
    workload: Any,
    exec_id: str | None,
    python_allow: tuple[str, ...],
    config: ToolConfig,
    world_path: str,
    as_json: bool,
    *,
    file_base: Path,
) -> None:
    with tempfile.TemporaryDirectory(prefix="aos-flow-local-") as scratch:
        world, keys = _local_world(world_path, Path(scratch))
        with world:
            adapters = LocalAdapters(
                world, keys, python_allow=python_allow, config=config, file_base=file_base
            )
            ops.deploy(world, definition)
            started = ops.start(world, definition.name, workload=workload, exec_id=exec_id)
            drained = adapters.drain()
            state = ops.status(world, started.exec)
            events = ops.history(world, started.exec)
    body = {
        **_started_json(started),
        "status": state["status"],
        "result": state["engine"].get("result") if isinstance(state["engine"], dict) else None,
        "error": ops.failure(state),
        "human_tasks": drained.human_tasks,
        "receipts": drained.receipts,
        "timers_skipped": drained.timers_skipped,
        "events": [{"seq": e.seq, **e.event} for e in events],
    }
    if as_json:
        emit_json(cbor.to_json(body))
    else:
        for event in body["events"]:
            click.echo(_event_line(event))
        number = execution_number(started.exec)
        click.echo(f"status    {body['status']}  ({started.exec}, number {number})")
        _echo_failure(state)
        if drained.human_tasks:
            click.echo(f"waiting   {len(drained.human_tasks)} human task(s)")
    _exit_if_failed(state["status"])


def _local_world(world_path: str, scratch: Path) -> tuple[World, FlowKeys]:
    """The world `--local` runs on: a flow world `--world` names that exists (made by `aos
    flow world create`, its adapter keys beside it; the flows deployed there, such as the
    children a `kind: playbook` task starts, are there to run), a new one where `--world`
    names a folder that does not exist yet, else a throwaway one."""
    path = Path(world_path)
    if world_path == "./.aos":
        return create_flow_world(scratch / "world", clock=CLOCK_MANUAL, sync=False)
    if not path.exists():
        return create_flow_world(path, clock=CLOCK_MANUAL, sync=True)
    keys_dir = default_keys_dir(path)
    world = World.open(world_path)
    if not is_flow_world(world) or not keys_dir.is_dir():
        world.close()
        raise FlowLocalWorldError(
            f"{world_path} is not a flow world with its adapter keys in {keys_dir}",
            world=world_path,
        )
    return world, load_or_make_keys(keys_dir)


# --------------------------------------------------------------------------------------------
# status, events, signal, cancel


@flow_group.command("status")
@click.argument("exec_id", metavar="EXEC")
@world_option
@node_option
@json_option
@handles_errors
def status_command(exec_id: str, world_path: str, node_url: str | None, as_json: bool) -> None:
    """An execution's status, version, business state and waits."""
    if node_url is not None:
        state = node_client(node_url).status(exec_id)
    else:
        with _opened(world_path) as world:
            state = cbor.to_json(ops.shown_status(world, exec_id))
    if as_json:
        emit_json(state)
        return
    number = state.get("number", execution_number(state["exec"]))
    click.echo(f"execution {state['exec']}  number {number}  ({state['flow']} v{state['version']})")
    click.echo(f"status    {state['status']}  version {state['engine_version']}")
    _echo_failure(state)
    click.echo("business  " + json.dumps(state["business"], sort_keys=True)[:2000])
    waits = (state.get("engine") or {}).get("waits") or {}
    for token, wait in sorted(waits.items()):
        click.echo(f"waiting   {token}  {json.dumps(wait, sort_keys=True)[:200]}")


def _event_line(event: dict[str, Any]) -> str:
    return f"{event['seq']:>6}  {ops.describe_event(event)}"


@flow_group.command("events")
@click.argument("exec_id", metavar="EXEC")
@click.option("--follow", is_flag=True, help="With --node: print new events until it ends.")
@world_option
@node_option
@json_option
@handles_errors
def events_command(
    exec_id: str, follow: bool, world_path: str, node_url: str | None, as_json: bool
) -> None:
    """An execution's history in journal order, each event with the journal sequence of the
    step record that carries it."""
    if follow:
        if node_url is None:
            raise ops.FlowRequestInvalidError("--follow needs --node")
        _follow(node_client(node_url), exec_id, as_json)
        return
    if node_url is not None:
        events = node_client(node_url).events(exec_id)
    else:
        with _opened(world_path) as world:
            events = [{"seq": e.seq, **cbor.to_json(e.event)} for e in ops.history(world, exec_id)]
    if as_json:
        emit_json(events)
        return
    for event in events:
        click.echo(_event_line(event))


def _follow(client: FlowNodeClient, exec_id: str, as_json: bool) -> None:
    """Print events as the node journals them (one JSON object a line with --json) until the
    execution has ended: long-polls, so each event shows once its step is durable."""
    for event in client.follow(exec_id):
        click.echo(json.dumps(event, sort_keys=True) if as_json else _event_line(event))


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
    if node_url is not None:
        body = node_client(node_url).signal(exec_id, name, value, expect_version)
    else:
        with _opened(world_path) as world:
            body = ops.signal(world, exec_id, name, value, expect_version=expect_version).to_json()
    if as_json:
        emit_json(body)
    else:
        outcome = f"{body['outcome']} (seq {body['seq']})"
        click.echo(f"signalled {exec_id} {name}: {outcome}; status {body['status']}")
    if body["outcome"] in NOT_DELIVERED:
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
    if node_url is not None:
        body = node_client(node_url).cancel(exec_id, reason)
    else:
        with _opened(world_path) as world:
            ops.cancel(world, exec_id, reason)
            body = {"exec": exec_id, "status": ops.status(world, exec_id)["status"]}
    if as_json:
        emit_json(body)
        return
    click.echo(f"cancelled {exec_id}; status {body['status']}")
