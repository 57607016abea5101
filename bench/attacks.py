"""Issue 31's resource attacks, measured: what each costs a node (or a command) and whether it
is refused. The tests assert the bounds (tests/test_node_bounds_process.py,
tests/test_yamltext.py, tests/flows_tools/test_python_limits.py, test_shell_check.py); this
prints the figures, on whichever checkout runs it (copy it onto an older one to see before).

    python -m bench.attacks proposal                  # a 60 MB JSON proposal to a real node
    python -m bench.attacks slowloris N SECONDS [aos node up options ...]
    python -m bench.attacks python KEY_FILE           # inline code: 4 GB, whoami, the key
    python -m bench.attacks yaml                      # a ~430-byte alias bomb, `aos hash`

Each prints one line per measurement. `slowloris` raises this process's open-files limit to
its hard limit (the node inherits it); N sockets each send half a request head and wait.
"""

from __future__ import annotations

import argparse
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.test_node_process import make_world, node_process
from tests.test_yamltext import laughs

HALF_HEAD = b"GET /v1/world HTTP/1.1\r\nHost: node\r\nX-Slow: "
PROBE_EVERY_S = 1.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def open_files(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def timed_get(url: str) -> tuple[float, Any]:
    started = time.monotonic()
    try:
        status: Any = httpx.get(f"{url}/v1/world", timeout=60).status_code
    except httpx.HTTPError as error:
        status = type(error).__name__
    return round(time.monotonic() - started, 3), status


@contextmanager
def node(*options: str) -> Iterator[tuple[str, int]]:
    with (
        tempfile.TemporaryDirectory(prefix="aos-attack-") as folder,
        node_process(make_world(Path(folder) / "w"), *options) as (url, process),
    ):
        yield url, process.pid


def proposal() -> None:
    """A 60 MB JSON proposal of small items: its answer, the node's memory, other requests."""
    body = b'{"patch": {"x": [' + b"1," * 30_000_000 + b"1]}}"
    with node() as (url, pid):
        base = peak = rss_mb(pid)
        probes: list[float] = []
        done = threading.Event()

        def watch() -> None:
            nonlocal peak
            last = time.monotonic()
            while not done.wait(0.05):
                peak = max(peak, rss_mb(pid))
                if time.monotonic() - last >= PROBE_EVERY_S:
                    probes.append(timed_get(url)[0])
                    last = time.monotonic()

        watcher = threading.Thread(target=watch)
        watcher.start()
        started = time.monotonic()
        try:
            answer = httpx.post(
                f"{url}/v1/gov/proposals",
                content=body,
                headers={"content-type": "application/json"},
                timeout=600,
            )
            what: Any = (answer.status_code, answer.text[:120])
        except httpx.HTTPError as error:
            what = type(error).__name__
        took_s = time.monotonic() - started
        done.set()
        watcher.join()
        print(f"proposal: {len(body) / 1e6:.0f} MB -> {what} in {took_s:.2f} s")
        print(f"node RSS {base:.0f} MB, peak {peak:.0f} MB (+{peak - base:.0f} MB)")
        print(f"GET /v1/world meanwhile: slowest {max(probes, default=0):.2f} s of {len(probes)}")


def slowloris(count: int, hold_s: float, options: list[str]) -> None:
    """`count` half-open heads: a normal client's answers, the node's descriptors, and how many
    of the sockets the node closed as time goes on."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with node(*options) as (url, pid):
        host, port = url.split("//", 1)[1].rsplit(":", 1)
        sockets: list[socket.socket] = []
        started = time.monotonic()
        for index in range(count):
            try:
                sock = socket.create_connection((host, int(port)), timeout=30)
                sock.sendall(HALF_HEAD)
            except OSError as error:
                print(f"connect {index} failed: {error}")
                break
            sockets.append(sock)
        opened_s = time.monotonic() - started
        print(f"opened {len(sockets)} in {opened_s:.1f} s; node fds {open_files(pid)}")
        for _ in range(3):
            print("normal client (s, status):", timed_get(url))
        deadline = time.monotonic() + hold_s
        while time.monotonic() < deadline:
            time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
            print(
                f"+{hold_s - (deadline - time.monotonic()):.0f} s: closed by the node "
                f"{closed(sockets)}/{len(sockets)}; node fds {open_files(pid)}; normal "
                f"{timed_get(url)}"
            )
        for sock in sockets:
            sock.close()


def closed(sockets: list[socket.socket]) -> int:
    count = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            count += sock.recv(1, socket.MSG_PEEK) == b""
        except BlockingIOError:
            pass
        except OSError:
            count += 1
    return count


PYTHON_ATTACKS = {
    "4 GB": "block = bytearray(4 * 1024**3)\nresult = len(block)",
    "whoami": "import os\nresult = [os.getuid(), os.geteuid()]",
}


def python(key_file: str) -> None:
    """Inline python code through the tool adapter's own path (flows/tools/dispatch.py)."""
    from aos.flows.tools.context import ToolContext
    from aos.flows.tools.dispatch import run_tool

    attacks = {**PYTHON_ATTACKS, "read the key": f"result = open({key_file!r}).read()[:8]"}
    for name, code in attacks.items():
        params = {"tool": {"kind": "python", "code": code, "timeout_ms": 120_000}, "args": {}}
        started = time.monotonic()
        outcome = run_tool("aos/tool.python@1", params, context=ToolContext(intent="blake3:i"))
        took_s = time.monotonic() - started
        print(f"{name}: {outcome.status} {str(outcome.payload)[:150]} in {took_s:.2f} s")


def yaml(timeout_s: float = 60.0) -> None:
    """`aos hash` of an alias bomb, as a process: its answer or how far it got."""
    with tempfile.TemporaryDirectory(prefix="aos-attack-") as folder:
        bomb = Path(folder) / "bomb.yaml"
        bomb.write_text(laughs())
        command = [sys.executable, "-c", "from aos.cli.main import main; main()", "hash", str(bomb)]
        started = time.monotonic()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        peak = 0.0
        while process.poll() is None and time.monotonic() - started < timeout_s:
            peak = max(peak, rss_mb(process.pid))
            time.sleep(0.1)
        took_s = time.monotonic() - started
        if process.poll() is None:
            process.kill()
            print(f"aos hash ({bomb.stat().st_size} bytes): still running after {took_s:.0f} s")
        else:
            output = process.communicate()[0].decode()[:160].strip()
            print(f"aos hash ({bomb.stat().st_size} bytes): exit {process.returncode} in "
                  f"{took_s:.2f} s (CLI start included): {output}")  # fmt: skip
        print(f"peak RSS {peak:.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.attacks")
    parser.add_argument("attack", choices=("proposal", "slowloris", "python", "yaml"))
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    given = parser.parse_args()
    if given.attack == "proposal":
        proposal()
    elif given.attack == "slowloris":
        slowloris(int(given.rest[0]), float(given.rest[1]), given.rest[2:])
    elif given.attack == "python":
        python(given.rest[0])
    else:
        yaml()


if __name__ == "__main__":
    main()
