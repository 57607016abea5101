"""Shadowing a flow version against recorded executions, and migrating a running execution
(spec/11-flows.md §10): which executions another definition reproduces and where the others
first differ (fault, history, effects, events, cancels, decided state); a migration allowed
only where the shadow reproduces the whole history and state, journaled as one input and
replayed like any other; refusals that change nothing; the CLI and the node's routes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.flows.define.cfd import load_definition
from aos.flows.serve import flow_operations as ops
from aos.flows.serve import flow_shadow as shadow_module
from aos.flows.serve import migration
from aos.flows.serve.flow_shadow import (
    SHADOW_EXECS_NAMED_MAX,
    SHADOW_EXECUTIONS_LIMIT,
    FlowShadowReport,
    check_execs,
    deployed_target,
    file_target,
    shadow_flow,
)
from aos.flows.serve.flow_shadow_worker import REQUEST_BYTES_MAX
from aos.flows.serve.flow_world import MIGRATE_EVENT, SIGNAL_EVENT
from aos.flows.serve.local import LocalAdapters
from aos.flows.serve.routes import EXEC_ID_LENGTH_MAX, add_flow_routes
from aos.kernel import cbor
from aos.kernel.audit import replay
from aos.kernel.errors import AosError
from aos.kernel.node import Node, NodeLimits
from aos.kernel.node.app import create_app
from aos.kernel.world.world import World
from tests.auth_fixtures import authorize
from tests.flows_world.support import FlowWorld, make_flow_world
from tests.flows_world.test_flow_cli import aos, ok_json, ok_text, refused
from tests.flows_world.test_flow_requests import TestClient
from tests.flows_world.test_stale_and_replay import EVERYTHING, run_everything
from tests.test_node_process import node_process
from tests.test_world import engine

FLOW = "t/order"
V1 = """
name: t/order
steps:
  - name: a
    tasks:
      - {name: call, do: call, tool: {kind: echo}, args: {n: "{{ workload.n }}"}}
    next: b
  - name: b
    tasks:
      - {name: go, do: wait_signal, signal: go}
    next: c
  - name: c
    tasks:
      - {do: noop, result: {ok: true}}
"""
# Only the last step's result differs: an execution still waiting at `b` is reproduced.
V2_LATER = V1.replace("{ok: true}", "{ok: false}")
# The first tool call's arguments differ: every execution departs at its start.
V3_ARGS = V1.replace('n: "{{ workload.n }}"', 'n: "{{ workload.n + 1 }}"')
# The waiting task has another name: the history departs where `b` begins.
V4_RENAMED = V1.replace("{name: go, do: wait_signal", "{name: proceed, do: wait_signal")
OTHER = """
name: t/other
steps:
  - name: only
    tasks:
      - {do: noop, result: 1}
"""


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[Path]:
    """A closed flow world: t/order v1 deployed, then v2 (later step), v3 (args), v4 (a
    renamed task); e0 completed, e1 and e2 waiting for `go`; t/other's x0 completed."""
    flows = make_flow_world(tmp_path / "w")
    _record(flows)
    flows.world.close()
    yield flows.path


def _record(flows: FlowWorld) -> None:
    flows.deploy(V1)
    flows.deploy(OTHER)
    for index in range(3):
        ops.start(flows.world, FLOW, workload={"n": index}, exec_id=f"e{index}")
    ops.start(flows.world, "t/other", exec_id="x0")
    flows.adapters.drain()
    ops.signal(flows.world, "e0", "go")
    flows.adapters.drain()
    for text in (V2_LATER, V3_ARGS, V4_RENAMED):
        flows.deploy(text)


def shadow_of(path: Path, version: int | None = None, **options: Any) -> FlowShadowReport:
    with World.reading(path, engine=engine()) as world:
        target = deployed_target(world, FLOW, version)
    return shadow_flow(path, target, engine=engine(), **options)


def by_exec(report: FlowShadowReport) -> dict[str, Any]:
    return {e.exec: e for e in report.executions}


def journal_of(path: Path) -> tuple[int, list[Any]]:
    with World.reading(path, engine=engine()) as world:
        return world.height, list(world.store.journal.read(1, world.height))


# --------------------------------------------------------------------------------------------
# shadow


def test_a_later_change_reproduces_what_has_not_reached_it(recorded: Path) -> None:
    report = shadow_of(recorded, 2)
    assert report.summary() == {"executions": 3, "reproduce": 2, "diverge": 1, "on_target": 0}
    found = by_exec(report)
    for exec_id in ("e1", "e2"):
        waiting = found[exec_id]
        assert (waiting.outcome, waiting.status, waiting.steps) == ("reproduces", "running", 2)
        assert waiting.migratable
        assert (waiting.version, waiting.engine_version) == (1, 2)
    done = found["e0"]
    assert (done.outcome, done.status, done.steps, done.migratable) == (
        "diverges",
        "completed",
        3,
        False,
    )
    assert done.difference == "state at $.business.steps.c.ok"
    assert (done.recorded, done.shadow) == (True, False)
    # `diverged_at` is the step record, as `aos flow events` numbers it: e0's last step.
    with World.reading(recorded, engine=engine()) as world:
        last_step = max(e.seq for e in ops.history(world, "e0"))
        assert done.started_seq == min(e.seq for e in ops.history(world, "e0"))
    assert done.diverged_at == last_step


def test_different_arguments_diverge_at_the_first_tool_call(recorded: Path) -> None:
    report = shadow_of(recorded, 3)
    assert report.summary()["diverge"] == 3
    first = by_exec(report)["e1"]
    assert (first.difference, first.steps, first.diverged_at) == ("effects", 1, first.started_seq)
    assert first.recorded["effect"] == first.shadow["effect"] == "aos/tool.echo@1"
    assert (first.recorded["params"]["args"], first.shadow["params"]["args"]) == (
        {"n": 1},
        {"n": 2},
    )
    assert not first.migratable


def test_a_renamed_task_diverges_in_the_history(recorded: Path) -> None:
    e1 = by_exec(shadow_of(recorded, 4))["e1"]
    assert (e1.difference, e1.steps) == ("history", 2)
    assert e1.recorded["event"] == e1.shadow["event"] == "task.started"
    assert (e1.recorded["task"], e1.shadow["task"]) == ("go", "proceed")


def test_executions_already_on_the_definition_are_counted_not_shadowed(recorded: Path) -> None:
    with World.reading(recorded, engine=engine()) as world:
        v1 = file_target(world, load_definition(V1))
        assert v1.definition == ops.versions(world, FLOW)[0]["definition"]
    report = shadow_flow(recorded, v1, engine=engine())
    assert report.summary() == {"executions": 0, "reproduce": 0, "diverge": 0, "on_target": 3}


def test_a_definition_not_deployed_is_shadowed_and_nothing_moves(recorded: Path) -> None:
    before = journal_of(recorded)
    with World.reading(recorded, engine=engine()) as world:
        target = file_target(world, load_definition(V2_LATER.replace("ok: false", "ok: 2")))
        versions = ops.versions(world, FLOW)
    assert target.version is None and target.blob is not None
    assert target.definition not in {v["definition"] for v in versions}
    report = shadow_flow(recorded, target, engine=engine())
    assert report.summary()["reproduce"] == 2
    assert journal_of(recorded) == before  # height and every record


def test_shadows_are_deterministic(recorded: Path) -> None:
    assert shadow_of(recorded, 3).to_value() == shadow_of(recorded, 3).to_value()


def test_named_executions_only(recorded: Path) -> None:
    report = shadow_of(recorded, 2, execs=("e2",))
    assert [e.exec for e in report.executions] == ["e2"]
    assert report.on_target == 0


@pytest.mark.parametrize(
    ("named", "code"),
    [(("nope",), "flow.execution_unknown"), (("x0",), "flow.execution_unknown")],
)
def test_named_executions_are_checked(recorded: Path, named: tuple[str, ...], code: str) -> None:
    with World.reading(recorded, engine=engine()) as world, pytest.raises(AosError) as refusal:
        check_execs(world, FLOW, named)
    assert refusal.value.code == code


def test_executions_max_at_its_edges(recorded: Path) -> None:
    two = shadow_of(recorded, 2, executions_max=2)
    assert ([e.exec for e in two.executions], two.more) == (["e0", "e1"], True)
    three = shadow_of(recorded, 2, executions_max=3)
    assert (len(three.executions), three.more) == (3, False)
    for bad in (0, SHADOW_EXECUTIONS_LIMIT + 1):
        with pytest.raises(AosError) as refusal:
            shadow_of(recorded, 2, executions_max=bad)
        assert refusal.value.code == "flow.request_invalid"
    assert len(shadow_of(recorded, 2, executions_max=SHADOW_EXECUTIONS_LIMIT).executions) == 3


@pytest.mark.parametrize(
    ("flow", "version", "code"),
    [("t/nope", None, "flow.unknown"), (FLOW, 9, "flow.version_unknown")],
)
def test_unknown_targets_are_refused(
    recorded: Path, flow: str, version: int | None, code: str
) -> None:
    with World.reading(recorded, engine=engine()) as world, pytest.raises(AosError) as refusal:
        deployed_target(world, flow, version)
    assert refusal.value.code == code


# --------------------------------------------------------------------------------------------
# migrate


def test_a_migrated_execution_goes_on_under_the_new_version_and_replays(recorded: Path) -> None:
    planned = migration.plan(recorded, "e1", 2, engine=engine())
    assert (planned.from_version, planned.version, planned.expect_version, planned.steps) == (
        1,
        2,
        2,
        2,
    )
    with World.open(recorded, engine=engine()) as world:
        migration.apply(world, planned)
        state = ops.status(world, "e1")
        assert (state["version"], state["definition"]) == (2, planned.definition)
        ops.signal(world, "e1", "go")
        ops.signal(world, "e2", "go")
        assert ops.status(world, "e1")["business"]["steps"]["c"] == {"ok": False}
        assert ops.status(world, "e2")["business"]["steps"]["c"] == {"ok": True}
        migrated = [e.event for e in ops.history(world, "e1") if e.event["event"].startswith("exe")]
    assert migrated == [
        {
            "event": "execution.migrated",
            "from_version": 1,
            "to_version": 2,
            "from_definition": planned.from_definition,
            "to_definition": planned.definition,
        }
    ]
    report = replay.verify_replay(recorded, engine=engine())
    assert report.ok, report.divergence


def test_a_migrated_execution_is_shadowed_through_its_migration(recorded: Path) -> None:
    """A later shadow of e1, which moved from v1 to v2, follows the migration (the shadow
    migrates to its own target there) and may move e1 again; v1's e2 is shadowed as before."""
    planned = migration.plan(recorded, "e1", 2, engine=engine())
    with World.open(recorded, engine=engine()) as world:
        migration.apply(world, planned)
        ops.deploy(world, load_definition(V2_LATER.replace("{ok: false}", "{ok: false, v: 5}")))
    report = shadow_of(recorded, 5)
    found = by_exec(report)
    assert (found["e1"].version, found["e1"].outcome, found["e1"].steps) == (2, "reproduces", 3)
    assert found["e1"].migratable and found["e1"].engine_version == 3
    assert (found["e2"].version, found["e2"].outcome, found["e2"].migratable) == (
        1,
        "reproduces",
        True,
    )
    again = migration.plan(recorded, "e1", 5, engine=engine())
    assert (again.from_version, again.version, again.expect_version) == (2, 5, 3)
    with World.open(recorded, engine=engine()) as world:
        migration.apply(world, again)
        ops.signal(world, "e1", "go")
        assert ops.status(world, "e1")["business"]["steps"]["c"] == {"ok": False, "v": 5}
    assert replay.verify_replay(recorded, engine=engine()).ok


@pytest.mark.parametrize(
    ("exec_id", "version", "code"),
    [
        ("e1", 3, "flow.migration_refused"),  # departs at its start
        ("e1", 4, "flow.migration_refused"),  # departs where `b` begins
        ("e0", 2, "flow.execution_ended"),
        ("e1", 1, "flow.request_invalid"),  # it runs v1 already
        ("e1", 9, "flow.version_unknown"),
        ("nope", 2, "flow.execution_unknown"),
        ("x0", None, "flow.execution_ended"),
    ],
)
def test_refused_migrations_change_nothing(
    recorded: Path, exec_id: str, version: int | None, code: str
) -> None:
    before = journal_of(recorded)
    with pytest.raises(AosError) as refusal:
        migration.plan(recorded, exec_id, version, engine=engine())
    assert refusal.value.code == code
    assert journal_of(recorded) == before


def test_an_execution_that_moved_on_since_its_shadow_is_stale(recorded: Path) -> None:
    planned = migration.plan(recorded, "e1", 2, engine=engine())
    with World.open(recorded, engine=engine()) as world:
        # Sent around the host's check (ops.signal refuses it): dropped, recorded; e1 has not moved.
        nobody = {"exec": "e1", "name": "nobody-waits", "payload": None, "expect_version": None}
        world.send(SIGNAL_EVENT, nobody)
        migration.apply(world, planned)
        height = world.height
        with pytest.raises(AosError) as refusal:  # the same plan again: e1 moved on since
            migration.apply(world, planned)
        assert refusal.value.code == "flow.migration_stale"
        assert world.height == height


@pytest.mark.parametrize(
    ("exec_id", "change", "reason"),
    [
        ("e1", {"expect_version": 7}, "the execution moved on to version 2"),
        ("e1", {"flow": "t/other"}, "the definition is another flow's"),
        ("e1", {"from_definition": "blake3:" + "0" * 64}, "the execution runs another definition"),
        ("e0", {}, "the execution is completed"),
    ],
)
def test_the_interpreter_records_a_stale_migration_and_keeps_the_state(
    recorded: Path, exec_id: str, change: dict[str, Any], reason: str
) -> None:
    """What `apply` checks, the interpreter checks again: an input that raced past it is
    recorded as `migrate.stale` and changes nothing else; the world replays."""
    planned = migration.plan(recorded, "e1", 2, engine=engine())
    with World.open(recorded, engine=engine()) as world:
        before = ops.status(world, exec_id)
        world.send(MIGRATE_EVENT, {**planned.event(), "exec": exec_id, **change})
        assert ops.status(world, exec_id) == before
        last = ops.history(world, exec_id)[-1].event
    assert last == {"event": "migrate.stale", "version": 2, "reason": reason}
    assert replay.verify_replay(recorded, engine=engine()).ok


def test_a_flow_moves_every_running_execution_the_shadow_allows(recorded: Path) -> None:
    """One shadow plans e1 and e2 (running, reproduced) and skips e0 (completed); applying
    moves both, each its own input; a stale plan leaves the others to go."""
    planned = migration.plan_flow(recorded, FLOW, 2, engine=engine())
    assert ([p.exec for p in planned.plans], planned.refused, planned.more) == (
        ["e1", "e2"],
        [],
        False,
    )
    refused = migration.plan_flow(recorded, FLOW, 4, engine=engine())
    assert refused.plans == []
    assert [r["exec"] for r in refused.refused] == ["e1", "e2"]
    assert "departs from e1's history" in refused.refused[0]["reason"]
    with World.open(recorded, engine=engine()) as world:
        migration.apply(world, planned.plans[0])  # e1 moves first, on its own
        answer = migration.apply_flow(world, planned)
        assert answer["migrated"] == ["e2"]
        assert [(s["exec"], s["code"]) for s in answer["stale"]] == [("e1", "flow.migration_stale")]
        assert [ops.status(world, e)["version"] for e in ("e0", "e1", "e2")] == [1, 2, 2]
    again = migration.plan_flow(recorded, FLOW, 2, engine=engine())
    assert again.plans == []  # both run v2 already
    assert replay.verify_replay(recorded, engine=engine()).ok


# --------------------------------------------------------------------------------------------
# the CLI


def test_cli_shadow_reports_and_strict_fails_on_divergence(recorded: Path) -> None:
    report = ok_json("flow", "shadow", FLOW, "--version", "2", "--world", recorded)
    assert report["summary"] == {"executions": 3, "reproduce": 2, "diverge": 1, "on_target": 0}
    text = ok_text("flow", "shadow", FLOW, "--version", "2", "--world", recorded)
    assert "executions 3: 2 reproduce, 1 diverge; 0 already run it" in text
    assert "e0 at seq" in text and "state at $.business.steps.c.ok" in text
    assert "  recorded  true" in text and "  shadow    false" in text
    strict = aos("flow", "shadow", FLOW, "--version", "2", "--strict", "--world", recorded)
    assert strict.exit_code == 1, strict.output
    only = ["flow", "shadow", FLOW, "--version", "2", "--exec", "e1", "--strict"]
    assert aos(*only, "--world", recorded).exit_code == 0


def test_cli_shadows_a_file_and_refuses_a_version_with_it(recorded: Path, tmp_path: Path) -> None:
    edited = tmp_path / "order.yaml"
    edited.write_text(V3_ARGS)
    report = ok_json("flow", "shadow", edited, "--world", recorded)
    assert (report["version"], report["summary"]["diverge"]) == (None, 3)
    refused("flow.request_invalid", "flow", "shadow", edited, "--version", "2", "--world", recorded)
    refused("flow.unknown", "flow", "shadow", "t/nope", "--world", recorded)
    refused("flow.execution_unknown", "flow", "shadow", FLOW, "--exec", "x0", "--world", recorded)


def test_cli_migrate_dry_run_then_for_real(recorded: Path) -> None:
    before = journal_of(recorded)
    dry = ok_json("flow", "migrate", "e1", "--to", "2", "--dry-run", "--world", recorded)
    assert (dry["from_version"], dry["version"], dry["steps"]) == (1, 2, 2)
    assert journal_of(recorded) == before
    refused("flow.migration_refused", "flow", "migrate", "e1", "--to", "3", "--world", recorded)
    assert journal_of(recorded) == before
    text = ok_text("flow", "migrate", "e1", "--to", "2", "--world", recorded)
    assert "migrated  e1  t/order v1 -> v2  (a shadow reproduced its 2 recorded steps)" in text
    events = ok_text("flow", "events", "e1", "--world", recorded)
    assert "execution.migrated" in events and "from_version=1 to_version=2" in events
    assert (
        json.loads(aos("flow", "status", "e1", "--world", recorded, "--json").stdout)["version"]
        == 2
    )


@pytest.mark.parametrize(
    "args",
    [
        ["flow", "migrate", "e1", "--to", "0"],
        ["flow", "migrate", "e1", "--to", "two"],
        ["flow", "migrate"],
        ["flow", "shadow", FLOW, "--executions-max", "0"],
        ["flow", "shadow", FLOW, "--executions-max", str(SHADOW_EXECUTIONS_LIMIT + 1)],
        ["flow", "shadow", FLOW, "--version", "0"],
        ["flow", "shadow"],
    ],
)
def test_cli_usage_errors_exit_2_and_change_nothing(recorded: Path, args: list[str]) -> None:
    before = journal_of(recorded)
    result = aos(*args, "--world", recorded)
    assert result.exit_code == 2, result.output
    assert journal_of(recorded) == before


def test_cli_migrates_a_flow(recorded: Path) -> None:
    before = journal_of(recorded)
    dry = ok_text("flow", "migrate", "--flow", FLOW, "--to", "2", "--dry-run", "--world", recorded)
    assert "would move  2 of t/order to v2: e1, e2" in dry
    assert journal_of(recorded) == before
    stays = ok_text("flow", "migrate", "--flow", FLOW, "--to", "3", "--world", recorded)
    assert "migrated  0 of t/order to v3\n" in stays and "stays     e1: version 3 departs" in stays
    assert journal_of(recorded) == before
    moved = ok_json("flow", "migrate", "--flow", FLOW, "--to", "2", "--world", recorded)
    assert (moved["migrated"], moved["stale"], moved["refused"]) == (["e1", "e2"], [], [])
    for both in (["e1", "--flow", FLOW], []):
        result = aos("flow", "migrate", *both, "--world", recorded)
        assert result.exit_code == 2, result.output


# --------------------------------------------------------------------------------------------
# the node: shadows and plans in a worker process, the migration on the writer


@pytest.fixture
def served(recorded: Path) -> Iterator[TestClient]:
    with Node.open_path(recorded, sync=False, engine=engine()) as node:
        app = create_app(node)
        add_flow_routes(app, node)
        yield authorize(TestClient(app), node)


def test_node_shadow_and_migrate(served: TestClient, recorded: Path) -> None:
    answer = served.post("/v1/flows/t%2Forder/shadow", json={"version": 2})
    assert answer.status_code == 200, answer.text
    assert answer.json()["summary"]["reproduce"] == 2
    text = served.post("/v1/flows/t%2Forder/shadow", json={"text": V3_ARGS, "exec": ["e2"]})
    assert text.status_code == 200, text.text
    assert [e["outcome"] for e in text.json()["executions"]] == ["diverges"]
    moved = served.post("/v1/executions/e1/migrate", json={"version": 2})
    assert moved.status_code == 200, moved.text
    assert (moved.json()["version"], moved.json()["status"]) == (2, "running")
    status = served.get("/v1/executions/e1").json()
    assert (status["version"], status["definition"]) == (2, moved.json()["definition"])
    rest = served.post("/v1/flows/t%2Forder/migrate", json={"version": 2})
    assert rest.status_code == 200, rest.text
    assert (rest.json()["migrated"], rest.json()["refused"]) == (["e2"], [])
    assert served.get("/v1/executions/e2").json()["version"] == 2


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/v1/flows/t%2Forder/shadow", {"version": 2, "text": V1}, 400, "flow.request_invalid"),
        ("/v1/flows/t%2Forder/shadow", {"executions_max": 0}, 422, None),
        ("/v1/flows/t%2Forder/shadow", {"exec": ["x" * 129]}, 422, None),
        ("/v1/flows/t%2Forder/shadow", {"text": OTHER}, 400, "flow.request_invalid"),
        ("/v1/flows/t%2Fnope/shadow", {}, 404, "flow.unknown"),
        ("/v1/flows/t%2Forder/shadow", {"exec": ["nope"]}, 404, "flow.execution_unknown"),
        ("/v1/executions/e1/migrate", {"version": 3}, 409, "flow.migration_refused"),
        ("/v1/executions/e0/migrate", {"version": 2}, 409, "flow.execution_ended"),
        ("/v1/executions/e1/migrate", {"version": 0}, 422, None),
        ("/v1/executions/e1/migrate", {"to": 2}, 422, None),
        ("/v1/flows/t%2Forder/migrate", {"version": 9}, 404, "flow.version_unknown"),
        ("/v1/flows/t%2Fnope/migrate", {}, 404, "flow.unknown"),
        ("/v1/flows/t%2Forder/migrate", {"executions_max": 0}, 422, None),
    ],
)
def test_node_refusals_change_nothing(
    served: TestClient, path: str, body: dict[str, Any], status: int, code: str | None
) -> None:
    height = served.get("/v1/world").json()["height"]
    answer = served.post(path, json=body)
    assert answer.status_code == status, answer.text
    if code is not None:
        assert answer.json()["error"]["code"] == code
    assert served.get("/v1/world").json()["height"] == height


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/flows/t%2Forder/shadow", {"version": 2}),
        ("/v1/executions/e1/migrate", {"version": 2}),
        ("/v1/flows/t%2Forder/migrate", {"version": 2}),
    ],
)
def test_a_worker_past_the_nodes_time_limit_is_killed_and_nothing_moves(
    recorded: Path, path: str, body: dict[str, Any]
) -> None:
    limits = NodeLimits(shadow_ms_max=1)
    with Node.open_path(recorded, sync=False, engine=engine(), limits=limits) as node:
        app = create_app(node)
        add_flow_routes(app, node)
        client = authorize(TestClient(app), node)
        height = client.get("/v1/world").json()["height"]
        answer = client.post(path, json=body)
        assert answer.status_code == 504, answer.text
        error = answer.json()["error"]
        assert (error["code"], error["detail"]["limit"]) == ("node.shadow_timeout", 1)
        assert client.get("/v1/world").json()["height"] == height
        assert client.get("/v1/executions/e1").json()["version"] == 1


def test_cli_beside_a_serving_node_process(recorded: Path) -> None:
    """`aos flow shadow --world` reads the store while `aos node up` writes it; `aos flow
    migrate --world` goes through that node (which shadows in its worker) and is journaled."""
    with node_process(recorded) as (url, _node):
        report = ok_json("flow", "shadow", FLOW, "--version", "4", "--world", recorded)
        assert report["summary"]["diverge"] == 3
        moved = ok_json("flow", "migrate", "e2", "--world", recorded, "--to", "2")
        assert (moved["version"], moved["status"]) == (2, "running")
        remote = ok_json("flow", "shadow", FLOW, "--node", url, "--exec", "e1")
        assert remote["version"] == 4 and remote["executions"][0]["difference"] == "history"
    with World.reading(recorded, engine=engine()) as world:
        assert ops.status(world, "e2")["version"] == 2


def test_a_version_that_changes_nothing_reproduces_every_construct(tmp_path: Path) -> None:
    """Retries through timers, a parallel loop, a human task, a signal and a child: a version
    that differs only in a limit no execution reaches reproduces every execution, the waiting
    one is migratable, and after its migration it completes and the world replays."""
    flows = make_flow_world(tmp_path / "w")
    with flows.world:
        run_everything(flows)  # e1: completed
        ops.start(flows.world, "t/everything", exec_id="later")
        flows.adapters.drain()  # later: waits for its person and its signal
        flows.deploy(EVERYTHING + "limits: {history_events_per_step_max: 999}\n")
    with World.reading(flows.path, engine=engine()) as world:
        target = deployed_target(world, "t/everything", 2)
    found = by_exec(shadow_flow(flows.path, target, engine=engine()))
    assert [found[e].outcome for e in ("e1", "later")] == ["reproduces", "reproduces"]
    assert (found["e1"].migratable, found["later"].migratable) == (False, True)
    assert found["e1"].steps > 10
    planned = migration.plan(flows.path, "later", 2, engine=engine())
    reopened = _reopened(flows)
    with reopened.world:
        migration.apply(reopened.world, planned)
        (task,) = reopened.human_tasks()
        reopened.adapters.complete_task(str(task["intent"]), {"approved": True})
        ops.signal(reopened.world, "later", "go", {"at": 2})
        reopened.adapters.drain()
        assert (reopened.state("later")["status"], reopened.state("later")["version"]) == (
            "completed",
            2,
        )
    assert replay.verify_replay(flows.path, engine=engine()).ok


def _reopened(flows: FlowWorld) -> FlowWorld:
    world = World.open(flows.path, engine=engine())
    adapters = LocalAdapters(world, flows.keys, python_allow=("tests",))
    return FlowWorld(world, flows.keys, adapters, flows.path)


def test_a_shadow_replays_from_the_newest_snapshot_before_its_executions(tmp_path: Path) -> None:
    """Executions started after a snapshot are shadowed from it, with the same result as from
    genesis; when the executions start before every snapshot, the replay starts at genesis."""
    flows = make_flow_world(tmp_path / "w")
    with flows.world:
        _record(flows)
        snapshot_seq, _ = flows.world.snapshot()
        ops.start(flows.world, FLOW, workload={"n": 7}, exec_id="late", version=1)
        flows.adapters.drain()
    named = shadow_of(flows.path, 2, execs=("late",))
    assert named.from_snapshot == snapshot_seq
    every = shadow_of(flows.path, 2)
    assert every.from_snapshot is None
    assert by_exec(named)["late"].to_value() == by_exec(every)["late"].to_value()
    assert by_exec(named)["late"].migratable
    text = ok_text(
        "flow", "shadow", FLOW, "--version", "2", "--exec", "late", "--world", flows.path
    )
    assert f"replayed from the snapshot at seq {snapshot_seq}" in text
    assert "replayed from" not in ok_text("flow", "shadow", FLOW, "--world", flows.path)


def test_a_start_before_the_chosen_snapshot_falls_back_to_genesis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the starts the state records were ever later than the start inputs, the replay
    from a snapshot would miss executions; the shadow sees that and replays from genesis."""
    flows = make_flow_world(tmp_path / "w")
    with flows.world:
        _record(flows)
        flows.world.snapshot()
        height = flows.world.height
    monkeypatch.setattr(shadow_module, "_starts", lambda *_: {"e1": height + 1})
    report = shadow_of(flows.path, 2, execs=("e1",))
    assert report.from_snapshot is None
    assert [e.exec for e in report.executions] == ["e1"]


def test_a_flow_without_executions_needs_no_replay(recorded: Path) -> None:
    with World.reading(recorded, engine=engine()) as world:
        target = deployed_target(world, "t/other", None)
        height = world.height
    report = shadow_flow(recorded, target, execs=("e1",), engine=engine())
    assert (report.executions, report.state_height, report.from_snapshot) == ([], height, None)


def test_named_executions_at_their_limit(recorded: Path) -> None:
    names = [f"x{index}" for index in range(SHADOW_EXECS_NAMED_MAX)]
    with World.reading(recorded, engine=engine()) as world:
        with pytest.raises(AosError) as at_limit:  # counted, then looked up: x0 is unknown
            check_execs(world, FLOW, names)
        assert at_limit.value.code == "flow.execution_unknown"
        with pytest.raises(AosError) as over:
            check_execs(world, FLOW, [*names, "x-over"])
        assert over.value.code == "flow.request_invalid"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"exec": ["x" * EXEC_ID_LENGTH_MAX]}, 404),  # a well-formed id of no execution
        ({"exec": ["x" * (EXEC_ID_LENGTH_MAX + 1)]}, 422),
        ({"exec": [f"x{i}" for i in range(SHADOW_EXECS_NAMED_MAX + 1)]}, 422),
        ({"executions_max": SHADOW_EXECUTIONS_LIMIT + 1}, 422),
    ],
)
def test_node_shadow_bounds(served: TestClient, body: dict[str, Any], status: int) -> None:
    answer = served.post("/v1/flows/t%2Forder/shadow", json=body)
    assert answer.status_code == status, answer.text


@pytest.mark.parametrize(
    ("extra", "code"), [(0, "flow.request_invalid"), (1, "flow.request_invalid")]
)
def test_a_worker_reads_a_request_up_to_its_bound(recorded: Path, extra: int, code: str) -> None:
    """A request of exactly REQUEST_BYTES_MAX is read (and refused for what it asks: an
    unknown operation); one byte more is refused unread."""
    padding = REQUEST_BYTES_MAX - len(cbor.encode({"op": "none", "pad": ""})) - 4
    request = cbor.encode({"op": "none", "pad": "a" * padding})
    assert len(request) == REQUEST_BYTES_MAX
    answered = subprocess.run(
        [sys.executable, "-m", "aos.flows.serve.flow_shadow_worker", str(recorded)],
        input=request + b"\0" * extra,
        capture_output=True,
        check=False,
        timeout=120,
    )
    error = cbor.decode(answered.stdout)["error"]
    assert (answered.returncode, error["code"]) == (1, code)
    expected = "unknown worker operation" if extra == 0 else "over"
    assert expected in error["message"]
