"""The node's metrics (`GET /metrics`, spec/04 §9.7), in process over a real world: the
figures a scrape shows are the world's and the journal's own, counted exactly; batches and HTTP
answers are counted; label values stay in closed sets; a scrape changes nothing; a bad scrape
is a typed refusal that changes nothing either."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from aos.kernel.node import Node
from aos.kernel.node.metrics import BATCH_INPUTS_BUCKETS, HostCounts
from aos.kernel.world import records
from aos.kernel.world.errors import TimeBackwardsError
from tests.node_fixtures import (  # noqa: F401 (fixtures)
    client_fixture,
    node_fixture,
    world_path_fixture,
)
from tests.test_node import (
    ADAPTER,
    KEYED,
    TestClient,
    _forged,
    _queued_behind_a_held_host,
    error_of,
    journal,
    lease,
    open_node,
    post_receipt,
    receipt,
    send,
    signed_client,
)
from tests.test_world import ping

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: TestClient, **headers: str) -> Samples:
    """Every sample of one scrape (the text parsed by prometheus_client's own parser, so the
    format is checked too)."""
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return metric_samples(response.text)


def metric_samples(text: str) -> Samples:
    """The samples of a scrape's text by name and sorted labels."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


def by_label(samples: Samples, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """A labelled family's samples as {label values: value}."""
    return {
        tuple(dict(key)[label] for label in labels): value
        for (sample, key), value in samples.items()
        if sample == name
    }


def one(samples: Samples, name: str) -> float:
    return samples[name, ()]


def records_since(client: TestClient, height: int) -> list[dict[str, Any]]:
    return [r["record"] for r in journal(client, **{"from": height + 1})]


def test_a_scrape_shows_what_the_worlds_own_reads_show(client: TestClient, node: Node) -> None:
    send(client, "a", "effect", 3)
    send(client, "b", "none")
    [first, *_] = lease(client, max=2)
    assert post_receipt(client, receipt(node.world_id, first["intent"])).status_code == 200
    samples = scrape(client)
    world = client.get("/v1/world").json()
    assert one(samples, "aos_journal_height") == world["height"]
    assert one(samples, "aos_intents_open") == world["open_intents"] == 2
    assert one(samples, "aos_deliveries_queued") == world["queued"] == 0
    assert one(samples, "aos_leases_published") == world["leases"]["published"]
    assert one(samples, "aos_leases_held") == world["leases"]["leased"] == 1
    cells = by_label(samples, "aos_cells", "workflow")
    failed = by_label(samples, "aos_cells_failed", "workflow")
    assert cells == {(name,): w["cells"] for name, w in world["workflows"].items()}
    assert failed == {(name,): w["failed"] for name, w in world["workflows"].items()}
    assert cells[(KEYED,)] == 2
    [(labels, value)] = by_label(samples, "aos_world_info", "world_id", "clock").items()
    assert labels == (node.world_id, world["clock"]) and value == 1
    assert one(samples, "aos_lease_waiters") == 0 and one(samples, "aos_cell_waiters") == 0
    assert one(samples, "process_resident_memory_bytes") > 0


def test_counters_count_exactly_what_the_node_journaled(client: TestClient, node: Node) -> None:
    height = client.get("/v1/world").json()["height"]  # what opening left: not this node's
    for key in ("a", "b", "c"):
        send(client, key, "effect", 2)
    leases = lease(client)
    for leased in leases[:3]:
        assert post_receipt(client, receipt(node.world_id, leased["intent"])).status_code == 200
    errored = receipt(node.world_id, leases[3]["intent"], status="error")
    assert post_receipt(client, errored).status_code == 200
    forged = post_receipt(client, _forged(node.world_id, leases[4]["intent"]))
    assert error_of(forged, 403)["code"] == "receipt.signature_invalid"
    unroutable = client.post(
        "/v1/events", json={"schema": "demo/Ping@1", "value": ping("k" * 2000, "none")}
    )
    assert error_of(unroutable, 422)["code"] == "route.key_too_large"
    journaled = records_since(client, height)
    samples = scrape(client)
    kinds = Counter(str(r["kind"]) for r in journaled)
    assert by_label(samples, "aos_journal_records_total", "kind") == {
        (kind,): count for kind, count in kinds.items()
    }
    faults = Counter((r["workflow"], r["code"]) for r in journaled if r["kind"] == "step_fault")
    assert faults and by_label(samples, "aos_step_faults_total", "workflow", "code") == faults
    dropped = Counter(
        (r["workflow"], r["reason"]) for r in journaled if r["kind"] == "delivery_dropped"
    )
    assert dropped  # the failed cell's later deliveries
    assert by_label(samples, "aos_deliveries_dropped_total", "workflow", "reason") == dropped
    rejected = Counter(
        (r["kind"], r["code"])
        for r in journaled
        if r["kind"] in ("ingress_rejected", "receipt_rejected")
    )
    assert rejected == {
        ("receipt_rejected", "receipt.signature_invalid"): 1,
        ("ingress_rejected", "route.key_too_large"): 1,
    }
    assert by_label(samples, "aos_inputs_rejected_total", "kind", "code") == dict(rejected)
    intents = Counter((r["effect"],) for r in journaled if r["kind"] == "effect_intent")
    assert by_label(samples, "aos_effect_intents_total", "effect") == dict(intents)
    assert sum(intents.values()) == 6
    assert by_label(samples, "aos_effect_receipts_total", "adapter", "status") == {
        (ADAPTER, "ok"): 3,
        (ADAPTER, "error"): 1,
    }


def test_batches_are_counted_with_their_sizes_and_durations(world_path: Path) -> None:
    with open_node(world_path) as node:
        client = signed_client(node)
        for key in ("a", "b"):
            send(client, key, "effect", 2)
        leases = lease(client)
        values = [receipt(node.world_id, le["intent"]) for le in leases]
        _queued_behind_a_held_host(
            node, [lambda value=value: node.settle(value, ADAPTER) for value in values]
        )
        samples = scrape(client)
        inputs = by_label(samples, "aos_host_batch_inputs_bucket", "le")
        seconds = by_label(samples, "aos_host_batch_seconds_bucket", "le")
        assert one(samples, "aos_host_batch_inputs_count") == node.host.batches
        assert one(samples, "aos_host_batch_inputs_sum") == node.host.batched
        assert one(samples, "aos_host_batch_seconds_count") == node.host.batches
        assert one(samples, "aos_host_batch_seconds_sum") > 0
        # Cumulative: every bucket holds the ones below it, `+Inf` holds all.
        for buckets in (inputs, seconds):
            counts = [buckets[key] for key in sorted(buckets, key=lambda k: float(k[0]))]
            assert counts == sorted(counts) and counts[-1] == node.host.batches
        # Each batch's phases add up to its duration.
        phases = by_label(samples, "aos_host_batch_phase_seconds_sum", "phase")
        assert set(phases) == {("admit",), ("run",), ("publish",), ("answer",)}
        assert sum(phases.values()) == pytest.approx(one(samples, "aos_host_batch_seconds_sum"))
        counts = by_label(samples, "aos_host_batch_phase_seconds_count", "phase")
        assert set(counts.values()) == {node.host.batches}
        # The two events went alone (a batch of one each); the four receipts as one batch.
        assert inputs[("2",)] == 2 and inputs[("4",)] == 3
        assert len(inputs) == len(BATCH_INPUTS_BUCKETS) + 1


def test_http_answers_are_counted_by_method_and_status(client: TestClient) -> None:
    before = by_label(scrape(client), "aos_http_responses_total", "method", "status")
    client.get("/v1/no-such-route")
    client.delete("/v1/world")
    client.request("PROPFIND", "/v1/world")
    client.post("/v1/events", content=b"{", headers={"content-type": "application/json"})
    client.get("/v1/world")
    after = by_label(scrape(client), "aos_http_responses_total", "method", "status")
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert delta == {
        ("GET", "404"): 1,
        ("DELETE", "405"): 1,
        ("other", "405"): 1,  # a method outside the known ones adds no series of its own
        ("POST", "400"): 1,  # refused by the request guard, before any route
        ("GET", "200"): 2,  # /v1/world and the first scrape
    }


def test_label_values_stay_in_closed_sets(client: TestClient) -> None:
    for number in range(40):
        client.request(f"X{number}", f"/v1/anything/{number}")
        client.get(f"/v1/state/demo/unknown{number}@1")
    answers = by_label(scrape(client), "aos_http_responses_total", "method", "status")
    assert {method for method, _ in answers} <= {"GET", "other"}
    assert len(answers) <= 4


def test_each_flush_is_one_timed_commit(client: TestClient) -> None:
    before = scrape(client)
    send(client, "a", "none")  # one batch: admitted, run to idle, one flush
    after = scrape(client)
    commits = one(after, "aos_store_commit_seconds_count")
    assert commits - one(before, "aos_store_commit_seconds_count") == 1
    committed = one(after, "aos_store_commit_seconds_sum")
    spent = committed - one(before, "aos_store_commit_seconds_sum")
    ran = by_label(after, "aos_host_batch_phase_seconds_sum", "phase")[("run",)]
    ran -= by_label(before, "aos_host_batch_phase_seconds_sum", "phase")[("run",)]
    assert 0 < spent < ran  # the commit is part of the batch's run


def test_commits_are_still_counted_after_a_refusal_reopened_the_world(
    client: TestClient, node: Node
) -> None:
    send(client, "a", "none")
    before = one(scrape(client), "aos_store_commit_seconds_count")

    def refused_late(world: Any) -> None:
        world.ingress("demo/Ping@1", ping("b", "none"))
        raise TimeBackwardsError("refused after an append")  # the host discards and reopens

    with pytest.raises(TimeBackwardsError):
        node.host.call(refused_late)
    assert one(scrape(client), "aos_store_commit_seconds_count") == before
    send(client, "c", "none")
    assert one(scrape(client), "aos_store_commit_seconds_count") == before + 1


def test_a_scrape_changes_nothing(client: TestClient, node: Node) -> None:
    send(client, "a", "effect", 2)
    before = (client.get("/v1/world").json(), journal(client))
    for _ in range(3):
        scrape(client)
    after = (client.get("/v1/world").json(), journal(client))
    assert after == before


def test_a_scrape_with_parameters_is_refused_and_changes_nothing(client: TestClient) -> None:
    send(client, "a", "effect", 2)
    before = journal(client)
    for query in ("name[]=aos_cells", "x=1", "x"):
        error = error_of(client.get(f"/metrics?{query}"), 400)
        assert error["code"] == "query.invalid" and error["path"] == f"$.{query.split('=')[0]}"
    assert journal(client) == before


def test_openmetrics_when_the_scraper_asks_for_it(client: TestClient) -> None:
    response = client.get(
        "/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.endswith("# EOF\n")
    assert "aos_journal_height " in response.text


FAULT = records.StepFaultRecord(1, 0, "w", None, "blake3:" + "0" * 64, "step.trap", "boom")


def test_host_counts_copy_is_independent() -> None:
    counts = HostCounts()
    counts.journaled(FAULT)
    counts.batch(3, [1.0, 1.0005, 1.0015, 1.0018, 1.002])
    copy = counts.snapshot()
    counts.journaled(FAULT)
    counts.batch(1, [1.0, 2.0, 3.0, 24.0, 25.0])
    assert copy.records == {"step_fault": 1} and copy.step_faults == {("w", "step.trap"): 1}
    assert copy.batch_inputs.observed == 1 and copy.batch_seconds.cumulative()[-1] == ("+Inf", 1)
    phases = {phase: b.total for phase, b in copy.batch_phase_seconds.items()}
    assert phases == pytest.approx(
        {"admit": 0.0005, "run": 0.001, "publish": 0.0003, "answer": 0.0002}
    )
    # Past the last bound a value is counted in `+Inf` only.
    assert counts.batch_seconds.cumulative()[-2:] == [("10", 1.0), ("+Inf", 2.0)]
    assert counts.batch_phase_seconds["publish"].cumulative()[-2:] == [("10", 1.0), ("+Inf", 2.0)]
