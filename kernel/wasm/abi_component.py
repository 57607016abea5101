"""The component ABI: a WebAssembly component of the world `aos:workflow/workflow`
(spec/wit/workflow.wit) exporting `step: func(input: list<u8>) -> list<u8>`.

Python workflows are built into such components with `componentize-py --stub-wasi`, which
leaves no imports. The host calls the export once per step with the input envelope.

wasmtime-py converts a `list<u8>` one element at a time in Python (about 1.4 µs per byte);
here the bytes are laid into (and read out of) the C API's value array with strided slice
copies instead, which is about ten times faster. The layout comes from wasmtime-py's own
ctypes declarations, not from constants of ours.
"""

from __future__ import annotations

import ctypes
from typing import Any

import wasmtime
from wasmtime import _ffi as ffi
from wasmtime import component as wc

from aos.kernel.errors import KernelInvariantError
from aos.kernel.wasm.engine import Abi, LoadedModule
from aos.kernel.wasm.faults import StepOutputTooLargeError
from aos.kernel.wasm.instance import MeteredStore


def _offset(structure: type, field: str) -> int:
    return int(getattr(structure, field).offset)


_VAL_BYTES = ctypes.sizeof(ffi.wasmtime_component_val_t)
_KIND_OFFSET = _offset(ffi.wasmtime_component_val_t, "kind")
_U8_OFFSET = _offset(ffi.wasmtime_component_val_t, "of") + _offset(
    ffi.wasmtime_component_valunion_t, "u8"
)
_KIND_U8 = ffi.WASMTIME_COMPONENT_U8.value
_KIND_LIST = ffi.WASMTIME_COMPONENT_LIST.value


class ComponentInstance:
    """One instance of a workflow component in its own store."""

    def __init__(self, module: LoadedModule, *, fuel_max: int, memory_bytes_max: int) -> None:
        if module.abi is not Abi.COMPONENT or not isinstance(module.artifact, wc.Component):
            raise TypeError("ComponentInstance needs a module loaded with abi=component")
        self._module_hash = str(module.module_hash)
        self._meter = MeteredStore(
            module.engine.wasmtime_engine,
            fuel_max=fuel_max,
            memory_bytes_max=memory_bytes_max,
            module_hash=self._module_hash,
        )
        store = self._meter.store
        try:
            instance = self._instantiate(module.engine.component_linker, module.artifact, store)
        except BaseException:
            self._meter.close()
            raise
        func = instance.get_func(store, module.entrypoint)
        if func is None:  # the export was checked at load
            raise KernelInvariantError(f"component lost its {module.entrypoint} export")
        # Taken once: a warm instance serves thousands of calls through them.
        self._func_ref = ctypes.byref(func._func)
        self._context = store._context()
        self._lowering = _Lowering()

    def _instantiate(
        self, linker: wc.Linker, component: wc.Component, store: wasmtime.Store
    ) -> wc.Instance:
        try:
            instance = linker.instantiate(store, component)
        except wasmtime.WasmtimeError as exc:
            raise self._meter.fault(exc, "instantiation") from None
        self._meter.check_fuel()
        return instance

    @property
    def fuel_used(self) -> int:
        return self._meter.fuel_used

    def close(self) -> None:
        self._meter.close()

    def call(self, data: bytes, *, output_bytes_max: int) -> bytes:
        self._meter.refuel()
        result = ffi.wasmtime_component_val_t()
        error = self._invoke(data, result)
        if error:
            raise self._meter.fault(wasmtime.WasmtimeError._from_ptr(error), "the step") from None
        try:
            self._meter.check_fuel()
            return self._lift_bytes(result, output_bytes_max)
        finally:
            ffi.wasmtime_component_val_delete(ctypes.byref(result))

    def _invoke(self, data: bytes, result: ffi.wasmtime_component_val_t) -> Any:
        argument = self._lowering.lower(data)
        try:
            return ffi.wasmtime_component_func_call(
                self._func_ref, self._context, ctypes.byref(argument), 1, ctypes.byref(result), 1
            )
        finally:
            ffi.wasmtime_component_val_delete(ctypes.byref(argument))

    def _lift_bytes(self, result: ffi.wasmtime_component_val_t, output_bytes_max: int) -> bytes:
        if result.kind != _KIND_LIST:
            raise KernelInvariantError("a list<u8> export returned a value of another kind")
        length = int(result.of.list.size)
        if length > output_bytes_max:
            raise StepOutputTooLargeError(
                f"output is {length} bytes; the limit is {output_bytes_max}",
                module_hash=self._module_hash,
                output_bytes=length,
                output_bytes_max=output_bytes_max,
            )
        if length == 0:
            return b""
        raw = ctypes.string_at(result.of.list.data, length * _VAL_BYTES)
        if raw[_KIND_OFFSET::_VAL_BYTES] != bytes([_KIND_U8]) * length:
            raise KernelInvariantError("a list<u8> export returned elements of another kind")
        return raw[_U8_OFFSET::_VAL_BYTES]


class _Lowering:
    """Lays bytes out as a C API `list<u8>` value. The laid-out form (one tagged value per
    byte) is kept between calls with every tag already written, so a call writes only the
    bytes themselves; it grows to the longest input seen and belongs to one instance."""

    def __init__(self) -> None:
        self._laid = bytearray()
        # A ctypes view of `_laid`; it also pins the buffer (no resize while it exists).
        self._view = (ctypes.c_char * 0).from_buffer(self._laid)

    def lower(self, data: bytes) -> ffi.wasmtime_component_val_t:
        """A new `list<u8>` value holding `data` (the caller deletes it)."""
        size = len(data) * _VAL_BYTES
        items = ffi.wasmtime_component_vallist_t()
        ffi.wasmtime_component_vallist_new_uninit(ctypes.byref(items), len(data))
        if data:
            if len(self._laid) < size:
                self._laid = bytearray(size)
                self._laid[_KIND_OFFSET::_VAL_BYTES] = bytes([_KIND_U8]) * len(data)
                self._view = (ctypes.c_char * size).from_buffer(self._laid)
            self._laid[_U8_OFFSET:size:_VAL_BYTES] = data
            ctypes.memmove(items.data, self._view, size)
        value = ffi.wasmtime_component_val_t()
        value.kind = _KIND_LIST
        value.of.list = items
        return value
