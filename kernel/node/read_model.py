"""The node's read layer (spec/04-effects.md §9.4): every query the HTTP read API and the web
inspector show, written once over a `World`.

Each function is a pure read that runs on the node's host thread (the world's one writer, so
it sees a consistent world) and returns JSON-ready values (bytes as `{"$bytes": hex}`). Every
one is bounded: a page holds at most `rows_max` rows and a journal scan reads at most
`scan_max` records, after which it answers the cursor to continue from. Paging is by key, never
by offset: journal pages by sequence number (`before` for newest first, `from` for oldest
first), cells by key hash, intents by intent hash. A bad parameter is `query.invalid` (400)
and reads nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aos.kernel import cbor
from aos.kernel.audit import replay
from aos.kernel.hashing import hash_bytes, is_hash
from aos.kernel.node.errors import NodeLimitExceededError, QueryInvalidError
from aos.kernel.node.human import task_fields
from aos.kernel.signing.signatures import verify_body
from aos.kernel.store.views import read_back
from aos.kernel.world import records
from aos.kernel.world.cellindex import key_hash
from aos.kernel.world.cells import STATUS_FAILED
from aos.kernel.world.errors import CellMissingError
from aos.kernel.world.state_status import state_status
from aos.kernel.world.trace import Trace, trace
from aos.kernel.world.world import CellInfo, World

JOURNAL_ROWS_DEFAULT = 100
CELLS_ROWS_DEFAULT = 1000
ROWS_DEFAULT = 50
"""Rows of any other page when the request names no `limit`."""

CELL_STATUSES = ("running", "waiting", "completed", "failed")
FAILED_KINDS = frozenset(
    {
        records.STEP_FAULT,
        records.DELIVERY_DROPPED,
        records.INGRESS_REJECTED,
        records.RECEIPT_REJECTED,
    }
)
"""What "failed only" keeps: every record of something the world refused or could not do."""
_CELL_KINDS = frozenset({records.STEP, records.STEP_FAULT, records.DELIVERY_DROPPED})
_KEY_HASH = re.compile(r"[0-9a-f]{64}")

SIGNATURE_VERIFIED = "verified"
SIGNATURE_INVALID = "invalid"
SIGNATURE_UNSIGNED = "unsigned"
SIGNATURE_ADAPTER_UNKNOWN = "adapter_unknown"


@dataclass(frozen=True)
class JournalCursor:
    """Where a journal page goes on: oldest first from `from_seq`, or newest first below
    `before` (below the head when both are None)."""

    from_seq: int | None
    before: int | None


@dataclass(frozen=True)
class Bounds:
    """How much one read may return and read: `rows_max` rows per page, `scan_max` journal
    records per scan, `value_bytes_max` bytes of one shown value (a larger one is shown by
    size and hash)."""

    rows_max: int
    scan_max: int
    value_bytes_max: int


@dataclass(frozen=True)
class CellRef:
    """A cell named by its workflow and its key value (None for an unkeyed workflow)."""

    workflow: str
    key: Any = None


FailureOf = Callable[[dict[str, Any]], bool]
DERIVED_STATUS_CELLS_MAX = 2_000
"""Cells the overview looks at to count a derived status's failures (each one's state read and
decoded, ~42 µs): a bound on how long it holds the world's writer."""


def cell_status_of(world: World, cell: CellInfo) -> str:
    """A cell's status as the node's reads say it: `failed` when the kernel says so, else
    what its state says, for a workflow whose layer reads its cells' states
    (`state_status.status_from_state`: flows say an execution's status, flows/serve/cell_status.py),
    else the kernel's. Where the kernel sees an execution that waits on an intent, this says
    `running`; the kernel's own `status` is answered beside it (`/v1/cell` `kernel_status`)."""
    reader = state_status(cell.workflow)
    if reader is None or cell.status == STATUS_FAILED:
        return cell.status
    return reader(world.reader.state(cell.workflow, cell.key)) or cell.status


@dataclass(eq=False)  # one per node, compared by identity
class Derived:
    """Journal records a layer served beside the kernel says are failures the kernel did not
    see (a step that ended an execution failed), so that every read of the node says it too
    (flows register theirs, aos.flows.serve.execution_views)."""

    failures: list[FailureOf] = field(default_factory=list)

    def is_failure(self, record: dict[str, Any]) -> bool:
        return any(failure(record) for failure in self.failures)


NOTHING_DERIVED = Derived()


# --------------------------------------------------------------------------------------------
# Parameters


def rows(limit: int | None, bounds: Bounds, default: int = ROWS_DEFAULT) -> int:
    """A page size: `default` (at most rows_max), or `limit` when 1 <= limit <= rows_max."""
    if limit is None:
        return min(default, bounds.rows_max)
    if limit < 1:
        raise QueryInvalidError(f"limit is {limit}; it is at least 1", path="$.limit")
    if limit > bounds.rows_max:
        raise NodeLimitExceededError(
            f"limit is {limit}; this node allows at most {bounds.rows_max}",
            path="$.limit",
            limit=bounds.rows_max,
            value=limit,
        )
    return limit


def kinds_of(names: list[str]) -> frozenset[str]:
    for index, name in enumerate(names):
        if name not in records.KINDS:
            raise QueryInvalidError(
                f"kind {name!r} is not one of {', '.join(records.KINDS)}",
                path=f"$.kind[{index}]",
            )
    return frozenset(names)


def sequence(value: int | None, name: str) -> int | None:
    if value is not None and value < 1:
        raise QueryInvalidError(f"{name} is a journal sequence number (>= 1)", path=f"$.{name}")
    return value


def cell_status(value: str | None) -> str | None:
    if value is not None and value not in CELL_STATUSES:
        raise QueryInvalidError(
            f"status is one of {', '.join(CELL_STATUSES)}", path="$.status", status=value
        )
    return value


def key_value(text: str | None) -> Any:
    """A cell key given as JSON text (None: no key)."""
    if text is None:
        return None
    import json

    try:
        parsed = json.loads(text, parse_constant=_no_constant)
    except (json.JSONDecodeError, RecursionError):
        raise QueryInvalidError("the key is not JSON", path="$.key") from None
    return cbor.from_json(parsed, "$.key")


def _no_constant(name: str) -> Any:
    raise QueryInvalidError(f"{name} is not JSON", path="$.key")


# --------------------------------------------------------------------------------------------
# The world


def overview(world: World, *, bounded_failures: bool = False) -> dict[str, Any]:
    """Height, manifest, clock, cells and failures per workflow, open intents, proposals. A
    workflow whose cells' states say their status (`cell_status_of`) counts its failures among
    at most `DERIVED_STATUS_CELLS_MAX` cells (`failed_counted`: how many were looked at),
    with `bounded_failures` (the read API's and the inspector's overview; `GET /v1/world` and
    the metrics answer the kernel's counts)."""
    status = world.reader.status()
    for name, counts in status["workflows"].items():
        if bounded_failures and state_status(name) is not None:
            counts.update(_derived_failures(world, name))
    by_status: dict[str, int] = {}
    for entry in world.proposals.values():
        by_status[entry["status"]] = by_status.get(entry["status"], 0) + 1
    return {
        "world_id": world.world_id,
        "manifest": status["manifest"],
        "height": status["height"],
        "logical_ns": status["logical_ns"],
        "clock": status["clock"],
        "workflows": status["workflows"],
        "open_intents": status["open_intents"],
        "queued": status["queued"],
        "proposals": dict(sorted(by_status.items())),
    }


def _derived_failures(world: World, workflow: str) -> dict[str, int]:
    failed = counted = 0
    for counted, cell in enumerate(world.reader.cells_after(workflow, None), start=1):
        failed += cell_status_of(world, cell) == STATUS_FAILED
        if counted == DERIVED_STATUS_CELLS_MAX:
            break
    return {"failed": failed, "failed_counted": counted}


# --------------------------------------------------------------------------------------------
# Cells


def cells(
    world: World,
    workflow: str,
    *,
    status: str | None,
    after: str | None,
    limit: int,
    scan_max: int,
) -> dict[str, Any]:
    """A workflow's cells in key-hash order, only those with `status` when given, from the one
    after the key hash `after`. `next_after` continues (null: this is the last page). Reads
    only the cells it looks at: at most `limit` shown and `scan_max` looked at (a status
    filter that matches few cells stops there, `truncated`, with `next_after` the last cell
    looked at). A cell's status is `cell_status_of`'s."""
    if after is not None and not _KEY_HASH.fullmatch(after):
        raise QueryInvalidError("after is a cell's key hash (64 hex digits)", path="$.after")
    count = world.reader.cell_count(workflow)  # raises world.workflow_unknown
    page: list[dict[str, Any]] = []
    next_after: str | None = None
    looked_at = after
    found = world.reader.cells_after(workflow, bytes.fromhex(after) if after else None)
    for scanned, cell in enumerate(found):
        if len(page) == limit or scanned == scan_max:
            # There is more: go on after the last cell shown, or the last one looked at.
            next_after = page[-1]["key_hash"] if len(page) == limit else looked_at
            break
        looked_at = _key_digest(cell)
        shown = cell_json(cell, cell_status_of(world, cell))
        if not status or shown["status"] == status:
            page.append({**shown, "key_hash": looked_at})
    return {
        "workflow": workflow,
        "count": count,
        "truncated": next_after is not None,
        "cells": page,
        "next_after": next_after,
    }


def _key_digest(cell: CellInfo) -> str:
    return key_hash(cell.key_bytes or b"").hex()


def cell_json(cell: CellInfo, status: str | None = None) -> dict[str, Any]:
    return {
        "key": cbor.to_json(cell.key),
        "status": cell.status if status is None else status,
        "state_hash": str(cell.state_hash),
        "last_active_seq": cell.last_active_seq,
    }


def cell(world: World, ref: CellRef, bounds: Bounds) -> dict[str, Any]:
    """One cell: status (`cell_status_of`), state (bounded), state hash, last active sequence,
    and the kernel's own status."""
    info = world.reader.cell_info(ref.workflow, world.reader.key_bytes(ref.workflow, ref.key))
    if info is None:
        raise CellMissingError(f"{ref.workflow} has no cell for that key")
    return {
        "workflow": ref.workflow,
        **cell_json(info, cell_status_of(world, info)),
        "kernel_status": info.status,
        "state": shown(world.reader.state(ref.workflow, ref.key), bounds),
    }


def shown(value: Any, bounds: Bounds) -> dict[str, Any]:
    """A value as JSON when it fits `value_bytes_max` encoded, else only its size and hash."""
    data = cbor.encode(value)
    if len(data) > bounds.value_bytes_max:
        return {"bytes": len(data), "hash": str(hash_bytes(data)), "value": None, "cut": True}
    return {"bytes": len(data), "value": cbor.to_json(value), "cut": False}


def timeline(
    world: World, ref: CellRef, *, before: int | None, limit: int, bounds: Bounds
) -> dict[str, Any]:
    """A cell's records newest first (its steps, faults, dropped deliveries and the intents it
    emitted), each step with the input it took (an event, or a receipt with its signature
    status). Scans back from `before` (default: past the head) at most `scan_max` records;
    `next_before` continues (null: the journal's start was reached)."""
    key_bytes = world.reader.key_bytes(ref.workflow, ref.key)

    def mine(record: dict[str, Any]) -> bool:
        kind = record.get("kind")
        if kind in _CELL_KINDS:
            return bool(record["workflow"] == ref.workflow and record["key"] == key_bytes)
        if kind == records.EFFECT_INTENT:
            origin = record["origin"]
            return bool(origin["workflow"] == ref.workflow and origin["key"] == key_bytes)
        return False

    found, next_before, scanned = _scan_back(world, before, limit, bounds.scan_max, mine)
    entries = [_timeline_entry(world, seq, record) for seq, record in found]
    return {
        "workflow": ref.workflow,
        "key": cbor.to_json(ref.key),
        "entries": entries,
        "next_before": next_before,
        "scanned": scanned,
    }


def _timeline_entry(world: World, seq: int, record: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "seq": seq,
        "kind": record["kind"],
        "record": cbor.to_json(record),
        "input": None,
    }
    input_seq = record.get("input")
    if isinstance(input_seq, int):
        taken = record_at(world, input_seq)
        entry["input"] = {"seq": input_seq, "kind": taken["kind"], "record": cbor.to_json(taken)}
        if taken["kind"] == records.EFFECT_RECEIPT:
            entry["input"]["signature"] = signature_status(world, taken)
    return entry


def signature_status(world: World, receipt_record: dict[str, Any]) -> str:
    """Whether an `effect_receipt` record's signature verifies with its adapter's key in the
    world's current manifest (`unsigned`: a kernel timer's receipt)."""
    signature = receipt_record.get("signature")
    if signature is None:
        return SIGNATURE_UNSIGNED
    body = receipt_record["body"]
    adapter = world.runtime.adapters.get(str(body.get("adapter")))
    if adapter is None:
        return SIGNATURE_ADAPTER_UNKNOWN
    if verify_body(adapter.public_key_bytes, body, bytes(signature)):
        return SIGNATURE_VERIFIED
    return SIGNATURE_INVALID


def state_at(world: World, seq: int, bounds: Bounds, *, replay_records_max: int) -> dict[str, Any]:
    """The state a step record left its cell in: from the store while it still has it, else
    rebuilt by a checked replay from the latest snapshot before it (superseded states are
    reclaimed), when that replays at most `replay_records_max` records (`replay.too_long`)."""
    record = record_at(world, seq)
    if record["kind"] != records.STEP:
        raise QueryInvalidError(f"record {seq} is a {record['kind']}, not a step", path="$.seq")
    state_hash = record["state"]
    body: dict[str, Any] = {
        "seq": seq,
        "workflow": record["workflow"],
        "key": cbor.to_json(cbor.decode(record["key"]) if record["key"] else None),
        "state_hash": state_hash,
        "stored": True,
        "replayed": 0,
        "state": shown(None, bounds),
    }
    if state_hash is None:
        return body
    data = world.read_blob(str(state_hash))
    if data is not None:
        body["state"] = shown(cbor.decode(data) if data else None, bounds)
        return body
    rebuilt = replay.state_after(
        world.store, seq, engine=world.engine, records_max=replay_records_max
    )
    body.update(stored=False, replayed=rebuilt.replayed, state=shown(rebuilt.state, bounds))
    return body


# --------------------------------------------------------------------------------------------
# The journal


@dataclass(frozen=True)
class JournalFilter:
    """Which records a journal page keeps: of these kinds (none: all), of this cell's (or, with
    `workflow` alone, of any cell of that workflow), only failures (the kernel's, and those
    `derived` names)."""

    kinds: frozenset[str] = frozenset()
    cell: CellRef | None = None
    failed: bool = False
    workflow: str | None = None
    derived: Derived = NOTHING_DERIVED  # with `failed`: the failures it names too


def journal(
    world: World,
    *,
    from_seq: int | None,
    before: int | None,
    limit: int,
    where: JournalFilter,
    bounds: Bounds,
) -> dict[str, Any]:
    """A page of records that pass `where`: oldest first from `from_seq` (`next_seq`
    continues), or newest first below `before` (`next_before` continues; the default when
    neither is given, from the head)."""
    if from_seq is not None and before is not None:
        raise QueryInvalidError("give from or before, not both", path="$.before")
    wanted = _matcher(world, where)
    head = world.store.journal.head()
    if from_seq is not None:
        found, next_seq, scanned = _scan_forward(world, from_seq, limit, bounds.scan_max, wanted)
        return {
            "head": head,
            "records": [{"seq": seq, "record": cbor.to_json(r)} for seq, r in found],
            "next_seq": next_seq,
            "next_before": None,
            "scanned": scanned,
        }
    found, next_before, scanned = _scan_back(world, before, limit, bounds.scan_max, wanted)
    return {
        "head": head,
        "records": [{"seq": seq, "record": cbor.to_json(r)} for seq, r in found],
        "next_seq": None,
        "next_before": next_before,
        "scanned": scanned,
    }


def _matcher(world: World, where: JournalFilter) -> Callable[[dict[str, Any]], bool]:
    key_bytes = (
        world.reader.key_bytes(where.cell.workflow, where.cell.key)
        if where.cell is not None
        else None
    )

    def wanted(record: dict[str, Any]) -> bool:
        kind = record.get("kind")
        if where.kinds and kind not in where.kinds:
            return False
        if where.failed and kind not in FAILED_KINDS and not where.derived.is_failure(record):
            return False
        if where.cell is None and where.workflow is None:
            return True
        origin = record.get("origin") if kind == records.EFFECT_INTENT else record
        if not isinstance(origin, dict) or "workflow" not in origin:
            return False
        if where.cell is None:
            return bool(origin["workflow"] == where.workflow)
        return bool(origin["workflow"] == where.cell.workflow and origin["key"] == key_bytes)

    return wanted


Scan = tuple[list[tuple[int, dict[str, Any]]], int | None, int]


def _scan_forward(
    world: World, from_seq: int, limit: int, scan_max: int, wanted: Callable[[Any], bool]
) -> Scan:
    journal = world.store.journal
    found: list[tuple[int, dict[str, Any]]] = []
    next_seq = from_seq
    scanned = 0
    for seq, value in journal.read(from_seq, limit=scan_max):
        scanned += 1
        next_seq = seq + 1
        record = _record(value)
        if wanted(record):
            found.append((seq, record))
            if len(found) == limit:
                break
    return found, next_seq, scanned


def _scan_back(
    world: World,
    before: int | None,
    limit: int,
    scan_max: int,
    wanted: Callable[[dict[str, Any]], bool],
) -> Scan:
    """Newest first below `before`; the cursor is the last sequence looked at (null: the
    journal's start was reached)."""
    head = world.store.journal.head()
    top = head if before is None else min(before - 1, head)
    found: list[tuple[int, dict[str, Any]]] = []
    scanned = 0
    lowest = top + 1
    for seq, record in _backwards(world, top, scan_max):
        scanned += 1
        lowest = seq
        if wanted(record):
            found.append((seq, record))
            if len(found) == limit:
                break
    return found, (lowest if lowest > 1 else None), scanned


def _backwards(world: World, top: int, scan_max: int) -> Iterator[tuple[int, dict[str, Any]]]:
    for seq, value in read_back(world.store.journal, top, records_max=scan_max):
        yield seq, _record(value)


def record_at(world: World, seq: int) -> dict[str, Any]:
    head = world.store.journal.head()
    if seq < 1 or seq > head:
        raise QueryInvalidError(f"the journal has records 1 to {head}, not {seq}", path="$.seq")
    return _record(next(iter(world.store.journal.read(seq, seq)))[1])


def _record(value: Any) -> dict[str, Any]:
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {"kind": "?"}


def traced(world: World, target: str, bounds: Bounds, from_seq: int = 1) -> dict[str, Any]:
    """What the record (or intent) with hash `target` came from and caused (trace.py),
    searching from `from_seq` (a record's own sequence finds it at once)."""
    if not is_hash(target):
        raise QueryInvalidError("a trace names a record or intent hash (blake3:...)", path="$.hash")
    return trace_json(trace(world.store.journal, target, limit=bounds.scan_max, from_seq=from_seq))


def trace_json(found: Trace) -> dict[str, Any]:
    return {
        "target": str(found.target),
        "match": found.match,
        "seq": found.seq,
        "scanned": found.scanned,
        "truncated": found.truncated,
        "entries": [
            {
                "seq": e.seq,
                "role": e.role,
                "depth": e.depth,
                "parent": e.parent,
                "record": cbor.to_json(e.record),
            }
            for e in found.entries
        ],
    }


# --------------------------------------------------------------------------------------------
# Intents and governance


def open_intents(
    world: World, leased: Callable[[str], bool], *, after: str | None, limit: int
) -> dict[str, Any]:
    """Open intents in intent-hash order from the one after `after`, each with its origin
    cell, effect and whether an adapter holds it under a lease now."""
    if after is not None and not is_hash(after):
        raise QueryInvalidError("after is an intent hash (blake3:...)", path="$.after")
    everything = world.reader.open_intents()
    page = [i for i in everything if after is None or i["intent"] > after][: limit + 1]
    more = len(page) > limit
    page = page[:limit]
    return {
        "count": len(everything),
        "intents": [
            {
                "intent": i["intent"],
                "effect": i["effect"],
                "workflow": i["workflow"],
                "key": cbor.to_json(cbor.decode(i["key"]) if i["key"] else None),
                "seq": i["seq"],
                "issuer_ref": i["issuer_ref"],
                "due_ns": i["due_ns"],
                "leased": leased(i["intent"]),
            }
            for i in page
        ],
        "next_after": page[-1]["intent"] if more else None,
    }


def task_shown(intent: str, effect: str, params: Any) -> dict[str, Any] | None:
    """A person's task as the pages show it beside its intent (None: its params name no
    title, so it is no task): shaped as the task answers are (`intent`, `effect`, `params`
    and the fields from them), so that redaction treats it as one (redaction.py)."""
    fields = task_fields(params)
    if fields.title is None:
        return None
    return {
        "intent": intent,
        "effect": effect,
        "params": cbor.to_json(params),
        "title": fields.title,
        "description": fields.description,
        "assignee": fields.assignee,
        "roles": list(fields.roles),
        "form": cbor.to_json(fields.form),
    }


def proposals(world: World) -> dict[str, Any]:
    """Every proposal, newest first, with whether its shadow is still current."""
    listed = [
        proposal_entry(world, proposal, entry)
        for proposal, entry in sorted(world.proposals.items(), key=lambda p: -int(p[1]["seq"]))
    ]
    return {"manifest": str(world.manifest_hash), "proposals": listed}


def proposal_entry(world: World, proposal: str, entry: dict[str, Any]) -> dict[str, Any]:
    shadowed = entry["shadow"]
    current = shadowed is not None and shadowed["state_height"] == world.state_height
    return {"proposal": proposal, **cbor.to_json(entry), "shadow_current": current}


def proposal(world: World, proposal_id: str) -> dict[str, Any]:
    """One proposal with its patch and its stored shadow report (null before a shadow)."""
    entry = world.proposals.get(proposal_id)
    if entry is None:
        from aos.kernel.governance.proposals import GovUnknownProposalError

        raise GovUnknownProposalError(f"no proposal {proposal_id}")
    body = proposal_entry(world, proposal_id, entry)
    body["patch"] = cbor.to_json(cbor.decode(world.read_blob(proposal_id) or cbor.encode(None)))
    shadowed = entry["shadow"]
    report = world.read_blob(str(shadowed["report"])) if shadowed else None
    body["report"] = cbor.to_json(cbor.decode(report)) if report else None
    return body


def cell_ref(world: World, workflow: str, key_text: str | None) -> CellRef:
    """A cell named by a workflow and its key as JSON text, checked against the manifest."""
    definition = world.runtime.workflow(workflow)  # raises world.workflow_unknown
    key = key_value(key_text)
    if definition.key_schema is None and key is not None:
        raise QueryInvalidError(f"{workflow} is not keyed; leave the key out", path="$.key")
    if definition.key_schema is not None and key is None:
        raise QueryInvalidError(f"{workflow} is keyed; name the key", path="$.key")
    return CellRef(workflow, key)
