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
import functools
from typing import Any

import wasmtime
from wasmtime import _ffi as ffi

from aos.kernel.errors import KernelInvariantError
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


class CoreInstance:
    """One instance of a core module in its own store.

    Instantiation goes through the module's `InstancePre` (imports resolved and types checked
    once, at load), and the three exports are looked up by name straight through the C API
    without wrapping every export in a Python object: a `strict` step pays for this on every
    step. The store, and so the linear memory, is new each time."""

    def __init__(self, module: LoadedModule, *, fuel_max: int, memory_bytes_max: int) -> None:
        pre = module.instance_pre
        if module.abi is not Abi.CORE or pre is None:
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
        self._context = self._meter.store._context()
        try:
            instance = _instantiate(pre, self._context, self._meter)
            self._meter.check_fuel()
        except BaseException:
            self._meter.close()
            raise
        # Types were checked at load (engine._check_core), so these are the right kinds.
        self._memory = _export(self._context, instance, "memory").of.memory
        self._alloc = _export(self._context, instance, "alloc").of.func
        self._entry = _export(self._context, instance, module.entrypoint).of.func
        self._module_hash = module_hash

    @property
    def fuel_used(self) -> int:
        return self._meter.fuel_used

    def close(self) -> None:
        self._meter.close()

    def call(self, data: bytes, *, output_bytes_max: int) -> bytes:
        self._meter.refuel()
        try:
            pointer = _call_ints(self._context, self._alloc, len(data), i64=False) & _U32_MASK
            self._write_input(pointer, data)
            packed = _call_ints(self._context, self._entry, pointer, len(data), i64=True)
        except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
            raise self._meter.fault(exc, "the step") from None
        self._meter.check_fuel()
        packed &= _U64_MASK
        return self._read_output(packed >> 32, packed & _U32_MASK, output_bytes_max)

    def _memory_size(self) -> int:
        return int(ffi.wasmtime_memory_data_size(self._context, ctypes.byref(self._memory)))

    def _memory_address(self) -> int:
        # Asked again after every guest call: a `memory.grow` may move the memory.
        data = ffi.wasmtime_memory_data(self._context, ctypes.byref(self._memory))
        return ctypes.cast(data, ctypes.c_void_p).value or 0

    def _write_input(self, pointer: int, data: bytes) -> None:
        size = self._memory_size()
        if pointer + len(data) > size:
            raise StepTrapError(
                f"alloc({len(data)}) returned {pointer}, outside the {size}-byte memory",
                module_hash=self._module_hash,
                reason="alloc returned an out-of-bounds pointer",
                phase="alloc",
                fuel_used=self._meter.fuel_used,
            )
        if data:
            ctypes.memmove(self._memory_address() + pointer, data, len(data))

    def _read_output(self, pointer: int, length: int, output_bytes_max: int) -> bytes:
        if length > output_bytes_max:
            raise StepOutputTooLargeError(
                f"output is {length} bytes; the limit is {output_bytes_max}",
                module_hash=self._module_hash,
                output_bytes=length,
                output_bytes_max=output_bytes_max,
            )
        size = self._memory_size()
        if pointer + length > size:
            raise StepOutputMalformedError(
                f"output [{pointer}, {pointer + length}) is outside the {size}-byte memory",
                module_hash=self._module_hash,
            )
        if length == 0:
            return b""
        return ctypes.string_at(self._memory_address() + pointer, length)


def _instantiate(
    pre: wasmtime.InstancePre, context: Any, meter: MeteredStore
) -> ffi.wasmtime_instance_t:
    instance = ffi.wasmtime_instance_t()
    trap = ctypes.POINTER(ffi.wasm_trap_t)()
    error = ffi.wasmtime_instance_pre_instantiate(
        pre.ptr(), context, ctypes.byref(instance), ctypes.byref(trap)
    )
    if error or trap:
        raise meter.fault(_wasm_error(error, trap), "instantiation") from None
    return instance


def _wasm_error(error: Any, trap: Any) -> Exception:
    if error:
        return wasmtime.WasmtimeError._from_ptr(error)
    return wasmtime.Trap._from_ptr(trap)


def _call_ints(context: Any, func: ffi.wasmtime_func_t, *args: int, i64: bool) -> int:
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
        context,
        ctypes.byref(func),
        params,
        len(args),
        results,
        1,
        ctypes.byref(trap),
    )
    if error or trap:
        raise _wasm_error(error, trap)
    return int(results[0].of.i64 if i64 else results[0].of.i32)


def _export(context: Any, instance: ffi.wasmtime_instance_t, name: str) -> Any:
    """An export's raw `wasmtime_extern_t` (the load checked that it exists)."""
    buffer, length = _name_buffer(name)
    item = ffi.wasmtime_extern_t()
    found = ffi.wasmtime_instance_export_get(
        context, ctypes.byref(instance), buffer, length, ctypes.byref(item)
    )
    if not found:
        raise KernelInvariantError(f"core module lost its {name} export")
    return item


@functools.lru_cache(maxsize=64)
def _name_buffer(name: str) -> tuple[ctypes.Array[ctypes.c_char], int]:
    """An export name as the C API takes it; the C side only reads it, so one per name."""
    raw = name.encode()
    return ctypes.create_string_buffer(raw), len(raw)
