"""Before/after of the WASM step costs on a noisy machine: run `measure` in two checkouts,
alternating, then `compare` the JSON files. Each run times every row in short rounds; the
comparison pools the rounds of all runs of a side, so the load of other jobs falls on both
sides alike. A row whose code did not change (the native Python call) shows the noise.

    AB=$PWD/bench/wasm_ab.py    # the base checkout need not have this file
    for i in 1 2 3 4 5 6 7 8; do
      (cd ../base && PYTHONPATH=. .venv/bin/python $AB measure > /tmp/ab-base-$i.json)
      PYTHONPATH=. .venv/bin/python $AB measure > /tmp/ab-new-$i.json
    done
    .venv/bin/python -m bench.wasm_ab compare /tmp/ab-base-*.json -- /tmp/ab-new-*.json

Only the public names of `aos.kernel.wasm` and `bench.bench_wasm` that both checkouts have
are used.
"""

from __future__ import annotations

import json
import runpy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from aos.kernel import cbor
from aos.kernel.wasm import StepRunner, WasmEngine, WorkflowContext, encode_input
from aos.kernel.wasm.build import build_c, build_python
from bench.bench_wasm import COUNTER_C, COUNTER_PY, INPUT

ROUNDS = 5


def _rounds(fn: Callable[[], object], number: int) -> list[float]:
    fn()
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number * 1e6)
    return samples


def measure() -> dict[str, list[float]]:
    """µs per operation of each row, one sample per round."""
    context = WorkflowContext(1, bytes(64), 2, "blake3:" + "0" * 64, "demo/Counter@1").encode()
    fields = {
        "state": cbor.encode({"count": 9, "resets": 0}),
        "event_schema": "demo/CounterEvent@1",
        "event_value": cbor.encode({"$tag": "Increment", "$value": {"id": "c-42", "by": 3}}),
        "ctx": context,
    }
    engine = WasmEngine()
    core = engine.load(build_c(COUNTER_C).wasm_path.read_bytes(), abi="core")
    component = engine.load(build_python(COUNTER_PY).wasm_path.read_bytes(), abi="component")
    native = runpy.run_path(str(COUNTER_PY))["counter"]
    rows: dict[str, tuple[Callable[[], object], int]] = {
        "native Python SDK call (unchanged code: the noise)": (
            lambda: native.step_bytes(INPUT),
            200,
        ),
        "encode_input (with a context)": (lambda: encode_input(**fields), 2000),
    }
    profiles = [
        ("core strict", core, "strict", 0.0, 200),
        ("core checked, rate 0", core, "checked", 0.0, 200),
        ("core checked, rate 0.05", core, "checked", 0.05, 200),
        ("component checked, rate 0", component, "checked", 0.0, 100),
        ("component checked, rate 0.05", component, "checked", 0.05, 100),
        ("component strict", component, "strict", 0.0, 10),
    ]
    for name, module, determinism, rate, number in profiles:
        runner = StepRunner(module, determinism=determinism, sample_rate=rate)
        seqs = iter(range(10**12))
        rows[name] = (lambda r=runner, s=seqs: r.step(INPUT, seq=next(s)), number)
    return {name: _rounds(fn, number) for name, (fn, number) in rows.items()}


def compare(base_files: list[str], new_files: list[str]) -> str:
    base, new = _pooled(base_files), _pooled(new_files)
    lines = [
        f"runs: base {len(base_files)}, new {len(new_files)}, {ROUNDS} rounds each; µs per op",
        "| row | base median | new median | new/base | base p10 | new p10 | new/base (p10) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in base:
        b, n = base[name], new[name]
        b_median, n_median = statistics.median(b), statistics.median(n)
        b_p10, n_p10 = b[len(b) // 10], n[len(n) // 10]
        lines.append(
            f"| {name} | {b_median:.1f} | {n_median:.1f} | {n_median / b_median:.2f}x "
            f"| {b_p10:.1f} | {n_p10:.1f} | {n_p10 / b_p10:.2f}x |"
        )
    return "\n".join(lines)


def _pooled(files: list[str]) -> dict[str, list[float]]:
    runs = [json.loads(Path(path).read_text()) for path in files]
    return {name: sorted(x for run in runs for x in run[name]) for name in runs[0]}


def main(argv: list[str]) -> None:
    if argv[:1] == ["measure"]:
        print(json.dumps(measure()))
    elif argv[:1] == ["compare"] and "--" in argv:
        split = argv.index("--")
        print(compare(argv[1:split], argv[split + 1 :]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
