"""Bad flow requests are typed refusals that change nothing (spec/11-flows.md §8): on an
embedded world (the world's height, journal tail, registry and execution states are as before)
and over the node's HTTP API (`/v1/flows`, `/v1/executions`), with their HTTP statuses."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning

from aos.flows.errors import FlowError
from aos.flows.limits import DEFINITION_BYTES_MAX
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import EXEC_WORKFLOW, REGISTRY_WORKFLOW
from aos.flows.serve.routes import add_flow_routes
from aos.kernel import cbor
from aos.kernel.hashing import hash_value
from aos.kernel.node import Node, NodeLimits
from aos.kernel.node.app import create_app
from aos.kernel.node.worlds import MountedWorld, WorldsRouter
from tests.auth_fixtures import authorize
from tests.flows_world.support import FlowWorld, make_flow_world
from tests.test_world import engine

with warnings.catch_warnings():
    # Starlette's test client warns that it will move to another HTTP library; not ours to fix.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

WAIT_FLOW = """
name: t/wait
steps:
  - name: hold
    tasks:
      - {name: go, do: wait_signal, signal: go}
    next: done
  - name: done
    tasks:
      - {do: noop, result: {ok: true}}
"""

QUICK_FLOW = """
name: t/quick
steps:
  - name: only
    tasks:
      - {do: noop, result: 1}
"""

BAD_FLOW = """
name: t/bad
steps:
  - name: a
    tasks:
      - {do: call, tool: {kind: carrier_pigeon}}
    next: nowhere
  - name: a
    tasks:
      - {do: noop, result: "{{ unclosed "}
"""

BAD_CODES = {"flow.tool_unknown", "flow.step_unknown", "flow.step_duplicate"}


def oversized_flow() -> str:
    """A definition whose text is one byte over definition_bytes_max."""
    head = "name: t/big\nsteps:\n  - name: a\n    tasks: []\ndescription: "
    return head + "x" * (DEFINITION_BYTES_MAX + 1 - len(head))


def check_problems(problems: list[dict[str, Any]]) -> None:
    assert {p["code"] for p in problems} >= BAD_CODES, problems
    for problem in problems:
        assert problem["path"].startswith("$"), problem
        assert problem["message"], problem
    paths = {p["code"]: p["path"] for p in problems}
    assert paths["flow.tool_unknown"] == "$.steps[0].tasks[0].tool.kind"
    assert paths["flow.step_unknown"].startswith("$.steps[0].next")


# --------------------------------------------------------------------------------------------
# An embedded world


@pytest.fixture
def flows(tmp_path: Path) -> Iterator[FlowWorld]:
    made = make_flow_world(tmp_path / "w")
    try:
        made.deploy(WAIT_FLOW)
        made.deploy(QUICK_FLOW)
        ops.start(made.world, "t/wait", exec_id="w1")
        ops.start(made.world, "t/quick", exec_id="done1")
        made.adapters.drain()
        assert made.state("w1")["status"] == "running"
        assert made.state("done1")["status"] == "completed"
        yield made
    finally:
        made.world.close()


def fingerprint(flows: FlowWorld) -> dict[str, Any]:
    """Everything a refused request must leave as it was."""
    world = flows.world
    height = world.height
    [(seq, tail)] = list(world.store.journal.read(height, height))
    return {
        "height": height,
        "head": world.store.journal.head(),
        "tail": (seq, str(hash_value(tail))),
        "listing": cbor.encode(ops.listing(world)),
        "registry": {
            str(c.key): cbor.encode(world.reader.state(REGISTRY_WORKFLOW, c.key))
            for c in world.reader.cells(REGISTRY_WORKFLOW)
        },
        "executions": {
            str(c.key): cbor.encode(world.reader.state(EXEC_WORKFLOW, c.key))
            for c in world.reader.cells(EXEC_WORKFLOW)
        },
        "open_intents": cbor.encode(world.reader.open_intents()),
    }


def refused(flows: FlowWorld, code: str, request: Callable[[], Any]) -> FlowError:
    before = fingerprint(flows)
    with pytest.raises(FlowError) as caught:
        request()
    assert caught.value.code == code, caught.value
    assert fingerprint(flows) == before, code
    return caught.value


def test_refused_requests_change_nothing_on_an_embedded_world(flows: FlowWorld) -> None:
    world = flows.world

    invalid = refused(flows, "flow.invalid", lambda: flows.deploy(BAD_FLOW))
    check_problems(invalid.to_dict()["problems"])
    too_large = refused(flows, "flow.too_large", lambda: flows.deploy(oversized_flow()))
    assert too_large.detail["limit"] == DEFINITION_BYTES_MAX

    refused(flows, "flow.unknown", lambda: ops.start(world, "t/none", exec_id="n1"))
    refused(
        flows, "flow.version_unknown", lambda: ops.start(world, "t/wait", exec_id="n1", version=2)
    )
    refused(flows, "flow.execution_exists", lambda: ops.start(world, "t/wait", exec_id="w1"))
    refused(flows, "flow.execution_exists", lambda: ops.start(world, "t/quick", exec_id="done1"))
    for bad_id in ["", "bad id", "-x", "a:b", "a~b", "x" * 129, "é", "a/events", "e/x/events"]:
        error = refused(
            flows, "flow.request_invalid", lambda i=bad_id: ops.start(world, "t/wait", exec_id=i)
        )
        assert error.path == "$.exec"
    for not_data in [{"x": object()}, {"n": 2**70}, {"s": {1, 2}}]:
        error = refused(
            flows,
            "flow.request_invalid",
            lambda w=not_data: ops.start(world, "t/wait", exec_id="n1", workload=w),
        )
        assert error.path == "$.workload"
    for reserved in ops.RESERVED_WORKLOAD_KEYS:  # what the interpreter tells its children
        error = refused(
            flows,
            "flow.request_invalid",
            lambda k=reserved: ops.start(world, "t/wait", exec_id="n1", workload={k: {}}),
        )
        assert error.path == f"$.workload.{reserved}"

    refused(flows, "flow.execution_unknown", lambda: ops.signal(world, "nope", "go"))
    refused(flows, "flow.execution_unknown", lambda: ops.cancel(world, "nope"))
    refused(flows, "flow.execution_unknown", lambda: ops.status(world, "nope"))
    refused(flows, "flow.execution_unknown", lambda: ops.history(world, "nope"))
    refused(flows, "flow.execution_ended", lambda: ops.signal(world, "done1", "go"))
    refused(flows, "flow.execution_ended", lambda: ops.cancel(world, "done1", "late"))
    for bad_name in ["", "bad name", "1go", "x" * 129]:
        error = refused(
            flows, "flow.request_invalid", lambda n=bad_name: ops.signal(world, "w1", n)
        )
        assert error.path == "$.name"
    error = refused(
        flows, "flow.request_invalid", lambda: ops.signal(world, "w1", "go", expect_version=-1)
    )
    assert error.path == "$.expect_version"
    error = refused(
        flows, "flow.request_invalid", lambda: ops.signal(world, "w1", "go", {object()})
    )
    assert error.path == "$.payload"

    # Nothing moved, so the waiting execution still takes its signal and completes.
    assert flows.state("w1")["status"] == "running"
    ops.signal(world, "w1", "go", {"n": 1})
    assert flows.state("w1")["status"] == "completed"
    refused(flows, "flow.execution_ended", lambda: ops.signal(world, "w1", "go"))


def test_redeploying_the_latest_definition_changes_nothing(flows: FlowWorld) -> None:
    before = fingerprint(flows)
    again = flows.deploy(WAIT_FLOW)
    assert (again.version, again.changed) == (1, False)
    assert fingerprint(flows) == before


# --------------------------------------------------------------------------------------------
# Over the node's HTTP API

REQUEST_BYTES_MAX = 3 * DEFINITION_BYTES_MAX


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    made = make_flow_world(tmp_path / "w")
    made.world.close()
    limits = NodeLimits(request_bytes_max=REQUEST_BYTES_MAX)
    with Node.open_path(made.path, sync=False, engine=engine(), limits=limits) as node:
        app = create_app(node)
        add_flow_routes(app, node)
        yield authorize(TestClient(app), node)


def ok(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_refused_http_requests_change_nothing(client: TestClient) -> None:
    assert ok(client.post("/v1/flows", json={"text": WAIT_FLOW}))["version"] == 1
    assert ok(client.post("/v1/flows", json={"text": QUICK_FLOW, "source": "quick.yaml"}))
    started = ok(client.post("/v1/flows/t%2Fwait/run", json={"exec": "w1", "workload": {"a": 1}}))
    assert (started["exec"], started["status"]) == ("w1", "running")
    done = ok(client.post("/v1/flows/t%2Fquick/run", json={"exec": "done1"}))
    assert done["status"] == "completed"

    def state() -> tuple[Any, ...]:
        world = ok(client.get("/v1/world"))
        journal = ok(client.get("/v1/journal", params={"from": 1, "limit": 1000}))["records"]
        return world["height"], world["open_intents"], ok(client.get("/v1/flows")), journal

    def refused_http(
        status: int, code: str, method: str, path: str, **request: Any
    ) -> dict[str, Any]:
        before = state()
        response = client.request(method, path, **request)
        assert response.status_code == status, (path, response.text)
        error: dict[str, Any] = response.json()["error"]
        assert error["code"] == code, (path, error)
        assert state() == before, (path, code)
        return error

    post = "POST"
    invalid = refused_http(400, "flow.invalid", post, "/v1/flows", json={"text": BAD_FLOW})
    check_problems(invalid["problems"])
    refused_http(400, "flow.decode", post, "/v1/flows", json={"text": "a: 1\na: 2\n"})
    refused_http(413, "flow.too_large", post, "/v1/flows", json={"text": oversized_flow()})

    refused_http(404, "flow.unknown", post, "/v1/flows/t%2Fnone/run", json={})
    refused_http(404, "flow.version_unknown", post, "/v1/flows/t%2Fwait/run", json={"version": 2})
    refused_http(409, "flow.execution_exists", post, "/v1/flows/t%2Fwait/run", json={"exec": "w1"})
    for bad_id in ["bad id", "a:b", "x" * 129]:
        error = refused_http(
            400, "flow.request_invalid", post, "/v1/flows/t%2Fwait/run", json={"exec": bad_id}
        )
        assert error["path"] == "$.exec"
    for not_data in [{"n": 2**70}, {"b": {"$bytes": "zz"}}]:
        error = refused_http(
            400,
            "flow.request_invalid",
            post,
            "/v1/flows/t%2Fwait/run",
            json={"exec": "n1", "workload": not_data},
        )
        assert error["path"].startswith("$.workload"), error

    unknown = "flow.execution_unknown"
    refused_http(404, unknown, post, "/v1/executions/nope/signal", json={"name": "go"})
    refused_http(404, unknown, post, "/v1/executions/nope/cancel", json={})
    refused_http(404, unknown, "GET", "/v1/executions/nope")
    refused_http(404, unknown, "GET", "/v1/executions/nope/events")
    refused_http(
        409, "flow.execution_ended", post, "/v1/executions/done1/signal", json={"name": "go"}
    )
    refused_http(409, "flow.execution_ended", post, "/v1/executions/done1/cancel", json={})
    error = refused_http(
        400, "flow.request_invalid", post, "/v1/executions/w1/signal", json={"name": "bad name"}
    )
    assert error["path"] == "$.name"

    # Bodies that do not fit the request models.
    for path, body in [
        ("/v1/flows", {}),
        ("/v1/flows", {"text": 5}),
        ("/v1/flows", {"text": WAIT_FLOW, "extra": 1}),
        ("/v1/flows/t%2Fwait/run", {"version": 0}),
        ("/v1/flows/t%2Fwait/run", {"exec": "n1", "bogus": True}),
        ("/v1/executions/w1/signal", {}),
        ("/v1/executions/w1/signal", {"name": "go", "expect_version": -1}),
        ("/v1/executions/w1/signal", {"name": "x" * 129}),
        ("/v1/executions/w1/cancel", {"reason": 5}),
    ]:
        refused_http(422, "request.invalid", post, path, json=body)
    padding = b" " * (REQUEST_BYTES_MAX + 1)
    refused_http(
        413,
        "request.too_large",
        post,
        "/v1/flows",
        content=b'{"text": "name: t/x"}' + padding,
        headers={"content-type": "application/json"},
    )

    # Nothing moved: the waiting execution still completes on its signal.
    signalled = ok(client.post("/v1/executions/w1/signal", json={"name": "go", "payload": [1]}))
    assert signalled == {
        "exec": "w1",
        "name": "go",
        "seq": signalled["seq"],
        "outcome": "delivered",
        "status": "completed",
    }
    events = ok(client.get("/v1/executions/w1/events"))["events"]
    assert [e["event"] for e in events][-1] == "playbook.finished"
    assert all(isinstance(e["seq"], int) for e in events)


def test_playbooks_deploy_over_http_and_a_broken_one_changes_nothing(client: TestClient) -> None:
    hello = Path(__file__).resolve().parents[2] / "flows" / "examples" / "hello.yaml"
    deployed = ok(client.post("/v1/flows", json={"text": hello.read_text(), "source": "h.yaml"}))
    assert (deployed["name"], deployed["version"]) == ("examples/hello-playbook", 1)
    before = ok(client.get("/v1/world"))["height"], ok(client.get("/v1/flows"))
    broken = hello.read_text().replace("kind: python", "kind: carrier_pigeon", 1)
    response = client.post("/v1/flows", json={"text": broken})
    assert response.status_code == 400
    [problem] = response.json()["error"]["problems"]
    assert (problem["code"], problem["path"]) == (
        "playbook.tool_unknown",
        "$.workflow[0].tool.kind",
    )
    assert (ok(client.get("/v1/world"))["height"], ok(client.get("/v1/flows"))) == before


def test_status_fast_path_answers_as_the_fastapi_route(tmp_path: Path) -> None:
    """`GET /v1/executions/{exec}` is served ahead of FastAPI (a client polls it while an
    execution runs), and so is `.../events`: the same bytes and statuses as the FastAPI
    routes of the same paths, for a running, a finished, an unknown and a slash-named
    execution, with and without their queries. A refused read changes nothing."""
    made = make_flow_world(tmp_path / "w")
    made.world.close()
    with Node.open_path(made.path, sync=False, engine=engine()) as node:
        fast, plain = create_app(node), create_app(node)
        add_flow_routes(fast, node)
        add_flow_routes(plain, node)
        plain.state.fast_reads.clear()  # before its first request: FastAPI answers all
        # Without their FastAPI routes, `fast` answers these only through the fast path.
        fast_only = {"/v1/executions/{exec_id:path}", "/v1/executions/{exec_id:path}/events"}
        fast.router.routes[:] = [
            r for r in fast.router.routes if getattr(r, "path", "") not in fast_only
        ]
        with (
            authorize(TestClient(fast), node) as client,
            authorize(TestClient(plain), node) as reference,
        ):
            ok(client.post("/v1/flows", json={"text": WAIT_FLOW}))
            ok(client.post("/v1/flows", json={"text": QUICK_FLOW}))
            ok(client.post("/v1/flows/t%2Fwait/run", json={"exec": "w1"}))
            ok(client.post("/v1/flows/t%2Fquick/run", json={"exec": "a/b"}))
            height = ok(client.get("/v1/world"))["height"]
            paths = ["w1", "a/b", "nope", "", "events", "w1/events", "a/b/events", "nope/events"]
            # The long-poll's query is read by the same checks on both routes.
            paths += ["w1?wait_ms=1", "a/b?wait_ms=5000", "nope?wait_ms=5", "w1?wait_ms=x"]
            paths += ["w1?wait_ms=99999999", "w1?other=1", "w1?wait_ms=1&wait_ms=2"]
            paths += ["w1/events?after=1&limit=1", "a/b/events?after=2&wait_ms=9&limit=1000"]
            paths += ["w1/events?wait_ms=1", "w1/events?limit=0", "w1/events?after=-1"]
            paths += ["nope/events?wait_ms=5", "a/b/events?after=1&after=2", "w1/events?x=1"]
            for path in paths:
                got = client.get(f"/v1/executions/{path}")
                want = reference.get(f"/v1/executions/{path}")
                assert (got.status_code, got.content) == (want.status_code, want.content), path
            running = ok(client.get("/v1/executions/w1"))
            state = cbor.to_json(node.host.call(lambda w: ops.shown_status(w, "w1")))
            assert running == {**state, "error": None}  # why it failed: it has not
            assert running["status"] == "running"
            assert ok(client.get("/v1/executions/a/b"))["status"] == "completed"
            unknown = client.get("/v1/executions/nope")
            assert (unknown.status_code, unknown.json()["error"]["code"]) == (
                404,
                "flow.execution_unknown",
            )
            # Behind a mount (several worlds per process) the route is the path after it.
            mounted = MountedWorld(
                "one", node.world_id, fast, lambda _: {}, lambda: None, lambda: None
            )
            process = authorize(
                TestClient(WorldsRouter([mounted])), node
            )  # no lifespan: as uvicorn runs it
            for path in ["w1", "a/b", "nope"]:
                got = process.get(f"/worlds/one/v1/executions/{path}")
                want = reference.get(f"/v1/executions/{path}")
                assert (got.status_code, got.content) == (want.status_code, want.content)
            assert ok(client.get("/v1/world"))["height"] == height
