"""The adapter side of a task alone (not run by `bench.run`): the python tool adapter, built as
`aos adapter run tool-python` builds it, settles a chain of N inline-code tasks against a
stand-in node that answers at once, so what is timed is the adapter's own work per task: the
receipt's answer parsed, the next lease dispatched, the python worker's round trip, the
receipt signed and its request signed and sent (spec/10 §2: each receipt's answer carries the
next lease). The stand-in is a plain socket server in another process: it checks nothing and
answers every receipt with the next lease, so its own cost per task is some tens of µs.

    .venv/bin/python -m bench.profile_adapter [--tasks 2000] [--rounds 3]

Prints, per round, the wall time per task and the CPU time per task of the adapter process
(all its threads) and of its python workers; the best round is the one to compare (the
machine's other load only adds to the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aos.flows.tools.dispatch import TOOL_EFFECTS, make_adapter
from aos.kernel.adapters.sdk import Outcome
from aos.kernel.signing.signatures import generate_seed, public_key_of
from bench.proc_cpu import children, tree_cpu_s

EFFECT = "aos/tool.python@1"
ADAPTER = TOOL_EFFECTS[EFFECT]
WORLD = "blake3:" + "ab" * 32
CODE = 'result = {"greeting": message}\n'  # hello_world's first step
WARMUP = 50

# The stand-in node: one thread per connection, HTTP/1.1 keep-alive, JSON answers.
STAND_IN = r"""
import json, socket, sys, threading, time
world, adapter, effect, public_key, code = sys.argv[1:6]
lock = threading.Lock()
state = {"next": 0}

def lease():
    with lock:
        n = state["next"]
        state["next"] += 1
    return {
        "lease_id": f"l-{n}", "intent": "blake3:" + format(n, "064x"), "effect": effect,
        "params": {"tool": {"kind": "python", "code": code}, "args": {"message": "Hello World"}},
        "idempotency_key": "blake3:" + format(n, "064x"), "issuer_ref": None,
        "origin": {"workflow": "aos/FlowExec@1", "key": None},
        "expires_unix_ms": time.time_ns() // 1_000_000 + 30_000,
    }

def answer(method, path, body):
    if path == "/v1/world":
        return {"world_id": world}
    if path == "/v1/adapters":
        return {"adapters": [{"name": adapter, "public_key": public_key, "effects": [effect]}]}
    if path == "/v1/leases":
        with lock:
            first = state["next"] == 0
        if not first:
            time.sleep(0.05)  # a long-poll with nothing open
        return {"leases": [lease()] if first else []}
    if path == "/v1/receipts":
        asked = json.loads(body).get("lease")
        return {"seq": 1, "duplicate": False, "delivered": True, "leases": [lease()] if asked else []}
    return {"error": {"code": "not_found", "message": path}}

def serve(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = b""
    while True:
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        while len(data) < length:
            data += conn.recv(65536)
        body, data = data[:length], data[length:]
        out = json.dumps(answer(method, path.split("?")[0], body)).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(out), out))

server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(16)
print(server.getsockname()[1], flush=True)
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


@contextmanager
def stand_in(public_key: str) -> Iterator[tuple[str, int]]:
    command = [sys.executable, "-c", STAND_IN, WORLD, ADAPTER, EFFECT, public_key, CODE]
    process = subprocess.Popen(command, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        yield f"http://127.0.0.1:{int(process.stdout.readline())}", process.pid
    finally:
        process.kill()
        process.wait()


def one_round(tasks: int) -> dict[str, float]:
    """Settle WARMUP + `tasks` chained tasks; the figures of the last `tasks`."""
    seed = generate_seed()
    done = threading.Event()
    marks: dict[int, tuple[float, float, float]] = {}
    count = 0
    server_pid = -1

    def on_outcome(outcome: Outcome) -> None:
        nonlocal count
        count += 1
        if count in (WARMUP, WARMUP + tasks):
            workers = [child for child in children(os.getpid()) if child != server_pid]
            marks[count] = (time.perf_counter(), time.process_time(), tree_cpu_s(workers))
        if count >= WARMUP + tasks:
            done.set()

    with stand_in(public_key_of(seed).hex()) as (url, pid):
        server_pid = pid
        adapter = make_adapter(
            "python", seed=seed, node=url, python_paths=(Path.cwd(),), on_outcome=on_outcome
        )
        with adapter:
            serving = threading.Thread(target=lambda: adapter.run(install_signals=False))
            serving.start()
            done.wait()
            adapter.stop()
            serving.join()
    (wall0, cpu0, workers0), (wall1, cpu1, workers1) = marks[WARMUP], marks[WARMUP + tasks]
    return {
        "wall_ms": (wall1 - wall0) / tasks * 1000,
        "adapter_cpu_ms": (cpu1 - cpu0) / tasks * 1000,
        "workers_cpu_ms": (workers1 - workers0) / tasks * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    rounds = [one_round(options.tasks) for _ in range(options.rounds)]
    for number, found in enumerate(rounds, 1):
        print(
            f"round {number}: {found['wall_ms']:.3f} ms per task wall, adapter CPU "
            f"{found['adapter_cpu_ms']:.3f} ms, python workers' CPU {found['workers_cpu_ms']:.3f} ms"
        )
    best = min(rounds, key=lambda found: found["wall_ms"])
    print(json.dumps({"best": {k: round(v, 3) for k, v in best.items()}}))


if __name__ == "__main__":
    main()
