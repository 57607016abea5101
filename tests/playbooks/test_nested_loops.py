"""Nested loops in playbooks (seed 003 §6.4, §11: cities, hotels per city, rooms per hotel)
on a flow world with the real python worker: a loop step's iteration runs a `kind: playbook`
task, whose playbook loops again and sees the enclosing iteration as `iter.parent` (and
`iter.parent.parent` one level further). Sequential and parallel at each level (never more
iterations in flight than allowed, read from the journal), `iter.parent` in templates and
`when`, isolation between outer iterations, the results' shape, and replay."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from aos.flows.define.document import load_flow
from aos.flows.serve import flow_operations as ops
from aos.kernel.audit import replay
from tests.flows_world.support import FlowWorld, make_flow_world

CITIES = [
    {"name": "Oslo", "hotels": ["a", "b", "c"]},
    {"name": "Rome", "hotels": ["d"]},
    {"name": "Lima", "hotels": ["e", "f"]},
]


def playbook(path: str, *steps: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "noetl.io/v2",
            "kind": "Playbook",
            "metadata": {"name": path.rsplit("/", 1)[-1], "path": path},
            "workflow": list(steps),
        },
        sort_keys=False,
    )


def loop_spec(mode: str, max_in_flight: int | None) -> dict[str, Any]:
    return (
        {"mode": mode} if max_in_flight is None else {"mode": mode, "max_in_flight": max_in_flight}
    )


def hotels(mode: str, max_in_flight: int | None = None) -> str:
    """The inner playbook: one python call per hotel of the enclosing city; a policy whose
    `when` reads the parent tags it; the iteration's result reads both levels."""
    spec = loop_spec(mode, max_in_flight)
    return playbook(
        f"lib/hotels_{mode}",
        {
            "step": "each_hotel",
            "loop": {"in": "{{ iter.parent.city.hotels }}", "iterator": "hotel", "spec": spec},
            "tool": [
                {
                    "name": "price",
                    "kind": "python",
                    "args": {"hotel": "{{ iter.hotel }}", "city": "{{ iter.parent.city.name }}"},
                    "code": "result = {'price': len(city) * 10 + ord(hotel) - 96}",
                    "spec": {
                        "policy": {
                            "rules": [
                                {
                                    "when": "{{ iter.parent.city.name == 'Oslo' }}",
                                    "then": {"do": "continue", "set_iter": {"label": "north"}},
                                },
                                {"else": {"then": {"do": "continue", "set_iter": {"label": "x"}}}},
                            ]
                        }
                    },
                },
                {
                    "name": "row",
                    "kind": "noop",
                    "args": {
                        "city": "{{ iter.parent.city.name }}",
                        "outer": "{{ iter.parent.index }}",
                        "hotel": "{{ iter.hotel }}",
                        "price": "{{ results.price.price }}",
                        "label": "{{ iter.label }}",
                        "parent_label": "{{ iter.parent.label }}",
                    },
                },
            ],
        },
    )


def cities(inner: str, mode: str, max_in_flight: int | None = None) -> str:
    """The outer playbook: a label in its own iteration, the inner playbook, then a row that
    reads its iteration again (an inner write must not reach it)."""
    spec = loop_spec(mode, max_in_flight)
    return playbook(
        f"lib/cities_{mode}",
        {
            "step": "each_city",
            "loop": {"in": "{{ workload.cities }}", "iterator": "city", "spec": spec},
            "tool": [
                {
                    "name": "mark",
                    "kind": "noop",
                    "spec": {
                        "policy": {
                            "rules": [
                                {
                                    "else": {
                                        "then": {
                                            "do": "continue",
                                            "set_iter": {"label": "outer {{ iter.city.name }}"},
                                        }
                                    }
                                }
                            ]
                        }
                    },
                },
                {"name": "hotels", "kind": "playbook", "path": inner},
                {
                    "name": "summary",
                    "kind": "noop",
                    "args": {
                        "label": "{{ iter.label }}",
                        "rows": "{{ results.hotels.results }}",
                        "stats": "{{ results.hotels.stats }}",
                    },
                },
            ],
            "next": {"arcs": [{"step": "total", "when": "{{ event.name == 'loop.done' }}"}]},
        },
        {
            "step": "total",
            "tool": {
                "kind": "python",
                "args": {"cities": "{{ each_city.results }}"},
                "code": "result = sum(r['price'] for c in cities for r in c['rows'])",
            },
        },
    )


@pytest.fixture(scope="module")
def flows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlowWorld]:
    path = tmp_path_factory.mktemp("nested") / "w"
    made = make_flow_world(path)
    try:
        yield made
    finally:
        made.world.close()
    report = replay.verify_replay(path)  # every execution of the module, children included
    assert report.ok, report.divergence


def run(flows: FlowWorld, exec_id: str, *documents: str) -> dict[str, Any]:
    """Deploy the documents (the last is started) and run until the end."""
    deployed = [ops.deploy(flows.world, load_flow(text, source="t")) for text in documents]
    ops.start(flows.world, deployed[-1].name, workload={"cities": CITIES}, exec_id=exec_id)
    flows.adapters.drain()
    return flows.state(exec_id)


def in_flight_max(flows: FlowWorld, exec_id: str) -> int:
    """The most iterations of the execution's loop that had started and not ended, after
    any journaled step."""
    running = most = 0
    for entry in ops.history(flows.world, exec_id):
        name = entry.event["event"]
        running += name == "loop.iteration.started"
        running -= name in ("loop.iteration.done", "loop.iteration.failed")
        most = max(most, running)
    return most


def children(flows: FlowWorld, exec_id: str) -> list[str]:
    return [e["child"] for e in flows.events(exec_id) if e["event"] == "child.started"]


def span(flows: FlowWorld, exec_id: str) -> tuple[int, int]:
    """The journal sequences of an execution's first and last step."""
    seqs = [entry.seq for entry in ops.history(flows.world, exec_id)]
    return seqs[0], seqs[-1]


def expected_rows(city: dict[str, Any], outer: int, label: str) -> list[dict[str, Any]]:
    return [
        {
            "city": city["name"],
            "outer": outer,
            "hotel": hotel,
            "price": len(city["name"]) * 10 + ord(hotel) - 96,
            "label": label,
            "parent_label": f"outer {city['name']}",
        }
        for hotel in city["hotels"]
    ]


def check_results(state: dict[str, Any]) -> None:
    """Item order at both levels; each outer iteration sees only its own city and keeps its
    own label; the inner label came from a `when` on the parent."""
    assert state["status"] == "completed"
    loop = state["business"]["steps"]["each_city"]
    assert loop["stats"] == {"total": 3, "success": 3, "failed": 0}
    for index, (city, result) in enumerate(zip(CITIES, loop["results"], strict=True)):
        label = "north" if city["name"] == "Oslo" else "x"
        assert result["label"] == f"outer {city['name']}"
        assert result["rows"] == expected_rows(city, index, label)
        total = len(city["hotels"])
        assert result["stats"] == {"total": total, "success": total, "failed": 0}
    prices = [r["price"] for c in loop["results"] for r in c["rows"]]
    assert state["business"]["steps"]["total"] == sum(prices)


def test_sequential_cities_parallel_hotels(flows: FlowWorld) -> None:
    state = run(flows, "seq", hotels("parallel", 2), cities("lib/hotels_parallel", "sequential"))
    check_results(state)
    kids = children(flows, "seq")
    assert len(kids) == 3
    spans = [span(flows, kid) for kid in kids]
    assert all(spans[i][1] < spans[i + 1][0] for i in range(2)), spans  # one city at a time
    assert [in_flight_max(flows, kid) for kid in kids] == [2, 1, 2]  # never more than 2


def test_parallel_cities_sequential_hotels(flows: FlowWorld) -> None:
    state = run(
        flows,
        "par",
        hotels("sequential"),
        cities("lib/hotels_sequential", "parallel", max_in_flight=2),
    )
    check_results(state)
    assert in_flight_max(flows, "par") == 2
    kids = children(flows, "par")
    assert [in_flight_max(flows, kid) for kid in kids] == [1, 1, 1]
    spans = [span(flows, kid) for kid in kids]
    assert spans[1][0] < spans[0][1]  # the first two cities overlap


ROOMS = playbook(
    "lib/rooms",
    {
        "step": "each_room",
        "loop": {"in": [1, 2], "iterator": "room"},
        "tool": {
            "kind": "python",
            "args": {
                "city": "{{ iter.parent.parent.city.name }}",
                "hotel": "{{ iter.parent.hotel }}",
                "room": "{{ iter.room }}",
            },
            "code": "result = f'{city}/{hotel}/{room}'",
        },
    },
)
HOTEL_ROOMS = playbook(
    "lib/hotel_rooms",
    {
        "step": "each_hotel",
        "loop": {"in": "{{ iter.parent.city.hotels }}", "iterator": "hotel"},
        "tool": {"kind": "playbook", "path": "lib/rooms"},
    },
)
CITY_ROOMS = playbook(
    "lib/city_rooms",
    {
        "step": "each_city",
        "loop": {"in": "{{ workload.cities }}", "iterator": "city", "spec": {"mode": "parallel"}},
        "tool": {"kind": "playbook", "path": "lib/hotel_rooms"},
    },
)


def test_three_levels_read_iter_parent_parent(flows: FlowWorld) -> None:
    state = run(flows, "rooms", ROOMS, HOTEL_ROOMS, CITY_ROOMS)
    assert state["status"] == "completed"
    rooms = [
        room
        for city in state["business"]["steps"]["each_city"]["results"]
        for hotel in city["results"]
        for room in hotel["results"]
    ]
    assert rooms == [
        f"{city['name']}/{hotel}/{room}"
        for city in CITIES
        for hotel in city["hotels"]
        for room in (1, 2)
    ]


def test_an_inner_write_to_iter_parent_fails_its_iteration(flows: FlowWorld) -> None:
    writer = playbook(
        "lib/writer",
        {
            "step": "each_hotel",
            "loop": {"in": "{{ iter.parent.city.hotels }}", "iterator": "hotel"},
            "tool": {
                "kind": "noop",
                "spec": {
                    "policy": {
                        "rules": [
                            {"else": {"then": {"do": "continue", "set_iter": {"parent.x": 1}}}}
                        ]
                    }
                },
            },
        },
    )
    outer = playbook(
        "lib/writer_outer",
        {
            "step": "each_city",
            "loop": {"in": "{{ workload.cities }}", "iterator": "city"},
            "tool": [{"name": "w", "kind": "playbook", "path": "lib/writer"}],
        },
    )
    state = run(flows, "writer", writer, outer)
    inner = state["business"]["steps"]["each_city"]["results"][0]
    assert inner["stats"] == {"total": 3, "success": 0, "failed": 3}
    assert "iter.parent is read-only" in inner["results"][0]["error"]["message"]
