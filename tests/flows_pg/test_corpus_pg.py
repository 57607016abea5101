"""The corpus playbooks that use postgres run end to end, as the corpus writes them, on a flow
world (the interpreter component, the python worker, the postgres tool against the session's
real throwaway server, http against a local server standing in for the internet), and each
world replays byte for byte. Each test asserts the final status, the step results the
playbook's comments state, and the rows the server holds afterwards.

- `iterator_save_test`: creates its table and saves one row per loop item;
- `v10_canonical_example`: admission, an http fetch, a task pipeline, a parallel postgres loop
  (its `results` table is set up first, as the upstream suite's `create_tables` does);
- `examples/weather_loop_v2`: its http task reads `outcome.result.current_weather`, but an
  http result holds the decoded body under `data` (NoETL 2.13.1's http tool too), so as
  written the temperature a policy renders is undefined — `""` under the lenient undefined
  of a task's policy (spec/12 §6) — every iteration's python comparison of it raises, the
  policy's `else: continue` goes on past it, and the summary it stores counts no city; with
  that one path read as `outcome.result.data.current_weather` it stores the real summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from aos.flows.define.document import load_flow
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.numbers import execution_number
from aos.kernel.audit import replay
from tests.flows_pg.support import secrets_world
from tests.flows_world.support import FlowWorld
from tests.pg_cluster import PgCluster
from tests.playbooks.driver import PLAYBOOKS
from tests.playbooks.server import WEATHER, serving


def run_corpus(flows: FlowWorld, text: bytes, exec_id: str, workload: Any = None) -> dict[str, Any]:
    deployed = ops.deploy(flows.world, load_flow(text, source=exec_id))
    ops.start(flows.world, deployed.name, workload=workload, exec_id=exec_id)
    flows.adapters.drain()
    return flows.state(exec_id)


def rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return list(conn.execute(query).fetchall())


def verify(path: Path) -> None:
    report = replay.verify_replay(path)
    assert report.ok, report.divergence


def test_iterator_save_test(tmp_path: Path, pg_cluster: PgCluster, database: str) -> None:
    dsn = pg_cluster.dsn(database)
    flows = secrets_world(tmp_path / "w", {"pg_local": dsn})  # the workload's pg_auth
    with flows.world:
        text = (PLAYBOOKS / "iterator_save_test" / "iterator_save_test.yaml").read_bytes()
        state = run_corpus(flows, text, "save1")
    assert state["status"] == "completed"
    steps = state["business"]["steps"]
    assert steps["start"] == {"status": "initialized"}
    assert steps["process_items"]["stats"] == {"total": 3, "success": 3, "failed": 0}
    assert [r["rowcount"] for r in steps["process_items"]["results"]] == [1, 1, 1]
    assert steps["end"] == {"status": "complete"}
    saved = rows(
        dsn,
        "SELECT id, execution_id, item_name, item_value FROM public.iterator_save_test ORDER BY id",
    )
    # `{{ execution_id }}` is the execution's number, as NoETL's ids are (spec/12 §6).
    number = str(execution_number("save1"))
    assert saved == [(f"{number}:item{n}", number, f"item{n}", n * 100) for n in (1, 2, 3)]
    verify(tmp_path / "w")


def test_v10_canonical_example(tmp_path: Path, pg_cluster: PgCluster, database: str) -> None:
    dsn = pg_cluster.dsn(database)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE results (item_id int PRIMARY KEY, data jsonb)")
    flows = secrets_world(tmp_path / "w", {"pg_test": dsn})
    with flows.world, serving() as url:
        text = (PLAYBOOKS / "v10_canonical_example.yaml").read_bytes()
        state = run_corpus(flows, text, "v10", {"api_url": url})
        admitted = [e for e in flows.events("v10") if e["event"] == "policy.admit.evaluated"]
    assert state["status"] == "completed"
    assert [e["admitted"] for e in admitted] == [True]  # `enabled: true`
    business = state["business"]
    assert business["ctx"] == {"fetch_completed": True, "transform_done": True}
    steps = business["steps"]
    assert steps["fetch_data"]["http"]["status"] == 200
    # validate counts the fetched body's keys; transform passes the count on (`_prev`).
    assert steps["process_data"]["results"] == {
        "validate": {"status": "ok", "valid": True, "count": 3},
        "transform": {"transformed": True, "items": 3},
    }
    # `in` renders to that count, a scalar: one item, so one row.
    assert steps["store_results"]["stats"] == {"total": 1, "success": 1, "failed": 0}
    assert rows(dsn, "SELECT item_id, data FROM results") == [(3, {})]
    assert steps["end"] == {
        "status": "COMPLETED",
        "message": "Workflow finished successfully",
        "context": {"fetch_completed": True, "transform_done": True},
    }
    verify(tmp_path / "w")


WEATHER_TABLE = """
CREATE TABLE weather_monitoring_summary (
  execution_id text, total_cities int, alerts_triggered int, summary_data jsonb,
  created_at timestamptz)
"""
WEATHER_PLAYBOOK = PLAYBOOKS / "examples" / "weather_loop_v2.yaml"


def run_weather(tmp_path: Path, dsn: str, text: bytes, exec_id: str) -> dict[str, Any]:
    flows = secrets_world(tmp_path / exec_id, {"pg_local": dsn})
    with flows.world, serving() as url:
        state = run_corpus(flows, text, exec_id, {"weather_api_url": f"{url}/v1/forecast"})
    verify(tmp_path / exec_id)
    return state


def test_weather_loop_v2_as_written(tmp_path: Path, pg_cluster: PgCluster, database: str) -> None:
    dsn = pg_cluster.dsn(database)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(WEATHER_TABLE)
    state = run_weather(tmp_path, dsn, WEATHER_PLAYBOOK.read_bytes(), "weather")
    assert state["status"] == "completed"
    steps = state["business"]["steps"]
    # each iteration went on past an error: it ended, and counts as failed (spec/12 §5)
    assert steps["city_loop"]["stats"] == {"total": 3, "success": 0, "failed": 3}
    for continued in steps["city_loop"]["results"]:  # the error its policy continued past
        assert continued["error"]["code"] == "python.raised"
        assert (
            "'>' not supported between instances of 'str' and 'int'"
            in (continued["error"]["message"])
        )
    empty = {
        "total_cities_monitored": 0,
        "alerts_triggered": 0,
        "alert_percentage": 0,
        "weather_data": "",  # the policy's set_ctx of a result the failed task did not have
        "alerts": "",
    }
    assert state["business"]["ctx"]["summary"] == empty
    stored = rows(
        dsn, "SELECT execution_id, total_cities, summary_data FROM weather_monitoring_summary"
    )
    assert stored == [(str(execution_number("weather")), 0, empty)]
    assert steps["end"] == {"status": "completed", "workflow": "weather_monitoring"}


def test_weather_loop_v2_reading_the_body_under_data(
    tmp_path: Path, pg_cluster: PgCluster, database: str
) -> None:
    dsn = pg_cluster.dsn(database)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(WEATHER_TABLE)
    text = WEATHER_PLAYBOOK.read_text().replace(
        "outcome.result.current_weather", "outcome.result.data.current_weather"
    )
    state = run_weather(tmp_path, dsn, text.encode(), "weather2")
    assert state["status"] == "completed"
    steps = state["business"]["steps"]
    assert steps["city_loop"]["stats"] == {"total": 3, "success": 3, "failed": 0}
    summary = state["business"]["ctx"]["summary"]
    hot = [("New York", WEATHER["40.7128"][0])]  # the one above alert_threshold (30)
    cool = [("San Francisco", WEATHER["37.7749"][0]), ("London", WEATHER["51.5074"][0])]
    assert [(a["city"], a["temperature"]) for a in summary["alerts"]] == hot
    assert [(w["city"], w["temperature"]) for w in summary["weather_data"]] == cool
    assert all(a["alert"] for a in summary["alerts"])
    assert (summary["total_cities_monitored"], summary["alerts_triggered"]) == (3, 1)
    assert abs(summary["alert_percentage"] - 100 / 3) < 1e-9
    stored = rows(
        dsn,
        "SELECT execution_id, total_cities, alerts_triggered, summary_data "
        "FROM weather_monitoring_summary",
    )
    assert stored == [(str(execution_number("weather2")), 3, 1, summary)]
