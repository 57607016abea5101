"""What a flow shadow costs against `replay --verify` of the same world (spec/11 §10.1).

    python -m bench.flow_shadow [--executions 200] [--rounds 3]

Builds a flow world (manual clock, no sync, the echo tool in process) with N executions of a
three-step flow (two tool calls and a result), deploys a second version that changes only
the result, then times, round by round in one process, `replay.verify_replay` and `shadow_flow` of
the second version against every execution (each diverges at its last step, so every step
is shadowed). Process CPU time, median of the rounds; the ratio is the shadow over the
replay. Not run by `bench.run`: it measures a command, not a hot path.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from aos.flows.define.cfd import load_definition
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_shadow import deployed_target, shadow_flow
from aos.flows.serve.flow_world import create_flow_world
from aos.flows.serve.local import LocalAdapters
from aos.kernel.audit import replay
from aos.kernel.wasm import WasmEngine
from aos.kernel.world.world import World

FLOW = "bench/chain"
V1 = """
name: bench/chain
steps:
  - name: a
    tasks:
      - {name: one, do: call, tool: {kind: echo}, args: {n: "{{ workload.n }}"}}
    next: b
  - name: b
    tasks:
      - {name: two, do: call, tool: {kind: echo}, args: {n: "{{ workload.n }}"}}
    next: c
  - name: c
    tasks:
      - {do: noop, result: {ok: true}}
"""
V2 = V1.replace("{ok: true}", "{ok: 2}")


def build(path: Path, executions: int, engine: WasmEngine) -> int:
    """The world at `path`; its journal height."""
    world, keys = create_flow_world(path, clock="manual", sync=False, engine=engine)
    with world:
        adapters = LocalAdapters(world, keys)
        ops.deploy(world, load_definition(V1))
        for index in range(executions):
            ops.start(world, FLOW, workload={"n": index}, exec_id=f"e{index}")
        adapters.drain()
        ops.deploy(world, load_definition(V2))
        return world.height


def measure(path: Path, rounds: int, engine: WasmEngine) -> dict[str, list[float]]:
    with World.reading(path, engine=engine) as world:
        target = deployed_target(world, FLOW, 2)
    found: dict[str, list[float]] = {"replay": [], "shadow": []}
    for _ in range(rounds):
        started = time.process_time()
        if not replay.verify_replay(path, engine=engine).ok:
            raise SystemExit("the world does not replay")
        found["replay"].append(time.process_time() - started)
        started = time.process_time()
        report = shadow_flow(path, target, engine=engine)
        found["shadow"].append(time.process_time() - started)
        if report.summary()["diverge"] != len(report.executions):
            raise SystemExit("every execution should diverge at its last step")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    engine = WasmEngine()
    with tempfile.TemporaryDirectory(prefix="aos-bench-shadow-") as scratch:
        path = Path(scratch) / "w"
        height = build(path, args.executions, engine)
        found = measure(path, args.rounds, engine)
    replayed, shadowed = statistics.median(found["replay"]), statistics.median(found["shadow"])
    print(f"{args.executions} executions, {height} records, {args.rounds} rounds (CPU, median)")
    print(f"replay --verify   {replayed:.2f} s")
    print(f"shadow            {shadowed:.2f} s   {shadowed / replayed:.2f}x the replay")


if __name__ == "__main__":
    main()
