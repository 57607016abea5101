"""`aos.kernel.world.trace`: following what a journal record caused, and where an intent came
from, over a hand-written journal (every record kind and link) and over a real world."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.kernel.errors import InvalidInputError
from aos.kernel.hashing import InvalidHashError, hash_value
from aos.kernel.world import records
from aos.kernel.world.errors import NotFoundError, RecordMalformedError, WorldCorruptError
from aos.kernel.world.trace import (
    ROLE_CAUSED,
    ROLE_ORIGIN,
    ROLE_TARGET,
    TRACE_RECORDS_MAX_DEFAULT,
    Trace,
    trace,
)
from aos.kernel.world.world import World

REPO = Path(__file__).resolve().parent.parent
COUNTER_C = REPO / "manifests" / "counter-c"
STAMP: dict[str, Any] = {
    "wall_ns": 1,
    "logical_ns": 1,
    "entropy": b"\0" * 64,
    "height": 1,
    "manifest": "blake3:" + "0" * 64,
}
KEY = b"\xd9\xd9\xf7aa"
INTENT_A = "blake3:" + "a" * 64
INTENT_B = "blake3:" + "b" * 64


class ListJournal:
    """A journal held in a list: record i is sequence i + 1. Counts reads, to check bounds."""

    def __init__(self, entries: list[Any]) -> None:
        self.entries = entries
        self.reads = 0

    def read(
        self, from_seq: int = 1, to_seq: int | None = None, limit: int | None = None
    ) -> Iterator[tuple[int, Any]]:
        last = len(self.entries) if to_seq is None else min(to_seq, len(self.entries))
        if limit is not None:
            last = min(last, from_seq + limit - 1)
        for seq in range(from_seq, last + 1):
            self.reads += 1
            yield seq, self.entries[seq - 1]

    def head(self) -> int:
        return len(self.entries)


def ingress(schema: str, value: Any) -> dict[str, Any]:
    return records.IngressEvent(schema, value, {**STAMP, "wall_ns": value}).to_value()


def step(input_seq: int, *, events: int = 0, intents: list[str] | None = None) -> dict[str, Any]:
    return records.StepRecord(
        input_seq=input_seq,
        delivery=0,
        workflow="demo/w@1",
        key=KEY,
        state="blake3:" + "5" * 64,
        events=events,
        intents=intents or [],
    ).to_value()


def intent(hash_: str, cause: int, index: int = 0) -> dict[str, Any]:
    return records.EffectIntentRecord(
        intent=hash_,
        effect="demo/http.request@1",
        params={"url": "x"},
        workflow="demo/w@1",
        key=KEY,
        cause=cause,
        output_index=index,
        idempotency_key=None,
        issuer_ref=None,
    ).to_value()


def receipt(intent: str) -> dict[str, Any]:
    body = {"intent": intent, "status": "ok", "payload": b""}
    return records.EffectReceipt(body, b"\0" * 64, STAMP).to_value()


def journal_of_two_inputs() -> ListJournal:
    """Two inputs whose consequences interleave; input 2 fans out through a derived event."""
    return ListJournal(
        [
            records.ManifestRecord("blake3:" + "0" * 64, STAMP).to_value(),  # 1
            ingress("demo/E@1", 1),  # 2
            ingress("demo/E@1", 2),  # 3
            step(2, events=1),  # 4  <- input 2
            step(3),  # 5  <- input 3
            records.DerivedEvent("demo/F@1", {"n": 1}, 4, 0).to_value(),  # 6  <- step 4
            step(6, intents=[INTENT_A]),  # 7  <- event 6
            records.StepFaultRecord(  # 8  <- event 6 (a second delivery)
                input_seq=6,
                delivery=1,
                workflow="demo/v@1",
                key=None,
                module="blake3:" + "6" * 64,
                code="step.trap",
                message="boom",
            ).to_value(),
            intent(INTENT_A, 7),  # 9  <- step 7
            records.DeliveryDropped(  # 10 <- input 3
                input_seq=3, delivery=1, workflow="demo/v@1", key=None, reason="cell_failed"
            ).to_value(),
            receipt(INTENT_A),  # 11 <- intent 9
            step(11),  # 12 <- receipt 11
            receipt(INTENT_B),  # 13: not traced
        ]
    )


def shape(found: Trace) -> list[tuple[int, str, int, int | None]]:
    return [(e.seq, e.role, e.depth, e.parent) for e in found.entries]


def test_an_input_and_everything_it_caused_in_causal_order() -> None:
    journal = journal_of_two_inputs()
    found = trace(journal, hash_value(journal.entries[1]))
    assert (found.match, found.seq, found.truncated) == ("record", 2, False)
    assert shape(found) == [
        (2, ROLE_TARGET, 0, None),
        (4, ROLE_CAUSED, 1, 2),
        (6, ROLE_CAUSED, 2, 4),
        (7, ROLE_CAUSED, 3, 6),
        (8, ROLE_CAUSED, 3, 6),
        (9, ROLE_CAUSED, 4, 7),
        (11, ROLE_CAUSED, 5, 9),
        (12, ROLE_CAUSED, 6, 11),
    ]
    assert found.entries[0].record == journal.entries[1]
    assert found.scanned == journal.head() and found.limit == TRACE_RECORDS_MAX_DEFAULT


def test_the_other_input_has_its_own_consequences() -> None:
    journal = journal_of_two_inputs()
    found = trace(journal, hash_value(journal.entries[2]))
    assert [(e.seq, e.depth) for e in found.entries] == [(3, 0), (5, 1), (10, 1)]


def test_a_step_traced_by_its_record_hash() -> None:
    journal = journal_of_two_inputs()
    found = trace(journal, hash_value(journal.entries[6]))
    assert [e.seq for e in found.entries] == [7, 9, 11, 12]


def test_an_intent_shows_where_it_came_from() -> None:
    journal = journal_of_two_inputs()
    found = trace(journal, INTENT_A)
    assert (found.match, found.seq) == ("intent", 9)
    assert shape(found) == [
        (2, ROLE_ORIGIN, 0, None),
        (4, ROLE_ORIGIN, 1, 2),
        (6, ROLE_ORIGIN, 2, 4),
        (7, ROLE_ORIGIN, 3, 6),
        (9, ROLE_TARGET, 4, 7),
        (11, ROLE_CAUSED, 5, 9),
        (12, ROLE_CAUSED, 6, 11),
    ]


def test_an_intent_record_is_also_traceable_by_its_record_hash() -> None:
    journal = journal_of_two_inputs()
    found = trace(journal, hash_value(journal.entries[8]))
    assert found.match == "record"
    assert [e.seq for e in found.entries] == [9, 11, 12]


def test_unknown_hash_is_not_found() -> None:
    journal = journal_of_two_inputs()
    with pytest.raises(NotFoundError) as caught:
        trace(journal, "blake3:" + "9" * 64)
    assert caught.value.code == "world.not_found"
    assert caught.value.detail == {
        "scanned": 13,
        "limit": TRACE_RECORDS_MAX_DEFAULT,
        "truncated": False,
    }


def test_limit_hit_before_the_record_is_found_says_so() -> None:
    journal = journal_of_two_inputs()
    with pytest.raises(NotFoundError) as caught:
        trace(journal, hash_value(journal.entries[8]), limit=5)
    assert caught.value.detail["truncated"] is True
    assert "limit of 5" in caught.value.message
    assert journal.reads == 5


def test_limit_hit_after_the_record_is_found_truncates() -> None:
    journal = journal_of_two_inputs()
    found = trace(journal, hash_value(journal.entries[1]), limit=7)
    assert found.truncated and found.scanned == 7
    assert [e.seq for e in found.entries] == [2, 4, 6, 7]


def test_the_walk_back_counts_against_the_limit() -> None:
    journal = journal_of_two_inputs()
    # Nine records to reach the intent, then the budget allows one step back only.
    found = trace(journal, INTENT_A, limit=10)
    assert [(e.seq, e.role) for e in found.entries] == [(7, ROLE_ORIGIN), (9, ROLE_TARGET)]
    assert found.truncated and found.scanned == 10


def test_limit_at_the_head_is_not_truncated() -> None:
    journal = journal_of_two_inputs()
    found = trace(journal, hash_value(journal.entries[2]), limit=journal.head())
    assert not found.truncated


def test_search_from_a_later_sequence() -> None:
    journal = journal_of_two_inputs()
    found = trace(journal, hash_value(journal.entries[2]), from_seq=3)
    assert found.scanned == journal.head() - 2
    with pytest.raises(NotFoundError):
        trace(journal, hash_value(journal.entries[1]), from_seq=3)


@pytest.mark.parametrize("text", ["", "blake3:xyz", "sha256:" + "0" * 64, "blake3:" + "A" * 64])
def test_malformed_hash(text: str) -> None:
    with pytest.raises(InvalidHashError):
        trace(journal_of_two_inputs(), text)


@pytest.mark.parametrize(("limit", "from_seq"), [(0, 1), (1, 0)])
def test_bad_bounds(limit: int, from_seq: int) -> None:
    with pytest.raises(InvalidInputError):
        trace(journal_of_two_inputs(), INTENT_A, limit=limit, from_seq=from_seq)


def test_a_record_that_is_not_a_record_is_corruption() -> None:
    with pytest.raises(WorldCorruptError):
        trace(ListJournal([{"no": "kind"}]), INTENT_A)


def test_a_record_missing_a_field_of_its_kind_is_malformed() -> None:
    with pytest.raises(RecordMalformedError):
        trace(ListJournal([{"kind": "step", "input": 1}]), INTENT_A)


def test_empty_journal() -> None:
    with pytest.raises(NotFoundError) as caught:
        trace(ListJournal([]), INTENT_A)
    assert "no records" in caught.value.message


def test_a_real_world(tmp_path: Path) -> None:
    increment = {"$tag": "Increment", "$value": {"id": "a", "by": 12}}
    with World.create(tmp_path / "w", COUNTER_C, sync=False) as world:
        world.send("demo/CounterEvent@1", {"$tag": "Increment", "$value": {"id": "b", "by": 1}})
        admitted, report = world.send("demo/CounterEvent@1", increment)
        found = trace(world.store.journal, admitted.event_hash)
    assert found.seq == admitted.seq
    kinds = [(e.record["kind"], e.depth) for e in found.entries]
    assert kinds == [("domain_event", 0), ("step", 1), ("domain_event", 2)]
    assert found.entries[-1].seq == report.last_seq
    assert found.entries[-1].record["schema"] == "demo/CounterThreshold@1"
