"""The differential run's reading of each side's answer (tests/conformance/normalize.py), fed
answers of the shapes NoETL 2.13.1 and aos give. The run itself needs NoETL and has its own
target (`make conformance-noetl`); this needs neither."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.normalize import (
    ABSENT,
    CONTEXT_BYTES_MAX,
    EXECUTION_ID,
    NO_END,
    VOLATILE,
    Difference,
    Outcome,
    Shape,
    aos_outcome,
    compare,
    facts,
    kept,
    mask,
    noetl_outcome,
)

PLAYBOOK: dict[str, Any] = {
    "workbook": [{"name": "probe", "tool": {"kind": "http", "url": "x"}}],
    "workflow": [
        {"step": "start", "tool": {"kind": "python", "code": "..."}},
        {"step": "pipe", "tool": [{"name": "a", "kind": "noop"}, {"kind": "postgres"}]},
        {
            "step": "each",
            "loop": {"in": "{{ xs }}", "iterator": "x", "spec": {"mode": "parallel"}},
            "tool": {"kind": "python", "code": "..."},
        },
        {"step": "seq", "loop": {"in": "{{ xs }}", "iterator": "x"}, "tool": {"kind": "noop"}},
        {"step": "check", "tool": {"kind": "workbook", "name": "probe"}},
        {"step": "end", "tool": {"kind": "python", "code": "..."}},
    ],
}
SHAPE = Shape.of(PLAYBOOK)
EXEC = "769801943244865541"


def event(kind: str, node: str, result: Any = None, event_id: int = 0) -> dict[str, Any]:
    """A record of `GET /api/executions/ID/events` as 2.13.1 answers it (the fields read)."""
    return {"event_id": str(event_id), "event_type": kind, "node_name": node, "result": result}


def done(node: str, context: dict[str, Any] | None) -> dict[str, Any]:
    envelope: dict[str, Any] = {"status": "COMPLETED"}
    if context is not None:
        envelope["context"] = {**context, "command_id": f"{EXEC}:{node}:1"}
    return event("call.done", node, envelope)


def test_the_shape_knows_steps_loops_and_the_kind_of_each_last_task() -> None:
    assert SHAPE.steps == ("start", "pipe", "each", "seq", "check", "end")
    assert SHAPE.loops == {"each", "seq"} and SHAPE.parallel == {"each"}
    assert SHAPE.kinds["pipe"] == "postgres" and SHAPE.kinds["check"] == "http"
    assert Shape.of({"workflow": "not a list"}).steps == ()


def test_kept_is_what_noetl_keeps_scalars_and_maps_of_scalars() -> None:
    value = {
        "n": 1,
        "s": "x",
        "none": None,
        "flag": True,
        "items": [1, 2],
        "data": {"a": 1},
        "rows": [],
        "command_7": "transport",
        "meta": {"k": "v", "deep": {"x": 1}, "result": 3},
        "empty": {"deep": {"x": 1}},
    }
    assert kept(value) == {"n": 1, "s": "x", "none": None, "flag": True, "meta": {"k": "v"}}


def test_kept_of_a_result_noetl_stores_elsewhere_is_its_small_fields() -> None:
    huge = {"size": 2_000_000, "blob": "y" * 2_000_000, "note": "n" * 800, "ok": True}
    assert kept(huge) == {"size": 2_000_000, "note": "n" * 500 + "...", "ok": True}


def test_kept_drops_everything_past_the_context_limit_and_non_maps() -> None:
    assert kept({"pad": "x" * CONTEXT_BYTES_MAX}) is None
    assert kept({"pad": "x" * (CONTEXT_BYTES_MAX - 100)}) is not None
    assert kept([1, 2]) is None and kept(5) is None and kept({"rows": [1]}) is None


def test_facts_reads_each_tools_own_words() -> None:
    assert facts("http", {"status_code": 200, "url": "u", "elapsed": 0.1}) == {"http_status": 200}
    assert facts("http", {"status": 200, "http": {"status": 200}}) == {"http_status": 200}
    assert facts("postgres", {"row_count": -1, "statement_count": 1}) == {"row_count": 0}
    assert facts("postgres", {"rowcount": 3}) == {"row_count": 3}
    assert facts("python", {"a": 1}) == {"a": 1} and facts("http", None) is None
    assert facts("noop", {"status": "noop", "step": "s"}) is None
    assert (
        facts("duckdb", {"executed_commands": 1}) is None
        and facts("duckdb", {"rowcount": 1}) is None
    )


def test_noetl_outcome_reads_results_from_call_done_envelopes() -> None:
    events = [
        event("playbook.initialized", "pb", {"status": "INITIALIZED"}),
        done("start", {"greeting": f"hi {EXEC}"}),
        done("pipe:task_sequence", {"status": "ok", "_prev": {"row_count": 2}, "ctx": {"k": 1}}),
        done("each", {"v": 2}),
        done("each", {"v": 1}),
        event("call.error", "each", {"status": "FAILED"}),
        done("seq", None),
        done("check", {"status_code": 404, "url": "u"}),
        done("pipe:inline_task", {"ignored": True}),
        done("workflow", {"ignored": True}),
        event("workflow.completed", "workflow", {"status": "COMPLETED"}),
        done("end", {"status": "complete"}),
    ]
    found = noetl_outcome(events, SHAPE, execution=EXEC, requests=["/b", "/a"])
    assert found.status == "completed"
    assert found.steps == {
        "start": {"greeting": f"hi {EXECUTION_ID}"},
        "pipe": {"row_count": 2},
        "each": {
            "results": [None, {"v": 1}, {"v": 2}],
            "stats": {"total": 3, "success": 2, "failed": 1},
        },
        "seq": {"results": [None], "stats": {"total": 1, "success": 1, "failed": 0}},
        "check": {"http_status": 404},
        "end": {"status": "complete"},
    }
    assert found.requests == ["/a", "/b"]  # a parallel loop: any order, so sorted
    assert found.raw is events


def test_noetl_without_a_terminal_event_never_ended_and_a_failure_ends_failed() -> None:
    started = [done("start", {"a": 1})]
    assert noetl_outcome(started, SHAPE, execution=EXEC, requests=[]).status == NO_END
    failed = [*started, event("playbook.failed", "pb", {"status": "FAILED"})]
    assert noetl_outcome(failed, SHAPE, execution=EXEC, requests=[]).status == "failed"


def test_aos_outcome_reads_its_status() -> None:
    state = {
        "status": "completed",
        "exec": "e1",
        "business": {
            "steps": {
                "start": {"greeting": "hi e1", "items": [1]},
                "pipe": {"rowcount": 2, "rows": [], "results": {"a": None}},
                "each": {
                    "results": [{"v": 1}, {"v": 2}, {"error": {"code": "python.raised"}}],
                    "stats": {"total": 3, "success": 2, "failed": 1},
                },
                "check": {"status": 404, "http": {"status": 404, "headers": {}}, "data": {}},
                "end": None,
            }
        },
    }
    found = aos_outcome(state, SHAPE, execution="e1", requests=["/x"])
    assert found.steps == {
        "start": {"greeting": f"hi {EXECUTION_ID}"},
        "pipe": {"row_count": 2},
        "each": {
            "results": [{"error": {"code": "python.raised"}}, {"v": 1}, {"v": 2}],
            "stats": {"total": 3, "success": 2, "failed": 1},
        },
        "check": {"http_status": 404},
        "end": None,
    }
    running = aos_outcome({"status": "running"}, SHAPE, execution="e2", requests=[])
    assert running.status == NO_END and running.steps == {}


def test_compare_names_every_part_that_differs() -> None:
    noetl = Outcome("completed", {"a": {"x": 1}, "b": None}, ["/1"])
    aos = Outcome("failed", {"a": {"x": 1}, "c": {"y": 2}}, ["/1"])
    assert compare(noetl, aos) == [
        Difference("status", "completed", "failed"),
        Difference("steps.b", None, ABSENT),
        Difference("steps.c", ABSENT, {"y": 2}),
    ]
    assert compare(noetl, Outcome("completed", {"a": {"x": 1}, "b": None}, ["/1"])) == []


def test_mask_reads_a_volatile_field_the_same_on_both_sides() -> None:
    masked = mask(Outcome("completed", {"s": {"m": "draw 7", "k": 1}}), {"steps.s.m": "random"})
    assert masked.steps == {"s": {"m": VOLATILE, "k": 1}}
    assert mask(Outcome("completed", {}), {"steps.s.m": "random"}).steps == {}
    with pytest.raises(ValueError, match=r"steps\."):
        mask(Outcome("completed"), {"status": "no"})
