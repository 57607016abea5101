"""Where one flow interpreter step's milliseconds go (not run by `bench.run`): a playbook of
`bench_playbooks` on an embedded flow world, its tool intents answered in process, every
`aos/FlowExec@1` step split into

* the kernel's whole step (`World.step_next`: input envelope, the runner, output checks,
  the step record, the cell's new state);
* the runner (`StepRunner.step`: the guest calls, read rounds, a `checked` sample's fresh
  re-run), and in it the guest calls on the warm instance and on fresh instances;
* the host's share: the whole step less the runner;

with the guest's fuel (wasmtime's instruction count: the one figure the machine's load does
not move), the input / state / annotation sizes per step, and the flush (one commit per
receipt, as the node does). The python tool's work is not timed: its receipt is made here
with the result the playbook's code would give.

    .venv/bin/python -m bench.profile_interp [--case loop20] [--executions 5] [--sync on|off]
        [--profile]    # cProfile over the world's steps: top functions by own time
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aos.flows.define.document import load_flow
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import EXEC_WORKFLOW, create_flow_world
from aos.flows.serve.local import LocalAdapters
from aos.flows.tools.dispatch import TOOL_EFFECTS
from aos.kernel.wasm import StepResult, abi_component
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import CLOCK_MANUAL, World
from bench.bench_playbooks import AOS_FILES

WARMUP = 2


@dataclass
class Split:
    """Per interpreter step: seconds of each part, fuel and sizes."""

    step_s: list[float] = field(default_factory=list)
    step_cpu_s: list[float] = field(default_factory=list)  # the step's thread CPU time
    runner_s: list[float] = field(default_factory=list)
    warm_call_s: list[float] = field(default_factory=list)
    fresh_s: list[float] = field(default_factory=list)  # instantiate + calls, per fresh run
    flush_s: list[float] = field(default_factory=list)
    fuel: list[int] = field(default_factory=list)
    input_bytes: list[int] = field(default_factory=list)
    output_bytes: list[int] = field(default_factory=list)
    inputs: list[bytes] = field(default_factory=list)  # each recorded step's input envelope
    blobs: dict[str, bytes] = field(default_factory=dict)  # what the steps may read
    steps: int = 0


class Timed:
    """Wraps the world's interpreter runner and its instances' calls with timers."""

    def __init__(self, world: World) -> None:
        self.split = Split()
        self.recording = False
        runner = world.runtime.runner(EXEC_WORKFLOW)
        self.runner = runner
        step = runner.step

        def timed_step(input_bytes: bytes, **kwargs: Any) -> StepResult:
            self.warm_instance = None  # the step's first instance: the warm one
            started = time.perf_counter()
            result = step(input_bytes, **kwargs)
            if self.recording:
                self.split.runner_s.append(time.perf_counter() - started)
                self.split.fuel.append(result.fuel_used)
                self.split.input_bytes.append(len(input_bytes))
                self.split.output_bytes.append(len(result.output_bytes))
                self.split.inputs.append(input_bytes)
            return result

        runner.step = timed_step  # type: ignore[method-assign]
        self.warm_instance: int | None = None
        self._wrap_instances()

    def _wrap_instances(self) -> None:
        """Time each component call: a step calls its warm instance first (a read round
        calls it again), then a fresh one when the step is sampled."""
        original = abi_component.ComponentInstance.call
        outer = self

        def call(instance: Any, data: bytes, *, output_bytes_max: int) -> bytes:
            started = time.perf_counter()
            try:
                return original(instance, data, output_bytes_max=output_bytes_max)
            finally:
                if outer.recording:
                    elapsed = time.perf_counter() - started
                    if outer.warm_instance is None:
                        outer.warm_instance = id(instance)
                    warm = id(instance) == outer.warm_instance
                    (outer.split.warm_call_s if warm else outer.split.fresh_s).append(elapsed)

        abi_component.ComponentInstance.call = call  # type: ignore[method-assign]


class Answering(LocalAdapters):
    """Tool intents answered in process with what the playbook's python code returns, one
    receipt per flush (as the node commits one receipt per request)."""

    timed: Timed

    def _perform(self, intents: list[dict[str, Any]]) -> int:
        for intent in intents:
            record = self.world.reader.open_intent(str(intent["intent"]))
            if record is None:
                continue
            self.settle(
                str(intent["intent"]),
                TOOL_EFFECTS[str(intent["effect"])],
                "ok",
                _result(record["params"]),
            )
            self._run()
        return len(intents)

    def _run(self) -> None:
        split = self.timed.split
        while True:
            started, cpu_started = time.perf_counter(), time.thread_time()
            if not self.world.step_next():
                break
            if self.timed.recording:
                split.step_s.append(time.perf_counter() - started)
                split.step_cpu_s.append(time.thread_time() - cpu_started)
                split.steps += 1
        started = time.perf_counter()
        self.world.commit()
        if self.timed.recording:
            split.flush_s.append(time.perf_counter() - started)


def _result(params: Any) -> Any:
    args = params.get("args") if isinstance(params, dict) else None
    item = args.get("item") if isinstance(args, dict) else None
    value = {"item": item, "square": item * item} if isinstance(item, int) else {"done": True}
    return {"result": value}


@contextmanager
def flow_world(sync: bool) -> Iterator[tuple[World, Answering, Timed]]:
    with tempfile.TemporaryDirectory(prefix="aos-profile-interp-") as tmp:
        world, keys = create_flow_world(
            Path(tmp) / "w", clock=CLOCK_MANUAL, sync=sync, stamps=PinnedStampSource()
        )
        with world:
            timed = Timed(world)
            adapters = Answering(world, keys)
            adapters.timed = timed
            yield world, adapters, timed


def run(case: str, executions: int, sync: bool) -> Split:
    with flow_world(sync) as (world, adapters, timed):
        definition = load_flow(AOS_FILES[case].read_text(), source=str(AOS_FILES[case]))
        name = ops.deploy(world, definition).name
        for n in range(WARMUP + executions):
            timed.recording = n >= WARMUP
            exec_id = f"x{n}"
            ops.start(world, name, exec_id=exec_id)
            adapters.drain()
            status = ops.status(world, exec_id)["status"]
            assert status == "completed", (exec_id, status)
        for hash_ in _definitions(world):
            timed.split.blobs[hash_] = world.read_blob(hash_) or b""
        return timed.split


def _definitions(world: World) -> list[str]:
    found = []
    for cell in world.reader.cells(EXEC_WORKFLOW):
        state = world.reader.state(EXEC_WORKFLOW, cell.key)
        if isinstance(state, dict) and isinstance(state.get("definition"), str):
            found.append(state["definition"])
    return sorted(set(found))


def native(split: Split, profile: bool, top: int) -> None:
    """The recorded inputs again, through the interpreter's Python code run natively (what
    the component runs, without WebAssembly): the guest's split by function."""
    from aos_flow import workflow as app

    from aos.kernel.wasm.envelope import with_data

    def step(data: bytes) -> bytes:
        output = app.flow.step_bytes(data)
        if b"\x65reads" in output[:64]:
            output = app.flow.step_bytes(with_data(data, split.blobs))
        return output

    for data in split.inputs:  # warm: the memo holds the definition
        step(data)
    profiler = cProfile.Profile() if profile else None
    seconds = []
    for data in split.inputs:
        started = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        step(data)
        if profiler is not None:
            profiler.disable()
        seconds.append(time.perf_counter() - started)
    print(f"  native step (same inputs) {_ms(seconds)}")
    if profiler is not None:
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    median_ms, mean_ms = statistics.median(values) * 1e3, statistics.fmean(values) * 1e3
    return f"median {median_ms:7.3f} ms  mean {mean_ms:7.3f} ms  n={len(values)}"


def _spread(name: str, values: list[int]) -> str:
    median = statistics.median(values)
    return f"  {name} first/median/last {values[0]:,}/{median:,.0f}/{values[-1]:,}"


def report(case: str, split: Split, executions: int) -> None:
    host = [s - r for s, r in zip(split.step_s, split.runner_s, strict=False)]
    print(f"{case}: {split.steps / executions:.1f} interpreter steps per execution")
    print(f"  kernel step (step_next)   {_ms(split.step_s)}")
    print(f"  kernel step, CPU time     {_ms(split.step_cpu_s)}")
    print(f"  runner.step               {_ms(split.runner_s)}")
    print(f"  warm guest call           {_ms(split.warm_call_s)}")
    print(f"  fresh guest call          {_ms(split.fresh_s)}")
    print(f"  host (step - runner)      {_ms(host)}")
    print(f"  flush (commit)            {_ms(split.flush_s)}")
    fresh_ms = sum(split.fresh_s) * 1e3 / max(1, split.steps)
    print(f"  fresh calls: {len(split.fresh_s)}, {fresh_ms:.3f} ms per step")
    print(_spread("fuel per step", split.fuel))
    print(_spread("input bytes", split.input_bytes))
    print(_spread("output bytes", split.output_bytes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(AOS_FILES), default="loop20")
    parser.add_argument("--executions", type=int, default=5)
    parser.add_argument("--sync", choices=("on", "off"), default="on")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--native", action="store_true", help="re-run the steps natively")
    parser.add_argument("--top", type=int, default=30)
    options = parser.parse_args()
    profiler = cProfile.Profile() if options.profile and not options.native else None
    if profiler is not None:
        profiler.enable()
    split = run(options.case, options.executions, options.sync == "on")
    if profiler is not None:
        profiler.disable()
    report(options.case, split, options.executions)
    if profiler is not None:
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(options.top)
        stats.sort_stats("cumulative").print_stats(options.top)
    if options.native:
        native(split, options.profile, options.top)


if __name__ == "__main__":
    main()
