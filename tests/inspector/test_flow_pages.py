"""The inspector's flow pages and their read model in process (FastAPI's TestClient over the
inspector's world, tests/inspector/world.py, built once): executions in the order they started,
searched and filtered and paged; an execution's history paged back to its start, with times;
its pending work with attempt, last error, next run and a person's task; the kernel's views
saying `running` and `failed` for execution cells, and "failed only" finding a failed flow;
and the actions (cancel, signal, retry, complete a task) behind their scopes and, sent with the
inspector's cookie, only from its own pages with their page token. Refusals change nothing."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

import pytest

from aos.flows.serve import execution_views as views
from aos.flows.serve.flow_world import EXEC_WORKFLOW, HUMAN_ADAPTER
from aos.flows.serve.pages import add_flow_pages
from aos.flows.serve.routes import add_flow_routes
from aos.kernel.node import Node
from aos.kernel.node import read_model as kernel_views
from aos.kernel.node.access import PAGE_TOKEN_HEADER, SESSION_COOKIE
from aos.kernel.node.app import create_app
from aos.kernel.node.human import HumanAdapter
from aos.kernel.node.identities import OPERATE, READ, SEND
from aos.kernel.node.inspector import add_inspector
from aos.kernel.node.times import RecordTimes
from aos.kernel.world.world import World
from tests.auth_fixtures import authorize, token_for
from tests.inspector.world import (
    ALL_EXECS,
    APPROVAL_EXEC,
    DONE_EXEC,
    FAILED_EXEC,
    FINANCE,
    LONG_EXEC,
    LONG_NAMES,
    PARSE_BUSINESS_REF,
    RETRYING_EXEC,
    SIGNAL_EXEC,
    TO_CANCEL_EXEC,
    TO_COMPLETE_EXEC,
    TO_RETRY_EXEC,
    TO_SIGNAL_EXEC,
    InspectorWorld,
    build,
)
from tests.test_node import TestClient
from tests.test_world import engine

ORIGIN = "http://testserver"  # the TestClient's host: the node's own pages


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> InspectorWorld:
    return build(tmp_path_factory.mktemp("inspector-flows"))


@pytest.fixture(scope="module")
def node(built: InspectorWorld) -> Iterator[Node]:
    human = HumanAdapter(HUMAN_ADAPTER, built.keys.seed(HUMAN_ADAPTER))
    with Node.open_path(built.path, sync=False, engine=engine(), human=human) as opened:
        yield opened


def client_of(node: Node) -> TestClient:
    app = create_app(node)
    add_flow_routes(app, node)
    add_flow_pages(app, add_inspector(app, node))
    return TestClient(app)


@pytest.fixture(scope="module")
def client(node: Node) -> TestClient:
    return authorize(client_of(node), node)


def browser_of(node: Node, scopes: tuple[str, ...], roles: tuple[str, ...] = ()) -> TestClient:
    """A client that logged in as a browser does: its session is the cookie."""
    browser = client_of(node)
    token = token_for(node, scopes, roles)
    answer = browser.post(
        "/ui/login", data={"token": token}, headers={"origin": ORIGIN}, follow_redirects=False
    )
    assert answer.status_code == 303 and browser.cookies.get(SESSION_COOKIE), answer.text
    return browser


def page_token_of(html: str) -> str:
    found = re.search(r'<meta name="aos-page-token" content="([0-9a-f]{64})"', html)
    assert found is not None, html[:600]
    return found.group(1)


def journal_of(client: TestClient) -> Any:
    return client.get("/v1/journal", params={"limit": 1000, "order": "desc"}).json()


def listed(html: str) -> list[str]:
    return re.findall(r'<tr data-exec="([^"]+)"', html)


# --------------------------------------------------------------------------------------------
# Executions


def test_executions_are_listed_newest_first_searched_filtered_and_paged(
    client: TestClient,
) -> None:
    newest = listed(client.get("/ui/flows").text)
    assert len(newest) == ALL_EXECS and newest[:3] == [RETRYING_EXEC, TO_RETRY_EXEC, FAILED_EXEC]
    assert listed(client.get("/ui/flows", params={"order": "oldest"}).text) == newest[::-1]
    searched = client.get("/ui/flows", params={"q": PARSE_BUSINESS_REF.upper()}).text
    assert listed(searched) == [RETRYING_EXEC, TO_RETRY_EXEC, FAILED_EXEC]
    assert 'id="exact"' not in searched
    exact = client.get("/ui/flows", params={"q": LONG_EXEC}).text
    assert listed(exact) == [LONG_EXEC] and 'id="exact"' in exact
    by_flow = listed(client.get("/ui/flows", params={"q": "t/parse-retry"}).text)
    assert by_flow == [RETRYING_EXEC]
    failed = listed(client.get("/ui/flows", params={"status": "failed"}).text)
    assert failed == [TO_RETRY_EXEC, FAILED_EXEC]
    pages, cursor = [], None
    while True:
        params = {"limit": 4, **({"cursor": cursor} if cursor is not None else {})}
        html = client.get("/ui/flows", params=params).text
        pages.append(listed(html))
        found = re.search(r'id="next-page" href="[^"]*cursor=(\d+)', html)
        if found is None:
            break
        cursor = int(found.group(1))
    assert [len(p) for p in pages] == [4, 4, 2] and [e for p in pages for e in p] == newest


def test_a_listing_row_has_its_start_time_and_how_long_it_ran(
    client: TestClient, node: Node
) -> None:
    def row_of(world: World) -> dict[str, Any]:
        page = views.executions(
            world,
            views.ExecutionSearch(LONG_EXEC),
            cursor=None,
            limit=1,
            scan_max=10_000,
            times=RecordTimes(world),
        )
        return dict(page["executions"][0])

    row = node.host.call(row_of)
    assert row["exec"] == LONG_EXEC and row["status"] == "completed"
    assert row["duration_ns"] > 0 and row["last_seq"] > row["started_seq"]
    html = client.get("/ui/flows", params={"q": LONG_EXEC}).text
    iso = re.search(
        r"<td class=\"mono time\"[^>]*>(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)</td>", html
    )
    assert iso is not None
    assert re.search(r"<td class=\"mono\">PT\d+(\.\d+)?S</td>", html)


def test_a_bad_listing_parameter_is_an_error_page_and_changes_nothing(
    client: TestClient,
) -> None:
    before = journal_of(client)
    for params, status, code in [
        ({"order": "sideways"}, 400, "flow.request_invalid"),
        ({"q": "x" * (views.SEARCH_CHARS_MAX + 1)}, 400, "flow.request_invalid"),
        ({"limit": 0}, 400, "query.invalid"),
        ({"limit": 100_000}, 400, "node.limit_exceeded"),
        ({"status": "odd"}, 400, "flow.request_invalid"),
        ({"cursor": -3}, 400, "query.invalid"),
    ]:
        response = client.get("/ui/flows", params=params)
        assert response.status_code == status, (params, response.text[:400])
        assert f"<h1>{code}</h1>" in response.text, params
    for path, status, code in [
        ("/ui/flows/executions/nobody", 404, "flow.execution_unknown"),
        (f"/ui/flows/executions/{LONG_EXEC}?before=5&after=5", 400, "flow.request_invalid"),
        (f"/ui/flows/executions/{LONG_EXEC}?limit=0", 400, "query.invalid"),
    ]:
        response = client.get(path)
        assert response.status_code == status, (path, response.text[:400])
        assert f"<h1>{code}</h1>" in response.text, path
    assert journal_of(client) == before
    at_most = client.get("/ui/flows", params={"q": "x" * views.SEARCH_CHARS_MAX})
    assert at_most.status_code == 200 and listed(at_most.text) == []


# --------------------------------------------------------------------------------------------
# One execution


def history_rows(html: str) -> list[int]:
    return [int(seq) for seq in re.findall(r'<tr data-seq="(\d+)"', html.split('id="history"')[1])]


def test_a_long_history_is_paged_back_to_its_start_and_forward_again(
    client: TestClient,
) -> None:
    everything = client.get(f"/v1/executions/{LONG_EXEC}/events", params={"limit": 1000}).json()[
        "events"
    ]
    assert len(everything) > 4 * LONG_NAMES  # a long history: more than a page
    newest, last = walk(client, f"/ui/flows/executions/{LONG_EXEC}?limit=40", "history-older")
    assert newest == sorted(newest, reverse=True)
    assert sorted(set(newest)) == sorted({e["seq"] for e in everything})
    assert "playbook.started" in last  # the last page older reaches is the start
    oldest, _ = walk(client, f"/ui/flows/executions/{LONG_EXEC}?after=0&limit=40", "history-newer")
    assert oldest == sorted(oldest) and sorted(set(oldest)) == sorted(set(newest))


def walk(client: TestClient, path: str, link: str) -> tuple[list[int], str]:
    """The history rows of the pages from `path` on, following the link `link`; the last
    page."""
    found: list[int] = []
    while True:
        html = client.get(path).text
        found += history_rows(html)
        following = re.search(f'id="{link}" href="([^"]+)"', html)
        if following is None:
            return found, html
        path = following.group(1).replace("&amp;", "&")


def test_history_events_have_iso_times_since_the_start_and_between(node: Node) -> None:
    def page(world: World) -> dict[str, Any]:
        return views.history(
            world,
            LONG_EXEC,
            before=None,
            after=0,
            limit=30,
            scan_max=10_000,
            times=RecordTimes(world),
        )

    found = node.host.call(page)
    events = found["events"]
    assert events[0]["line"].startswith("playbook.started") and events[0]["since_ns"] == 0
    assert events[0]["delta_ns"] is None  # nothing before the start
    for earlier, later in itertools.pairwise(events):
        assert later["since_ns"] >= earlier["since_ns"] >= 0
        assert later["delta_ns"] == later["time"]["wall_ns"] - earlier["time"]["wall_ns"]


def test_a_failed_execution_shows_why_where_and_offers_a_retry(client: TestClient) -> None:
    html = client.get(f"/ui/flows/executions/{FAILED_EXEC}").text
    box = html.split('id="execution-error"')[1].split("</section>")[0]
    assert "Why it failed" in box and "fetch.parse" in box
    assert "python.raised" in box and "invalid literal for int()" in box
    assert 'id="retry-form"' in html and 'id="cancel-form"' not in html
    assert f'id="business-ref">{PARSE_BUSINESS_REF}<' in html
    assert re.search(r'id="started-at">\d{4}-\d\d-\d\dT[\d:.]+Z<', html)


def test_pending_work_has_its_attempt_last_error_next_run_and_task(client: TestClient) -> None:
    retrying = client.get(f"/ui/flows/executions/{RETRYING_EXEC}").text
    row = retrying.split('data-kind="retry"')[1].split("</tr>")[0]
    assert re.search(r'class="num attempt">1<', row)
    assert "python.raised" in row and "invalid literal" in row
    assert "+PT30S" in row and "the next attempt" in row  # due at the world's 30 s (manual)
    waiting = client.get(f"/ui/flows/executions/{APPROVAL_EXEC}").text
    human = waiting.split('data-kind="human"')[1].split("</tr>")[0]
    assert "Approve order A-7 for 250 EUR" in human and FINANCE in human
    assert 'class="task-assignee">anyone<' in human and 'id="complete-' in human
    timeout = waiting.split('data-kind="timeout"')[1].split("</tr>")[0]
    assert "+P1D" in timeout


# --------------------------------------------------------------------------------------------
# The kernel's views of execution cells


def test_kernel_views_say_running_and_failed_for_execution_cells(client: TestClient) -> None:
    def cell(exec_id: str) -> dict[str, Any]:
        key = f'"{exec_id}"'
        return dict(client.get("/v1/cell", params={"workflow": EXEC_WORKFLOW, "key": key}).json())

    assert cell(SIGNAL_EXEC)["status"] == "running"
    assert cell(FAILED_EXEC)["status"] == "failed"
    # The kernel's own views know flow cells too (flows/serve/cell_status.py): both say failed.
    assert cell(FAILED_EXEC)["kernel_status"] == "failed"
    assert cell(DONE_EXEC)["status"] == "completed"
    failed = client.get(f"/v1/cells/{EXEC_WORKFLOW}", params={"status": "failed"}).json()
    assert {c["key"] for c in failed["cells"]} >= {FAILED_EXEC, TO_RETRY_EXEC}
    overview = client.get("/v1/overview").json()
    assert overview["workflows"][EXEC_WORKFLOW]["failed"] >= 2
    only_failed = client.get(
        "/v1/journal", params={"failed": "true", "workflow": EXEC_WORKFLOW, "limit": 1000}
    ).json()
    assert len(only_failed["records"]) >= 2
    page = client.get("/ui/journal", params={"failed": "true", "workflow": EXEC_WORKFLOW}).text
    assert FAILED_EXEC in page


def test_the_overview_counts_derived_failures_among_a_bounded_number_of_cells(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = client.get("/v1/overview").json()["workflows"][EXEC_WORKFLOW]
    assert counts["failed_counted"] == counts["cells"] == ALL_EXECS and counts["failed"] >= 2
    monkeypatch.setattr(kernel_views, "DERIVED_STATUS_CELLS_MAX", 3)
    bounded = client.get("/v1/overview").json()["workflows"][EXEC_WORKFLOW]
    assert bounded["failed_counted"] == 3 and bounded["failed"] <= 3
    assert 'title="among the first 3 cells"' in client.get("/ui").text


# --------------------------------------------------------------------------------------------
# Actions


def test_an_action_with_the_cookie_needs_the_page_token_and_the_nodes_origin(
    node: Node, client: TestClient
) -> None:
    browser = browser_of(node, (READ, OPERATE))
    html = browser.get(f"/ui/flows/executions/{TO_CANCEL_EXEC}").text
    token = page_token_of(html)
    assert 'id="cancel-form"' in html and "disabled" not in html.split('id="cancel-form"')[1][:200]
    path = f"/v1/executions/{TO_CANCEL_EXEC}/cancel"
    before = journal_of(client)
    for headers in (
        {"origin": ORIGIN},  # the cookie alone
        {"origin": ORIGIN, PAGE_TOKEN_HEADER: "0" * 64},  # a token not of this session
        {"origin": "https://elsewhere.example", PAGE_TOKEN_HEADER: token},  # another site
        {PAGE_TOKEN_HEADER: token},  # no origin at all
    ):
        refused = browser.post(path, json={"reason": "no"}, headers=headers)
        assert refused.status_code == 403, (headers, refused.text)
        assert refused.json()["error"]["code"] == "auth.cross_site"
    assert journal_of(client) == before
    done = browser.post(
        path, json={"reason": "asked"}, headers={"origin": ORIGIN, PAGE_TOKEN_HEADER: token}
    )
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "cancelled"
    other = browser_of(node, (READ, OPERATE))  # another session's token is another token
    assert page_token_of(other.get("/ui").text) != token


def test_an_action_the_caller_may_not_take_is_shown_disabled_and_refused(
    node: Node, client: TestClient
) -> None:
    viewer = browser_of(node, (READ,))
    html = viewer.get(f"/ui/flows/executions/{TO_SIGNAL_EXEC}").text
    form = html.split('id="signal-form"')[1].split("</form>")[0]
    assert "<fieldset disabled>" in form and f"needs the {OPERATE} scope" in form
    token = page_token_of(html)
    before = journal_of(client)
    refused = viewer.post(
        f"/v1/executions/{TO_SIGNAL_EXEC}/signal",
        json={"name": "warehouse.packed", "payload": None},
        headers={"origin": ORIGIN, PAGE_TOKEN_HEADER: token},
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "auth.forbidden"
    assert journal_of(client) == before


def test_a_signal_from_the_page_reaches_the_execution(node: Node, client: TestClient) -> None:
    operator = browser_of(node, (READ, OPERATE))
    html = operator.get(f"/ui/flows/executions/{TO_SIGNAL_EXEC}").text
    name = re.search(r'id="signal-name" required size="18" maxlength="128" value="([^"]*)"', html)
    assert name is not None and name.group(1)  # the open wait's signal, filled in
    sent = operator.post(
        f"/v1/executions/{TO_SIGNAL_EXEC}/signal",
        json={"name": name.group(1), "payload": {"parcels": 2}},
        headers={"origin": ORIGIN, PAGE_TOKEN_HEADER: page_token_of(html)},
    )
    assert sent.status_code == 200, sent.text
    events = client.get(f"/v1/executions/{TO_SIGNAL_EXEC}/events").json()["events"]
    assert any(e["event"] == "signal.received" for e in events)


def test_retrying_a_failed_execution_starts_it_again_as_a_new_one(
    node: Node, client: TestClient
) -> None:
    sender = browser_of(node, (READ, SEND))
    html = sender.get(f"/ui/flows/executions/{TO_RETRY_EXEC}").text
    headers = {"origin": ORIGIN, PAGE_TOKEN_HEADER: page_token_of(html)}
    before = journal_of(client)
    for exec_id, code in (
        (SIGNAL_EXEC, "flow.execution_not_retryable"),
        (DONE_EXEC, "flow.execution_not_retryable"),
        ("nobody", "flow.execution_unknown"),
    ):
        refused = sender.post(f"/v1/executions/{exec_id}/retry", json={}, headers=headers)
        assert refused.json()["error"]["code"] == code, refused.text
        assert refused.status_code in (404, 409)
    taken = sender.post(
        f"/v1/executions/{TO_RETRY_EXEC}/retry", json={"exec": FAILED_EXEC}, headers=headers
    )
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "flow.execution_exists"
    assert journal_of(client) == before
    again = sender.post(
        f"/v1/executions/{TO_RETRY_EXEC}/retry", json={"exec": "parse-again"}, headers=headers
    )
    assert again.status_code == 200, again.text
    assert again.json()["retry_of"] == TO_RETRY_EXEC
    assert again.json()["status"] == "running"  # its python task waits for the adapter
    first = client.get(f"/v1/executions/{TO_RETRY_EXEC}").json()
    second = client.get("/v1/executions/parse-again").json()
    assert (second["flow"], second["version"]) == (first["flow"], first["version"])
    assert second["business"]["business_ref"] == PARSE_BUSINESS_REF
    assert first["status"] == "failed"  # the one retried stays as it ended


def test_a_persons_task_is_completed_from_the_execution_page(
    node: Node, client: TestClient
) -> None:
    clerk = browser_of(node, (READ, "task"), roles=(FINANCE,))
    html = clerk.get(f"/ui/flows/executions/{TO_COMPLETE_EXEC}").text
    found = re.search(r'data-path="(/v1/tasks/(blake3:[0-9a-f]{64})/complete)"', html)
    assert found is not None
    done = clerk.post(
        found.group(1),
        json={"status": "ok", "payload": {"approved": True}},
        headers={"origin": ORIGIN, PAGE_TOKEN_HEADER: page_token_of(html)},
    )
    assert done.status_code == 200, done.text
    events = client.get(f"/v1/executions/{TO_COMPLETE_EXEC}/events").json()["events"]
    assert any(e["event"] == "human.task.completed" for e in events)
