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
from aos.kernel.world.records import RecordMap
from aos.kernel.world.trace import JournalView

EXPLAIN_RECORDS_MAX = 100_000
"""Most records one explanation reads looking back for a fault or forward for deliveries."""

# What a delivery of an input leaves in the journal, and which of those are problems.
Delivery = records.StepRecord | records.StepFaultRecord | records.DeliveryDropped
Problem = records.StepFaultRecord | records.DeliveryDropped


@dataclass(frozen=True)
class Explanation:
    """A record and what explains it. `cause` is the input a delivery came from; `fault` the
    step fault that failed the cell a dropped delivery reached; `problems` the faults and
    drops among an input's deliveries."""

    seq: int
    record: RecordMap
    cause: tuple[int, RecordMap] | None = None
    fault: tuple[int, RecordMap] | None = None
    problems: list[tuple[int, RecordMap]] = field(default_factory=list)


def explain(journal: JournalView, seq: int, *, limit: int = EXPLAIN_RECORDS_MAX) -> Explanation:
    record = record_at(journal, seq)
    typed = records.parse(record)
    if isinstance(typed, Delivery):
        cause = _optional_record(journal, typed.input_seq)
        fault = (
            _failing_fault(journal, seq, typed, limit)
            if isinstance(typed, records.DeliveryDropped)
            else None
        )
        return Explanation(seq, record, cause=cause, fault=fault)
    return Explanation(seq, record, problems=problems_of(journal, seq, seq + limit))


def problems_of(journal: JournalView, input_seq: int, last_seq: int) -> list[tuple[int, RecordMap]]:
    """The faults and drops among the deliveries of the input at `input_seq`, up to `last_seq`."""
    found: list[tuple[int, RecordMap]] = []
    for seq, value in journal.read(input_seq + 1, last_seq):
        typed = records.parse(value)
        if isinstance(typed, Problem) and typed.input_seq == input_seq:
            found.append((seq, _as_record(value)))
    return found


def record_at(journal: JournalView, seq: int) -> RecordMap:
    for _, value in journal.read(seq, seq):
        return _as_record(value)
    raise NotFoundError(f"no record at seq {seq} (the journal is at {journal.head()})", seq=seq)


def _optional_record(journal: JournalView, seq: int) -> tuple[int, RecordMap] | None:
    return (seq, record_at(journal, seq)) if seq >= 1 else None


def _failing_fault(
    journal: JournalView, seq: int, dropped: records.DeliveryDropped, limit: int
) -> tuple[int, RecordMap] | None:
    """The last step fault of the dropped delivery's cell before it."""
    found: tuple[int, RecordMap] | None = None
    for at, value in journal.read(max(1, seq - limit), seq - 1):
        typed = records.parse(value)
        if not isinstance(typed, records.StepFaultRecord):
            continue
        if (typed.workflow, typed.key) == (dropped.workflow, dropped.key):
            found = (at, _as_record(value))
    return found


def _as_record(value: cbor.Value) -> RecordMap:
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def run_problems(journal: JournalView, first: int, last: int) -> list[dict[str, Any]]:
    """The step faults and dropped deliveries journaled from `first` to `last` (a run's
    records), in order, each as `{seq, kind, workflow, key, input, code?, message?, reason?}`
    with its key decoded to JSON."""
    found: list[dict[str, Any]] = []
    for seq, value in journal.read(first, last) if first <= last else ():
        record = records.parse(value)
        if not isinstance(record, Problem):
            continue
        key = record.key
        problem = {
            "seq": seq,
            "kind": record.kind,
            "workflow": record.workflow,
            "key": cbor.to_json(cbor.decode(key)) if key else None,
            "input": record.input_seq,
        }
        if isinstance(record, records.StepFaultRecord):
            problem.update(code=record.code, message=record.message)
        else:
            problem["reason"] = record.reason
        found.append(problem)
    return found
