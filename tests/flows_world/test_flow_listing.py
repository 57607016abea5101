"""Listing executions a page at a time (`aos flow ls`, `GET /v1/flows`, the inspector's flows
page; spec/11 §9.1): pages put end to end list every execution once; the flow and status
filters; a page stops at `limit` shown and at `scan_max` looked at, however many executions
the world has; bad parameters are typed refusals that change nothing."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.exceptions import StarletteDeprecationWarning

from aos.cli.main import main
from aos.flows.errors import FlowError
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.pages import add_flow_pages
from aos.flows.serve.routes import add_flow_routes
from aos.kernel.node import Node
from aos.kernel.node.app import create_app
from aos.kernel.node.inspector import add_inspector
from tests.auth_fixtures import authorize
from tests.flows_world.support import FlowWorld, make_flow_world
from tests.flows_world.test_flow_requests import QUICK_FLOW, WAIT_FLOW
from tests.test_world import engine

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

WAITING = 12  # t/wait executions, left running
QUICK = 9  # t/quick executions, completed


def _populated(path: Path) -> FlowWorld:
    made = make_flow_world(path)
    made.deploy(WAIT_FLOW)
    made.deploy(QUICK_FLOW)
    for n in range(WAITING):
        ops.start(made.world, "t/wait", exec_id=f"w{n}")
    for n in range(QUICK):
        ops.start(made.world, "t/quick", exec_id=f"q{n}")
    made.adapters.drain()
    return made


@pytest.fixture
def flows(tmp_path: Path) -> Iterator[FlowWorld]:
    made = _populated(tmp_path / "w")
    try:
        yield made
    finally:
        made.world.close()


def all_pages(
    flows: FlowWorld, wanted: ops.ExecutionFilter, limit: int, scan_max: int
) -> list[Any]:
    """Every page from the first, until one says it was the last."""
    pages, after = [], None
    while True:
        page = ops.listing(flows.world, wanted, ops.Page(after, limit, scan_max))
        pages.append(page)
        after = page["next_after"]
        if after is None:
            return pages
        assert len(pages) < 100, "the pages do not end"


def test_pages_end_to_end_list_every_execution_once(flows: FlowWorld) -> None:
    pages = all_pages(flows, ops.ExecutionFilter(), limit=5, scan_max=1000)
    shown = [e for page in pages for e in page["executions"]]
    assert sorted(e["exec"] for e in shown) == sorted(
        [f"w{n}" for n in range(WAITING)] + [f"q{n}" for n in range(QUICK)]
    )
    assert [len(page["executions"]) for page in pages] == [5, 5, 5, 5, 1]
    hashes = [e["key_hash"] for e in shown]
    assert hashes == sorted(hashes)  # key-hash order, across pages
    assert {page["count"] for page in pages} == {WAITING + QUICK}
    assert {e["status"] for e in shown if e["exec"].startswith("w")} == {"running"}
    assert {(e["flow"], e["status"]) for e in shown if e["exec"].startswith("q")} == {
        ("t/quick", "completed")
    }
    assert [f["name"] for f in pages[0]["flows"]] == ["t/quick", "t/wait"]


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        (ops.ExecutionFilter(flow="t/wait"), WAITING),
        (ops.ExecutionFilter(status="completed"), QUICK),
        (ops.ExecutionFilter(flow="t/quick", status="running"), 0),
        (ops.ExecutionFilter(flow="t/none"), 0),
        (ops.ExecutionFilter(status="cancelled"), 0),
    ],
)
def test_filters(flows: FlowWorld, wanted: ops.ExecutionFilter, expected: int) -> None:
    pages = all_pages(flows, wanted, limit=4, scan_max=1000)
    shown = [e for page in pages for e in page["executions"]]
    assert len(shown) == expected and all(wanted.keeps(e) for e in shown)


def test_a_page_looks_at_no_more_than_scan_max(flows: FlowWorld) -> None:
    # A filter that matches few executions: each page stops after scan_max looked at, says
    # where it stopped, and the pages together still find them all.
    wanted = ops.ExecutionFilter(status="completed")
    pages = all_pages(flows, wanted, limit=100, scan_max=4)
    assert len(pages) == -(-(WAITING + QUICK) // 4)  # ceil: every page looked at 4 (the last, 1)
    assert sum(len(page["executions"]) for page in pages) == QUICK
    assert all(len(page["executions"]) <= 4 for page in pages)


def test_the_edges_of_a_page(flows: FlowWorld) -> None:
    one = ops.listing(flows.world, page=ops.Page(limit=1))
    assert len(one["executions"]) == 1 and one["next_after"] == one["executions"][0]["key_hash"]
    most = ops.listing(flows.world, page=ops.Page(limit=ops.EXECUTIONS_PER_PAGE_MAX))
    assert len(most["executions"]) == WAITING + QUICK and most["next_after"] is None
    past_the_end = ops.listing(flows.world, page=ops.Page(after="f" * 64))
    assert past_the_end["executions"] == [] and past_the_end["next_after"] is None


@pytest.mark.parametrize(
    ("make", "path"),
    [
        (lambda: ops.Page(after="xyz"), "$query.after"),
        (lambda: ops.Page(after="A" * 64), "$query.after"),
        (lambda: ops.Page(limit=0), "$query.limit"),
        (lambda: ops.Page(limit=ops.EXECUTIONS_PER_PAGE_MAX + 1), "$query.limit"),
        (lambda: ops.Page(scan_max=ops.EXECUTIONS_SCAN_MAX + 1), "$query.scan_max"),
        (lambda: ops.ExecutionFilter(status="sleeping"), "$query.status"),
        (lambda: ops.ExecutionFilter(flow=""), "$query.flow"),
        (lambda: ops.ExecutionFilter(flow="x" * 129), "$query.flow"),
    ],
)
def test_bad_parameters_are_refused(make: Any, path: str) -> None:
    with pytest.raises(FlowError) as caught:
        make()
    assert (caught.value.code, caught.value.path) == ("flow.request_invalid", path)


# --------------------------------------------------------------------------------------------
# Over HTTP, in the inspector, and from the CLI


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    _populated(tmp_path / "w").world.close()
    with Node.open_path(tmp_path / "w", sync=False, engine=engine()) as node:
        app = create_app(node)
        add_flow_routes(app, node)
        inspector = add_inspector(app, node)
        add_flow_pages(app, inspector)
        yield authorize(TestClient(app), node)


def test_the_http_listing_pages_and_filters(client: TestClient) -> None:
    first = client.get("/v1/flows", params={"limit": 8, "status": "running"}).json()
    assert len(first["executions"]) == 8 and first["count"] == WAITING + QUICK
    rest = client.get(
        "/v1/flows", params={"after": first["next_after"], "status": "running", "limit": 8}
    ).json()
    names = {e["exec"] for e in first["executions"] + rest["executions"]}
    assert names == {f"w{n}" for n in range(WAITING)} and rest["next_after"] is None
    default = client.get("/v1/flows").json()
    assert len(default["executions"]) == WAITING + QUICK  # under the default page


@pytest.mark.parametrize(
    ("query", "status", "code", "path"),
    [
        ("bogus=1", 422, "request.invalid", "$query"),
        ("limit=1&limit=2", 422, "request.invalid", "$query"),
        ("limit=two", 422, "request.invalid", "$query.limit"),
        ("limit=0", 422, "request.invalid", "$query.limit"),
        ("limit=1001", 400, "node.limit_exceeded", "$query.limit"),
        ("after=zz", 400, "flow.request_invalid", "$query.after"),
        ("status=sleeping", 400, "flow.request_invalid", "$query.status"),
        ("flow=", 400, "flow.request_invalid", "$query.flow"),
    ],
)
def test_bad_http_queries_change_nothing(
    client: TestClient, query: str, status: int, code: str, path: str
) -> None:
    before = client.get("/v1/world").json()["height"]
    response = client.get(f"/v1/flows?{query}")
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error.get("path")) == (code, path)
    assert client.get("/v1/world").json()["height"] == before


def test_the_inspector_pages_executions(client: TestClient) -> None:
    first = client.get("/ui/flows", params={"limit": 10})
    assert first.status_code == 200
    assert f"({WAITING + QUICK} in all," in first.text and 'id="next-page"' in first.text
    running = client.get("/ui/flows", params={"status": "running", "limit": 10})
    assert running.text.count('class="badge running"') == 10
    assert "completed</span>" not in running.text
    refused = client.get("/ui/flows", params={"order": "nope"})
    assert refused.status_code == 400 and "flow.request_invalid" in refused.text


def test_the_cli_pages_executions(tmp_path: Path) -> None:
    _populated(tmp_path / "w").world.close()
    runner = CliRunner()
    world = str(tmp_path / "w")
    shown = runner.invoke(main, ["flow", "ls", "--world", world, "--limit", "4"])
    assert shown.exit_code == 0, shown.output
    assert f"{WAITING + QUICK} executions in all; more: --after " in shown.output
    listed = runner.invoke(
        main, ["flow", "ls", "--world", world, "--status", "completed", "--limit", "100", "--json"]
    )
    body = json.loads(listed.output)
    assert len(body["executions"]) == QUICK and body["next_after"] is None
    for bad in (["--status", "sleeping"], ["--limit", "0"], ["--limit", "1001"]):
        refused = runner.invoke(main, ["flow", "ls", "--world", world, *bad])
        assert refused.exit_code == 2, (bad, refused.output)
    after = runner.invoke(main, ["flow", "ls", "--world", world, "--after", "nope"])
    assert after.exit_code != 0 and "flow.request_invalid" in after.output
