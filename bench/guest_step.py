"""A warm interpreter step, component against component (not run by `bench.run`): the step
inputs of a `bench_playbooks` playbook, recorded once on an embedded flow world
(`bench.profile_interp`), are replayed in order on one warm instance of each given
interpreter component, the components taking turns round after round so that the machine's
load falls on all of them alike. Per component: the median and p10 thread CPU time of a warm
call, and its fuel (wasmtime's instruction count: the same on every run).

    .venv/bin/python -m bench.guest_step [--case hello_world] [--rounds 7] [WASM ...]

With no WASM, the interpreter these sources build. To compare with another checkout's
interpreter, build it there (`python -c 'from aos.flows.interpreter import InterpreterSources;
print(InterpreterSources.installed().build().wasm_path)'`) and pass both paths.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from aos.flows.interpreter import InterpreterSources
from aos.kernel.wasm import WasmEngine
from aos.kernel.wasm.abi_component import ComponentInstance
from aos.kernel.wasm.envelope import with_data
from aos.kernel.wasm.limits import FUEL_PER_STEP_MAX_DEFAULT, MEMORY_BYTES_MAX_DEFAULT
from aos_sdk import envelope as sdk_envelope
from bench import profile_interp
from bench.bench_playbooks import AOS_FILES

OUTPUT_BYTES_MAX = 16 * 1024 * 1024


class Warm:
    """One component's warm instance, fed the recorded inputs in order."""

    def __init__(self, path: Path, engine: WasmEngine, blobs: dict[str, bytes]) -> None:
        self.path = path
        module = engine.load(path.read_bytes(), abi="component")
        self.instance = ComponentInstance(
            module, fuel_max=FUEL_PER_STEP_MAX_DEFAULT, memory_bytes_max=MEMORY_BYTES_MAX_DEFAULT
        )
        self.blobs = blobs
        self.cpu_s: list[float] = []
        self.fuel: list[int] = []

    def step(self, data: bytes, *, record: bool) -> None:
        started = time.thread_time()
        output = self.instance.call(data, output_bytes_max=OUTPUT_BYTES_MAX)
        elapsed, fuel = time.thread_time() - started, self.instance.fuel_used
        if sdk_envelope.decode_output(output).reads:  # the definition, once per instance
            self.instance.call(with_data(data, self.blobs), output_bytes_max=OUTPUT_BYTES_MAX)
            return
        if record:
            self.cpu_s.append(elapsed)
            self.fuel.append(fuel)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(AOS_FILES), default="hello_world")
    parser.add_argument("--executions", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("wasm", nargs="*", type=Path)
    options = parser.parse_args()
    paths = options.wasm or [InterpreterSources.installed().build().wasm_path]
    split = profile_interp.run(options.case, options.executions, sync=False)
    engine = WasmEngine()
    sides = [Warm(path, engine, split.blobs) for path in paths]
    for side in sides:  # the first pass fills each instance's memos
        for data in split.inputs:
            side.step(data, record=False)
    for _ in range(options.rounds):
        for side in sides:
            for data in split.inputs:
                side.step(data, record=True)
    print(f"{options.case}: {len(split.inputs)} recorded inputs, {options.rounds} rounds")
    for side in sides:
        cpu = sorted(side.cpu_s)
        median_ms = statistics.median(cpu) * 1e3
        p10_ms = cpu[len(cpu) // 10] * 1e3
        fuel = statistics.median(side.fuel)
        print(
            f"  {side.path.name[:16]}  warm call CPU median {median_ms:.3f} ms  "
            f"p10 {p10_ms:.3f} ms  fuel median {fuel:,.0f}  n={len(cpu)}"
        )


if __name__ == "__main__":
    main()
