"""Nested loops (seed 003 §6.4): an iteration sees the iteration it is nested in as
`iter.parent` (and `iter.parent.parent` ...) — a repeat inside a loop step, a loop step of a
child execution started inside an iteration, a distributed iteration of such a child — up to
`iter_depth_max` levels; `iter.parent` is read-only and each child keeps its own copy."""

from __future__ import annotations

from typing import Any

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
START = "aos/FlowStart@1"
ENDED = "aos/FlowEnded@1"


def run_tree(root: Execution, output: Any) -> dict[str, Execution]:
    """Route every child start and end between executions, and answer every echo call with
    its args, in arrival order, until nothing is left to deliver."""
    executions = {root.exec_id: root}
    queue = [(root.exec_id, output)]
    while queue:
        exec_id, out = queue.pop(0)
        for call in effects(out, ECHO):
            queue.append((exec_id, executions[exec_id].receipt(call, call.params["args"])))
        for start in domain(out, START):
            value = start.value
            child = Execution(exec_id=value["exec"], blobs=root.blobs, now_ns=root.now_ns)
            executions[child.exec_id] = child
            started = child.start(value["definition"], value["workload"], parent=value["parent"])
            queue.append((child.exec_id, started))
        for ended in domain(out, ENDED):
            parent = executions[ended.value["exec"]]
            queue.append((parent.exec_id, parent.send("Ended", ended.value)))
    return executions


def inner_flow(**limits: Any) -> dict[str, Any]:
    """A child whose loop reads its own item and its parent's."""
    return flow(
        [
            step(
                "each_hotel",
                [
                    task(
                        "c",
                        "call",
                        args={
                            "hotel": "{{ iter.hotel }}",
                            "city": "{{ iter.parent.city }}",
                            "outer_index": "{{ iter.parent.index }}",
                            "grand": "{{ iter.parent.parent }}",
                        },
                    )
                ],
                loop={"in": "{{ iter.parent.city_hotels }}", "iterator": "hotel"},
            )
        ],
        name="t/inner",
        limits=limits or None,
    )


def outer_flow(inner: str, mode: str = "sequential", **limits: Any) -> dict[str, Any]:
    return flow(
        [
            step(
                "each_city",
                [
                    task(
                        "hotels",
                        "noop",
                        rules=[rule(set_iter={"city_hotels": "{{ workload.hotels[iter.city] }}"})],
                    ),
                    task("nested", "subflow", flow="inner", workload={}),
                ],
                loop={"in": "{{ workload.cities }}", "iterator": "city", "mode": mode},
            )
        ],
        subflows={"inner": {"flow": "t/inner", "definition": inner}},
        limits=limits or None,
    )


WORKLOAD = {"cities": ["Oslo", "Rome"], "hotels": {"Oslo": ["a", "b"], "Rome": ["c"]}}


def test_a_childs_loop_sees_the_iteration_it_was_started_in_as_parent() -> None:
    root = Execution()
    inner = root.deploy(inner_flow())
    out = root.start(outer_flow(inner), WORKLOAD)
    (start,) = domain(out, START)
    marker = start.value["workload"]["$iter_parent"]
    assert {k: marker[k] for k in ("city", "index", "first", "last", "parent")} == {
        "city": "Oslo",
        "index": 0,
        "first": True,
        "last": False,
        "parent": None,
    }
    executions = run_tree(root, out)
    assert root.status == "completed"
    results = root.business["steps"]["each_city"]["results"]
    assert [
        [r["city"], r["hotel"], r["outer_index"]] for city in results for r in city["results"]
    ] == [
        ["Oslo", "a", 0],
        ["Oslo", "b", 0],
        ["Rome", "c", 1],
    ]
    assert all(r["grand"] is None for city in results for r in city["results"])
    child = executions["e1:each_city:1"]
    assert "$iter_parent" not in child.business["workload"]  # a marker, not the child's data
    assert child.engine["outer"]["city"] == "Oslo"


def test_a_grandchild_reads_iter_parent_parent() -> None:
    root = Execution()
    leaf = root.deploy(
        flow(
            [
                step(
                    "each_room",
                    [
                        task(
                            "c",
                            "call",
                            args="{{ iter.parent.parent.city }}/{{ iter.parent.hotel }}/{{ iter.room }}",
                        )
                    ],
                    loop={"in": [1, 2], "iterator": "room"},
                )
            ],
            name="t/leaf",
        )
    )
    middle = root.deploy(
        flow(
            [
                step(
                    "each_hotel",
                    [task("rooms", "subflow", flow="leaf")],
                    loop={"in": "{{ iter.parent.city_hotels }}", "iterator": "hotel"},
                )
            ],
            name="t/inner",
            subflows={"leaf": {"flow": "t/leaf", "definition": leaf}},
        )
    )
    run_tree(root, root.start(outer_flow(middle), WORKLOAD))
    assert root.status == "completed"
    rows = [
        room
        for city in root.business["steps"]["each_city"]["results"]
        for hotel in city["results"]
        for room in hotel["results"]
    ]
    assert rows == ["Oslo/a/1", "Oslo/a/2", "Oslo/b/1", "Oslo/b/2", "Rome/c/1", "Rome/c/2"]


def test_outside_a_loop_a_child_reads_iter_parent_in_admission_tasks_and_arcs() -> None:
    root = Execution()
    inner = root.deploy(
        flow(
            [
                step(
                    "first",
                    [task("n", "noop", result="{{ iter.parent.city }}")],
                    admit="{{ iter.parent.city != 'Rome' }}",
                    arcs=[arc("second", when="{{ iter.parent.first }}")],
                ),
                step("second", [task("n", "noop", result="after {{ iter.parent.city }}")]),
            ],
            name="t/inner",
        )
    )
    run_tree(root, root.start(outer_flow(inner), WORKLOAD))
    assert root.status == "completed"
    # Oslo is admitted and, as the first city, routed on; Rome is not admitted.
    assert root.business["steps"]["each_city"]["results"] == ["after Oslo", None]


def test_parallel_outer_iterations_each_keep_their_own_parent() -> None:
    root = Execution()
    inner = root.deploy(inner_flow())
    out = root.start(outer_flow(inner, mode="parallel"), WORKLOAD)
    starts = domain(out, START)
    assert [s.value["workload"]["$iter_parent"]["city"] for s in starts] == ["Oslo", "Rome"]
    run_tree(root, out)
    results = root.business["steps"]["each_city"]["results"]
    assert [{r["city"] for r in city["results"]} for city in results] == [{"Oslo"}, {"Rome"}]


def test_iter_parent_is_read_only() -> None:
    definition = flow(
        [
            step(
                "each",
                [
                    task(
                        "inner",
                        "repeat",
                        over=[1],
                        **{"as": "x"},
                        tasks=[task("n", "noop", rules=[rule(set_iter={"parent.item": 9})])],
                    )
                ],
                loop={"in": [1]},
            )
        ]
    )
    ex = Execution()
    out = ex.start(definition)
    (failed,) = [e for e in out.ann["events"] if e["event"] == "loop.iteration.failed"]
    assert failed["error"]["code"] == "policy.set"
    assert "iter.parent is read-only" in failed["error"]["message"]


def test_an_inner_write_stays_in_its_iteration() -> None:
    """set_iter in a repeat's iteration leaves the loop iteration it reads as parent alone,
    and the next item starts from that parent as it was."""
    definition = flow(
        [
            step(
                "each",
                [
                    task("mark", "noop", rules=[rule(set_iter={"seen": "outer"})]),
                    task(
                        "inner",
                        "repeat",
                        over=[1, 2],
                        **{"as": "x"},
                        tasks=[
                            task(
                                "n",
                                "noop",
                                result="{{ iter.seen | default('-') }}:{{ iter.parent.seen }}",
                                rules=[rule(set_iter={"seen": "inner"})],
                            )
                        ],
                    ),
                    task("after", "noop", result="{{ iter.seen }}|{{ results.inner | join(',') }}"),
                ],
                loop={"in": [1]},
            )
        ]
    )
    ex = Execution()
    ex.start(definition)
    assert ex.business["steps"]["each"]["results"] == ["outer|-:outer,-:outer"]


def test_a_distributed_iteration_of_a_child_keeps_the_parent() -> None:
    root = Execution()
    inner = root.deploy(
        flow(
            [
                step(
                    "each_hotel",
                    [task("n", "noop", result="{{ iter.parent.city }}-{{ iter.hotel }}")],
                    loop={
                        "in": "{{ iter.parent.city_hotels }}",
                        "iterator": "hotel",
                        "exec": "distributed",
                    },
                )
            ],
            name="t/inner",
        )
    )
    executions = run_tree(root, root.start(outer_flow(inner), WORKLOAD))
    assert root.status == "completed"
    results = root.business["steps"]["each_city"]["results"]
    assert [city["results"] for city in results] == [["Oslo-a", "Oslo-b"], ["Rome-c"]]
    grandchild = executions["e1:each_city:1:each_hotel:1"]
    assert grandchild.engine["outer"]["city"] == "Oslo"


# -- the depth limit --------------------------------------------------------------------------


def _repeat_in_loop(**limits: Any) -> dict[str, Any]:
    return flow(
        [
            step(
                "each",
                [
                    task(
                        "inner",
                        "repeat",
                        over=[1],
                        **{"as": "x"},
                        tasks=[task("n", "noop", result="{{ iter.parent.item }}")],
                    )
                ],
                loop={"in": [7]},
            )
        ],
        limits=limits,
    )


def test_iter_depth_max_edge_for_a_repeat_in_a_loop() -> None:
    ok = Execution()
    ok.start(_repeat_in_loop(iter_depth_max=2))
    assert ok.business["steps"]["each"]["results"] == [[7]]
    over = Execution()
    out = over.start(_repeat_in_loop(iter_depth_max=1))
    (failed,) = [e for e in out.ann["events"] if e["event"] == "loop.iteration.failed"]
    assert failed["error"]["code"] == "limit.iter_depth_max"


def test_iter_depth_max_edge_for_a_childs_loop() -> None:
    ok = Execution()
    run_tree(ok, ok.start(outer_flow(ok.deploy(inner_flow(iter_depth_max=2))), WORKLOAD))
    assert ok.status == "completed"
    over = Execution()
    run_tree(over, over.start(outer_flow(over.deploy(inner_flow(iter_depth_max=1))), WORKLOAD))
    results = over.business["steps"]["each_city"]["results"]
    assert [r["error"]["code"] for r in results] == ["limit.iter_depth_max"] * 2


def test_a_start_marker_deeper_than_the_limit_or_not_a_map_fails_the_execution() -> None:
    definition = flow([step("a", [task("n", "noop")])], limits={"iter_depth_max": 2})
    at_limit = Execution()
    at_limit.start(definition, {"$iter_parent": {"parent": {"parent": None}}})
    assert at_limit.status == "completed"
    for marker, code in (
        ({"parent": {"parent": {}}}, "limit.iter_depth_max"),
        ([1], "iteration.invalid"),
    ):
        ex = Execution()
        out = ex.start(definition, {"$iter_parent": marker})
        assert ex.status == "failed" and "step.started" not in names(out)
        assert ex.engine["error"]["code"] == code
