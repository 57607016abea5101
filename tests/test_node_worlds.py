"""Several worlds in one `aos node up` process (spec/04 §9.6, spec/07 §11.5), with real
processes: two LMDB worlds, each under /worlds/{name}, take events, are settled by adapters
(`aos adapter run`, signed leases and receipts) through their prefixed base URLs, and take CLI
writes routed through each world's node.json; an unknown prefix is a typed 404 that changes
nothing. On PostgreSQL: one process serves two worlds of one database, a second process takes
one of them over after a SIGKILL; and a process that loses one world's lease serves the other
on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from aos.cli.main import main
from aos.flows.serve.flow_client import NodeFlows
from aos.kernel.errors import AosError
from aos.kernel.node.owner import owner_url
from aos.kernel.signing.keys import write_seed
from aos.kernel.world.stamps import PinnedStampSource
from tests.auth_fixtures import admin_headers, node_http
from tests.conftest import readable_folder
from tests.test_node_metrics import metric_samples
from tests.test_node_process import _AOS, adapter_http
from tests.test_receipts import ADAPTER_SEED
from tests.test_store_pg_nodes import (
    COUNTER,
    FUNCTIONS,
    LEASE_MS,
    announced_process,
    increment,
    killable_node,
    pg_world,
    row_of,
    second_directory,
    send_pings,
    settled,
    take_while_paused,
    where,
)
from tests.test_world import SCRIPTED, create, ping

START_TIMEOUT_S = 60.0
ADAPTER = "demo/adapter@1"


@contextmanager
def worlds_node(
    *worlds: Path, options: tuple[str, ...] = ()
) -> Iterator[tuple[dict[str, Any], subprocess.Popen[str]]]:
    """`aos node up` serving `worlds`; its announcement; SIGTERM (else SIGKILL) at the end."""
    command = [*_AOS, "node", "up", "--bind", "127.0.0.1:0", "--no-sync", "--json", *options]
    for world in worlds:
        command += ["--world", str(world)]
    with announced_process(command) as found:
        yield found


@contextmanager
def adapter_process(tmp_path: Path, node_url: str) -> Iterator[subprocess.Popen[str]]:
    tmp_path.mkdir()
    key = tmp_path / "adapter.key"
    write_seed(key, ADAPTER_SEED)
    with readable_folder() as modules:
        (modules / "fns.py").write_text(FUNCTIONS)
        adapter = subprocess.Popen(
            [*_AOS, "adapter", "run", "python", "--node", node_url, "--key", str(key),
             "--name", ADAPTER, "--effect", "demo/noop@1", "--function", "fns:answer",
             "--module-path", str(modules), "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            yield adapter
        finally:
            adapter.send_signal(signal.SIGTERM)
            adapter.communicate(timeout=START_TIMEOUT_S)


def make_world_named(path: Path) -> Path:
    """A world whose id differs from every other test world's (the pinned stamps otherwise
    give worlds of one manifest one id)."""
    create(path, SCRIPTED, stamps=PinnedStampSource(seed=str(path).encode())).close()
    return path


def urls_of(announced: dict[str, Any]) -> dict[str, str]:
    return {world["name"]: world["url"] for world in announced["worlds"]}


def test_one_process_serves_two_lmdb_worlds_under_their_prefixes(tmp_path: Path) -> None:
    alpha, beta = make_world_named(tmp_path / "alpha"), make_world_named(tmp_path / "beta")
    with worlds_node(alpha, beta) as (announced, process):
        root = announced["url"]
        urls = urls_of(announced)
        assert urls == {"alpha": f"{root}/worlds/alpha", "beta": f"{root}/worlds/beta"}
        listed = node_http.get(f"{root}/v1/worlds").json()["worlds"]
        assert [(w["name"], w["url"], w["serving"]) for w in listed] == [
            ("alpha", urls["alpha"], True),
            ("beta", urls["beta"], True),
        ]
        ids = {
            name: node_http.get(f"{url}/v1/world").json()["world_id"] for name, url in urls.items()
        }
        assert ids["alpha"] != ids["beta"]
        # Each world's adapter settles its intents through the prefixed base URL (signed
        # leases and receipts: the target signed is the whole path, prefix included).
        for number, (name, url) in enumerate(urls.items()):
            with adapter_process(tmp_path / f"adapter-{name}", url) as adapter:
                send_pings(url, name, number + 2)
                records = settled(url)
                assert adapter.poll() is None
            intents = [
                r["record"]["intent"] for r in records if r["record"]["kind"] == "effect_intent"
            ]
            receipts = [
                r["record"]["intent"] for r in records if r["record"]["kind"] == "effect_receipt"
            ]
            assert len(intents) == (number + 2) * 2
            assert sorted(receipts) == sorted(intents)
        # Each world counts its own: its metrics under its prefix.
        for name, url in urls.items():
            samples = metric_samples(node_http.get(f"{url}/metrics").text)
            [info] = [dict(labels) for (n, labels) in samples if n == "aos_world_info"]
            assert info["world_id"] == ids[name]
            height = node_http.get(f"{url}/v1/world").json()["height"]
            assert samples["aos_journal_height", ()] == height
            counted = sum(v for (n, _), v in samples.items() if n == "aos_effect_receipts_total")
            kinds = [r["record"]["kind"] for r in settled(url)]
            assert counted == kinds.count("effect_receipt") > 0
        # Where each world is served: asked of a world, or of the process's root.
        for asked in (urls["alpha"], urls["beta"], root):
            for name in urls:
                found = where(asked, ids[name])
                assert found["url"] == urls[name] and found["live"] is True
        assert where(root, "another")["url"] is None
        # The inspector of a mounted world links within its prefix.
        page = node_http.get(f"{urls['beta']}/ui")
        assert page.status_code == 200
        assert 'href="/worlds/beta/ui/journal"' in page.text
        assert 'data-root="/worlds/beta"' in page.text
        assert node_http.get(f"{urls['beta']}/ui/static/tail.js").status_code == 200
        assert process.poll() is None


def test_cli_writes_go_through_each_worlds_node_json(tmp_path: Path) -> None:
    alpha, beta = make_world_named(tmp_path / "alpha"), make_world_named(tmp_path / "beta")
    with worlds_node(alpha, beta) as (announced, _):
        urls = urls_of(announced)
        assert owner_url(alpha) == urls["alpha"] and owner_url(beta) == urls["beta"]
        for world, name in ((alpha, "alpha"), (beta, "beta")):
            before = node_http.get(f"{urls[name]}/v1/world").json()["height"]
            # Each world has its own identities: the token of the world's own first admin.
            token = admin_headers(urls[name])["authorization"].removeprefix("Bearer ")
            done = subprocess.run(
                [*_AOS, "world", "send", "demo/Ping@1", "--world", str(world), "--json",
                 "--value-json", json.dumps(ping(f"cli-{name}"))],
                capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False,
                env={**os.environ, "AOS_TOKEN": token},
            )  # fmt: skip
            assert done.returncode == 0, (done.stdout, done.stderr)
            assert node_http.get(f"{urls[name]}/v1/world").json()["height"] > before
        # Each write reached its own world only.
        for name, other in (("alpha", "beta"), ("beta", "alpha")):
            key = {"key": json.dumps(f"cli-{name}")}
            assert (
                node_http.get(f"{urls[name]}/v1/state/demo/keyed@1", params=key).status_code == 200
            )
            assert (
                node_http.get(f"{urls[other]}/v1/state/demo/keyed@1", params=key).status_code == 404
            )
    assert owner_url(alpha) is None and owner_url(beta) is None  # stopped: records removed


def test_an_unknown_world_prefix_is_a_typed_404_that_changes_nothing(tmp_path: Path) -> None:
    alpha, beta = make_world_named(tmp_path / "alpha"), make_world_named(tmp_path / "beta")
    with worlds_node(alpha, beta) as (announced, _):
        root, urls = announced["url"], urls_of(announced)
        before = {name: node_http.get(f"{url}/v1/journal").json() for name, url in urls.items()}
        event = {"schema": "demo/Ping@1", "value": ping("x")}
        for method, path in (
            ("POST", "/worlds/gamma/v1/events"),
            ("POST", "/v1/events"),
            ("GET", "/v1/world"),
            ("GET", "/metrics"),
            ("GET", "/worlds/alpha"),
            ("POST", "/worlds/../alpha/v1/events"),
        ):
            answer = node_http.request(method, root + path, json=event)
            assert answer.status_code == 404, (path, answer.text)
            error = answer.json()["error"]
            assert error["code"] == "node.world_unknown"
            assert error["detail"]["worlds"] == ["alpha", "beta"]
        # A request signed for alpha's world, sent to beta, is refused there.
        with adapter_http(urls["alpha"]) as signed_for_alpha:
            signed_for_alpha.base_url = httpx.URL(urls["beta"])
            refused = signed_for_alpha.post("/v1/leases", json={"adapter": ADAPTER, "max": 1})
            assert refused.status_code in (401, 403), refused.text
        # The flow client takes a base URL with a path: the world answers (it runs no flows).
        for base, code in ((urls["alpha"], "world.workflow_unknown"), (root, "node.world_unknown")):
            token = admin_headers(urls["alpha"])["authorization"].removeprefix("Bearer ")
            with NodeFlows(base, token=token) as flows, pytest.raises(AosError) as caught:
                flows.listing()
            assert caught.value.code == code
        after = {name: node_http.get(f"{url}/v1/journal").json() for name, url in urls.items()}
        assert after == before


def test_two_worlds_with_one_name_are_refused(tmp_path: Path) -> None:
    one = make_world_named(tmp_path / "a" / "world")
    two = make_world_named(tmp_path / "b" / "world")
    result = CliRunner().invoke(
        main, ["node", "up", "--world", str(one), "--world", str(two), "--json"]
    )
    assert result.exit_code == 1
    assert json.loads(result.output)["error"]["code"] == "node.config_invalid"


def test_one_process_serves_two_pg_worlds_and_another_takes_one_over(
    pg_store_dsn: str, tmp_path: Path
) -> None:
    first = pg_world(pg_store_dsn, tmp_path / "one")
    second = pg_world(pg_store_dsn, tmp_path / "two")
    elsewhere = second_directory(pg_store_dsn, second, tmp_path / "elsewhere")
    options = ("--owner-lease-ms", LEASE_MS)
    with worlds_node(tmp_path / "one", tmp_path / "two", options=options) as (announced, node):
        root, urls = announced["url"], urls_of(announced)
        assert urls == {first: f"{root}/worlds/{first}", second: f"{root}/worlds/{second}"}
        for name, by in ((first, 3), (second, 4)):
            sent = node_http.post(
                f"{urls[name]}/v1/events", json={"schema": COUNTER, "value": increment("a", by)}
            )
            assert sent.status_code == 200, sent.text
        for name in (first, second):
            assert where(root, name)["url"] == urls[name]
            assert where(urls[first], name)["url"] == urls[name]
        _, head_at_kill, journal_at_kill = row_of(pg_store_dsn, second)
        node.send_signal(signal.SIGKILL)
        node.wait()
        with killable_node(elsewhere, "--takeover") as (taker, _):
            state = node_http.get(f"{taker}/v1/state/demo/counter@1", params={"key": '"a"'}).json()
            assert state["state"]["count"] == 4
            assert where(taker, second)["url"] == taker
            assert where(taker, first)["live"] is False  # its node is dead; not taken over
            sent = node_http.post(
                f"{taker}/v1/events", json={"schema": COUNTER, "value": increment("a", 1)}
            )
            assert sent.status_code == 200, sent.text
    _, head, journal = row_of(pg_store_dsn, second)
    assert head > head_at_kill and journal[:head_at_kill] == journal_at_kill


def test_losing_one_worlds_lease_stops_serving_that_world_only(
    pg_store_dsn: str, tmp_path: Path
) -> None:
    kept = pg_world(pg_store_dsn, tmp_path / "kept")
    taken = pg_world(pg_store_dsn, tmp_path / "taken")
    options = ("--owner-lease-ms", LEASE_MS)
    with worlds_node(tmp_path / "kept", tmp_path / "taken", options=options) as (announced, node):
        urls = urls_of(announced)
        # Paused past its leases, then one world is taken by another owner ...
        taker = take_while_paused(node, pg_store_dsn, taken)
        try:
            # ... the node finds out at that world's next renewal; the other world is served on.
            answer = _lease_lost(urls[taken])
            assert answer["code"] == "store.lease_lost"
            sent = node_http.post(
                f"{urls[kept]}/v1/events", json={"schema": COUNTER, "value": increment("a", 2)}
            )
            assert sent.status_code == 200, sent.text
            listed = {
                w["name"]: w
                for w in node_http.get(f"{announced['url']}/v1/worlds").json()["worlds"]
            }
            assert listed[kept]["serving"] is True and listed[taken]["serving"] is False
            assert node.poll() is None
        finally:
            taker.close()


def _lease_lost(url: str) -> dict[str, Any]:
    """The error the lost world answers, once the renewal thread has found out (it renews
    every third of a lease; until then the fence refuses its writes)."""
    for _ in range(600):
        answer = node_http.get(f"{url}/v1/world", timeout=30)
        if answer.status_code != 200:
            error: dict[str, Any] = answer.json()["error"]
            return error
        subprocess.run(["sleep", "0.05"], check=True)
    raise AssertionError("the world was never reported lost")
