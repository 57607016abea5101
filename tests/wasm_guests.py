"""Guests for the WASM runtime tests: the C counter (built with ziglang through
`aos.kernel.wasm.build.build_c`, cached by source hash), the hand-written WAT probes and bad
guests under modules/examples, and the native Python counter of the SDK to compare with."""

from __future__ import annotations

import atexit
import importlib.util
import shutil
import sys
import tempfile
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import wasmtime

from aos.kernel import cbor
from aos.kernel.wasm import WasmEngine, encode_input
from aos.kernel.wasm.build import build_c

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "modules" / "examples"
COUNTER_C = EXAMPLES / "counter_c" / "counter.c"
COUNTER_PY = EXAMPLES / "counter_py" / "counter.py"
COUNTER_EVENT = "demo/CounterEvent@1"


@cache
def session_dir() -> Path:
    """A scratch directory for the whole test session (build and compile caches)."""
    path = Path(tempfile.mkdtemp(prefix="aos-wasm-tests-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@cache
def shared_engine() -> WasmEngine:
    """One engine for the session, so each guest is compiled once."""
    return WasmEngine(cache_dir=session_dir() / "compiled")


def wat(name: str, **replace: str) -> bytes:
    """A WAT guest from modules/examples/{bad,probe}, compiled to wasm. `replace` swaps exact
    source fragments (e.g. a memory's declared size) for one test."""
    for folder in ("bad", "probe"):
        path = EXAMPLES / folder / f"{name}.wat"
        if path.exists():
            text = path.read_text()
            for old, new in replace.items():
                assert old in text, f"{old!r} is not in {path.name}"
                text = text.replace(old, new)
            return bytes(wasmtime.wat2wasm(text))
    raise FileNotFoundError(name)


@cache
def counter_c() -> bytes:
    """The C counter as a core module (a ziglang build, skipped when the source is unchanged)."""
    return build_c(COUNTER_C, cache_dir=session_dir() / "builds").wasm_path.read_bytes()


@cache
def counter_py() -> ModuleType:
    """The Python counter, run natively (its `counter.step_bytes` is the reference)."""
    spec = importlib.util.spec_from_file_location("counter_py_native", COUNTER_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def increment(counter_id: str, by: int) -> dict[str, Any]:
    return {"$tag": "Increment", "$value": {"id": counter_id, "by": by}}


def reset(counter_id: str) -> dict[str, Any]:
    return {"$tag": "Reset", "$value": {"id": counter_id}}


def counter_input(state: bytes | None, event: dict[str, Any]) -> bytes:
    return encode_input(state=state, event_schema=COUNTER_EVENT, event_value=cbor.encode(event))
