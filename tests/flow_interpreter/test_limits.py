"""Every limit of spec/11 §7 at its edge: N passes, N + 1 fails as specified."""

from __future__ import annotations

from tests.flow_interpreter.harness import (
    Execution,
    arc,
    effects,
    events,
    flow,
    names,
    rule,
    step,
    task,
)


def _chain(count: int, **limits: int) -> dict:
    steps = [step(f"s{i}", arcs=[arc(f"s{i + 1}")] if i < count - 1 else []) for i in range(count)]
    return flow(steps, limits=limits)


def test_tokens_max_edge() -> None:
    ok = Execution()
    ok.start(_chain(3, tokens_max=3))
    assert ok.status == "completed"
    over = Execution()
    over.start(_chain(4, tokens_max=3))
    assert over.status == "failed"
    assert over.engine["error"] == {
        "kind": "engine",
        "category": "engine",
        "code": "limit.tokens_max",
        "message": "more than 3 tokens in one execution",
        "retryable": False,
    }


def test_tokens_max_stops_a_routing_cycle() -> None:
    ex = Execution()
    ex.start(flow([step("a", arcs=[arc("b")]), step("b", arcs=[arc("a")])]))
    assert ex.status == "failed" and ex.engine["error"]["code"] == "limit.tokens_max"
    assert ex.engine["counters"]["token"] == 10_001


def _loop(items: int, **limits: int) -> dict:
    return flow(
        [
            step(
                "each",
                [task("n", "noop", result="{{ iter.index }}")],
                loop={"in": list(range(items))},
            )
        ],
        limits=limits,
    )


def test_loop_items_max_edge() -> None:
    ok = Execution()
    ok.start(_loop(5, loop_items_max=5))
    assert ok.business["steps"]["each"]["stats"]["total"] == 5
    over = Execution()
    out = over.start(_loop(6, loop_items_max=5))
    assert over.status == "failed"
    failed = next(e for e in events(out) if e["event"] == "step.failed")
    assert failed["error"]["code"] == "limit.loop_items_max"


def test_in_flight_max_caps_a_parallel_loop() -> None:
    definition = flow(
        [
            step(
                "each",
                [task("c", "call", tool={"kind": "echo"})],
                loop={"in": list(range(10)), "mode": "parallel", "max_in_flight": 8},
            )
        ],
        limits={"in_flight_max": 4},
    )
    ex = Execution()
    out = ex.start(definition)
    assert len(effects(out)) == 4
    exact = Execution()
    out = exact.start(flow(definition["steps"], limits={"in_flight_max": 8}))
    assert len(effects(out)) == 8


def _noops(count: int, **limits: int) -> dict:
    return flow([step("a", [task(f"t{i}", "noop", result=i) for i in range(count)])], limits=limits)


def test_tasks_per_input_max_edge() -> None:
    ok = Execution()
    ok.start(_noops(5, tasks_per_input_max=5))
    assert ok.status == "completed"
    over = Execution()
    over.start(_noops(6, tasks_per_input_max=5))
    assert over.status == "failed"
    assert over.engine["error"]["code"] == "limit.tasks_per_input_max"


def test_tasks_per_input_max_stops_a_jump_loop() -> None:
    ex = Execution()
    ex.start(
        flow(
            [step("a", [task("spin", "noop", rules=[rule(None, "jump", to="spin")])])],
            limits={"tasks_per_input_max": 50},
        )
    )
    assert ex.status == "failed" and ex.engine["error"]["code"] == "limit.tasks_per_input_max"


def test_tasks_per_input_max_counts_per_input() -> None:
    definition = flow(
        [
            step(
                "a",
                [
                    task("one", "noop"),
                    task("two", "noop"),
                    task("w", "wait_signal", signal="go"),
                    task("three", "noop"),
                    task("four", "noop"),
                ],
            )
        ],
        limits={"tasks_per_input_max": 3},
    )
    ex = Execution()
    ex.start(definition)
    assert ex.status == "running"
    ex.signal("go")
    assert ex.status == "completed"


def test_history_events_per_step_max_edge() -> None:
    full = Execution()
    out = full.start(_noops(3))
    count = len(events(out))
    exact = Execution()
    out = exact.start(_noops(3, history_events_per_step_max=count))
    assert len(events(out)) == count and "history.truncated" not in names(out)
    cut = Execution()
    out = cut.start(_noops(3, history_events_per_step_max=count - 1))
    assert len(events(out)) == count - 1
    assert events(out)[-1] == {"event": "history.truncated", "dropped": 2}
    assert names(out)[:-1] == names(full.outputs[-1])[: count - 2]


def test_result_inline_bytes_max_is_passed_to_the_tool() -> None:
    ex = Execution()
    out = ex.start(
        flow(
            [step("a", [task("c", "call", tool={"kind": "python", "code": "x"})])],
            limits={"result_inline_bytes_max": 100},
        )
    )
    (call,) = effects(out)
    assert call.effect == "aos/tool.python@1"
    assert call.params["result_inline_bytes_max"] == 100
