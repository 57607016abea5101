"""The journal browser on a world of more than 100 000 records (`make test-scale`, not part of
`make test`: making the world takes a minute or two on a loaded machine).

A real counter world gets 50 000 increments over 1000 keys (an event and a step each) and, one
in a thousand, an event no workflow takes (journaled as `ingress_rejected`). Then a real
`aos node up` serves it and the tests time the reads the inspector makes: a journal page at
the head, in the middle and at the start (keyset paging: each costs the same), "failed only"
and one cell's records (a filter reads at most journal_scan_records_max records and says where
to go on), a cells page, and the journal page in the browser with its "older" link."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from aos.kernel.node.inspector import PAGE_SCAN_RECORDS_MAX
from aos.kernel.world.router import RouteError
from tests.auth_fixtures import admin_headers, node_http
from tests.inspector.test_inspector_browser import (
    browser,  # noqa: F401 (a fixture)
    log_in,
)
from tests.test_node_process import node_process
from tests.test_world import COUNTER_C, create, inc

EVENTS = 50_000
KEYS = 1000
REJECTED_EVERY = 1000
BATCH = 1000
COUNTER = "demo/counter@1"
PAGE_S_MAX = 1.0
"""An unfiltered page (at the head, the middle or the start) answers within this."""
SCAN_S_MAX = 20.0
"""A filtered API read that scans journal_scan_records_max (100 000) records answers within
this (about 10 s on a loaded 2-core machine; the inspector's pages scan a tenth of that)."""
BROWSER_PAGE_S_MAX = 3.0
"""A journal page in the browser, unfiltered or filtered, is shown within this."""

timings: dict[str, float] = {}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="aos-scale-") as root:
        path = Path(root) / "world"
        with create(path, COUNTER_C, sync=False, clock="manual") as world:
            for start in range(0, EVENTS, BATCH):
                for index in range(start, start + BATCH):
                    world.ingress("demo/CounterEvent@1", inc(f"k{index % KEYS}", 1))
                    if index % REJECTED_EVERY == 0:
                        with contextlib.suppress(RouteError):
                            world.ingress(
                                "demo/CounterThreshold@1", {"id": "x", "count": 1, "threshold": 0}
                            )
                world.run_to_idle()
            assert world.height > 100_000
        with node_process(path) as (found, _):
            yield found
    print("\njournal reads on a world of >100 000 records (seconds):")
    for name, seconds in timings.items():
        print(f"  {name:<40} {seconds:.3f}")


def timed(name: str, url: str, path: str, **params: Any) -> Any:
    started = time.perf_counter()
    response = node_http.get(url + path, params=params, timeout=60)
    timings[name] = time.perf_counter() - started
    assert response.status_code == 200, response.text
    return response.json()


def test_keyset_pages_cost_the_same_anywhere(url: str) -> None:
    head = timed("overview", url, "/v1/overview")["height"]
    assert head > 100_000
    for name, before in (("head", head + 1), ("middle", head // 2), ("start", 101)):
        page = timed(f"page of 100 at the {name}", url, "/v1/journal", before=before)
        assert [r["seq"] for r in page["records"]] == list(range(before - 1, before - 101, -1))
        assert timings[f"page of 100 at the {name}"] < PAGE_S_MAX


def test_filters_scan_a_bounded_part_and_say_where_to_go_on(url: str) -> None:
    head = timed("overview", url, "/v1/overview")["height"]
    failed = timed(
        "failed only, 100 000 records", url, "/v1/journal", failed="true", before=head + 1
    )
    assert failed["scanned"] == 100_000 and failed["next_before"] == head - 100_000 + 1
    rest = timed(
        "failed only, the rest", url, "/v1/journal", failed="true", before=failed["next_before"]
    )
    assert rest["next_before"] is None  # the journal's start
    found = failed["records"] + rest["records"]
    assert len(found) == EVENTS // REJECTED_EVERY
    assert {r["record"]["kind"] for r in found} == {"ingress_rejected"}
    mine = timed(
        "one cell's records, from the head", url, "/v1/journal",
        workflow=COUNTER, key='"k7"', before=head + 1, limit=20,
    )  # fmt: skip
    assert len(mine["records"]) == 20 and mine["scanned"] < 100_000
    for name in ("failed only, 100 000 records", "one cell's records, from the head"):
        assert timings[name] < SCAN_S_MAX
    cells = timed("cells page of 100 by key hash", url, f"/v1/cells/{COUNTER}", limit=100)
    assert cells["count"] == KEYS and len(cells["cells"]) == 100 and cells["next_after"]
    assert timings["cells page of 100 by key hash"] < SCAN_S_MAX  # reads every cell (index)


def test_the_journal_page_in_the_browser(browser: Browser, url: str) -> None:  # noqa: F811
    page = browser.new_page(base_url=url)
    log_in(page, admin_headers(url)["authorization"].removeprefix("Bearer "))
    head = node_http.get(url + "/v1/overview").json()["height"]
    started = time.perf_counter()
    page.goto("/ui/journal")
    expect(page.locator("#journal-rows tbody tr")).to_have_count(100)
    timings["browser: journal page"] = time.perf_counter() - started
    for turn in range(3):
        started = time.perf_counter()
        page.locator("#older").click()
        expect(page.locator("#journal-rows tbody tr").first).to_have_attribute(
            "data-seq", str(head - 100 * (turn + 1))
        )
        timings[f"browser: older page {turn + 1}"] = time.perf_counter() - started
        assert timings[f"browser: older page {turn + 1}"] < BROWSER_PAGE_S_MAX
    # "Failed only": a page reads at most PAGE_SCAN_RECORDS_MAX records, then offers "older".
    started = time.perf_counter()
    page.locator("#filter-failed").check()
    expect(page.locator("#journal-page .muted").last).to_contain_text(
        f"{PAGE_SCAN_RECORDS_MAX} records scanned"
    )
    timings["browser: failed only (one page)"] = time.perf_counter() - started
    shown = page.locator("#journal-rows tbody tr").evaluate_all("r => r.map(x => x.dataset.seq)")
    failed = node_http.get(
        url + "/v1/journal", params={"failed": "true", "before": head + 1}, timeout=60
    ).json()["records"]
    in_reach = [str(r["seq"]) for r in failed if r["seq"] > head - PAGE_SCAN_RECORDS_MAX]
    assert shown == in_reach and len(shown) >= 4
    assert timings["browser: failed only (one page)"] < BROWSER_PAGE_S_MAX
    page.close()
