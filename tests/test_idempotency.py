"""Idempotent ingress (spec/03 §3.1): an event sent with an idempotency key is admitted once;
a repeat answers the first admission and journals nothing; a refusal changes nothing; the
index survives reopening, is bounded, and a replay re-admits what was journaled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from aos.kernel.audit import replay
from aos.kernel.errors import AosError
from aos.kernel.node.app import create_app
from aos.kernel.world.idempotency import IDEMPOTENCY_KEY_BYTES_MAX
from aos.kernel.world.world import World, WorldLimits
from tests.auth_fixtures import authorize
from tests.test_cli_world import run_json
from tests.test_world import COUNTER, EVENT, create, engine, inc, reopen


def journal(world: World) -> list[Any]:
    world.commit()
    return [record for _, record in world.store.journal.read()]


def test_a_repeat_answers_the_first_admission_and_journals_nothing(tmp_path: Path) -> None:
    with create(tmp_path / "w") as world:
        first, _ = world.send(EVENT, inc("a", 2), idempotency_key="order-17")
        before = journal(world)
        again, report = world.send(EVENT, inc("a", 2), idempotency_key="order-17")
        assert again.duplicate and not first.duplicate
        assert (again.seq, again.event_hash, again.deliveries) == (
            first.seq,
            first.event_hash,
            first.deliveries,
        )
        assert report.steps == 0 and journal(world) == before
        assert world.reader.state(COUNTER, "a")["count"] == 2
        assert before[first.seq - 1]["idempotency_key"] == "order-17"
        unkeyed, _ = world.send(EVENT, inc("a", 1))
        assert "idempotency_key" not in journal(world)[unkeyed.seq - 1]


@pytest.mark.parametrize(
    ("key", "code"),
    [
        ("", "world.idempotency_key_invalid"),
        (17, "world.idempotency_key_invalid"),
        ("k" * (IDEMPOTENCY_KEY_BYTES_MAX + 1), "world.idempotency_key_invalid"),
        ("é" * (IDEMPOTENCY_KEY_BYTES_MAX // 2 + 1), "world.idempotency_key_invalid"),
        ("order-17", "world.idempotency_key_reused"),  # the same key, another event
    ],
)
def test_refused_keys_change_nothing(tmp_path: Path, key: Any, code: str) -> None:
    with create(tmp_path / "w") as world:
        world.send(EVENT, inc("a", 2), idempotency_key="order-17")
        before, height = journal(world), world.height
        with pytest.raises(AosError) as refused:
            world.send(EVENT, inc("a", 3), idempotency_key=key)
        assert refused.value.code == code
        assert journal(world) == before and world.height == height
        assert world.reader.state(COUNTER, "a")["count"] == 2


def test_the_longest_key_is_accepted(tmp_path: Path) -> None:
    with create(tmp_path / "w") as world:
        key = "k" * IDEMPOTENCY_KEY_BYTES_MAX
        world.send(EVENT, inc("a"), idempotency_key=key)
        assert world.send(EVENT, inc("a"), idempotency_key=key)[0].duplicate


def test_keys_survive_reopening_and_repeats_in_one_batch_are_found(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path) as world:
        first = world.ingress(EVENT, inc("a"), idempotency_key="x")
        same_batch = world.ingress(EVENT, inc("a"), idempotency_key="x")
        assert same_batch.duplicate and same_batch.seq == first.seq
        world.run_to_idle()
    with reopen(path) as world:
        again, _ = world.send(EVENT, inc("a"), idempotency_key="x")
        assert again.duplicate and again.seq == first.seq
        assert world.reader.state(COUNTER, "a")["count"] == 1


def test_the_window_keeps_the_newest_keys(tmp_path: Path) -> None:
    path = tmp_path / "w"
    limits = WorldLimits(idempotency_keys_max=2)
    with create(path, limits=limits) as world:
        seqs = {k: world.send(EVENT, inc("a"), idempotency_key=k)[0].seq for k in "abc"}
        assert world.send(EVENT, inc("a"), idempotency_key="c")[0].duplicate
        assert world.send(EVENT, inc("a"), idempotency_key="b")[0].seq == seqs["b"]
        readmitted, _ = world.send(EVENT, inc("a"), idempotency_key="a")  # evicted: new
        assert not readmitted.duplicate and readmitted.seq > seqs["c"]
        assert world.reader.state(COUNTER, "a")["count"] == 4
    with reopen(path, limits=limits) as world:
        assert not world.send(EVENT, inc("a"), idempotency_key="b")[0].duplicate  # evicted
    report = replay.verify_replay(path, engine=engine())
    assert report.ok, report


def test_a_replay_readmits_keyed_events_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path, limits=WorldLimits(idempotency_keys_max=1)) as world:
        for key in ["p", "q", "p", "p", "r", "q"]:  # a window of 1: "p" twice in a row dedups
            world.send(EVENT, inc(f"cell-{key}"), idempotency_key=key)
        assert world.reader.state(COUNTER, "cell-p")["count"] == 2
    report = replay.verify_replay(path, engine=engine())
    assert report.ok, report


def test_the_node_takes_the_key_in_the_body_or_the_header(tmp_path: Path) -> None:
    from tests.test_node import open_node

    path = tmp_path / "w"
    create(path).close()
    with open_node(path) as node:
        client = authorize(TestClient(create_app(node)), node)
        event = {"schema": EVENT, "value": inc("a")}
        first = client.post("/v1/events", json={**event, "idempotency_key": "r1"}).json()
        header = client.post("/v1/events", json=event, headers={"Idempotency-Key": "r1"}).json()
        assert header["duplicate"] and header["seq"] == first["seq"] and not first["duplicate"]
        assert header["report"]["steps"] == 0
        height = client.get("/v1/world").json()["height"]
        mismatch = client.post(
            "/v1/events", json={**event, "idempotency_key": "r1"}, headers={"Idempotency-Key": "r2"}
        )
        reused = client.post(
            "/v1/events", json={"schema": EVENT, "value": inc("b"), "idempotency_key": "r1"}
        )
        assert mismatch.json()["error"]["code"] == "request.invalid"
        assert (reused.status_code, reused.json()["error"]["code"]) == (
            409,
            "world.idempotency_key_reused",
        )
        assert client.get("/v1/world").json()["height"] == height


def test_the_cli_sends_with_a_key(tmp_path: Path) -> None:
    path = tmp_path / "w"
    create(path).close()
    args = (
        "world",
        "send",
        EVENT,
        "--value-json",
        '{"$tag": "Increment", "$value": {"id": "a", "by": 1}}',
    )
    first = run_json(*args, "--idempotency-key", "cli-1", world=path)
    again = run_json(*args, "--idempotency-key", "cli-1", world=path)
    assert not first["duplicate"] and again["duplicate"] and again["seq"] == first["seq"]
