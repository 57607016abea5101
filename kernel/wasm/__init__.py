"""The WASM runtime: engine and compile cache, the two guest ABIs, step envelopes, limits,
faults and determinism profiles (spec/08-wasm.md).

    engine = WasmEngine()
    module = engine.load(wasm_bytes, abi="core")
    runner = StepRunner(module, limits=StepLimits(), determinism="strict")
    result = runner.step(encode_input(state=None, event_schema=..., event_value=...), seq=7)
"""

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
