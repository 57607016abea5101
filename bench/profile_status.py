"""What one status poll costs the node (not run by `bench.run`): `aos node up` on a fresh
durable flow world, one `loop20` execution started (no adapter runs, so it stays running with
its whole state), then `GET /v1/executions/ID` over one HTTP connection, as a flow client
polls it; the poll's round trip and the node's CPU time (its process tree) per poll.

    .venv/bin/python -m bench.profile_status [--polls 500]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from aos.flows.serve.flow_client import NodeFlows
from bench.bench_playbooks import AOS_FILES
from bench.proc_cpu import tree_cpu_s
from bench.profile_playbooks import node_up

WARMUP = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=500)
    options = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="aos-profile-status-") as folder,
        node_up(Path(folder)) as (url, _, pid, token),
        NodeFlows(url, token=token) as client,
    ):
        file = AOS_FILES["loop20"]
        name = client.deploy_text(file.read_text(), source=str(file)).name
        execution = client.run(name, None).exec
        for _ in range(WARMUP):
            client.status(execution)
        seconds = []
        cpu_s = tree_cpu_s([pid])
        for _ in range(options.polls):
            started = time.perf_counter()
            client.status(execution)
            seconds.append(time.perf_counter() - started)
        cpu_s = (tree_cpu_s([pid]) - cpu_s) / options.polls
    median_ms, mean_ms = statistics.median(seconds) * 1e3, statistics.fmean(seconds) * 1e3
    print(f"status poll: median {median_ms:.3f} ms, mean {mean_ms:.3f} ms")
    print(f"  node CPU time: {cpu_s * 1e3:.3f} ms per poll")


if __name__ == "__main__":
    main()
