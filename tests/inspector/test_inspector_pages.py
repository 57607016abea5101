"""The inspector's pages in process (FastAPI's TestClient over a real scripted world): every
page answers with its security headers, data is escaped however it is written, a bad
parameter is an error page with the API's status and changes nothing, the inspector takes no
writes, and the vendored htmx is served from the node itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aos.kernel.node import Node
from aos.kernel.node.app import create_app
from aos.kernel.node.inspector import CONTENT_SECURITY_POLICY, add_inspector
from tests.auth_fixtures import authorize
from tests.test_node import KEYED, TestClient, make_world, open_node, send

MARKUP = "<script>document.title='owned'</script>"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with open_node(make_world(tmp_path / "w")) as opened:
        yield opened


@pytest.fixture
def client(node: Node) -> TestClient:
    app = create_app(node)
    add_inspector(app, node)
    return authorize(TestClient(app), node)


def test_every_page_answers_escaped_with_its_headers(client: TestClient) -> None:
    send(client, MARKUP, "effect")
    send(client, "plain", "trap")
    head = client.get("/v1/overview").json()["height"]
    key = '"' + MARKUP.replace("'", "\\u0027") + '"'
    pages = [
        "/ui",
        f"/ui/cells/{KEYED}",
        f"/ui/cells/{KEYED}?status=failed",
        f"/ui/cell?workflow={KEYED}&key={key}",
        "/ui/steps/4/state",
        "/ui/journal",
        f"/ui/journal?workflow={KEYED}&failed=true",
        f"/ui/records/{head}",
        "/ui/intents",
        "/ui/proposals",
    ]
    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text)
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
        assert "<script>document" not in response.text, path
    cells = client.get(f"/ui/cells/{KEYED}").text
    assert "&lt;script&gt;document.title=&#39;owned&#39;&lt;/script&gt;" in cells
    journal = client.get("/ui/journal").text
    assert f"{KEYED} plain  input #" in journal  # a step names its cell by its key
    failed = client.get(f"/ui/cells/{KEYED}?status=failed").text
    assert "plain" in failed and "owned" not in failed  # the filter narrows
    intents = client.get("/ui/intents").text
    assert "demo/noop@1" in intents and "&lt;script&gt;" in intents


def test_a_record_page_shows_what_it_caused(client: TestClient) -> None:
    sent = send(client, "x", "effect")
    page = client.get(f"/ui/records/{sent['seq']}").text
    trace = page.split('id="trace"')[1]
    assert "effect_intent" in trace and "target" in trace and "caused" in trace
    traced = client.get(f"/v1/trace/{sent['event_hash']}", params={"from": sent["seq"]}).json()
    assert traced["scanned"] < client.get("/v1/overview").json()["height"]
    assert [f'data-seq="{e["seq"]}"' in trace for e in traced["entries"]] == [True] * len(
        traced["entries"]
    )


def test_a_bad_parameter_is_an_error_page_and_nothing_changes(client: TestClient) -> None:
    send(client, "x", "none")
    before = client.get("/v1/journal", params={"limit": 1000}).json()
    for path, status, code in [
        ("/ui/journal?kind=nope", 400, "query.invalid"),
        ("/ui/journal?limit=0", 400, "query.invalid"),
        ("/ui/journal?before=soon", 400, "query.invalid"),
        ("/ui/records/last", 400, "query.invalid"),
        ("/ui/cells/demo/none@1", 404, "world.workflow_unknown"),
        (f"/ui/cells/{KEYED}?status=odd", 400, "query.invalid"),
        (f"/ui/cell?workflow={KEYED}&key=%22nobody%22", 404, "world.cell_missing"),
        ("/ui/records/99999", 400, "query.invalid"),
        (f"/ui/proposals/blake3:{'0' * 64}", 404, "gov.unknown_proposal"),
    ]:
        response = client.get(path)
        assert response.status_code == status, (path, response.text)
        assert response.headers["content-type"].startswith("text/html")
        assert f"<h1>{code}</h1>" in response.text, path
    fragment = client.get("/ui/steps/1/state")  # a fragment shows its refusal inside itself
    assert fragment.status_code == 200 and "query.invalid" in fragment.text
    assert client.get("/v1/journal", params={"limit": 1000}).json() == before


def test_the_inspector_takes_no_writes(client: TestClient) -> None:
    for path in ("/ui", "/ui/journal", f"/ui/cells/{KEYED}", "/ui/intents"):
        assert client.post(path).status_code == 405
        assert client.delete(path).status_code == 405


def test_htmx_is_served_by_the_node_itself(client: TestClient) -> None:
    script = client.get("/ui/static/htmx.min.js")
    assert script.status_code == 200 and "htmx" in script.text[:200]
    assert client.get("/ui/static/htmx.LICENSE").text.startswith("Zero-Clause BSD")
    page = client.get("/ui").text
    assert 'src="/ui/static/htmx.min.js"' in page and "http://" not in page.split("<main>")[0]
