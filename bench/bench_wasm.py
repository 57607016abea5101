"""The WASM runtime: the cost of one counter step (envelope in, validated output out) on each
ABI and determinism profile, against the same step run natively by the Python SDK; and the
cost of loading a compiled Python component from the disk cache.

* core: the C counter (modules/examples/counter_c), built with ziglang;
* component: the Python counter (modules/examples/counter_py), built with componentize-py.

`strict` instantiates a fresh instance per step; `checked` reuses a warm one (at sample rate
0 it never re-runs; at the default rate 0.05 about one step in twenty also runs fresh).
Builds and compiled modules come from the default caches (~/.cache/aos), so only the first
run pays for componentize-py and the compiler.

Group `wasm.envelope`: the host's two envelope costs of a step, apart from the guest: writing
the input envelope (`encode_input`, with a workflow context) against the generic canonical
encoder on the same map, and checking the C counter's output (`decode_output`).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from aos.kernel import cbor
from aos.kernel.hashing import hash_bytes
from aos.kernel.wasm import (
    LoadedModule,
    StepLimits,
    StepRunner,
    WasmEngine,
    WorkflowContext,
    decode_output,
    encode_input,
)
from aos.kernel.wasm.build import build_c, build_python
from bench.harness import Row, row

REPO = Path(__file__).resolve().parent.parent
COUNTER_C = REPO / "modules" / "examples" / "counter_c" / "counter.c"
COUNTER_PY = REPO / "modules" / "examples" / "counter_py" / "counter.py"
GROUP = "wasm.step"

# One increment of an existing cell that crosses a threshold (so the step emits an event).
INPUT = encode_input(
    state=cbor.encode({"count": 9, "resets": 0}),
    event_schema="demo/CounterEvent@1",
    event_value=cbor.encode({"$tag": "Increment", "$value": {"id": "c-42", "by": 3}}),
)


# The same input with a workflow context, as a world builds it for a workflow that has one.
_CTX = WorkflowContext(
    now_ns=1_700_000_000_000_000_000,
    entropy=bytes(range(64)),
    journal_height=123_456,
    manifest_hash="blake3:" + "ab" * 32,
    workflow="demo/Counter@1",
).encode()
_INPUT_FIELDS = {
    "state": cbor.encode({"count": 9, "resets": 0}),
    "event_schema": "demo/CounterEvent@1",
    "event_value": cbor.encode({"$tag": "Increment", "$value": {"id": "c-42", "by": 3}}),
    "ctx": _CTX,
}


def _native_counter() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_counter_py", COUNTER_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _stepper(module: LoadedModule, determinism: str, rate: float) -> StepRunner:
    runner = StepRunner(module, determinism=determinism, sample_rate=rate)
    runner.step(INPUT, seq=0)  # warm up (and create the warm instance)
    return runner


def _step_rows(label: str, module: LoadedModule, expected: bytes, quick: bool) -> list[Row]:
    rows: list[Row] = []
    for determinism, rate in (("strict", 0.0), ("checked", 0.0), ("checked", 0.05)):
        runner = _stepper(module, determinism, rate)
        result = runner.step(INPUT, seq=1)
        assert result.output_bytes == expected
        name = f"{label}, {determinism}"
        if determinism == "checked":
            name += f" (sample rate {rate})"
        rows.append(_step_row(name, runner, result.fuel_used, quick))
    return rows


def _step_row(name: str, runner: StepRunner, fuel: int, quick: bool) -> Row:
    seqs = iter(range(2, 10**12))  # successive sequence numbers, as a journal would give
    return row(
        GROUP,
        name,
        lambda: runner.step(INPUT, seq=next(seqs)),
        number=50 if quick else 300,
        rounds=5 if quick else 9,
        per="step",
        fuel=fuel,
    )


def run(quick: bool) -> list[Row]:
    native = _native_counter().counter
    expected = native.step_bytes(INPUT)
    number, rounds = (200, 5) if quick else (1000, 9)
    rows = [
        row(
            GROUP,
            "native Python SDK call",
            lambda: native.step_bytes(INPUT),
            number=number,
            rounds=rounds,
            per="step",
            baseline=True,
        )
    ]
    engine = WasmEngine()
    core = engine.load(build_c(COUNTER_C).wasm_path.read_bytes(), abi="core")
    rows += _step_rows("core (C counter)", core, expected, quick)
    rows += _envelope_rows(StepRunner(core).step(INPUT, seq=0).output_bytes, quick)
    component_wasm = build_python(COUNTER_PY).wasm_path.read_bytes()
    component = engine.load(component_wasm, abi="component")
    rows += _step_rows("component (Python counter)", component, expected, quick)
    rows.append(_disk_load_row(component_wasm, quick))
    return rows


def _envelope_rows(output: bytes, quick: bool) -> list[Row]:
    fields = _INPUT_FIELDS
    generic = {
        "version": 1,
        "state": fields["state"],
        "event": {"schema": fields["event_schema"], "value": fields["event_value"]},
        "ctx": fields["ctx"],
    }
    assert encode_input(**fields) == cbor.encode(generic)
    limits = StepLimits()
    number, rounds = (2000, 5) if quick else (10_000, 9)
    cases: list[tuple[str, Callable[[], object], bool]] = [
        ("input: generic canonical encoder (cbor.encode)", lambda: cbor.encode(generic), True),
        ("input: encode_input", lambda: encode_input(**fields), False),
        ("output: decode_output (C counter)", lambda: decode_output(output, limits), False),
    ]
    return [
        row("wasm.envelope", name, fn, number=number, rounds=rounds, per="envelope", baseline=base)
        for name, fn, base in cases
    ]


def _disk_load_row(wasm: bytes, quick: bool) -> Row:
    # A new engine per load, on the default disk cache, which `run` has just filled.
    def load() -> WasmEngine:
        engine = WasmEngine()
        engine.load(wasm, abi="component")
        assert engine.stats.disk_hits == 1
        return engine

    path = load().cache_path("component", hash_bytes(wasm))
    result = row(
        "wasm.load",
        "component from the disk cache (new engine)",
        load,
        number=1,
        rounds=3 if quick else 7,
        per="load",
        baseline=True,
    )
    result.extra.update(wasm_bytes=len(wasm), compiled_bytes=path.stat().st_size if path else 0)
    return result
