"""The core ABI: a plain WebAssembly module exporting

    memory                          its linear memory
    alloc(len: i32) -> i32          room for the input, called exactly once per step
    <entrypoint>(ptr: i32, len: i32) -> i64
                                    one step; returns (out_ptr << 32) | out_len

for C, Zig, Rust or hand-written WAT. The host writes the input envelope at `alloc(len)`,
calls the entrypoint, and copies the output out of linear memory before anything else runs in
the instance. Because `alloc` is called once per step, a guest may use it to reset an arena.
"""

from __future__ import annotations

import ctypes
from typing import TypeVar

import wasmtime
from wasmtime import _ffi as ffi
from wasmtime._instance import InstanceExports

from aos.kernel.wasm.engine import Abi, LoadedModule
from aos.kernel.wasm.faults import (
    StepMemoryExhaustedError,
    StepOutputMalformedError,
    StepOutputTooLargeError,
    StepTrapError,
)
from aos.kernel.wasm.instance import MeteredStore
from aos.kernel.wasm.limits import WASM_PAGE_BYTES

_U32_MASK = 0xFFFF_FFFF
_U64_MASK = 0xFFFF_FFFF_FFFF_FFFF
_KIND_I32 = ffi.WASMTIME_I32.value

T = TypeVar("T")


class CoreInstance:
    """One instance of a core module in its own store."""

    def __init__(self, module: LoadedModule, *, fuel_max: int, memory_bytes_max: int) -> None:
        if module.abi is not Abi.CORE or not isinstance(module.artifact, wasmtime.Module):
            raise TypeError("CoreInstance needs a module loaded with abi=core")
        module_hash = str(module.module_hash)
        if module.memory_pages_min * WASM_PAGE_BYTES > memory_bytes_max:
            raise StepMemoryExhaustedError(
                f"the module declares {module.memory_pages_min} pages of memory; "
                f"the limit is {memory_bytes_max} bytes",
                module_hash=module_hash,
                memory_bytes_max=memory_bytes_max,
            )
        self._meter = MeteredStore(
            module.engine.wasmtime_engine,
            fuel_max=fuel_max,
            memory_bytes_max=memory_bytes_max,
            module_hash=module_hash,
        )
        store = self._meter.store
        try:
            instance = wasmtime.Instance(store, module.artifact, [])
        except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
            raise self._meter.fault(exc, "instantiation") from None
        self._meter.check_fuel()
        exports = instance.exports(store)
        # Types were checked at load (engine._check_core), so these are the right kinds.
        self._memory = _export(exports, "memory", wasmtime.Memory)
        self._alloc = _export(exports, "alloc", wasmtime.Func)
        self._entry = _export(exports, module.entrypoint, wasmtime.Func)
        self._module_hash = module_hash

    @property
    def fuel_used(self) -> int:
        return self._meter.fuel_used

    def call(self, data: bytes, *, output_bytes_max: int) -> bytes:
        store = self._meter.store
        self._meter.refuel()
        try:
            pointer = _call_ints(store, self._alloc, len(data), i64=False) & _U32_MASK
            self._write_input(pointer, data)
            packed = _call_ints(store, self._entry, pointer, len(data), i64=True) & _U64_MASK
        except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
            raise self._meter.fault(exc, "the step") from None
        self._meter.check_fuel()
        return self._read_output(packed >> 32, packed & _U32_MASK, output_bytes_max)

    def _write_input(self, pointer: int, data: bytes) -> None:
        size = self._memory.data_len(self._meter.store)
        if pointer + len(data) > size:
            raise StepTrapError(
                f"alloc({len(data)}) returned {pointer}, outside the {size}-byte memory",
                module_hash=self._module_hash,
                reason="alloc returned an out-of-bounds pointer",
                phase="alloc",
                fuel_used=self._meter.fuel_used,
            )
        if data:
            self._memory.write(self._meter.store, data, pointer)

    def _read_output(self, pointer: int, length: int, output_bytes_max: int) -> bytes:
        if length > output_bytes_max:
            raise StepOutputTooLargeError(
                f"output is {length} bytes; the limit is {output_bytes_max}",
                module_hash=self._module_hash,
                output_bytes=length,
                output_bytes_max=output_bytes_max,
            )
        size = self._memory.data_len(self._meter.store)
        if pointer + length > size:
            raise StepOutputMalformedError(
                f"output [{pointer}, {pointer + length}) is outside the {size}-byte memory",
                module_hash=self._module_hash,
            )
        if length == 0:
            return b""
        return bytes(self._memory.read(self._meter.store, pointer, pointer + length))


def _call_ints(store: wasmtime.Store, func: wasmtime.Func, *args: int, i64: bool) -> int:
    """Call an export that takes i32s and returns one i32 (or i64) through the C API directly.
    wasmtime-py's generic call re-reads the function type and boxes every value, which was
    half the cost of a core step; the types were checked at load."""
    params = (ffi.wasmtime_val_t * len(args))()
    for slot, value in zip(params, args, strict=True):
        slot.kind = _KIND_I32
        slot.of.i32 = value
    results = (ffi.wasmtime_val_t * 1)()
    trap = ctypes.POINTER(ffi.wasm_trap_t)()
    error = ffi.wasmtime_func_call(
        store._context(),
        ctypes.byref(func._func),
        params,
        len(args),
        results,
        1,
        ctypes.byref(trap),
    )
    if error:
        raise wasmtime.WasmtimeError._from_ptr(error)
    if trap:
        raise wasmtime.Trap._from_ptr(trap)
    return int(results[0].of.i64 if i64 else results[0].of.i32)


def _export(exports: InstanceExports, name: str, kind: type[T]) -> T:
    item = exports[name]
    if not isinstance(item, kind):
        raise TypeError(f"export {name} is not a {kind.__name__}")
    return item
