"""Logical time on manual-clock worlds: a time input past `LOGICAL_NS_MAX` is refused before
anything is stamped, and the refusal changes nothing (issue 16, item 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from aos.cli.main import main
from aos.kernel.audit import replay
from aos.kernel.node.app import create_app
from aos.kernel.world.errors import TimeOutOfRangeError
from aos.kernel.world.world import LOGICAL_NS_MAX, World
from tests.auth_fixtures import authorize
from tests.test_node import open_node
from tests.test_world import SCRIPTED, create, journal_bytes, ping


def observed(world: World) -> tuple[Any, ...]:
    """Everything a refusal must leave as it was."""
    return (
        world.height,
        world.logical_ns,
        world.reader.next_timer_ns(),
        journal_bytes(world),
        world.reader.state("demo/keyed@1", "far"),
    )


def test_advancing_past_the_range_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path, SCRIPTED, clock="manual") as world:
        assert world.logical_ns == 0
        world.send("demo/Ping@1", ping("far", "timer", LOGICAL_NS_MAX))  # due at the edge
        assert world.reader.next_timer_ns() == LOGICAL_NS_MAX
        before = observed(world)
        for by in (LOGICAL_NS_MAX + 1, 2**64, 10**100):
            with pytest.raises(TimeOutOfRangeError):
                world.advance_time(by)
            assert observed(world) == before
        report = world.jump_next_timer()  # exactly to the edge: accepted, the timer fires
        assert report is not None and report.steps >= 1
        assert world.logical_ns == LOGICAL_NS_MAX and world.reader.next_timer_ns() is None
        at_edge = observed(world)
        with pytest.raises(TimeOutOfRangeError):
            world.advance_time(1)
        assert observed(world) == at_edge
        world.advance_time(0)
        world.send("demo/Ping@1", ping("near", "timer", 0))  # the world keeps working
        assert world.reader.next_timer_ns() == LOGICAL_NS_MAX
    assert replay.verify_replay(path).ok


def test_the_cli_refuses_a_time_past_the_range(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path, SCRIPTED, clock="manual") as world:
        world.advance_time(5)
        before = (world.height, world.logical_ns, journal_bytes(world))
    # The largest duration the CLI parses, from 5 ns: past the range by 5 ns.
    result = CliRunner().invoke(
        main, ["world", "time", "advance", str(2**63 - 1), "--world", str(path)]
    )
    assert result.exit_code == 1 and result.stderr.startswith("error[world.time_out_of_range]")
    with World.open(path) as world:
        assert (world.height, world.logical_ns, journal_bytes(world)) == before


def test_the_node_refuses_a_time_past_the_range(tmp_path: Path) -> None:
    path = tmp_path / "w"
    create(path, SCRIPTED, clock="manual").close()
    with open_node(path) as node:
        client = authorize(TestClient(create_app(node)), node)
        before = client.get("/v1/world").json()
        for by_ns in (2**63, 2**64, 10**30):
            answer = client.post("/v1/time/advance", json={"by_ns": by_ns})
            assert answer.status_code == 400
            assert answer.json()["error"]["code"] == "world.time_out_of_range"
        assert client.get("/v1/world").json() == before
        assert client.post("/v1/time/advance", json={"by_ns": 5}).json()["logical_ns"] == 5
