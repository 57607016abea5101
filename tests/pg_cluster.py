"""A throwaway PostgreSQL cluster for tests and benches: `initdb` in a temporary folder, a
server on 127.0.0.1 at a free port, stopped (and its folder removed) at the end. The one
module both tests/ and bench/ use.

    cluster = PgCluster.start()       # or: with PgCluster.start(durable=True) as cluster:
    try:
        dsn = cluster.dsn()           # postgresql://postgres:PASSWORD@127.0.0.1:PORT/postgres
        cluster.psql("CREATE DATABASE x")   # SQL as the superuser through psql
        ...
    finally:
        cluster.stop()

It runs Debian's binaries (`AOS_PG_BIN`, else the newest `/usr/lib/postgresql/N/bin`). `initdb` refuses
to run as root, so when the tests run as root the cluster belongs to a non-root user
(`postgres`, or `AOS_PG_USER`) and its folder is one that user owns. It listens on loopback
only and checks passwords there (scram-sha-256: a test that a password reaches the server
proves something); the superuser's password is random, in `dsn()`. Tests run it with `fsync`
off (a crash loses it, which a test cluster may); benches start it `durable=True`, as
PostgreSQL ships (fsync and synchronous_commit on), so what it makes durable is real. Tests
that crash the server process (`restart("immediate")`) start it `crash_safe=True`:
synchronous_commit on, so a commit that returned is in the WAL the restarted server replays,
with fsync still off (only a crash of the machine would lose it).

A watchdog process stops the server and removes its folder if the process that started it
dies without `stop` (a killed test run must not leave servers behind on a shared machine).

Missing binaries fail loudly, naming the package: a postgres test that skips proves nothing.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

PG_ROOT = Path("/usr/lib/postgresql")
PG_USER_DEFAULT = "postgres"
PG_SUPERUSER = "postgres"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
# `pg_ctl restart -m`: a clean restart, and one like a crash (recovery from the WAL).
RESTART_MODES = ("fast", "immediate")
INSTALL_HINT = "apt-get install postgresql-15"
WATCHDOG_INTERVAL_S = 0.5

_WATCHDOG = """
import os, shutil, subprocess, sys, time
owner, interval, root, stop = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4:]
while True:
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        break
    time.sleep(interval)
subprocess.run(stop, capture_output=True, timeout=60, check=False)
shutil.rmtree(root, ignore_errors=True)
"""


class PgClusterError(RuntimeError):
    """The cluster could not be made or started."""


def find_bin_dir() -> Path | None:
    """$AOS_PG_BIN if it holds `initdb`, else the newest /usr/lib/postgresql/N/bin holding
    it; None when there is none (a bench then skips PostgreSQL, saying why)."""
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


def pg_bin() -> Path:
    """The folder of `initdb` and `pg_ctl`; a clear failure when they are not installed."""
    folder = find_bin_dir() or Path(os.environ.get("AOS_PG_BIN", PG_ROOT / "15" / "bin"))
    missing = [name for name in ("initdb", "pg_ctl") if not (folder / name).is_file()]
    if missing:
        raise PgClusterError(
            f"PostgreSQL's {', '.join(missing)} not found in {folder}: the tests need a real "
            f"server; install it with `{INSTALL_HINT}` (or set AOS_PG_BIN to its bin folder)"
        )
    return folder


def free_port() -> int:
    """A port free on loopback now (the server binds it a moment later; a clash is a failed
    start with the server's own message, not a silent wrong server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class PgCluster:
    """A running throwaway cluster; `stop` ends it and removes its folder."""

    root: Path
    port: int
    bin: Path
    user: str | None  # the OS user owning the cluster when we run as root, else None
    password: str  # the superuser's
    durable: bool = False
    crash_safe: bool = False
    stopped: bool = False
    watchdog: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def dsn(
        self, dbname: str = "postgres", user: str = PG_SUPERUSER, password: str | None = None
    ) -> str:
        """A URI for `user` (the superuser, with its password, by default)."""
        secret = self.password if password is None and user == PG_SUPERUSER else password
        credentials = user if secret is None else f"{user}:{secret}"
        return f"postgresql://{credentials}@{self.host}:{self.port}/{dbname}"

    @property
    def pid(self) -> int | None:
        """The server's (postmaster's) process id, while it runs."""
        path = self.data / "postmaster.pid"
        first = path.read_text().split("\n", 1)[0].strip() if path.exists() else ""
        return int(first) if first.isdigit() else None

    def psql(self, sql: str, *, database: str = "postgres") -> str:
        """Run `sql` as the superuser (stopping at the first error); its output."""
        command = [str(self.bin / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At"]
        command += ["-h", self.host, "-p", str(self.port), "-U", PG_SUPERUSER, "-d", database]
        done = subprocess.run(
            command,
            input=sql,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            env={**_pg_env(), "PGPASSWORD": self.password},
            check=False,
        )
        if done.returncode != 0:
            raise PgClusterError(f"psql failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        return done.stdout

    def __enter__(self) -> PgCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @classmethod
    def start(
        cls,
        *,
        port: int | None = None,
        os_user: str | None = None,
        durable: bool = False,
        crash_safe: bool = False,
    ) -> PgCluster:
        """initdb, then start a server on 127.0.0.1:`port` (a free one by default); with
        `durable`, fsync and synchronous commit stay on (benches); with `crash_safe`,
        synchronous commit only (a server crash loses no commit that returned)."""
        binaries = pg_bin()
        user = _os_user(os_user)
        root = Path(tempfile.mkdtemp(prefix="aos-pg-"))
        cluster = cls(
            root=root,
            port=port or free_port(),
            bin=binaries,
            user=user,
            password=secrets.token_hex(16),
            durable=durable,
            crash_safe=crash_safe,
        )
        try:
            password_file = root / "superuser.password"
            password_file.write_text(cluster.password)
            password_file.chmod(0o600)
            if user is not None:
                record = pwd.getpwnam(user)
                os.chown(root, record.pw_uid, record.pw_gid)
                os.chown(password_file, record.pw_uid, record.pw_gid)
            cluster._run(
                "initdb",
                "-D",
                str(cluster.data),
                "-U",
                PG_SUPERUSER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                f"--pwfile={password_file}",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            )
            cluster.start_server()
            cluster.watchdog = cluster._watch()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove the folder; safe to call twice."""
        if self.stopped:
            return
        self.stopped = True
        if self.watchdog is not None:
            self.watchdog.kill()
            self.watchdog.wait()
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def start_server(self) -> None:
        """Start the server on the cluster's folder and port (`pg_ctl start -w`)."""
        self._pg_ctl_up("start")

    def stop_server(self, mode: str = "fast") -> None:
        """Stop the server, keeping its folder (`start_server` brings it back)."""
        _check_mode(mode)
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast") -> None:
        """`pg_ctl restart -m MODE`: `fast` ends every session and checkpoints; `immediate`
        kills the server, which recovers from its WAL as after a crash. Every client
        connection is cut either way."""
        _check_mode(mode)
        self._pg_ctl_up("restart", "-m", mode)

    def _pg_ctl_up(self, action: str, *extra: str) -> None:
        """`pg_ctl start` or `restart`, waiting until the server accepts connections."""
        options = _server_options(
            self.port, self.root, durable=self.durable, crash_safe=self.crash_safe
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            str(int(START_TIMEOUT_S)),
            "-o",
            options,
            *extra,
            action,
        )

    def detached(self) -> PgCluster:
        """A copy without the watchdog, to hand to another process (it can `restart` and
        connect; stopping stays with the original)."""
        return replace(self, watchdog=None, stopped=True)

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _watch(self) -> subprocess.Popen[bytes]:
        """The watchdog: once this process is gone, an immediate stop and the folder removed."""
        stop = self._command("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        return subprocess.Popen(
            [*self._watchdog_head(), str(self.root), *stop],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a signal to the test's process group must not end it
        )

    @staticmethod
    def _watchdog_head() -> list[str]:
        return [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(WATCHDOG_INTERVAL_S)]

    def _command(self, tool: str, *args: str) -> list[str]:
        command = [str(self.bin / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        return command

    def _run(self, tool: str, *args: str, check: bool = True) -> None:
        command = self._command(tool, *args)
        deadline = START_TIMEOUT_S + STOP_TIMEOUT_S
        started = time.monotonic()
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=deadline,
            cwd=self.root,
            env=_pg_env(),
            check=False,
        )
        if check and done.returncode != 0:
            took = time.monotonic() - started
            raise PgClusterError(
                f"{tool} failed ({done.returncode}, {took:.1f} s): "
                f"{done.stderr.strip() or done.stdout.strip()}\n{self.log()[-2000:]}"
            )


def _server_options(port: int, root: Path, *, durable: bool, crash_safe: bool = False) -> str:
    """Loopback only, this port, its socket in the cluster's own folder; no durability unless
    `durable` (or, against a crash of the server process only, `crash_safe`)."""
    settings = {
        "listen_addresses": "127.0.0.1",
        "port": str(port),
        "unix_socket_directories": str(root),
        "max_connections": "100",
    }
    if not durable:
        commits = "on" if crash_safe else "off"
        settings |= {"fsync": "off", "synchronous_commit": commits, "full_page_writes": "off"}
    return " ".join(f"-c {name}={value}" for name, value in settings.items())


def _check_mode(mode: str) -> None:
    if mode not in RESTART_MODES:
        raise PgClusterError(f"shutdown mode {mode!r} is not one of {RESTART_MODES}")


def _os_user(wanted: str | None) -> str | None:
    """The user to own the cluster: none needed unless we are root."""
    if os.geteuid() != 0:
        return None
    name = wanted or os.environ.get("AOS_PG_USER", PG_USER_DEFAULT)
    try:
        pwd.getpwnam(name)
    except KeyError:
        raise PgClusterError(
            f"initdb refuses to run as root and there is no user {name!r} to run it as; "
            f"`{INSTALL_HINT}` creates `postgres` (or set AOS_PG_USER)"
        ) from None
    return name


def _pg_env() -> dict[str, str]:
    """The environment without any PG* setting that would point the tools elsewhere."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def start(*, durable: bool = True) -> PgCluster:
    """A cluster for a bench: durable by default, so commit costs are real."""
    return PgCluster.start(durable=durable)
