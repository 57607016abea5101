"""The keychain and the postgres tool on a real flow world (spec/11 §1.7, §2.1): CFD
definitions written directly, run by the interpreter with the adapters in process, against
the real throwaway PostgreSQL and a local HTTP server.

A run that uses two secrets (a PostgreSQL password and an API token sent as an http header)
journals only their names and placeholders: afterwards no file of the world (the LMDB store
and its journal) holds either secret's bytes, while the server and the HTTP endpoint did get
them. A missing entry fails the execution with kind `authorization` before any tool runs.
`outcome.pg.code` reaches task policies. The world then replays byte for byte."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from aos.flows.serve import flow_operations as ops
from aos.kernel.audit import replay
from tests.flows_pg.support import secrets_world
from tests.pg_cluster import PgCluster

SECRET_FLOW = """
name: t/secrets
keychain:
  - {name: pg, kind: postgres_credential}
  - {name: api, kind: bearer_token}
steps:
  - name: store
    tasks:
      - name: create
        do: call
        tool: {kind: postgres, auth: pg, command: "CREATE TABLE seen (id int PRIMARY KEY, who text)"}
      - name: insert
        do: call
        tool: {kind: postgres, auth: pg, command: "INSERT INTO seen VALUES (%(id)s, %(who)s)"}
        args: {id: "{{ workload.id }}", who: "{{ workload.who }}"}
      - name: again
        do: call
        tool: {kind: postgres, auth: pg, command: "INSERT INTO seen VALUES (%(id)s, 'again')"}
        args: {id: "{{ workload.id }}"}
        policy:
          rules:
            - when: "{{ outcome.status == 'error' and outcome.pg.code == '23505' }}"
              then: {do: continue, set_ctx: {duplicate: "{{ outcome.pg.sqlstate }}"}}
      - name: read
        do: call
        tool: {kind: postgres, auth: "{{ keychain.pg }}", query: "SELECT id, who FROM seen"}
    next: notify
  - name: notify
    tasks:
      - name: post
        do: call
        tool:
          kind: http
          method: POST
          url: "{{ workload.url }}"
          headers: {Authorization: "Bearer {{ keychain.api }}"}
          json: {rows: "{{ store.rows }}"}
"""

MISSING_FLOW = """
name: t/missing
keychain: [{name: nowhere, kind: postgres_credential}]
steps:
  - name: a
    tasks: [{do: call, tool: {kind: postgres, auth: nowhere, query: "SELECT 1"}}]
"""


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []  # noqa: RUF012 -- one list per server class

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.seen.append({"authorization": self.headers.get("Authorization"), "body": body})
        data = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    handler = type("Recorder", (_Recorder,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", handler.seen
    finally:
        server.shutdown()
        server.server_close()


def _files_holding(root: Path, needles: list[bytes]) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.name}: {needle!r}" for needle in needles if needle in data]
    return found


def test_a_run_with_secrets_leaves_none_of_their_bytes_in_the_store(
    tmp_path: Path,
    pg_cluster: PgCluster,
    database: str,
    endpoint: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = endpoint
    token = "tok-" + secrets.token_hex(16)
    dsn = pg_cluster.dsn(database)
    world_path = tmp_path / "w"
    flows = secrets_world(world_path, {"pg": dsn, "api": token})
    with flows.world:
        state = flows.run(SECRET_FLOW, {"id": 7, "who": "ada", "url": url})
        assert state["status"] == "completed", state["engine"]["error"]
        assert state["business"]["ctx"] == {"duplicate": "23505"}
        assert state["business"]["keychain"] == {"pg": "${keychain:pg}", "api": "${keychain:api}"}
        assert state["business"]["steps"]["store"]["rows"] == [{"id": 7, "who": "ada"}]
        names = flows.names()
        assert names.index("keychain.requested") < names.index("keychain.resolved")
        assert names.index("keychain.resolved") < names.index("step.started")
        resolved = next(e for e in flows.events() if e["event"] == "keychain.resolved")
        assert set(resolved["refs"]) == {"pg", "api"}
        assert all(r["fingerprint"].startswith("blake3k:") for r in resolved["refs"].values())
    # The secrets did their work outside the store...
    assert seen[0]["authorization"] == f"Bearer {token}"
    assert json.loads(seen[0]["body"]) == {"rows": [{"id": 7, "who": "ada"}]}
    # ...and none of their bytes is in it: not in the journal, state, CAS or annotations.
    needles = [pg_cluster.password.encode(), token.encode(), dsn.encode()]
    assert _files_holding(world_path, needles) == []
    assert any(world_path.rglob("*.mdb")), "the scan must have covered the LMDB files"
    report = replay.verify_replay(world_path)
    assert report.ok, report.divergence


def test_a_missing_entry_fails_the_execution_as_authorization(tmp_path: Path) -> None:
    flows = secrets_world(tmp_path / "w", {"other": "x"})
    with flows.world:
        state = flows.run(MISSING_FLOW)
        assert state["status"] == "failed"
        assert state["engine"]["error"]["kind"] == "authorization"
        assert state["engine"]["error"]["code"] == "keychain.missing"
        assert "nowhere" in state["engine"]["error"]["message"]
        assert "step.started" not in flows.names()
        tool_intents = [i for i in flows.world.reader.open_intents() if "tool." in str(i["effect"])]
        assert tool_intents == []


def test_the_same_secret_has_the_same_fingerprint_and_a_rotated_one_another(
    tmp_path: Path,
) -> None:
    flow = "name: t/fp\nkeychain: [{name: k, kind: token}]\nsteps: [{name: a, tasks: [{do: noop}]}]"
    flows = secrets_world(tmp_path / "w", {"k": "first"})
    with flows.world:
        flows.run(flow, exec_id="e1")
        flows.run(flow, exec_id="e2")
        (tmp_path / "secrets.yaml").write_text(json.dumps({"k": "second"}))
        flows.run(flow, exec_id="e3")

        def fingerprint(exec_id: str) -> str:
            events = flows.events(exec_id)
            found = next(e for e in events if e["event"] == "keychain.resolved")
            return str(found["refs"]["k"]["fingerprint"])

        assert fingerprint("e1") == fingerprint("e2") != fingerprint("e3")
        assert ops.status(flows.world, "e3")["status"] == "completed"


NOETL_SHAPED_FLOW = """
name: t/iterator-save
workload:
  pg_auth: pg_local
  items: [{name: a, value: 1}, {name: b, value: 2}, {name: c, value: 3}]
steps:
  - name: create_table
    tasks:
      - do: call
        tool:
          kind: postgres
          auth: "{{ pg_auth }}"
          command: |
            CREATE TABLE IF NOT EXISTS iterator_save_test (
              id TEXT PRIMARY KEY, item_name TEXT, item_value INTEGER);
    next: process_items
  - name: process_items
    loop: {in: "{{ items }}", iterator: item, mode: sequential}
    tasks:
      - name: save_item
        do: call
        tool:
          kind: postgres
          auth: "{{ pg_auth }}"
          command: |
            INSERT INTO iterator_save_test (id, item_name, item_value)
            VALUES ('{{ execution.id }}:{{ iter.item.name }}', '{{ iter.item.name }}',
                    {{ iter.item.value }})
            ON CONFLICT (id) DO UPDATE SET item_value = EXCLUDED.item_value;
        policy:
          rules:
            - {when: "{{ outcome.status == 'error' }}", then: {do: fail}}
            - {when: null, then: {do: continue}}
    next:
      - {to: check, when: "{{ event.name == 'loop.done' }}"}
  - name: check
    tasks:
      - do: call
        tool:
          kind: postgres
          auth: "{{ pg_auth }}"
          query: "SELECT count(*) AS n, sum(item_value) AS total FROM iterator_save_test"
"""


def test_a_noetl_shaped_flow_templates_its_sql_and_names_an_undeclared_entry(
    tmp_path: Path, pg_cluster: PgCluster, database: str
) -> None:
    """As the corpus's iterator_save_test: `auth` from the workload, names no `keychain`
    entry of the flow, SQL written with templates, one INSERT per loop item."""
    flows = secrets_world(tmp_path / "w", {"pg_local": pg_cluster.dsn(database)})
    with flows.world:
        state = flows.run(NOETL_SHAPED_FLOW)
        assert state["status"] == "completed", state["engine"]["error"]
        assert state["business"]["steps"]["check"]["rows"] == [{"n": 3, "total": 6}]
        assert state["business"]["steps"]["process_items"]["stats"]["success"] == 3
        assert "keychain.requested" not in flows.names()


RETRY_FLOW = """
name: t/pg-retry
steps:
  - name: store
    tasks:
      - name: prepare
        do: call
        tool: {kind: postgres, auth: pg, command: "CREATE SEQUENCE tries"}
      - name: store_200
        do: call
        tool:
          kind: postgres
          auth: pg
          command: |
            DO $$ BEGIN
              IF nextval('tries') < 3 THEN
                RAISE EXCEPTION 'could not serialize' USING ERRCODE = '40001';
              END IF;
            END $$;
            SELECT currval('tries') AS tries;
        policy:
          rules:
            - when: "{{ outcome.status == 'error' and outcome.pg.code in ['40001','40P01'] }}"
              then: {do: retry, attempts: 5, backoff: exponential, delay_s: 2.0}
            - when: "{{ outcome.status == 'error' }}"
              then: {do: fail}
"""


def test_a_serialization_failure_is_retried_as_seed_003_writes_it(
    tmp_path: Path, pg_cluster: PgCluster, database: str
) -> None:
    """Seed 003 §11's store rule: retry on SQLSTATE 40001/40P01 with exponential backoff.
    The real server raises 40001 twice (a sequence, made before, counts attempts: nextval
    survives the rollback of each failed attempt)."""
    flows = secrets_world(tmp_path / "w", {"pg": pg_cluster.dsn(database)})
    with flows.world:
        state = flows.run(RETRY_FLOW)
        assert state["status"] == "completed", state["engine"]["error"]
        assert state["business"]["steps"]["store"]["rows"] == [{"tries": 3}]
        failed = [e for e in flows.events() if e["event"] == "task.attempt.failed"]
        assert [e["attempt"] for e in failed] == [1, 2]
        assert flows.adapters.drain().timers_skipped == 0  # nothing left: both retries ran
