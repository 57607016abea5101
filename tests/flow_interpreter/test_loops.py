"""Loop steps: sequential, parallel with a window, distributed, results and stats."""

from __future__ import annotations

from aos_sdk import cbor as sdk_cbor
from tests.flow_interpreter.harness import (
    Execution,
    arc,
    domain,
    effects,
    flow,
    names,
    rule,
    step,
    task,
)

ECHO = "aos/tool.echo@1"


def _echo_loop(mode: str, max_in_flight: int | None = None, **extra: object) -> dict:
    return flow(
        [
            step(
                "each",
                [
                    task(
                        "c",
                        "call",
                        tool={"kind": "echo"},
                        args={"n": "{{ iter.item }}", "i": "{{ iter.index }}"},
                    )
                ],
                loop={
                    "in": "{{ workload.items }}",
                    "mode": mode,
                    "max_in_flight": max_in_flight,
                    **extra,
                },
                arcs=[arc("after", args={"stats": "{{ each.stats }}", "evt": "{{ event.name }}"})],
            ),
            step("after", [task("n", "noop", result="{{ args }}")]),
        ]
    )


def test_sequential_loop_runs_one_iteration_at_a_time() -> None:
    ex = Execution()
    out = ex.start(_echo_loop("sequential"), {"items": [10, 20, 30]})
    seen = []
    while ex.status == "running":
        (call,) = effects(out, ECHO)
        seen.append(call.params["args"])
        out = ex.receipt(call, call.params["args"]["n"] * 2)
    assert seen == [{"n": 10, "i": 0}, {"n": 20, "i": 1}, {"n": 30, "i": 2}]
    assert ex.business["steps"]["each"] == {
        "results": [20, 40, 60],
        "stats": {"total": 3, "success": 3, "failed": 0},
    }
    assert ex.business["steps"]["after"] == {
        "stats": {"total": 3, "success": 3, "failed": 0},
        "evt": "loop.done",
    }


def test_parallel_loop_respects_max_in_flight_and_keeps_item_order() -> None:
    ex = Execution()
    out = ex.start(_echo_loop("parallel", 2), {"items": ["a", "b", "c", "d", "e"]})
    assert [c.params["args"]["n"] for c in effects(out, ECHO)] == ["a", "b"]
    assert ex.engine["tokens"]["k1"]["loop"]["in_flight"] == 2
    pending = list(effects(out, ECHO))
    # answer out of order: the second first
    out = ex.receipt(pending.pop(1), "B")
    (new,) = effects(out, ECHO)
    assert new.params["args"]["n"] == "c"
    pending.append(new)
    while pending:
        call = pending.pop()
        out = ex.receipt(call, call.params["args"]["n"].upper())
        pending.extend(effects(out, ECHO))
        assert ex.engine["tokens"].get("k1", {"loop": {"in_flight": 0}})["loop"]["in_flight"] <= 2
    assert ex.business["steps"]["each"]["results"] == ["A", "B", "C", "D", "E"]
    assert ex.status == "completed"


def test_parallel_loop_default_window_is_in_flight_max() -> None:
    ex = Execution()
    out = ex.start(_echo_loop("parallel"), {"items": list(range(7))})
    assert len(effects(out, ECHO)) == 7


def test_failed_iterations_are_counted_and_the_loop_still_completes() -> None:
    definition = flow(
        [
            step(
                "each",
                [
                    task(
                        "f", "fail", message="odd {{ iter.item }}", when="{{ iter.item % 2 == 1 }}"
                    ),
                    task("n", "noop", result="{{ iter.item }}"),
                ],
                loop={"in": [0, 1, 2, 3]},
            )
        ]
    )
    ex = Execution()
    out = ex.start(definition)
    result = ex.business["steps"]["each"]
    assert result["stats"] == {"total": 4, "success": 2, "failed": 2}
    assert result["results"][0] == 0 and result["results"][1]["error"]["message"] == "odd 1"
    assert names(out).count("loop.iteration.failed") == 2
    assert "loop.done" in names(out)
    assert ex.status == "completed"


def test_a_map_or_scalar_is_one_item_and_an_empty_list_no_iteration() -> None:
    for given, expected in (({"a": 1}, [{"a": 1}]), (5, [5]), ([], [])):
        ex = Execution()
        ex.start(
            flow(
                [
                    step(
                        "each",
                        [task("n", "noop", result="{{ iter.item }}")],
                        loop={"in": "{{ workload.v }}"},
                    )
                ]
            ),
            {"v": given},
        )
        assert ex.business["steps"]["each"]["results"] == expected


def test_break_ends_an_iteration_successfully_and_set_iter_is_per_iteration() -> None:
    definition = flow(
        [
            step(
                "each",
                [
                    task(
                        "mark",
                        "noop",
                        result=0,
                        rules=[rule(None, "continue", set_iter={"seen": "{{ iter.item }}"})],
                    ),
                    task(
                        "stop",
                        "noop",
                        result="{{ iter.seen }}",
                        rules=[rule("{{ iter.item == 2 }}", "break")],
                    ),
                    task("tail", "noop", result="tail{{ iter.seen }}"),
                ],
                loop={"in": [1, 2, 3], "mode": "parallel"},
            )
        ]
    )
    ex = Execution()
    ex.start(definition)
    assert ex.business["steps"]["each"]["results"] == ["tail1", 2, "tail3"]


def test_repeat_inside_a_loop_sees_the_loop_iteration_as_parent() -> None:
    definition = flow(
        [
            step(
                "each",
                [
                    task(
                        "inner",
                        "repeat",
                        over="{{ iter.item }}",
                        **{"as": "x"},
                        tasks=[task("n", "noop", result="{{ iter.parent.index }}-{{ x }}")],
                    ),
                ],
                loop={"in": [[1, 2], [3]]},
            )
        ]
    )
    ex = Execution()
    ex.start(definition)
    assert ex.business["steps"]["each"]["results"] == [["0-1", "0-2"], ["1-3"]]


def test_a_loop_step_is_not_merged_a_second_token_runs_again() -> None:
    definition = flow(
        [
            step("fork", mode="inclusive", arcs=[arc("each"), arc("each")]),
            step("each", [task("w", "wait_signal", signal="go")], loop={"in": [1]}),
        ]
    )
    ex = Execution()
    out = ex.start(definition)
    assert "token.merged" not in names(out)
    assert len(ex.engine["tokens"]) == 2


def test_distributed_loop_runs_each_iteration_as_a_child_of_the_same_definition() -> None:
    definition = flow(
        [
            step(
                "prepare",
                [task("c", "assign", set={"c": "C"})],
                arcs=[arc("each", args={"k": "K"})],
            ),
            step(
                "each",
                [task("n", "noop", result="{{ iter.item * 10 }}|{{ args.k }}|{{ ctx.c }}|{{ w }}")],
                loop={
                    "in": [1, 2, 3],
                    "mode": "parallel",
                    "max_in_flight": 2,
                    "exec": "distributed",
                },
            ),
        ]
    )
    parent = Execution()
    digest = parent.deploy(definition)
    out = parent.start(digest, {"w": "W"})
    starts = domain(out, "aos/FlowStart@1")
    assert [s.value["exec"] for s in starts] == ["e1:each:1", "e1:each:2"]
    assert starts[0].value["definition"] == digest
    assert starts[0].value["workload"]["$iteration"]["item"] == 1
    assert starts[0].value["parent"] == {"exec": "e1", "token": "w1"}
    pending = list(starts)
    while pending:
        start = pending.pop()  # finish in reverse order
        child = Execution(exec_id=start.value["exec"], blobs=parent.blobs)
        child_out = child.start(digest, start.value["workload"], parent=start.value["parent"])
        assert child.status == "completed"
        assert child.business["workload"] == {"w": "W"}
        assert "step.started" in names(child_out) and "next.evaluated" not in names(child_out)
        (ended,) = domain(child_out, "aos/FlowEnded@1")
        out = parent.send("Ended", ended.value)
        pending.extend(domain(out, "aos/FlowStart@1"))
    assert parent.status == "completed"
    assert parent.business["steps"]["each"] == {
        "results": ["10|K|C|W", "20|K|C|W", "30|K|C|W"],
        "stats": {"total": 3, "success": 3, "failed": 0},
    }


def test_a_failed_distributed_iteration_is_counted() -> None:
    definition = flow(
        [
            step(
                "each",
                [task("f", "fail", message="no {{ iter.item }}")],
                loop={"in": [1], "exec": "distributed"},
            )
        ]
    )
    parent = Execution()
    digest = parent.deploy(definition)
    (start,) = domain(parent.start(digest), "aos/FlowStart@1")
    child = Execution(exec_id=start.value["exec"], blobs=parent.blobs)
    (ended,) = domain(
        child.start(digest, start.value["workload"], parent=start.value["parent"]),
        "aos/FlowEnded@1",
    )
    assert ended.value["status"] == "failed"
    parent.send("Ended", ended.value)
    assert parent.business["steps"]["each"]["stats"] == {"total": 1, "success": 0, "failed": 1}
    assert parent.business["steps"]["each"]["results"][0]["error"]["message"] == "no 1"


def test_a_loop_keeps_finished_results_encoded_until_it_is_done() -> None:
    ex = Execution()
    out = ex.start(_echo_loop("sequential"), {"items": [1, 2, 3]})
    for n in (1, 2):
        (call,) = effects(out, ECHO)
        out = ex.receipt(call, {"z": n, "a": [n, {"y": None}]})
    loop = ex.engine["tokens"]["k1"]["loop"]
    assert "results" not in loop
    assert [None if r is None else sdk_cbor.decode(r) for r in loop["results_cbor"]] == [
        {"z": 1, "a": [1, {"y": None}]},
        {"z": 2, "a": [2, {"y": None}]},
        None,
    ]
    (call,) = effects(out, ECHO)
    ex.receipt(call, 3)
    assert ex.business["steps"]["each"]["results"] == [
        {"a": [1, {"y": None}], "z": 1},
        {"a": [2, {"y": None}], "z": 2},
        3,
    ]


def test_a_loop_started_with_results_as_values_finishes_as_before() -> None:
    """A state an earlier interpreter stored, its loop's results kept as values."""
    ex = Execution()
    out = ex.start(_echo_loop("sequential"), {"items": [10, 20, 30]})
    (call,) = effects(out, ECHO)
    out = ex.receipt(call, 20)
    token = ex.state["engine"]["tokens"]["k1"]
    encoded = token["loop"].pop("results_cbor")
    token["loop"]["results"] = [None if r is None else sdk_cbor.decode(r) for r in encoded]
    while ex.status == "running":
        (call,) = effects(out, ECHO)
        out = ex.receipt(call, call.params["args"]["n"] * 2)
    assert ex.business["steps"]["each"]["results"] == [20, 40, 60]
