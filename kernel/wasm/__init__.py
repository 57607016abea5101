"""The WASM runtime: engine and compile cache, the two guest ABIs, step envelopes, limits,
faults and determinism profiles (spec/08-wasm.md).

    engine = WasmEngine()
    module = engine.load(wasm_bytes, abi="core")
    runner = StepRunner(module, limits=StepLimits(), determinism="strict")
    result = runner.step(encode_input(state=None, event_schema=..., event_value=...), seq=7)

Importing the package imports none of its modules: each name is imported from its module on
first use (PEP 562), so that code which needs only a fault class or the limits (the world's
errors, `aos world status`) does not load wasmtime and the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aos.kernel.lazy_names import module_getattr

if TYPE_CHECKING:
    from aos.kernel.wasm.engine import Abi, EngineStats, LoadedModule, WasmEngine, default_cache_dir
    from aos.kernel.wasm.envelope import (
        EmittedEffect,
        EmittedEvent,
        StepInput,
        StepOutput,
        WorkflowContext,
        decode_input,
        decode_output,
        encode_input,
        encode_output,
    )
    from aos.kernel.wasm.faults import (
        StepFault,
        StepFuelExhaustedError,
        StepGuestExceptionError,
        StepMemoryExhaustedError,
        StepNondeterministicError,
        StepOutputMalformedError,
        StepOutputTooLargeError,
        StepTooManyEffectsError,
        StepTooManyEventsError,
        StepTooManyWritesError,
        StepTrapError,
        WasmAbiMismatchError,
        WasmImportsForbiddenError,
        WasmInvalidModuleError,
        WasmLoadError,
        WasmUsageError,
    )
    from aos.kernel.wasm.limits import StepLimits
    from aos.kernel.wasm.runner import Determinism, StepResult, StepRunner, is_sampled

# Where each public name lives (a module of this package).
_HOMES: dict[str, str] = {
    "Abi": "engine",
    "EngineStats": "engine",
    "LoadedModule": "engine",
    "WasmEngine": "engine",
    "default_cache_dir": "engine",
    "EmittedEffect": "envelope",
    "EmittedEvent": "envelope",
    "StepInput": "envelope",
    "StepOutput": "envelope",
    "WorkflowContext": "envelope",
    "decode_input": "envelope",
    "decode_output": "envelope",
    "encode_input": "envelope",
    "encode_output": "envelope",
    "StepFault": "faults",
    "StepFuelExhaustedError": "faults",
    "StepGuestExceptionError": "faults",
    "StepMemoryExhaustedError": "faults",
    "StepNondeterministicError": "faults",
    "StepOutputMalformedError": "faults",
    "StepOutputTooLargeError": "faults",
    "StepTooManyEffectsError": "faults",
    "StepTooManyEventsError": "faults",
    "StepTooManyWritesError": "faults",
    "StepTrapError": "faults",
    "WasmAbiMismatchError": "faults",
    "WasmImportsForbiddenError": "faults",
    "WasmInvalidModuleError": "faults",
    "WasmLoadError": "faults",
    "WasmUsageError": "faults",
    "StepLimits": "limits",
    "Determinism": "runner",
    "StepResult": "runner",
    "StepRunner": "runner",
    "is_sampled": "runner",
}

__getattr__ = module_getattr(__name__, _HOMES, globals())


__all__ = [
    "Abi",
    "Determinism",
    "EmittedEffect",
    "EmittedEvent",
    "EngineStats",
    "LoadedModule",
    "StepFault",
    "StepFuelExhaustedError",
    "StepGuestExceptionError",
    "StepInput",
    "StepLimits",
    "StepMemoryExhaustedError",
    "StepNondeterministicError",
    "StepOutput",
    "StepOutputMalformedError",
    "StepOutputTooLargeError",
    "StepResult",
    "StepRunner",
    "StepTooManyEffectsError",
    "StepTooManyEventsError",
    "StepTooManyWritesError",
    "StepTrapError",
    "WasmAbiMismatchError",
    "WasmEngine",
    "WasmImportsForbiddenError",
    "WasmInvalidModuleError",
    "WasmLoadError",
    "WasmUsageError",
    "WorkflowContext",
    "decode_input",
    "decode_output",
    "default_cache_dir",
    "encode_input",
    "encode_output",
    "is_sampled",
]
