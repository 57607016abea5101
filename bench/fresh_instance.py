"""What one fresh instance costs: instantiate, call once, drop, for the C counter (a core
module), the Python counter and the flow interpreter (componentize-py components), in process
CPU time (`time.process_time`, which other jobs on a shared machine do not move) and wall time.
A `strict` step pays this on every step, a `checked` one on its sampled steps.

    PYTHONPATH=. .venv/bin/python -m bench.fresh_instance measure [--unpooled] > new.json
    .venv/bin/python -m bench.fresh_instance compare base.json... -- new.json...

`--unpooled` uses an engine without wasmtime's pooling allocator (in a checkout that has one).
Only names both sides have are used, so the file runs against a `git archive` of an older main:

    (cd ../base && PYTHONPATH=. $PWD/.venv/bin/python $NEW/bench/fresh_instance.py measure)

The flow interpreter is called with the counter's input: it refuses the unknown event as a
guest exception, after its fresh start-up (instantiation, first touch of its memory) and
dispatch. Each row also prints its fuel, which must not differ between the two sides.
"""

from __future__ import annotations

import inspect
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from aos.kernel.wasm import WasmEngine
from aos.kernel.wasm.abi_component import ComponentInstance
from aos.kernel.wasm.abi_core import CoreInstance
from aos.kernel.wasm.build import build_c, build_python
from bench.bench_wasm import COUNTER_C, COUNTER_PY, INPUT, REPO
from bench.wasm_ab import compare

FLOW_INTERPRETER = REPO / "modules" / "flow"
ROUNDS = 5
FUEL_MAX = 1_000_000_000
MEMORY_BYTES_MAX = 128 * 1024 * 1024
OUTPUT_BYTES_MAX = 1024 * 1024


def _engine(pooled: bool) -> WasmEngine:
    if "pooled" in inspect.signature(WasmEngine).parameters:
        return WasmEngine(pooled=pooled)
    return WasmEngine()


def _fresh(kind: Any, module: Any) -> tuple[float, float, int]:
    """(CPU s, wall s, fuel) of one instantiate + call + drop."""
    cpu, wall = time.process_time(), time.perf_counter()
    instance = kind(module, fuel_max=FUEL_MAX, memory_bytes_max=MEMORY_BYTES_MAX)
    instance.call(INPUT, output_bytes_max=OUTPUT_BYTES_MAX)
    fuel = int(instance.fuel_used)
    close = getattr(instance, "close", None)
    if close is not None:
        close()
    del instance
    return time.process_time() - cpu, time.perf_counter() - wall, fuel


def measure(pooled: bool) -> dict[str, list[float]]:
    """µs per fresh instance, one sample per round (the round's median), CPU and wall."""
    engine = _engine(pooled)
    rows = [
        ("C counter (core)", CoreInstance, build_c(COUNTER_C).wasm_path, "core", 200),
        ("Python counter (component)", ComponentInstance, build_python(COUNTER_PY).wasm_path,
         "component", 15),
        ("flow interpreter (component)", ComponentInstance,
         build_python(FLOW_INTERPRETER).wasm_path, "component", 8),
    ]  # fmt: skip
    result: dict[str, list[float]] = {}
    for name, kind, path, abi, number in rows:
        module = engine.load(Path(path).read_bytes(), abi=abi)
        _fresh(kind, module)
        cpu: list[float] = []
        wall: list[float] = []
        fuels: set[int] = set()
        for _ in range(ROUNDS):
            samples = [_fresh(kind, module) for _ in range(number)]
            cpu.append(statistics.median(s[0] for s in samples) * 1e6)
            wall.append(statistics.median(s[1] for s in samples) * 1e6)
            fuels.update(s[2] for s in samples)
        result[f"{name}, CPU"] = cpu
        result[f"{name}, wall"] = wall
        result[f"{name}, fuel"] = sorted(float(f) for f in fuels)
    return result


def main(argv: list[str]) -> None:
    if argv[:1] == ["measure"]:
        print(json.dumps(measure(pooled="--unpooled" not in argv)))
    elif argv[:1] == ["compare"] and "--" in argv:
        split = argv.index("--")
        print(compare(argv[1:split], argv[split + 1 :]))
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
