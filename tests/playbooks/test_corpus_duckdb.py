"""No corpus playbook uses duckdb (the upstream suite's duckdb fixtures, `duckdb_retry_query`
and `duckdb_gcs_workload_identity`, are not in the corpus), so the corpus's
`iterator_save_test` runs here with its postgres tasks on duckdb instead, unchanged but for
three words: `kind: duckdb`, `database:` (a file in the adapter's data_dir) for `auth:`, and
DuckDB's `main` schema for PostgreSQL's `public`. It runs end to end on a flow world against
a real DuckDB file, which holds one row per loop item afterwards, and the world replays."""

from __future__ import annotations

from pathlib import Path

import duckdb

from aos.flows.define.document import load_flow
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.numbers import execution_number
from aos.kernel.audit import replay
from tests.flows_pg.support import secrets_world
from tests.playbooks.driver import PLAYBOOKS

PLAYBOOK = PLAYBOOKS / "iterator_save_test" / "iterator_save_test.yaml"


def on_duckdb(text: str) -> str:
    return (
        text.replace("kind: postgres", "kind: duckdb")
        .replace("auth: '{{ pg_auth }}'", "database: corpus.duckdb")
        .replace("public.", "main.")
    )


def test_iterator_save_test_on_duckdb(tmp_path: Path) -> None:
    text = on_duckdb(PLAYBOOK.read_text())
    assert "postgres" not in text and "kind: duckdb" in text
    (tmp_path / "db").mkdir()
    flows = secrets_world(tmp_path / "w", {}, duckdb={"data_dir": "db"})
    with flows.world:
        deployed = ops.deploy(flows.world, load_flow(text, source="iterator_save_test"))
        ops.start(flows.world, deployed.name, exec_id="duck1")
        flows.adapters.drain()
        state = flows.state("duck1")
    assert state["status"] == "completed"
    steps = state["business"]["steps"]
    assert steps["process_items"]["stats"] == {"total": 3, "success": 3, "failed": 0}
    assert steps["end"] == {"status": "complete"}
    with duckdb.connect(str(tmp_path / "db" / "corpus.duckdb"), read_only=True) as conn:
        saved = conn.execute(
            "SELECT id, execution_id, item_name, item_value FROM main.iterator_save_test "
            "ORDER BY id"
        ).fetchall()
    number = str(execution_number("duck1"))  # `{{ execution_id }}`: NoETL's numeric id
    assert saved == [(f"{number}:item{n}", number, f"item{n}", n * 100) for n in (1, 2, 3)]
    report = replay.verify_replay(tmp_path / "w")
    assert report.ok, report.divergence
