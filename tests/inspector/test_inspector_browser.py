"""The web inspector in a real browser: Debian's chromium, driven by Playwright, against a real
`aos node up` on loopback serving a world with counter cells, flow executions waiting on a
person and a signal (open intents), a rejected event, and a shadowed governance proposal
(tests/inspector/world.py). The tests check what the pages say against what the world has,
that the filters narrow it, that paging by key walks it once, that a record sent during the
test reaches the live tail, and that markup in the data stays text. Screenshots of the
overview, a cell timeline, a shadow report and a flow execution go to build/screenshots/.

Never `playwright install`: the browser is the system's (`apt-get install chromium`)."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from aos.kernel.node.inspector import JOURNAL_ROWS
from tests.auth_fixtures import admin_headers
from tests.inspector.world import (
    ALL_EXECS,
    APPROVAL_EXEC,
    COUNTER,
    COUNTER_EVENT,
    DONE_EXEC,
    EXEC,
    FAILED_EXEC,
    LONG_EXEC,
    MARKUP_KEY,
    PARSE_BUSINESS_REF,
    RETRYING_EXEC,
    SIGNAL_EXEC,
    TO_CANCEL_EXEC,
    TO_RETRY_EXEC,
    UNROUTED_EVENT,
    InspectorWorld,
    build,
)
from tests.test_node_process import node_process
from tests.test_world import inc

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
pytestmark = pytest.mark.ui

SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
WAIT_MS = 10_000
ISO_INSTANT = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"


@pytest.fixture(scope="module")
def built() -> Iterator[InspectorWorld]:
    with tempfile.TemporaryDirectory(prefix="aos-inspector-") as root:
        yield build(Path(root))


@pytest.fixture(scope="module")
def url(built: InspectorWorld) -> Iterator[str]:
    with node_process(built.path) as (found, _):
        yield found


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists(), "the browser tests need Debian's chromium: apt-get install chromium"
    # Playwright gives every launch a fresh, temporary profile of its own.
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def problems() -> list[str]:
    """What the page's console reported as an error or a warning, and uncaught exceptions."""
    return []


@pytest.fixture
def page(browser: Browser, url: str, problems: list[str]) -> Iterator[Page]:
    context = browser.new_context(base_url=url, viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    opened.on("pageerror", lambda error: problems.append(str(error)))
    opened.on(
        "console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None
    )
    opened.set_default_timeout(WAIT_MS)
    log_in(opened, admin_headers(url)["authorization"].removeprefix("Bearer "))
    yield opened
    context.close()
    assert problems == []  # no script error, no CSP violation, nothing missing


def log_in(page: Page, token: str) -> None:
    """The inspector's login: asked for a page without a session, the node sends the browser
    to /ui/login; the token, entered once, becomes an HttpOnly cookie."""
    page.goto("/ui")
    assert page.url.endswith("/ui/login")
    page.fill("input[name=token]", token)
    page.click("#login button[type=submit]")
    page.wait_for_url("**/ui")


def api(url: str, path: str, **params: Any) -> Any:
    response = httpx.get(url + path, params=params, timeout=10, headers=admin_headers(url))
    assert response.status_code == 200, response.text
    return response.json()


def shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def rows(page: Page, table: str) -> list[str]:
    return [text.strip() for text in page.locator(f"#{table} tbody tr").all_inner_texts()]


def test_the_overview_shows_the_worlds_workflows_intents_and_proposals(
    page: Page, url: str, built: InspectorWorld
) -> None:
    world = api(url, "/v1/overview")
    page.goto("/ui")
    expect(page.locator("#tail-status")).to_have_text("live")
    listed = {}
    for row in page.locator("#workflows tbody tr").all():
        name, cells, failed = (c.strip() for c in row.locator("td").all_inner_texts())
        listed[name] = {"cells": int(cells), "failed": int(failed)}
    assert listed == {
        name: {"cells": counts["cells"], "failed": counts["failed"]}
        for name, counts in world["workflows"].items()
    }
    assert listed[COUNTER]["cells"] == len(built.counts) + 1  # and the key with markup
    assert listed[EXEC] == {"cells": ALL_EXECS, "failed": 2}  # failed flows count as failed
    expect(page.locator("#open-intents")).to_have_text(str(world["open_intents"]))
    # Two human tasks and their timeouts, three signals' timeouts, a retry's timer.
    assert world["open_intents"] == 8
    expect(page.locator("#height")).to_have_text(str(world["height"]))
    shot(page, "overview")


def test_cells_narrow_by_status_and_page_by_key(page: Page, url: str) -> None:
    page.goto(f"/ui/cells/{EXEC}")
    expect(page.locator("#cell-rows tbody tr")).to_have_count(ALL_EXECS)
    # An execution's cell says its execution's status (the kernel sees a waiting cell).
    page.locator('[data-status="running"]').click()  # htmx swaps the table in place
    expect(page.locator("#cell-rows tbody tr")).to_have_count(6)
    assert page.url.endswith("status=running")
    running = " ".join(rows(page, "cell-rows"))
    assert APPROVAL_EXEC in running and SIGNAL_EXEC in running and DONE_EXEC not in running
    # Two completed and two failed: a row count cannot tell the swapped table from the one
    # before it, so wait for the row that only the new table has.
    page.locator('[data-status="completed"]').click()
    expect(page.locator("#cell-rows tbody tr", has_text=DONE_EXEC)).to_have_count(1)
    expect(page.locator("#cell-rows tbody tr")).to_have_count(2)
    page.locator('[data-status="failed"]').click()
    expect(page.locator("#cell-rows tbody tr", has_text=FAILED_EXEC)).to_have_count(1)
    expect(page.locator("#cell-rows tbody tr")).to_have_count(2)
    assert DONE_EXEC not in " ".join(rows(page, "cell-rows"))

    everything = {c["key"] for c in api(url, f"/v1/cells/{COUNTER}")["cells"]}
    page.goto(f"/ui/cells/{COUNTER}?limit=2")
    seen: list[str] = []
    while True:
        seen += [
            page.locator("#cell-rows tbody tr td:first-child").nth(i).inner_text()
            for i in range(page.locator("#cell-rows tbody tr").count())
        ]
        if page.locator("#next-page").count() == 0:
            break
        before = page.url
        page.locator("#next-page").click()
        page.wait_for_url(lambda now, before=before: now != before)
    assert sorted(seen) == sorted(everything) and len(seen) == len(set(seen))
    assert MARKUP_KEY in seen  # shown as text, never as an element
    assert page.locator("#cell-rows img").count() == 0


def test_a_cell_timeline_shows_its_receipts_signatures_and_states(page: Page, url: str) -> None:
    key = f'"{APPROVAL_EXEC}"'
    timeline = api(url, "/v1/timeline", workflow=EXEC, key=key)
    page.goto(f"/ui/cell?workflow={EXEC}&key={key}")
    shown = [
        int(s)
        for s in page.locator("#timeline tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.seq)"
        )
    ]
    assert shown == [e["seq"] for e in timeline["entries"]]
    receipts = [
        e for e in timeline["entries"] if (e["input"] or {}).get("kind") == "effect_receipt"
    ]
    assert receipts and all(e["input"]["signature"] == "verified" for e in receipts)
    expect(page.locator(".signature.verified")).to_have_count(len(receipts))
    expect(page.locator("#cell-status")).to_have_text("running")  # the kernel's: waiting

    latest_step = next(e for e in timeline["entries"] if e["kind"] == "step")
    page.locator(f'tr[data-seq="{latest_step["seq"]}"] .state-button').click()
    state = page.locator("#state-at .state-at-value")
    expect(state).to_contain_text(APPROVAL_EXEC)
    expect(state).to_contain_text('"status": "running"')

    # The first step's state is superseded, so the store no longer has it: a replay rebuilds it.
    first_step = [e for e in timeline["entries"] if e["kind"] == "step"][-1]
    at = api(url, f"/v1/steps/{first_step['seq']}/state")
    assert at["stored"] is False and at["replayed"] > 0
    page.locator(f'tr[data-seq="{first_step["seq"]}"] .state-button').click()
    expect(page.locator("#state-at .rebuilt")).to_contain_text(
        f"replaying {at['replayed']} records"
    )
    expect(state).to_contain_text(f'"engine_version": {at["state"]["value"]["engine_version"]}')
    shot(page, "cell-timeline")


def test_the_journal_filters_by_kind_cell_and_failure(page: Page, url: str) -> None:
    head = api(url, "/v1/overview")["height"]
    page.goto("/ui/journal")
    first = page.locator("#journal-rows tbody tr").first
    expect(first).to_have_attribute("data-seq", str(head))  # newest first

    page.locator("#filter-failed").check()  # a change submits the filter form through htmx
    # The kernel's rejection, and the steps that ended two executions failed.
    expect(page.locator("#journal-rows tbody tr")).to_have_count(3)
    expect(page.locator("#journal-rows tbody tr").first).to_have_attribute(
        "data-kind", "ingress_rejected"
    )
    failed = rows(page, "journal-rows")
    assert UNROUTED_EVENT in failed[0]
    assert TO_RETRY_EXEC in failed[1] and FAILED_EXEC in failed[2]
    page.locator("#filter-failed").uncheck()

    page.locator("#filter-workflow").select_option(COUNTER)
    every_counter = api(url, "/v1/journal", workflow=COUNTER, before=head + 1, limit=1000)
    expect(page.locator("#journal-rows tbody tr")).to_have_count(len(every_counter["records"]))
    page.locator("#filter-key").fill('"charlie"')
    page.locator("#filter-key").dispatch_event("change")
    expected = api(url, "/v1/journal", workflow=COUNTER, key='"charlie"', before=head + 1)
    expect(page.locator("#journal-rows tbody tr")).to_have_count(len(expected["records"]))
    assert len(expected["records"]) == 3  # charlie's three steps
    assert "key=%22charlie%22" in page.url
    shot(page, "journal-filtered")

    page.goto("/ui/journal?kind=effect_intent")
    intents = api(url, "/v1/journal", kind="effect_intent", limit=1000)["records"]
    shown = min(len(intents), JOURNAL_ROWS)  # a page of them
    expect(page.locator("#journal-rows tbody tr")).to_have_count(shown)

    page.goto("/ui/journal?limit=7")
    seen: list[int] = []
    while True:
        seen += [
            int(s)
            for s in page.locator("#journal-rows tbody tr").evaluate_all(
                "rows => rows.map(r => r.dataset.seq)"
            )
        ]
        if page.locator("#older").count() == 0:
            break
        before = page.url
        page.locator("#older").click()
        page.wait_for_url(lambda now, before=before: now != before)
    assert seen == list(range(head, 0, -1))  # every record once, newest first


def test_open_intents_are_the_worlds(page: Page, url: str) -> None:
    found = api(url, "/v1/intents")["intents"]
    page.goto("/ui/intents")
    expect(page.locator("#intent-rows tbody tr")).to_have_count(len(found))
    text = " ".join(rows(page, "intent-rows"))
    for intent in found:
        assert intent["intent"][7:19] in text and intent["effect"] in text
    assert "aos/human.task@1" in text and "sys/timer.set@1" in text


def test_a_shadow_report_shows_live_and_proposed_state_side_by_side(
    page: Page, built: InspectorWorld
) -> None:
    page.goto("/ui/proposals")
    page.get_by_role("link", name=built.proposal[7:19]).click()
    expect(page.locator("#shadow-summary")).to_contain_text(f"{len(built.counts) + 1} diverge")
    charlie = page.locator('section.divergence[data-key="charlie"]')
    expect(charlie.locator(".live-state")).to_contain_text(f'"count": {3}')
    expect(charlie.locator(".proposed-state")).to_contain_text(f'"count": {6}')
    for exec_id in (APPROVAL_EXEC, SIGNAL_EXEC, DONE_EXEC):
        row = page.locator("#shadow-cells tbody tr", has_text=exec_id)
        expect(row.locator(".badge")).to_have_text("reproduces")
    shot(page, "shadow-report")


def test_a_flow_execution_is_drawn_with_its_marking(page: Page, url: str) -> None:
    state = api(url, f"/v1/executions/{APPROVAL_EXEC}")
    tokens = {t["step"] for t in state["engine"]["tokens"].values()}
    page.goto("/ui/flows")
    expect(page.locator("#execution-rows tbody tr")).to_have_count(ALL_EXECS)
    page.get_by_role("link", name=APPROVAL_EXEC).click()
    drawing = page.locator("#drawing svg")
    expect(drawing.locator("g.step")).to_have_count(6)  # validate charge ship pack invoice close
    active = drawing.locator("g.step.active")
    assert {active.nth(i).get_attribute("data-step") for i in range(active.count())} == tokens
    assert tokens == {"charge"}
    expect(drawing.locator('g.step.done[data-step="validate"]')).to_have_count(1)
    human = page.locator('#pending tr[data-kind="human"]')
    expect(human.locator(".task-title")).to_have_text("Approve order A-7 for 250 EUR")
    # This node hosts no task inbox (no --human-adapter): completing is shown disabled, why.
    expect(human.locator("form.action button")).to_be_disabled()
    expect(human.locator("form.action .why")).to_contain_text("hosts no task inbox")
    shot(page, "flow-execution")


def test_the_live_tail_shows_an_event_sent_during_the_test(page: Page, url: str) -> None:
    page.goto("/ui")
    expect(page.locator("#tail-status")).to_have_text("live")
    sent = httpx.post(
        url + "/v1/events",
        json={"schema": COUNTER_EVENT, "value": inc("tail", 4)},
        timeout=10,
        headers=admin_headers(url),
    )
    assert sent.status_code == 200, sent.text
    line = page.locator("#tail li", has_text=f"#{sent.json()['seq']} ")
    expect(line).to_contain_text("domain_event")
    expect(line).to_contain_text(COUNTER_EVENT)
    expect(page.locator("#tail li", has_text="step")).not_to_have_count(0)
    shot(page, "live-tail")


def test_a_bad_parameter_is_an_error_page_and_changes_nothing(
    page: Page, url: str, problems: list[str]
) -> None:
    head = api(url, "/v1/overview")["height"]
    response = page.goto("/ui/journal?kind=nope")
    assert response is not None and response.status == 400
    expect(page.locator("h1")).to_have_text("query.invalid")
    response = page.goto("/ui/cells/demo/nothing@1")
    assert response is not None and response.status == 404
    assert re.search("workflow", page.locator("#error-message").inner_text())
    assert api(url, "/v1/overview")["height"] == head
    # The browser reports each refused page load; those two are the point of this test.
    assert [p for p in problems if "status of 40" in p] == problems and len(problems) == 2
    problems.clear()


def test_a_read_only_identity_logs_in_and_sees_params_redacted(
    browser: Browser, url: str, built: InspectorWorld
) -> None:
    from aos.kernel.node.identities import IdentityStore

    _, token = IdentityStore.of_world(built.path).create("viewer-ui", ["read"])
    context = browser.new_context(base_url=url, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto("/ui/login")
    page.fill("input[name=token]", "aos_" + "x" * 43)
    page.click("#login button[type=submit]")
    assert "auth.token_invalid" in page.inner_text("#error-message")
    log_in(page, token)
    assert "viewer-ui" in page.inner_text("header") and "redacted" in page.inner_text("header")
    page.goto("/ui/journal?kind=effect_intent")
    first = page.locator("#journal-rows tbody tr a").first.get_attribute("href")
    assert first is not None
    page.goto(first)
    assert "$redacted" in page.inner_text("main")
    shot(page, "redacted-record")
    page.click("#logout")
    page.wait_for_url("**/ui/login")
    page.goto("/ui")
    assert page.url.endswith("/ui/login")  # the cookie is gone
    context.close()


# --------------------------------------------------------------------------------------------
# Flow executions: order, search, errors, history, actions


def test_executions_are_sorted_by_start_and_searched(page: Page) -> None:
    page.goto("/ui/flows")
    listed = page.locator("#execution-rows tbody tr")
    expect(listed).to_have_count(ALL_EXECS)
    expect(listed.first).to_have_attribute("data-exec", RETRYING_EXEC)  # newest first
    expect(listed.first.locator("td").nth(4)).to_have_text(re.compile(ISO_INSTANT))
    page.click("#sort-started")
    expect(listed.first).to_have_attribute("data-exec", APPROVAL_EXEC)  # the first started
    starts = [int(s or 0) for s in listed.evaluate_all("rows => rows.map(r => r.dataset.started)")]
    assert starts == sorted(starts)
    shot(page, "executions-sorted")
    page.fill("#search", PARSE_BUSINESS_REF)
    page.click("#execution-search button[type=submit]")
    expect(listed).to_have_count(3)
    for row in listed.all():
        expect(row.locator("td").nth(3)).to_have_text(PARSE_BUSINESS_REF)
    shot(page, "executions-searched")
    page.select_option("#filter-status", "failed")
    expect(listed).to_have_count(2)
    expect(page.locator(f'#execution-rows tr[data-exec="{FAILED_EXEC}"]')).to_have_count(1)


def test_a_failed_execution_shows_its_error_where_it_failed(page: Page) -> None:
    page.goto(f"/ui/flows/executions/{FAILED_EXEC}")
    expect(page.locator("#execution-status")).to_have_text("failed")
    box = page.locator("#execution-error")
    expect(box.locator("h2")).to_contain_text("fetch.parse")
    expect(box.locator(".error-code")).to_have_text("python.raised")
    expect(box.locator(".error-message")).to_contain_text("invalid literal for int()")
    expect(page.locator("#started-at")).to_have_text(re.compile(ISO_INSTANT))
    expect(page.locator("#retry-form button")).to_be_enabled()
    shot(page, "failed-execution")


def test_a_long_history_is_paged_back_to_its_start(page: Page) -> None:
    page.goto(f"/ui/flows/executions/{LONG_EXEC}?limit=40")
    history = page.locator("#history tbody tr")
    newest = int(history.first.get_attribute("data-seq") or 0)
    expect(history.first.locator("td").nth(1)).to_have_text(re.compile(ISO_INSTANT))
    pages = 1
    while page.locator("#history-older").count():
        page.click("#history-older")
        pages += 1
        expect(history.first).not_to_have_attribute("data-seq", str(newest))
        if pages == 3:
            shot(page, "history-paged")
    assert pages > 4
    expect(history.last).to_contain_text("playbook.started")
    expect(history.last.locator("td").nth(2)).to_have_text("PT0S")  # since the start


def test_an_execution_is_cancelled_from_its_page(page: Page, url: str) -> None:
    page.goto(f"/ui/flows/executions/{TO_CANCEL_EXEC}")
    expect(page.locator("#execution-status")).to_have_text("running")
    page.fill("#cancel-form input[name=reason]", "customer called")
    page.click("#cancel-form button[type=submit]")
    expect(page.locator("#execution-status")).to_have_text("cancelled")
    events = api(url, f"/v1/executions/{TO_CANCEL_EXEC}/events")["events"]
    assert any(e["event"] == "execution.cancelled" for e in events)
    expect(page.locator("#cancel-form")).to_have_count(0)  # an ended execution takes none


def test_a_failed_execution_is_retried_from_its_page_as_a_new_one(
    page: Page, url: str, problems: list[str]
) -> None:
    page.goto(f"/ui/flows/executions/{TO_RETRY_EXEC}")
    page.fill("#retry-form input[name=exec]", "parse-retried")
    page.click("#retry-form button[type=submit]")
    page.wait_for_url("**/ui/flows/executions/parse-retried")
    expect(page.locator("#business-ref")).to_have_text(PARSE_BUSINESS_REF)
    assert api(url, f"/v1/executions/{TO_RETRY_EXEC}")["status"] == "failed"
    page.goto(f"/ui/flows/executions/{TO_RETRY_EXEC}")
    page.fill("#retry-form input[name=exec]", "parse-retried")  # that id is taken now
    page.click("#retry-form button[type=submit]")
    expect(page.locator("#retry-form .action-result")).to_contain_text("flow.execution_exists")
    shot(page, "execution-action-refused")
    # The browser reports the refused request; it is the point of this part.
    assert problems == [
        "Failed to load resource: the server responded with a status of 409 (Conflict)"
    ]
    problems.clear()
