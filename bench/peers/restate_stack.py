"""Restate as the peer of `bench/bench_restate.py`: its server as shipped and one Python
service, each process on 127.0.0.1, started and stopped by its PID, driven over HTTP as a user
would.

    with RestateStack.start() as restate:    # the server, the service, its registration
        seconds, answer = restate.invoke("e-1")   # one ThreeSteps/run, answered at its end

* The server: the `restate-server` binary of the npm package `@restatedev/restate-server`
  (`make bench-restate-setup` installs it into `.bench-restate/`; the package's own `bin` is a
  Node wrapper that spawns this binary, run here directly so that its PID is the server's).
  Its configuration is the default (`restate-server --dump-config`: log and RocksDB as
  shipped) but for where it listens (ingress, admin and node-to-node each on a free loopback
  port), its data folder (`--base-dir`, a temporary folder) and telemetry, which is off
  (`RESTATE_DISABLE_TELEMETRY`; the machine has no network). 1.7.12 also asks GitHub for its
  latest release at every start, which nothing turns off; here the name does not resolve.
* The service: `bench/peers/restate_service.py` (three `ctx.run` steps) run by the
  interpreter of `.venv-restate` and served by hypercorn over HTTP/2 without TLS, registered
  with `POST /deployments` on the admin API.

An execution is `POST /ThreeSteps/run` on the ingress (a plain service call, no idempotency
key), answered with the handler's result once the invocation has completed. This module imports nothing of
Restate; it runs in the project's virtualenv.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
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
RESTATE_DIR = Path(os.environ.get("AOS_BENCH_RESTATE_DIR", REPO / ".bench-restate"))
RESTATE_PYTHON = Path(
    os.environ.get("AOS_BENCH_RESTATE_PYTHON", REPO / ".venv-restate" / "bin" / "python")
)
SERVICE_FILE = REPO / "bench" / "peers" / "restate_service.py"
SERVER_PACKAGE = "@restatedev/restate-server"
SERVICE = "ThreeSteps"
HANDLER = "run"
HOST = "127.0.0.1"
WORKLOAD = {"message": "Hello World"}
# npm's names for this machine (the package's wrapper resolves its binary the same way).
_NPM_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
START_S_MAX = 120.0
STOP_S_MAX = 20.0
REQUEST_S_MAX = 60.0
POLL_S = 0.05
LOG_TAIL_CHARS = 3000
CONNECTIONS_MAX = 128  # the bench's client: enough for fan-out's executions at once

SERVER_ENV = {"RESTATE_DISABLE_TELEMETRY": "true"}


class RestateError(RuntimeError):
    """A step of the Restate stack failed; the message says which, with its log's tail."""


def server_binary() -> Path:
    """Where the npm package put the server binary for this machine."""
    arch = _NPM_ARCH.get(platform.machine().lower(), platform.machine().lower())
    package = f"{SERVER_PACKAGE}-{platform.system().lower()}-{arch}"
    return RESTATE_DIR / "node_modules" / package / "bin" / "restate-server"


def unavailable() -> str | None:
    """Why the Restate side cannot run here (None: it can)."""
    if not server_binary().is_file():
        return f"no {server_binary()} (make bench-restate-setup installs it)"
    if not RESTATE_PYTHON.is_file():
        return f"no {RESTATE_PYTHON} (make bench-restate-setup builds it)"
    return None


def versions() -> dict[str, str]:
    """The server's version (its `--version`) and the service's packages."""
    found: dict[str, str] = {}
    done = subprocess.run(
        [str(server_binary()), "--version"], capture_output=True, text=True, check=False
    )
    found["restate_server"] = done.stdout.strip().removeprefix("restate-server ").strip()
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({p: m.version(p) for p in ('restate-sdk', 'hypercorn', 'h2')}))"
    )
    if not RESTATE_PYTHON.is_file():
        return found
    done = subprocess.run(
        [str(RESTATE_PYTHON), "-c", code], capture_output=True, text=True, check=False
    )
    if done.returncode == 0:
        found.update({k.replace("-", "_"): v for k, v in _json_object(done.stdout).items()})
    return found


def _json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    stop_signal: int = signal.SIGTERM

    def tail(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-LOG_TAIL_CHARS:]

    def stop(self) -> None:
        """`stop_signal` by PID, SIGKILL if it has not ended in time."""
        if self.popen.poll() is None:
            self.popen.send_signal(self.stop_signal)
            try:
                self.popen.wait(STOP_S_MAX)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@dataclass
class RestateStack:
    folder: Path
    ingress: str = ""
    admin: str = ""
    processes: list[_Process] = field(default_factory=list)
    http: httpx.Client = field(
        default_factory=lambda: httpx.Client(
            timeout=REQUEST_S_MAX,
            limits=httpx.Limits(
                max_connections=CONNECTIONS_MAX, max_keepalive_connections=CONNECTIONS_MAX
            ),
            trust_env=False,
        )
    )

    @classmethod
    def start(cls) -> RestateStack:
        """The server, the service and its registration; raises RestateError (leaving nothing
        running) when a step fails."""
        stack = cls(Path(tempfile.mkdtemp(prefix="aos-bench-restate-")))
        try:
            stack._server()
            stack._register(stack._service())
        except BaseException:
            stack.stop()
            raise
        return stack

    def __enter__(self) -> RestateStack:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """The service, then the server, each by its PID."""
        self.http.close()
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
        shutil.rmtree(self.folder, ignore_errors=True)

    def invoke(self, execution: str) -> tuple[float, dict[str, Any]]:
        """One execution of the service's handler (`execution` names it in errors): the
        seconds from the request to its answer (the invocation completed), and the answer."""
        started = time.perf_counter()
        try:
            response = self.http.post(f"{self.ingress}/{SERVICE}/{HANDLER}", json=WORKLOAD)
        except httpx.HTTPError as error:
            raise RestateError(f"{SERVICE}/{HANDLER} {execution}: {error}") from None
        seconds = time.perf_counter() - started
        if not response.is_success:
            raise RestateError(
                f"{SERVICE}/{HANDLER} {execution}: {response.status_code} {response.text[:500]}"
            )
        answer = response.json()
        if not isinstance(answer, dict):
            raise RestateError(f"{SERVICE}/{HANDLER} {execution}: not an object: {answer!r}")
        return seconds, answer

    def pids(self) -> dict[str, int]:
        """The stack's processes by name: the server and the service."""
        return {p.name: p.popen.pid for p in self.processes}

    # -- starting

    def _spawn(
        self,
        name: str,
        command: list[str],
        env: dict[str, str],
        stop_signal: int = signal.SIGTERM,
    ) -> _Process:
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
        process = _Process(name, popen, log, stop_signal)
        self.processes.append(process)
        return process

    def _server(self) -> None:
        ingress, admin, fabric = (pg_cluster.free_port() for _ in range(3))
        self.ingress, self.admin = f"http://{HOST}:{ingress}", f"http://{HOST}:{admin}"
        env = {
            **os.environ,
            **SERVER_ENV,
            "RESTATE_INGRESS__BIND_ADDRESS": f"{HOST}:{ingress}",
            "RESTATE_ADMIN__BIND_ADDRESS": f"{HOST}:{admin}",
        }
        command = [str(server_binary()), "--no-logo", "--base-dir", str(self.folder / "data")]
        command += ["--bind-address", f"{HOST}:{fabric}"]
        command += ["--advertised-address", f"http://{HOST}:{fabric}/"]
        server = self._spawn("restate-server", command, env)
        self._wait_healthy(server, f"{self.admin}/health")
        self._wait_healthy(server, f"{self.ingress}/restate/health")

    def _service(self) -> str:
        port = pg_cluster.free_port()
        command = [str(RESTATE_PYTHON), str(SERVICE_FILE), "--bind", f"{HOST}:{port}"]
        # restate-sdk takes the event loop's SIGTERM handler for itself at its first request
        # (to let open invocations suspend), so hypercorn stops on SIGINT only.
        service = self._spawn("service", command, dict(os.environ), signal.SIGINT)
        url = f"http://{HOST}:{port}"
        self._wait_healthy(service, f"{url}/health")
        return url

    def _register(self, service_url: str) -> None:
        response = self.http.post(f"{self.admin}/deployments", json={"uri": service_url})
        if not response.is_success:
            raise RestateError(
                f"registering {service_url}: {response.status_code} {response.text[:1000]}"
                f"\n{self._tails()}"
            )

    def _wait_healthy(self, process: _Process, url: str) -> None:
        deadline = time.monotonic() + START_S_MAX
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise RestateError(f"{process.name} exited:\n{process.tail()}")
            try:
                if self.http.get(url, timeout=1.0).is_success:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(POLL_S)
        raise RestateError(f"{url} did not answer:\n{process.tail()}")

    def _tails(self) -> str:
        return "\n".join(f"--- {p.name}:\n{p.tail()}" for p in self.processes)
