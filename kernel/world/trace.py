"""What an input caused: the records that follow from one journal record, step by step.

A trace starts at one record, named by its hash (the `hash_value` of the record, which is what
`World.ingress` returns as the event hash) or, for an `effect_intent` record, by its intent
hash. It then follows the journal forward, taking every record caused by one already taken:

    step, step_fault, delivery_dropped     whose `input` is taken (a delivery of it)
    domain_event, effect_intent            whose `cause` is taken (a step's output)
    any other record naming an intent      whose `intent` was taken (a receipt, later)

Causes always precede their consequences in the journal, so one forward pass finds them all.
For an intent the trace also walks back to where it came from (intent -> step -> input ->
... -> the input from outside) by following `cause` and `input`.

The scan is bounded: at most `limit` records are read (`TRACE_RECORDS_MAX_DEFAULT`), and the
result says when the bound stopped it before the journal's head. Pure: it only reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

from aos.kernel import cbor
from aos.kernel.errors import InvalidInputError
from aos.kernel.hashing import Hash, hash_value
from aos.kernel.world import records
from aos.kernel.world.errors import NotFoundError, WorldCorruptError
from aos.kernel.world.records import RecordMap

TRACE_RECORDS_MAX_DEFAULT = 100_000
"""Most journal records one trace reads (the search, the walk back and the forward scan)."""

ROLE_ORIGIN = "origin"
ROLE_TARGET = "target"
ROLE_CAUSED = "caused"

Match = Literal["record", "intent"]

# Records a delivery of an input produces; they name the input by its sequence.
_Delivery = records.StepRecord | records.StepFaultRecord | records.DeliveryDropped
# Records a step outputs; they name the step by its sequence.
_Output = records.DerivedEvent | records.EffectIntentRecord


class JournalView(Protocol):
    """What a trace needs of a journal (`Store.journal` is one)."""

    def read(
        self, from_seq: int = 1, to_seq: int | None = None, limit: int | None = None
    ) -> Iterator[tuple[int, cbor.Value]]: ...

    def head(self) -> int: ...


@dataclass(frozen=True)
class TraceEntry:
    """One record of a trace. `depth` is its causal distance from the first entry; `parent`
    is the sequence of the entry that caused it (None for the first)."""

    seq: int
    record: RecordMap  # as journaled
    role: str  # origin | target | caused
    depth: int
    parent: int | None


@dataclass(frozen=True)
class Trace:
    """A traced record, where it came from (intents only) and what it caused, in journal
    order, which is causal order."""

    target: Hash
    match: Match
    seq: int
    entries: list[TraceEntry]
    scanned: int
    limit: int
    truncated: bool  # the limit stopped the scan before the journal's head


class _Budget:
    """How many records a trace may still read."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @property
    def left(self) -> int:
        return self.limit - self.used


def trace(
    journal: JournalView,
    target: str,
    *,
    limit: int = TRACE_RECORDS_MAX_DEFAULT,
    from_seq: int = 1,
) -> Trace:
    """Trace the record whose hash, or whose intent hash, is `target`, searching from
    `from_seq`. Raises `hash.invalid` for a malformed hash and `world.not_found` when no record
    read within the limit matches."""
    wanted = Hash(target)
    if limit < 1 or from_seq < 1:
        raise InvalidInputError(f"limit ({limit}) and from_seq ({from_seq}) are at least 1")
    head = journal.head()
    budget = _Budget(limit)
    last_seq = from_seq - 1
    entries: list[TraceEntry] = []
    depths: dict[int, int] = {}  # sequence of each taken record -> its depth
    intents: dict[str, int] = {}  # intent hash of each taken intent -> its sequence
    match: Match | None = None
    target_seq = 0
    for seq, value in journal.read(from_seq, limit=limit):
        budget.used += 1
        last_seq = seq
        record = _as_record(value)
        typed = records.parse(record)
        entry: TraceEntry | None = None
        if match is None:
            match = _match(record, typed, wanted)
            if match is not None:
                origin = _origin(journal, typed, budget) if match == "intent" else []
                entries.extend(origin)
                target_seq = seq
                entry = TraceEntry(seq, record, ROLE_TARGET, len(origin), _parent_of(origin))
        else:
            parent = _cause(typed, depths, intents)
            if parent is not None:
                entry = TraceEntry(seq, record, ROLE_CAUSED, depths[parent] + 1, parent)
        if entry is not None:
            entries.append(entry)
            _take(entry, typed, depths, intents)
        if budget.left == 0:
            break  # before the next read: the limit bounds what is read, not just what is kept
    truncated = last_seq < head
    if match is None:
        raise _not_found(wanted, from_seq, last_seq, budget, truncated=truncated)
    return Trace(wanted, match, target_seq, entries, budget.used, limit, truncated)


def _as_record(value: cbor.Value) -> RecordMap:
    if not isinstance(value, dict) or not isinstance(value.get("kind"), str):
        # Records are written by the kernel alone; anything else is a broken journal, and a
        # trace that skipped it would silently lie.
        raise WorldCorruptError("a journal record is not a map with a kind")
    return {str(key): item for key, item in value.items()}


def _match(record: RecordMap, typed: records.Record, wanted: Hash) -> Match | None:
    if isinstance(typed, records.EffectIntentRecord) and typed.intent == wanted:
        return "intent"
    if hash_value(record) == wanted:
        return "record"
    return None


def _parent_of(entries: list[TraceEntry]) -> int | None:
    return entries[-1].seq if entries else None


def _take(
    entry: TraceEntry, typed: records.Record, depths: dict[int, int], intents: dict[str, int]
) -> None:
    depths[entry.seq] = entry.depth
    if isinstance(typed, records.EffectIntentRecord):
        intents[typed.intent] = entry.seq


def _cause(typed: records.Record, depths: dict[int, int], intents: dict[str, int]) -> int | None:
    """The sequence of the taken record that caused `typed`, or None."""
    found = _link_back(typed)
    about = _intent_named(typed)
    if found is None and about is not None:
        found = intents.get(about)  # a record about an intent of the trace
    return found if found in depths else None


def _intent_named(typed: records.Record) -> str | None:
    """The intent a record is about: a receipt settles one, a cancel closes one."""
    if isinstance(typed, records.EffectReceipt):
        return typed.intent
    if isinstance(typed, records.OperationRecord):
        return typed.operation.intent
    return None


def _origin(journal: JournalView, intent: records.Record, budget: _Budget) -> list[TraceEntry]:
    """The chain from the input that led to `intent` down to the step that emitted it, oldest
    first. Stops early when the budget runs out."""
    chain: list[tuple[int, RecordMap]] = []
    link = _link_back(intent)
    while link is not None and budget.left > 0:
        budget.used += 1
        record = _record_at(journal, link)
        chain.append((link, record))
        link = _link_back(records.parse(record))
    chain.reverse()
    entries: list[TraceEntry] = []
    for depth, (seq, record) in enumerate(chain):
        entries.append(TraceEntry(seq, record, ROLE_ORIGIN, depth, _parent_of(entries)))
    return entries


def _link_back(typed: records.Record) -> int | None:
    """The sequence a record names as its cause: the input of a delivery, the step of an
    output (an ingress event has none: it is an origin)."""
    if isinstance(typed, _Delivery):
        return typed.input_seq
    if isinstance(typed, _Output):
        return typed.cause
    return None


def _record_at(journal: JournalView, seq: int) -> RecordMap:
    for _, value in journal.read(seq, seq):
        return _as_record(value)
    raise WorldCorruptError(f"the journal has no record {seq}, which a later record names")


def _not_found(
    wanted: Hash, from_seq: int, last_seq: int, budget: _Budget, *, truncated: bool
) -> NotFoundError:
    where = f"records {from_seq}..{last_seq}" if last_seq >= from_seq else "no records"
    message = f"no record or intent has hash {wanted} in {where}"
    if truncated:
        message += f"; the scan stopped at its limit of {budget.limit} records before the head"
    return NotFoundError(message, scanned=budget.used, limit=budget.limit, truncated=truncated)
