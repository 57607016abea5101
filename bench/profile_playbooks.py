"""Where an aos playbook execution's milliseconds go, per python task (not run by
`bench.run`): `aos node up` on a fresh durable flow world, as `bench_playbooks` runs it, and
the python tool adapter in this process, built as `aos adapter run tool-python` builds it,
with each phase of the adapter's loop timed:

* dispatch: the lease's answer arrived -> its handler starts (the SDK's thread per lease);
* handler: the python worker's round trip (and the lease renewer's bookkeeping);
* sign: the receipt's Ed25519 signature and its checks;
* receipt round trip: POST /v1/receipts until the node answers (the node verifies, journals,
  steps the interpreter, commits with fsync, publishes the next intent, answers);
* next lease: the receipt's answer -> the next intent's lease: none when the receipt's answer
  carried it (the SDK's chained leases, spec/10 §2), else the long-poll's answer;
* adapter turnaround: a receipt's answer is back from the HTTP transport -> the next receipt's
  request enters it: everything the adapter does between two receipts of a chain (answer and
  lease parsing, dispatch, the worker, signing, the request's own signature, httpx's request
  building), the adapter side of the gap the node sees between answering and the next POST.

    .venv/bin/python -m bench.profile_playbooks [--case loop20] [--executions 5] [--poll-s 0.01]
        # --poll-s: poll the status that often instead of the run's long-poll
        [--no-chain]   # receipts ask for no lease: every next intent comes by long-poll
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from aos.flows.serve.flow_client import NodeFlows
from aos.flows.serve.flow_operations import TERMINAL_STATUSES
from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import TOOL_EFFECTS, handlers_for, renewing
from aos.kernel.adapters.sdk import Adapter, Lease, Outcome, Result
from aos.kernel.signing.keys import read_seed
from bench.bench_playbooks import AOS_FILES, EXECUTION_S_MAX, PYTHON_ALLOW, REPO
from bench.proc_cpu import children, tree_cpu_s

PYTHON_EFFECT = "aos/tool.python@1"
WARMUP = 3


class TimedAdapter(Adapter):
    """The SDK adapter, noting when each phase of a lease starts and ends, and the CPU time
    its handler thread spends on each lease (its answer's parsing, the tool's side of the
    worker call, signing, the receipt's request)."""

    marks: list[tuple[str, float]]
    cpu_s: list[float]

    def note(self, name: str) -> None:
        self.marks.append((name, time.perf_counter()))

    def handle(self, lease: Lease, *, then_lease: bool = False) -> Outcome:
        started = time.thread_time()
        try:
            return super().handle(lease, then_lease=then_lease)
        finally:
            self.cpu_s.append(time.thread_time() - started)

    def _lease(self, max_leases: int, wait_ms: int) -> list[Lease]:
        leases = super()._lease(max_leases, wait_ms)
        if leases:
            self.note("leased")
        return leases

    def _call(self, lease: Lease) -> Result:
        self.note("call")
        try:
            return super()._call(lease)
        finally:
            self.note("called")

    def _signed(
        self, lease: Lease, result: Result, started_ns: int, finished_ns: int
    ) -> tuple[str, bytes, Result]:
        self.note("sign")
        try:
            return super()._signed(lease, result, started_ns, finished_ns)
        finally:
            self.note("signed")

    def _post(
        self, lease: Lease, result: Result, body: str, signature: bytes, *, then_lease: bool = False
    ) -> Outcome:
        self.note("post")
        outcome = super()._post(lease, result, body, signature, then_lease=then_lease)
        self.note("posted")
        if outcome.next_leases:
            self.note("leased")  # the next lease came with the receipt's answer
        return outcome


class TimedTransport(httpx.HTTPTransport):
    """The SDK's transport, noting when a receipt's request goes out and its answer is back."""

    def __init__(self, marks: list[tuple[str, float]]) -> None:
        super().__init__()
        self.marks = marks  # the adapter's

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        receipt = request.url.path == "/v1/receipts"
        if receipt:
            self.marks.append(("receipt out", time.perf_counter()))
        response = super().handle_request(request)
        if receipt:
            self.marks.append(("receipt in", time.perf_counter()))
        return response


PHASES = {
    "dispatch (lease answer -> handler)": ("leased", "call"),
    "handler (python worker round trip)": ("call", "called"),
    "sign": ("sign", "signed"),
    "receipt round trip (node)": ("post", "posted"),
    "next lease after the receipt's answer": ("posted", "leased"),
    "adapter turnaround (answer in -> receipt out)": ("receipt in", "receipt out"),
    "  answer read and parsed (answer in -> posted)": ("receipt in", "posted"),
    "  next lease to its handler (posted -> call)": ("posted", "call"),
    "  receipt request built and signed (post -> out)": ("post", "receipt out"),
    "run request -> its first lease": ("run out", "leased"),
    "last receipt's answer -> the run's answer": ("posted", "run in"),
}


def phases(marks: list[tuple[str, float]], gap_s_max: float) -> dict[str, list[float]]:
    """Each phase's durations: from a `start` mark to the first `end` mark after it (gaps
    longer than `gap_s_max`, the pauses between executions, left out)."""
    found: dict[str, list[float]] = {name: [] for name in PHASES}
    open_: dict[str, float] = {}  # phase -> its latest start not yet ended
    for mark, at in marks:
        for name, (_, end) in PHASES.items():
            if mark == end and name in open_:
                began = open_.pop(name)
                if 0 <= at - began <= gap_s_max:
                    found[name].append(at - began)
        for name, (start, _) in PHASES.items():
            if mark == start:
                open_[name] = at
    return found


@contextmanager
def node_up(folder: Path) -> Iterator[tuple[str, Path, int, str]]:
    """A node on a new flow world: its URL, keys folder, PID and the first admin's token."""
    world = folder / "world"
    aos = str(Path(sys.executable).parent / "aos")
    created = subprocess.run(
        [aos, "flow", "world", "create", str(world), "--json"], check=True, capture_output=True
    )
    token = str(json.loads(created.stdout)["admin_token"])
    command = [aos, "node", "up", "--world", str(world), "--bind", "127.0.0.1:0", "--json"]
    node = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert node.stdout is not None
        url = str(json.loads(node.stdout.readline())["url"])
        yield url, world.with_name("world.keys"), node.pid, token
    finally:
        node.terminate()
        node.wait()


def python_adapter(url: str, keys: Path, *, chain: bool = True) -> TimedAdapter:
    marks: list[tuple[str, float]] = []
    adapter = TimedAdapter(
        name=TOOL_EFFECTS[PYTHON_EFFECT],
        seed=read_seed(keys / "python.key"),
        node=url,
        chain_leases=chain,
        transport=TimedTransport(marks),
    )
    adapter.marks = marks
    adapter.cpu_s = []
    context = ToolContext(
        intent="", python_allow=(PYTHON_ALLOW,), python_paths=(REPO,), put_blob=adapter.put_blob
    )
    for effect, handler in handlers_for("python", context).items():
        adapter.effect(effect)(renewing(adapter, handler))
    return adapter


def execute(client: NodeFlows, name: str, poll_s: float, marks: list[tuple[str, float]]) -> float:
    """One execution's seconds: the run answered at its end (long-poll), or with `poll_s`
    the status polled that often (as before the long-poll existed)."""
    started = time.perf_counter()
    if not poll_s:
        marks.append(("run out", started))
        client.run(name, None, wait_s=EXECUTION_S_MAX)
        ended = time.perf_counter()
        marks.append(("run in", ended))
        return ended - started
    execution = client.run(name, None).exec
    while client.status(execution).status not in TERMINAL_STATUSES:
        time.sleep(poll_s)
    return time.perf_counter() - started


@dataclass
class Profile:
    seconds: list[float]  # per execution
    adapter: TimedAdapter
    node_cpu_s: float  # per execution, the node's process tree
    workers_cpu_s: float  # per execution, the python workers (this process's other children)


def profile(
    folder: Path, case: str, executions: int, poll_s: float, *, chain: bool = True
) -> Profile:
    """Run `executions` of `case` after the warm-up, timing the adapter's phases."""
    with node_up(folder) as (url, keys, pid, token), NodeFlows(url, token=token) as client:
        adapter = python_adapter(url, keys, chain=chain)
        serving = threading.Thread(target=lambda: adapter.run(install_signals=False))
        serving.start()
        try:
            file = AOS_FILES[case]
            name = client.deploy_text(file.read_text(), source=str(file)).name
            for _ in range(WARMUP):
                execute(client, name, poll_s, adapter.marks)
            adapter.marks.clear()  # the transport's list too
            adapter.cpu_s.clear()
            workers = [child for child in children(os.getpid()) if child != pid]
            node_s, workers_s = tree_cpu_s([pid]), tree_cpu_s(workers)
            seconds = [execute(client, name, poll_s, adapter.marks) for _ in range(executions)]
            node_s, workers_s = tree_cpu_s([pid]) - node_s, tree_cpu_s(workers) - workers_s
            return Profile(seconds, adapter, node_s / executions, workers_s / executions)
        finally:
            adapter.stop()
            serving.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(AOS_FILES), default="loop20")
    parser.add_argument("--executions", type=int, default=5)
    parser.add_argument("--poll-s", type=float, default=0.0, help="poll (0: long-poll)")
    parser.add_argument("--no-chain", action="store_true", help="receipts ask for no lease")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="aos-profile-pb-") as folder:
        found = profile(
            Path(folder),
            options.case,
            options.executions,
            options.poll_s,
            chain=not options.no_chain,
        )
    adapter = found.adapter
    print(f"{options.case}: median {statistics.median(found.seconds) * 1000:.1f} ms per execution")
    print(f"  node CPU time: {found.node_cpu_s * 1000:.1f} ms per execution")
    print(f"  python workers' CPU time: {found.workers_cpu_s * 1000:.1f} ms per execution")
    if adapter.cpu_s:
        cpu_ms = statistics.median(adapter.cpu_s) * 1000
        mean_ms = statistics.fmean(adapter.cpu_s) * 1000
        print(
            f"  adapter CPU time per task (its handler thread): median {cpu_ms:.2f} ms  mean {mean_ms:.2f} ms"
        )
    for phase, values in phases(adapter.marks, gap_s_max=0.5).items():
        if values:
            median_ms = statistics.median(values) * 1000
            mean_ms = statistics.fmean(values) * 1000
            print(
                f"  {phase:48s} n={len(values):4d}  median {median_ms:7.2f} ms  mean {mean_ms:7.2f} ms"
            )


if __name__ == "__main__":
    main()
