"""Why something went wrong, from the journal: what a faulted step, a dropped delivery or a
refused input was, and what happened to each delivery of an input.

    found = explain(store.journal, seq)        # the record, its input, the fault behind it
    found.problems                             # faults and drops among an input's deliveries

A `step_fault` names its input and, for a workflow that raised, the exception (`guest`); a
`delivery_dropped` reached a failed cell, so the explanation also finds the fault that
failed that cell, searching back at most `EXPLAIN_RECORDS_MAX` records. For an input (an
event from outside, a receipt, an operation) it lists its deliveries' faults and drops,
searching forward as far. Pure: it only reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aos.kernel import cbor
from aos.kernel.world import records
from aos.kernel.world.errors import NotFoundError
from aos.kernel.world.trace import JournalView

EXPLAIN_RECORDS_MAX = 100_000
"""Most records one explanation reads looking back for a fault or forward for deliveries."""

PROBLEM_KINDS = frozenset({records.STEP_FAULT, records.DELIVERY_DROPPED})


@dataclass(frozen=True)
class Explanation:
    """A record and what explains it. `cause` is the input a delivery came from; `fault` the
    step fault that failed the cell a dropped delivery reached; `problems` the faults and
    drops among an input's deliveries."""

    seq: int
    record: dict[str, Any]
    cause: tuple[int, dict[str, Any]] | None = None
    fault: tuple[int, dict[str, Any]] | None = None
    problems: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


def explain(journal: JournalView, seq: int, *, limit: int = EXPLAIN_RECORDS_MAX) -> Explanation:
    record = record_at(journal, seq)
    kind = record.get("kind")
    if kind in PROBLEM_KINDS or kind == records.STEP:
        cause = _optional_record(journal, record.get("input"))
        fault = (
            _failing_fault(journal, seq, record, limit)
            if kind == records.DELIVERY_DROPPED
            else None
        )
        return Explanation(seq, record, cause=cause, fault=fault)
    return Explanation(seq, record, problems=problems_of(journal, seq, seq + limit))


def problems_of(
    journal: JournalView, input_seq: int, last_seq: int
) -> list[tuple[int, dict[str, Any]]]:
    """The faults and drops among the deliveries of the input at `input_seq`, up to `last_seq`."""
    found: list[tuple[int, dict[str, Any]]] = []
    for seq, value in journal.read(input_seq + 1, last_seq):
        record = _as_record(value)
        if record.get("kind") in PROBLEM_KINDS and record.get("input") == input_seq:
            found.append((seq, record))
    return found


def record_at(journal: JournalView, seq: int) -> dict[str, Any]:
    for _, value in journal.read(seq, seq):
        return _as_record(value)
    raise NotFoundError(f"no record at seq {seq} (the journal is at {journal.head()})", seq=seq)


def _optional_record(journal: JournalView, seq: Any) -> tuple[int, dict[str, Any]] | None:
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        return None
    return seq, record_at(journal, seq)


def _failing_fault(
    journal: JournalView, seq: int, dropped: dict[str, Any], limit: int
) -> tuple[int, dict[str, Any]] | None:
    """The last step fault of the dropped delivery's cell before it."""
    cell = (dropped.get("workflow"), cbor.encode(dropped.get("key")))
    found: tuple[int, dict[str, Any]] | None = None
    for at, value in journal.read(max(1, seq - limit), seq - 1):
        record = _as_record(value)
        if record.get("kind") != records.STEP_FAULT:
            continue
        if (record.get("workflow"), cbor.encode(record.get("key"))) == cell:
            found = (at, record)
    return found


def _as_record(value: cbor.Value) -> dict[str, Any]:
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def run_problems(journal: JournalView, first: int, last: int) -> list[dict[str, Any]]:
    """The step faults and dropped deliveries journaled from `first` to `last` (a run's
    records), in order, each as `{seq, kind, workflow, key, input, code?, message?, reason?}`
    with its key decoded to JSON."""
    found: list[dict[str, Any]] = []
    for seq, record in journal.read(first, last) if first <= last else ():
        if not isinstance(record, dict) or record.get("kind") not in PROBLEM_KINDS:
            continue
        key = record.get("key")
        problem = {
            "seq": seq,
            "kind": record["kind"],
            "workflow": record["workflow"],
            "key": cbor.to_json(cbor.decode(key)) if isinstance(key, bytes) and key else None,
            "input": record["input"],
        }
        if record["kind"] == records.STEP_FAULT:
            problem.update(code=record["code"], message=record["message"])
        else:
            problem["reason"] = record["reason"]
        found.append(problem)
    return found
