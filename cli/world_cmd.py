"""`aos world ...`: create a world, send it events, and look inside (DESIGN §13).

    aos world create DIR --manifest MANIFEST_DIR      genesis
    aos world status                                  height, manifest, cells, open intents
    aos world send SCHEMA --value-json JSON           ingress an event and run to idle
    aos world state get WORKFLOW [KEY] | state cells WORKFLOW
    aos world journal tail [--from N] [--limit N] [--kind K] | journal head
    aos world trace HASH                              what an input caused

Every command but `create` opens the world named by `--world` (env AOS_WORLD, default
./.aos). Read commands (status, state, journal, trace, explain) open it read-only and work
while another process, such as `aos node up`, writes it; a world has one writer at a time,
so a command that writes fails with `store.locked` while another process has it open.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from aos.cli.common import (
    EXIT_ERROR,
    emit_json,
    fail,
    handles_errors,
    json_option,
    table,
    world_option,
)
from aos.cli.identity_cmd import echo_first_admin, first_admin_token
from aos.cli.remote import node_option, world_client
from aos.cli.world_group import world_group
from aos.cli.world_text import (
    cell_text,
    clip,
    compact_text,
    key_text,
    key_value,
    short,
)
from aos.kernel import cbor
from aos.kernel.air import AirCheckError
from aos.kernel.text import jsontext
from aos.kernel.world import records
from aos.kernel.world.cells import STATUS_FAILED
from aos.kernel.world.errors import CellMissingError
from aos.kernel.world.router import RouteError
from aos.kernel.world.trace import (
    ROLE_TARGET,
    TRACE_RECORDS_MAX_DEFAULT,
    JournalView,
    Trace,
    trace,
)
from aos.kernel.world.world import CLOCK_MANUAL, CLOCK_WALL, CellInfo, RunReport, World

if TYPE_CHECKING:
    from aos.kernel.node.models import RunProblem, RunReportBody

JOURNAL_TAIL_LIMIT_DEFAULT = 20
JOURNAL_TAIL_SCAN_RECORDS_MAX = 100_000
"""Most records `journal tail --kind` reads looking for matches."""
CELLS_LIMIT_DEFAULT = 100
_TAIL_WINDOW_RECORDS = 256


@contextmanager
def opened_world(world_path: str) -> Iterator[World]:
    """Open the world for one command and close it after, whatever happens. Another process
    holding the world surfaces as `store.locked` ("world is locked by pid N")."""
    world = World.open(world_path)
    try:
        yield world
    finally:
        world.close()


def read_world(world_path: str) -> AbstractContextManager[World]:
    """Open the world read-only for a read command: no writer lock, so it works while
    `aos node up` (or any writer) has the world; every read sees one commit."""
    return World.reading(world_path)


# --------------------------------------------------------------------------------------------
# create, status


@world_group.command("create")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--manifest",
    "manifest_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The authored AIR folder (manifest and definitions).",
)
@click.option(
    "--clock",
    type=click.Choice([CLOCK_WALL, CLOCK_MANUAL]),
    default=CLOCK_WALL,
    show_default=True,
    help="Logical time follows the wall clock, or moves only when told (tests).",
)
@click.option("--no-sync", is_flag=True, help="Skip fsync on commit (scratch worlds, tests).")
@click.option(
    "--store",
    "store_url",
    metavar="URL",
    help="Keep the world on PostgreSQL: postgresql://[user@]host[:port]/db?world=ID "
    "(ID defaults to DIRECTORY's name). Default: embedded LMDB in DIRECTORY.",
)
@json_option
@handles_errors
def create_command(
    directory: Path,
    manifest_dir: Path,
    clock: str,
    no_sync: bool,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Create a world in DIRECTORY (new or empty) from MANIFEST_DIR: check the manifest,
    build module sources, store everything and journal the genesis manifest. With --store,
    the world lives in that database and DIRECTORY points at it (every command taking
    --world DIRECTORY then reads and writes the database)."""
    from aos.kernel.world_store import create_world

    try:
        world = create_world(
            directory, manifest_dir, store_url=store_url, sync=not no_sync, clock=clock
        )
    except AirCheckError as error:
        if not as_json:
            rows = [[i.code, i.path, i.message, i.file or ""] for i in error.issues]
            click.echo(table(["CODE", "PATH", "MESSAGE", "FILE"], rows))
        fail(error, as_json=as_json)
        return
    admin_token = first_admin_token(directory)
    with world:
        body = {
            "world": str(directory),
            "manifest": str(world.manifest_hash),
            "height": world.height,
            "clock": world.clock,
            "admin_token": admin_token,
        }
    if as_json:
        emit_json(body)
        return
    click.echo(f"created   {body['world']}")
    click.echo(f"manifest  {body['manifest']}")
    click.echo(f"height    {body['height']}")
    echo_first_admin(admin_token)


# --------------------------------------------------------------------------------------------
# send


@world_group.command("send")
@click.argument("schema")
@click.option("--value-json", "value_json", metavar="JSON", help="The event value ('-': stdin).")
@click.option(
    "--value-file",
    "value_file",
    type=click.File("r", encoding="utf-8"),
    help="A file with the event value as JSON ('-': stdin).",
)
@click.option(
    "--idempotency-key",
    "idempotency_key",
    metavar="KEY",
    help="Admit the event once: sent again with the same KEY, the first admission is answered.",
)
@node_option
@world_option
@json_option
@handles_errors
def send_command(
    schema: str,
    value_json: str | None,
    value_file: IO[str] | None,
    idempotency_key: str | None,
    node_url: str | None,
    world_path: str,
    as_json: bool,
) -> None:
    """Send one event of SCHEMA from outside and run the world until it is idle.

    The value is JSON; {"$bytes": "<hex>"} stands for bytes, times may be RFC 3339 text.
    A value that does not fit SCHEMA is refused before anything is journaled; an event that
    cannot be routed is journaled as `ingress_rejected` and reported (exit 1). Faults and
    dropped deliveries are listed by cell; exit 1 when one was a delivery of this event.
    While a node serves the world, the event goes through it. With --idempotency-key, a
    repeat (a retry after a failed request, say) journals nothing and answers the first
    admission, marked `duplicate`.
    """
    value = _event_value(value_json, value_file)
    try:
        with world_client(world_path, node_url) as client:
            sent = client.send(schema, value, idempotency_key=idempotency_key)
    except RouteError as error:
        _fail_rejected(error, as_json=as_json)
        raise
    own = [problem for problem in sent.problems if problem.input == sent.seq]
    body: dict[str, Any] = {
        "seq": sent.seq,
        "event_hash": sent.event_hash,
        "deliveries": sent.deliveries,
        "duplicate": sent.duplicate,
        "run": run_json(sent.report),
        "problems": [problem.model_dump(exclude_none=True) for problem in sent.problems],
        "journal": {"first": sent.seq, "last": max(sent.seq, sent.report.last_seq)},
    }
    if as_json:
        emit_json(body)
    else:
        word = "duplicate" if body["duplicate"] else "admitted "
        click.echo(f"{word} seq {sent.seq}  {body['event_hash']}")
        click.echo(f"delivered {body['deliveries']}")
        for line in run_lines(body["run"]):
            click.echo(line)
        for problem in sent.problems:
            click.echo(f"{_problem_word(problem):<9} {_problem_text(problem)}")
        click.echo(f"journal   {body['journal']['first']}..{body['journal']['last']}")
    if own:
        # The event is journaled and durable; exit non-zero because it did not take effect
        # in every cell it was routed to.
        if not as_json:
            click.echo(
                f"error[world.event_not_applied]: the event faulted or was dropped in "
                f"{len(own)} of its {body['deliveries']} deliveries",
                err=True,
            )
            click.echo(f"  hint: aos world explain {own[0].seq}", err=True)
        sys.exit(EXIT_ERROR)


RUN_FIELDS = ("steps", "faults", "fault_codes", "dropped", "events", "intents")


def run_json(report: RunReport | RunReportBody) -> dict[str, Any]:
    """What a run did, from the kernel's report or a client's answer alike."""
    return {name: getattr(report, name) for name in RUN_FIELDS}


def run_lines(run: dict[str, Any]) -> list[str]:
    """What a run did (`run_json`'s shape), as `send` and the operations print it."""
    return [
        f"run       {run['steps']} steps, {run['faults']} faults, {run['dropped']} dropped, "
        f"{run['events']} events, {run['intents']} intents"
    ]


def _problem_word(problem: RunProblem) -> str:
    return "fault" if problem.kind == records.STEP_FAULT else "dropped"


def _problem_text(problem: RunProblem) -> str:
    cell = cell_text(problem.workflow, problem.key)
    if problem.kind == records.STEP_FAULT:
        return f"{cell}  seq {problem.seq}  {problem.code}: {clip(str(problem.message))}"
    return f"{cell}  seq {problem.seq}  {problem.reason} (aos world explain {problem.seq})"


def _event_value(value_json: str | None, value_file: IO[str] | None) -> Any:
    if (value_json is None) == (value_file is None):
        raise click.UsageError("give the value with exactly one of --value-json, --value-file")
    if value_file is not None:
        text = value_file.read()
    else:
        assert value_json is not None
        text = sys.stdin.read() if value_json == "-" else value_json
    return jsontext.parse(text, path="value")


def _fail_rejected(error: RouteError, *, as_json: bool) -> None:
    """A routing error: the kernel journaled the input as rejected (at `rejected_seq`); say
    where."""
    seq = error.detail.get("rejected_seq")
    if as_json:
        fail(error, as_json=True)
    click.echo(f"error[{error.code}]: {error}", err=True)
    if error.hint:
        click.echo(f"  hint: {error.hint}", err=True)
    click.echo(f"  the input is journaled as {records.INGRESS_REJECTED} at seq {seq}", err=True)
    sys.exit(EXIT_ERROR)


# --------------------------------------------------------------------------------------------
# state get, state cells


@world_group.group("state")
def state_group() -> None:
    """Cells: one cell's state, or the cells of a workflow."""


@state_group.command("get")
@click.argument("workflow")
@click.argument("key", required=False)
@world_option
@json_option
@handles_errors
def state_get_command(workflow: str, key: str | None, world_path: str, as_json: bool) -> None:
    """Print the state of WORKFLOW's cell KEY as JSON.

    KEY is the key value as typed (a text key bare: `order-1`); when that does not fit the
    workflow's key type, KEY is read as JSON (`42`, `{"a": 1}`). Leave it out for a workflow
    that is not keyed.
    """
    with read_world(world_path) as world:
        key_value, key_bytes = world.reader.key_from_text(workflow, key)
        state = world.reader.state(workflow, key_value)
        status = world.reader.status_of(workflow, key_bytes)
    if state is None and status != STATUS_FAILED:
        raise CellMissingError(f"{cell_text(workflow, key_value)} has no cell")
    if as_json:
        emit_json(
            {
                "workflow": workflow,
                "key": cbor.to_json(key_value),
                "status": status,
                "state": cbor.to_json(state),
            }
        )
        return
    click.echo(json.dumps(cbor.to_json(state), indent=2, sort_keys=True, ensure_ascii=False))


@state_group.command("cells")
@click.argument("workflow")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=CELLS_LIMIT_DEFAULT,
    show_default=True,
    help="Most cells to list.",
)
@world_option
@json_option
@handles_errors
def state_cells_command(workflow: str, limit: int, world_path: str, as_json: bool) -> None:
    """List WORKFLOW's cells (in key-hash order): key, status, state hash, last active seq."""
    with read_world(world_path) as world:
        count = world.reader.cell_count(workflow)  # the index's count: no walk
        # Lazily, so only the cells shown are read, however many the workflow has.
        shown = list(itertools.islice(world.reader.cells_after(workflow, None), limit))
    if as_json:
        emit_json(
            {
                "workflow": workflow,
                "count": count,
                "truncated": len(shown) < count,
                "cells": [_cell_json(cell) for cell in shown],
            }
        )
        return
    rows = [
        [key_text(cell.key), cell.status, short(cell.state_hash), cell.last_active_seq]
        for cell in shown
    ]
    click.echo(table(["KEY", "STATUS", "STATE", "LAST ACTIVE"], rows))
    if len(shown) < count:
        click.echo(f"... {count - len(shown)} more (raise --limit)")


def _cell_json(cell: CellInfo) -> dict[str, Any]:
    return {
        "key": cbor.to_json(cell.key),
        "status": cell.status,
        "state_hash": str(cell.state_hash),
        "last_active_seq": cell.last_active_seq,
    }


# --------------------------------------------------------------------------------------------
# journal tail, journal head


@world_group.group("journal")
def journal_group() -> None:
    """The journal: its last records, its head."""


@journal_group.command("tail")
@click.option("--from", "from_seq", type=click.IntRange(min=1), help="Start at this sequence.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=JOURNAL_TAIL_LIMIT_DEFAULT,
    show_default=True,
    help="Most records to print.",
)
@click.option("--kind", type=click.Choice(list(records.KINDS)), help="Only records of a kind.")
@world_option
@json_option
@handles_errors
def journal_tail_command(
    from_seq: int | None, limit: int, kind: str | None, world_path: str, as_json: bool
) -> None:
    """Print journal records, one line each: the last LIMIT, or LIMIT from --from on."""
    with read_world(world_path) as world:
        journal = world.store.journal
        head = journal.head()
        found = _tail(journal, head, from_seq=from_seq, limit=limit, kind=kind)
    if as_json:
        emit_json({"head": head, "records": [record_json(s, r) for s, r in found]})
        return
    for seq, record in found:
        click.echo(record_line(seq, record))


def _tail(
    journal: JournalView, head: int, *, from_seq: int | None, limit: int, kind: str | None
) -> list[tuple[int, Any]]:
    """Up to `limit` records of `kind` (any kind when None): from `from_seq` on, else the last
    ones. Reads at most `JOURNAL_TAIL_SCAN_RECORDS_MAX` records."""

    def wanted(record: Any) -> bool:
        return kind is None or record.get("kind") == kind

    scan = min(JOURNAL_TAIL_SCAN_RECORDS_MAX, head)
    found: list[tuple[int, Any]] = []
    if from_seq is not None:
        for seq, record in journal.read(from_seq, limit=scan):
            if wanted(record):
                found.append((seq, record))
                if len(found) == limit:
                    break
        return found
    end = head
    # Read backwards in windows, since the journal reads forward only.
    while end >= 1 and len(found) < limit and scan > 0:
        start = max(1, end - max(limit, _TAIL_WINDOW_RECORDS) + 1, end - scan + 1)
        window = [(s, r) for s, r in journal.read(start, end) if wanted(r)]
        found = window + found
        scan -= end - start + 1
        end = start - 1
    return found[-limit:]


@journal_group.command("head")
@world_option
@json_option
@handles_errors
def journal_head_command(world_path: str, as_json: bool) -> None:
    """Print the journal's head: its last sequence number and that record."""
    with read_world(world_path) as world:
        journal = world.store.journal
        head = journal.head()
        last = next(iter(journal.read(head, head)), None) if head else None
    if as_json:
        emit_json({"head": head, "record": record_json(*last)["record"] if last else None})
        return
    click.echo(record_line(*last) if last else "0  (empty journal)")


# --------------------------------------------------------------------------------------------
# trace


@world_group.command("trace")
@click.argument("hash_text", metavar="HASH")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=TRACE_RECORDS_MAX_DEFAULT,
    show_default=True,
    help="Most journal records to read.",
)
@click.option(
    "--from", "from_seq", type=click.IntRange(min=1), default=1, help="Search from this seq."
)
@world_option
@json_option
@handles_errors
def trace_command(
    hash_text: str, limit: int, from_seq: int, world_path: str, as_json: bool
) -> None:
    """What an input caused, step by step. HASH is an event hash (as `send` prints it; any
    journal record's hash works) or an intent hash; for an intent the trace starts at the
    input it came from."""
    with read_world(world_path) as world:
        found = trace(world.store.journal, hash_text, limit=limit, from_seq=from_seq)
        head = world.store.journal.head()
    if as_json:
        emit_json(_trace_json(found))
        return
    click.echo(f"trace {found.target}  ({found.match} at seq {found.seq})")
    for entry in found.entries:
        marker = ">" if entry.role == ROLE_TARGET else " "
        line = record_line(entry.seq, entry.record, indent=2 * entry.depth)
        click.echo(f"{marker}{line}")
    note = f"{found.scanned} records read"
    if found.truncated:
        note += (
            f"; stopped at the limit of {found.limit} before the head ({head}): "
            "later consequences are not shown (raise --limit)"
        )
    click.echo(note)


def _trace_json(found: Trace) -> dict[str, Any]:
    return {
        "target": str(found.target),
        "match": found.match,
        "seq": found.seq,
        "scanned": found.scanned,
        "limit": found.limit,
        "truncated": found.truncated,
        "entries": [
            {
                "seq": entry.seq,
                "role": entry.role,
                "depth": entry.depth,
                "parent": entry.parent,
                "record": cbor.to_json(entry.record),
            }
            for entry in found.entries
        ],
    }


# --------------------------------------------------------------------------------------------
# One-line records


def record_json(seq: int, record: Any) -> dict[str, Any]:
    return {"seq": seq, "record": cbor.to_json(record)}


def record_line(seq: int, record: Any, *, indent: int = 0) -> str:
    kind = str(record.get("kind"))
    return f"{seq:>6}  {' ' * indent}{kind:<16}  {_summary(record)}"


def _summary(value: Any) -> str:
    """A short, human line about a record; `--json` gives the exact record."""
    record = records.parse(value)
    if isinstance(record, records.ManifestRecord):
        return record.manifest
    if isinstance(record, records.IngressEvent | records.DerivedEvent):
        cause = f"  (from step {record.cause})" if isinstance(record, records.DerivedEvent) else ""
        return f"{record.schema} {clip(compact_text(record.value))}{cause}"
    if isinstance(record, records.IngressRejected):
        return f"{record.schema} {record.code}: {clip(record.message)}"
    if isinstance(record, records.EffectIntentRecord):
        who = cell_text(record.workflow, key_value(record.key))
        return f"{record.effect} {short(record.intent)}  by {who} (step {record.cause})"
    if isinstance(record, records.StepRecord | records.StepFaultRecord | records.DeliveryDropped):
        return f"{cell_text(record.workflow, key_value(record.key))} input {record.input_seq}  " + (
            _delivery_summary(record)
        )
    return clip(compact_text(value))


def _delivery_summary(
    record: records.StepRecord | records.StepFaultRecord | records.DeliveryDropped,
) -> str:
    if isinstance(record, records.StepRecord):
        state = short(record.state) if record.state else "deleted"
        return f"state {state}  events {record.events}  intents {len(record.intents)}"
    if isinstance(record, records.StepFaultRecord):
        return f"{record.code}: {clip(record.message)}"
    return f"dropped: {record.reason}"
