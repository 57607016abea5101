"""A throwaway PostgreSQL cluster for the bench: `start()` makes one in a temporary folder and
serves it on 127.0.0.1 on a free port; `stop()` ends it by its PID and removes the folder.

    cluster = pg_cluster.start()             # or: with pg_cluster.start() as cluster:
    cluster.dsn                              # postgresql://postgres@127.0.0.1:PORT/postgres
    cluster.psql("CREATE DATABASE x")        # runs SQL as the superuser through psql
    cluster.stop()

It uses the machine's PostgreSQL binaries (`bin_dir`, default the newest of
/usr/lib/postgresql/*/bin, or $AOS_PG_BIN). `initdb` refuses to run as root, so as root the
cluster runs as the `postgres` user (`run_as`); the folder is handed to it. Trust
authentication, loopback only, no Unix socket outside the folder. The server runs as
PostgreSQL ships it (fsync on, synchronous_commit on), so what it makes durable is real.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

PG_ROOT = Path("/usr/lib/postgresql")
HOST = "127.0.0.1"
SUPERUSER = "postgres"
RUN_AS_DEFAULT = "postgres"
START_S_MAX = 30.0
STOP_S_MAX = 30.0
PSQL_S_MAX = 60.0
POLL_S = 0.05


class PgClusterError(RuntimeError):
    """The cluster could not be made, started or reached; the message says which step."""


def find_bin_dir() -> Path | None:
    """$AOS_PG_BIN, else the newest /usr/lib/postgresql/N/bin holding `initdb`; None if none."""
    found = os.environ.get("AOS_PG_BIN")
    if found:
        return Path(found) if (Path(found) / "initdb").is_file() else None
    if not PG_ROOT.is_dir():
        return None
    versions = sorted(
        (p for p in PG_ROOT.iterdir() if p.name.isdigit() and (p / "bin" / "initdb").is_file()),
        key=lambda p: int(p.name),
    )
    return versions[-1] / "bin" if versions else None


def free_port(host: str = HOST) -> int:
    """A port nothing listens on now (the kernel's pick; a race with another process is
    possible but the server then fails to start, loudly)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class PgCluster:
    folder: Path
    port: int
    bin_dir: Path
    user: str | None  # the OS user the server runs as (None: this process's)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def dsn(self) -> str:
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/postgres"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def psql(self, sql: str, *, database: str = "postgres") -> str:
        """Run `sql` as the superuser (stops at the first error); its output."""
        command = [str(self.bin_dir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At"]
        command += ["-h", HOST, "-p", str(self.port), "-U", SUPERUSER, "-d", database]
        done = subprocess.run(
            command,
            input=sql,
            capture_output=True,
            text=True,
            timeout=PSQL_S_MAX,
            check=False,
        )
        if done.returncode != 0:
            raise PgClusterError(f"psql failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        return done.stdout

    def stop(self) -> None:
        """Fast shutdown (SIGINT) by PID, SIGKILL if it does not end in time; then the folder
        goes."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(STOP_S_MAX)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PgCluster:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def start(*, bin_dir: Path | None = None, run_as: str = RUN_AS_DEFAULT) -> PgCluster:
    """initdb a new cluster in a temporary folder and start it on 127.0.0.1, a free port.
    Raises PgClusterError (and leaves nothing running) when any step fails."""
    found = bin_dir or find_bin_dir()
    if found is None:
        raise PgClusterError("no PostgreSQL binaries (initdb) under /usr/lib/postgresql")
    user = run_as if os.geteuid() == 0 else None
    folder = Path(tempfile.mkdtemp(prefix="aos-bench-pg-"))
    cluster = PgCluster(folder, free_port(), found, user)
    try:
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(folder, entry.pw_uid, entry.pw_gid)
        _initdb(cluster)
        _serve(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _as_user(cluster: PgCluster) -> dict[str, object]:
    return (
        {"user": cluster.user, "group": pwd.getpwnam(cluster.user).pw_gid} if cluster.user else {}
    )


def _initdb(cluster: PgCluster) -> None:
    data = cluster.folder / "data"
    command = [str(cluster.bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER]
    command += ["--auth=trust", "--encoding=UTF8", "--locale=C", "--no-instructions"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=START_S_MAX * 4,
        check=False,
        cwd=cluster.folder,
        **_as_user(cluster),  # type: ignore[arg-type]
    )
    if done.returncode != 0:
        raise PgClusterError(f"initdb failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def _serve(cluster: PgCluster) -> None:
    command = [str(cluster.bin_dir / "postgres"), "-D", str(cluster.folder / "data")]
    command += ["-h", HOST, "-p", str(cluster.port), "-k", str(cluster.folder)]
    log = (cluster.folder / "server.log").open("wb")
    with log:
        cluster.process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cluster.folder,
            **_as_user(cluster),  # type: ignore[arg-type]
        )
    deadline = time.monotonic() + START_S_MAX
    while time.monotonic() < deadline:
        if cluster.process.poll() is not None:
            tail = (cluster.folder / "server.log").read_text(errors="replace")[-2000:]
            raise PgClusterError(f"postgres exited ({cluster.process.returncode}): {tail}")
        ready = subprocess.run(
            [str(cluster.bin_dir / "pg_isready"), "-q", "-h", HOST, "-p", str(cluster.port)],
            check=False,
            timeout=START_S_MAX,
        )
        if ready.returncode == 0:
            return
        time.sleep(POLL_S)
    raise PgClusterError(f"postgres did not accept connections within {START_S_MAX:g} s")
