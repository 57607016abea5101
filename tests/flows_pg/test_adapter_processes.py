"""The keychain and postgres adapters as real processes (`aos adapter run keychain` and
`aos adapter run tool-postgres`, each `--once --config FILE`) settling a flow's intents on a
real `aos node up`: the execution waits for its keychain, then for its SQL, and completes
with the rows of the real server; the secret is in no file of the world afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from aos.flows.serve.flow_client import NodeFlows
from aos.flows.serve.flow_world import create_flow_world
from tests.auth_fixtures import admin_token
from tests.pg_cluster import PgCluster
from tests.test_node_process import _AOS, node_process

PROCESS_TIMEOUT_S = 90.0
POLL_TIMEOUT_S = 30.0

FLOW = """
name: t/pg-process
keychain: [{name: warehouse, kind: postgres_credential}]
steps:
  - name: count
    tasks:
      - do: call
        tool: {kind: postgres, auth: warehouse, query: "SELECT %(n)s::int * 2 AS doubled"}
        args: {n: "{{ workload.n }}"}
"""


def _adapter_once(url: str, kind: str, key: Path, config: Path) -> list[dict[str, Any]]:
    command = [*_AOS, "adapter", "run", kind, "--node", url, "--key", str(key)]
    command += ["--once", "--json", "--config", str(config)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOS_SECRET_")}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S, check=False, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if '"intent"' in line]


def _waiting_for(client: NodeFlows, exec_id: str, effect: str) -> None:
    deadline = time.monotonic() + POLL_TIMEOUT_S
    while time.monotonic() < deadline:
        waits = client.status(exec_id).engine["waits"]
        if any(w["effect"] == effect for w in waits.values()):
            return
        time.sleep(0.1)
    raise AssertionError(f"{exec_id} never waited for {effect}")


def test_keychain_and_postgres_adapter_processes_run_a_flow(
    tmp_path: Path, pg_cluster: PgCluster, database: str
) -> None:
    world_path, keys = tmp_path / "w", tmp_path / "w.keys"
    world, _ = create_flow_world(world_path, keys_dir=keys, sync=False)
    world.close()
    (tmp_path / "secrets.yaml").write_text(json.dumps({"warehouse": pg_cluster.dsn(database)}))
    config = tmp_path / "tools.yaml"
    config.write_text("keychain: {file: secrets.yaml, env_prefix: null}\n")
    with node_process(world_path) as (url, _process):
        client = NodeFlows(url, token=admin_token(url))
        client.deploy_text(FLOW)
        exec_id = client.run("t/pg-process", {"n": 21}).exec
        _waiting_for(client, exec_id, "aos/keychain.resolve@1")
        (resolved,) = _adapter_once(url, "keychain", keys / "keychain.key", config)
        assert resolved["status"] == "ok" and resolved["seq"] is not None
        _waiting_for(client, exec_id, "aos/tool.postgres@1")
        (ran,) = _adapter_once(url, "tool-postgres", keys / "postgres.key", config)
        assert ran["status"] == "ok"
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while (state := client.status(exec_id)).status == "running":
            assert time.monotonic() < deadline, state
            time.sleep(0.1)
        assert state.status == "completed", state.engine["error"]
        assert state.business["steps"]["count"]["rows"] == [{"doubled": 42}]
    password = pg_cluster.password.encode()
    holding = [p.name for p in world_path.rglob("*") if p.is_file() and password in p.read_bytes()]
    assert holding == []
