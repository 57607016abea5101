"""NoETL as a differential oracle (`make conformance-noetl`): every playbook of the corpus
(`cases.py`) run on NoETL 2.13.1 and on aos, their final status and step results compared
(`normalize.py`), each difference checked against the list of expected ones (`expected.py`).
It prints the table (playbook | NoETL | aos | same?), writes it with every difference to
`bench/results/conformance-noetl.json`, and exits 1 on any difference the list does not
explain (or one it lists that did not show).

* **NoETL**: its whole stack on loopback (`bench/peers/noetl_stack.py`: PostgreSQL, NATS
  JetStream, server, worker), each playbook registered in its catalog and executed over its
  REST API, its events read until a terminal event and then `SETTLE_S` of quiet, or
  `QUIET_S` of quiet without one (the execution never ended), at most `EXECUTION_S_MAX`.
* **aos**: what `aos flow run FILE --local` does, in this process: a fresh embedded world on a
  manual clock, the built-in adapters in process (`LocalAdapters`), the file deployed and run
  to its end, then its status. That is the path a user takes first, with the same compiler,
  interpreter and tool code a node runs; retry delays are skipped on the manual clock rather
  than waited, which changes no result, only the wall time. One world per playbook, so no run
  sees another's state.

Both sides reach the same local services: an HTTP server on port 0 (a new one per run, so each
side's requests are its own) and one database of NoETL's throwaway cluster for `auth:`
credentials, emptied before each run.

    .venv/bin/python -m tests.conformance.run [--only NAME]... [--quick] [--json PATH] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from aos.flows.define.document import load_flow
from aos.flows.errors import FlowError
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import create_flow_world
from aos.flows.serve.local import LocalAdapters
from aos.flows.serve.numbers import execution_number
from aos.flows.tools.config import load_config
from aos.kernel import cbor
from aos.kernel.errors import AosError
from aos.kernel.world.world import CLOCK_MANUAL, World
from bench.peers import noetl_stack
from tests.conformance import expected
from tests.conformance.cases import CASES, CREDENTIALS, QUICK, Case
from tests.conformance.normalize import (
    NO_END,
    REFUSED,
    TERMINAL_EVENTS,
    Difference,
    Outcome,
    Shape,
    aos_outcome,
    compare,
    mask,
    noetl_outcome,
)
from tests.playbooks.server import Handler, serving

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results" / "conformance-noetl.json"
DATABASE = "playbooks"  # role, password and database the playbooks' credentials name
QUIET_S = 20.0
SETTLE_S = 3.0
EXECUTION_S_MAX = 300.0
POLL_S = 0.25
CELL_CHARS_MAX = 300


# --------------------------------------------------------------------------------------------
# The playbook database


@dataclass
class Database:
    """One database in NoETL's cluster that every `auth:` of the corpus names."""

    stack: noetl_stack.NoetlStack

    def create(self) -> None:
        pg = self.stack.pg
        pg.psql(f"CREATE ROLE {DATABASE} LOGIN PASSWORD '{DATABASE}'")
        pg.psql(f"CREATE DATABASE {DATABASE} OWNER {DATABASE}")

    @property
    def dsn(self) -> str:
        return self.stack.pg.dsn(DATABASE, user=DATABASE, password=DATABASE)

    def credential(self) -> dict[str, Any]:
        """The same database as a NoETL postgres credential (noetl/tools/postgres/auth.py reads
        `db_host`, `db_port`, `db_user`, `db_password`, `db_name`)."""
        pg = self.stack.pg
        return {
            "db_host": pg.host,
            "db_port": str(pg.port),
            "db_user": DATABASE,
            "db_password": DATABASE,
            "db_name": DATABASE,
        }

    def reset(self, setup: str) -> None:
        """An empty `public` schema, then the case's setup, as the playbooks' role. Open
        connections (NoETL's tool pool) stay valid: the database itself is kept."""
        sql = f"SET ROLE {DATABASE}; DROP SCHEMA public CASCADE; CREATE SCHEMA public; {setup}"
        self.stack.pg.psql(sql, database=DATABASE)


# --------------------------------------------------------------------------------------------
# NoETL


def run_noetl(stack: noetl_stack.NoetlStack, case: Case, database: Database) -> Outcome:
    shape = Shape.of(_document(case))
    outcome = Outcome(NO_END)
    for _ in range(case.noetl_attempts):
        outcome = _noetl_once(stack, case, database, shape)
        if outcome.status == "completed":
            break
    return outcome


def _noetl_once(
    stack: noetl_stack.NoetlStack, case: Case, database: Database, shape: Shape
) -> Outcome:
    database.reset(case.setup)
    with serving() as server, tempfile.TemporaryDirectory(prefix="noetl-case-") as folder:
        file, workload = _document_file(case, server, Path(folder))
        try:
            for child in case.children:
                stack.register(child)
            path = stack.register(file)
            execution = stack.start_execution(path, workload)
        except noetl_stack.NoetlError as error:
            return Outcome(REFUSED, note=str(error)[:CELL_CHARS_MAX])
        events = _events_to_quiet(stack, execution)
        requests = list(Handler.calls)
    return noetl_outcome(events, shape, execution=execution, requests=requests)


def _events_to_quiet(stack: noetl_stack.NoetlStack, execution: str) -> list[dict[str, Any]]:
    """The execution's events once it ended and settled, or went quiet without ending."""
    events: list[dict[str, Any]] = []
    started = last = time.monotonic()
    while time.monotonic() - started < EXECUTION_S_MAX:
        since = int(events[-1]["event_id"]) if events else None
        fresh = stack.events_after(execution, since)
        now = time.monotonic()
        if fresh:
            events += fresh
            last = now
        ended = any(e.get("event_type") in TERMINAL_EVENTS for e in events)
        if now - last > (SETTLE_S if ended else QUIET_S):
            break
        time.sleep(POLL_S)
    return events


# --------------------------------------------------------------------------------------------
# aos


def run_aos(case: Case, database: Database, folder: Path) -> Outcome:
    shape = Shape.of(_document(case))
    database.reset(case.setup)
    config = load_config(_tool_config(folder, database))
    with (
        serving() as server,
        tempfile.TemporaryDirectory(prefix="aos-conformance-", dir=folder) as scratch,
    ):
        file, workload = _document_file(case, server, Path(scratch))
        try:
            definition = load_flow(file.read_bytes(), source=str(case.file))
            children = [load_flow(c.read_bytes(), source=str(c)) for c in case.children]
        except FlowError as error:
            return Outcome(REFUSED, note=f"{error.code}: {error}"[:CELL_CHARS_MAX])
        world, keys = create_flow_world(Path(scratch) / "world", clock=CLOCK_MANUAL, sync=False)
        with world:
            adapters = LocalAdapters(world, keys, config=config, file_base=case.file.parent)
            try:
                for child in children:
                    ops.deploy(world, child)
                ops.deploy(world, definition)
                started = ops.start(
                    world, definition.name, workload=workload, exec_id=_exec_id(case)
                )
                adapters.drain()
                state = _dereferenced(world, cbor.to_json(ops.status(world, started.exec)))
            except AosError as error:
                return Outcome(f"error ({error.code})", note=str(error)[:CELL_CHARS_MAX])
        requests = list(Handler.calls)
    # A playbook's `{{ execution_id }}` is the execution's number (spec/12 §6).
    number = str(execution_number(started.exec))
    return aos_outcome(state, shape, execution=number, requests=requests)


def _exec_id(case: Case) -> str:
    """A fixed execution id per playbook: the ids of its intents, and so the order in which
    the in-process adapters settle parallel calls, are the same from run to run."""
    return "conformance-" + "".join(c if c.isalnum() else "-" for c in case.name)


def _dereferenced(world: World, value: Any) -> Any:
    """The value with every result stored by reference (`{"$ref": "blake3:...", "size"}`,
    spec/11 §7) read back from the world's CAS: what templates see, so what is compared."""
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith("blake3:"):
            blob = world.read_blob(ref)
            if blob is not None:
                return _dereferenced(world, cbor.to_json(cbor.decode(blob)))
        return {k: _dereferenced(world, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dereferenced(world, v) for v in value]
    return value


def _tool_config(folder: Path, database: Database) -> Path:
    """aos's tool config: every credential name a secret holding the playbook database's DSN."""
    secrets = folder / "secrets.yaml"
    secrets.write_text(json.dumps({name: database.dsn for name in CREDENTIALS}))
    config = folder / "tools.yaml"
    config.write_text(json.dumps({"keychain": {"file": secrets.name, "env_prefix": None}}))
    return config


def _document_file(case: Case, server: str, folder: Path) -> tuple[Path, dict[str, Any]]:
    """The file each side runs and the workload its run request carries. By default a case's
    workload is written into a copy of the playbook's own `workload` (the same copy for both
    sides): NoETL 2.13.1 loses a run request's workload at its first state reload (spec/12
    §11, `request-workload-lost`), which would hide every other difference of the playbook.
    A case with `workload_at_run` sends it with the run request instead, as a user would."""
    workload = case.bound_workload(server)
    if case.workload_at_run or not workload:
        return case.file, workload
    document = _document(case)
    document["workload"] = {**(document.get("workload") or {}), **workload}
    copy = folder / case.file.name
    copy.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return copy, {}


def _document(case: Case) -> dict[str, Any]:
    loaded = yaml.safe_load(case.file.read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, dict) else {}


# --------------------------------------------------------------------------------------------
# The table


@dataclass
class Row:
    case: Case
    noetl: Outcome
    aos: Outcome
    differences: list[Difference] = field(default_factory=list)
    verdict: expected.Verdict | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def same(self) -> str:
        if not self.differences and self.verdict is not None and self.verdict.ok:
            return "yes"
        if self.verdict is not None and self.verdict.ok:
            ids = sorted(set(self.verdict.explained.values()))
            return "expected: " + ", ".join(ids)
        return "NO"

    def as_json(self) -> dict[str, Any]:
        verdict = self.verdict
        return {
            "playbook": self.case.name,
            "file": str(self.case.file.relative_to(REPO.parent)),
            "origin": self.case.origin,
            "same": self.same,
            "noetl": self.noetl.as_json(),
            "aos": self.aos.as_json(),
            "differences": [
                {"part": d.part, "noetl": d.noetl, "aos": d.aos} for d in self.differences
            ],
            "explained": verdict.explained if verdict else {},
            "unexpected": [d.part for d in verdict.unexpected] if verdict else [],
            "stale": verdict.stale if verdict else [],
            "seconds": self.seconds,
        }


def _status_cell(outcome: Outcome) -> str:
    steps = sum(1 for v in outcome.steps.values() if v is not None) if outcome.steps else 0
    return f"{outcome.status} ({len(outcome.steps)} steps, {steps} with results)"


def table(rows: list[Row]) -> str:
    lines = ["| playbook | NoETL | aos | same? |", "|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {row.case.name} | {_status_cell(row.noetl)} | {_status_cell(row.aos)} "
            f"| {row.same} |"
        )
    return "\n".join(lines)


def details(rows: list[Row]) -> str:
    """Each difference the list does not explain, and each expected one not seen."""
    lines: list[str] = []
    for row in rows:
        verdict = row.verdict
        if verdict is None or verdict.ok:
            continue
        lines.append(f"\n{row.case.name} ({row.case.file.name}):")
        for difference in verdict.unexpected:
            lines.append(f"  {difference.part}:")
            lines.append(f"    NoETL {_short(difference.noetl)}")
            lines.append(f"    aos   {_short(difference.aos)}")
        for part in verdict.stale:
            lines.append(f"  {part}: listed as differing, but the same")
        for side, outcome in (("NoETL", row.noetl), ("aos", row.aos)):
            if outcome.note:
                lines.append(f"  ({side}: {outcome.note})")
    return "\n".join(lines)


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= CELL_CHARS_MAX else text[:CELL_CHARS_MAX] + "..."


# --------------------------------------------------------------------------------------------
# Main


@contextmanager
def _stack() -> Iterator[tuple[noetl_stack.NoetlStack, Database]]:
    why = noetl_stack.unavailable()
    if why is not None:
        raise SystemExit(f"conformance-noetl: {why}")
    with noetl_stack.NoetlStack.start() as stack:
        stack.wait_for_worker()
        database = Database(stack)
        database.create()
        for name in CREDENTIALS:
            stack.put_credential(name, "postgres", database.credential())
        yield stack, database


def run_case(stack: noetl_stack.NoetlStack, database: Database, case: Case, folder: Path) -> Row:
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    noetl = _guarded(lambda: run_noetl(stack, case, database))
    seconds["noetl"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    aos = _guarded(lambda: run_aos(case, database, folder))
    seconds["aos"] = round(time.perf_counter() - started, 2)
    differences = compare(mask(noetl, case.volatile), mask(aos, case.volatile))
    verdict = expected.judge(expected.load(), case.name, differences)
    return Row(case, noetl, aos, differences, verdict, seconds)


def _guarded(run: Any) -> Outcome:
    """The side's outcome, or `harness error` with the traceback's last line: one playbook
    that breaks the harness must not hide the others' rows."""
    try:
        outcome: Outcome = run()
    except Exception as error:  # reported in the row, and the run fails
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        return Outcome("harness error", note=last[:CELL_CHARS_MAX])
    return outcome


def _keep(folder: Path, row: Row) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    raw = {"noetl": row.noetl.raw, "aos": row.aos.raw}
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in row.case.name)
    (folder / f"{name}.json").write_text(json.dumps(raw, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="a playbook's name")
    parser.add_argument("--quick", action="store_true", help="the CI slice (cases.QUICK)")
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"[{RESULTS}]")
    parser.add_argument(
        "--keep", type=Path, default=None, help="a folder for each side's raw answers and the logs"
    )
    options = parser.parse_args(argv)
    wanted = set(options.only) | (set(QUICK) if options.quick else set())
    chosen = [c for c in CASES if not wanted or c.name in wanted]
    if not chosen:
        parser.error(f"no playbook named {options.only}")
    started = time.perf_counter()
    rows: list[Row] = []
    with _stack() as (stack, database), tempfile.TemporaryDirectory() as folder:
        for case in chosen:
            rows.append(run_case(stack, database, case, Path(folder)))
            print(f"# {case.name}: {rows[-1].same} {rows[-1].seconds}", file=sys.stderr)
            if options.keep is not None:
                _keep(options.keep, rows[-1])
        versions = dict(stack.versions)
        if options.keep is not None:
            for process in stack.processes:
                shutil.copy(process.log, options.keep / f"{process.name}.log")
    print(table(rows))
    print(details(rows))
    failed = [row.case.name for row in rows if row.same == "NO"]
    report = {
        "versions": versions,
        "seconds": round(time.perf_counter() - started, 1),
        "playbooks": len(rows),
        "same": sum(1 for row in rows if row.same == "yes"),
        "expected": sum(1 for row in rows if row.same.startswith("expected")),
        "failed": failed,
        "rows": [row.as_json() for row in rows],
    }
    options.json.parent.mkdir(parents=True, exist_ok=True)
    options.json.write_text(json.dumps(report, indent=1, sort_keys=False, default=str) + "\n")
    print(f"\n{len(rows)} playbooks, {len(failed)} differ unexpectedly; {options.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
