"""Typed errors of the WASM runtime: step faults and load errors.

A **step fault** means one step of one workflow failed: nothing of the step is applied, the
world journals a `step_fault` record with the fault's `code` and `detail`, marks the cell
failed, and goes on. Every fault names the module (`detail.module_hash`) and carries a short
reason, never a raw wasmtime backtrace.

A **load error** means a module cannot be used at all (it imports something, is not valid
WebAssembly, or lacks the exports of its ABI); it is reported when a manifest is checked or
applied, before any step runs.
"""

from __future__ import annotations

import re
from typing import Any, TypedDict

from aos.kernel.errors import AosError

# A trap reason is one line; wasmtime's full text (backtrace included) can be long and names
# host paths, so it is cut to this many characters.
TRAP_REASON_CHARS_MAX = 200
# Innermost backtrace frames kept in a trap's detail (function names only, no offsets): enough
# to tell which capability a `--stub-wasi` guest reached for (build.trap_capability).
TRAP_FRAMES_MAX = 8
TRAP_FRAME_CHARS_MAX = 120

_FRAME_LINE = re.compile(r"^\s*\d+:\s+0x[0-9a-f]+ - (.+)$")


class StepFault(AosError):  # noqa: N818 -- "step fault" is the spec's name for the concept
    """Base of every step fault."""

    code = "step.fault"

    def __init__(self, message: str, *, module_hash: str | None = None, **detail: Any) -> None:
        if module_hash is not None:
            detail["module_hash"] = module_hash
        super().__init__(message, **detail)

    @property
    def module_hash(self) -> str | None:
        value = self.detail.get("module_hash")
        return value if isinstance(value, str) else None


class StepTrapError(StepFault):
    code = "step.trap"
    hint = "the module trapped (unreachable, out-of-bounds access, stack overflow ...)"

    @property
    def reason(self) -> str:
        return str(self.detail.get("reason", ""))

    @property
    def fuel_used(self) -> int:
        value = self.detail.get("fuel_used", 0)
        return value if isinstance(value, int) else 0


class GuestError(TypedDict):
    """The exception a workflow raised, as a `step_fault` record keeps it (spec/08 §4)."""

    type: str
    message: str
    where: str


class StepGuestExceptionError(StepFault):
    """The workflow raised an exception; the SDK caught it and the step returned its type,
    message and place (`fault` in the output envelope) instead of a result."""

    code = "step.guest_exception"
    hint = "the workflow raised: `aos world explain SEQ` shows where; fix it, then retry the cell"

    @property
    def guest(self) -> GuestError:
        """The exception as the step_fault record carries it: type, message, where."""
        detail = self.detail
        return GuestError(
            type=str(detail.get("guest_type", "")),
            message=str(detail.get("guest_message", "")),
            where=str(detail.get("guest_where", "")),
        )


class StepFuelExhaustedError(StepFault):
    code = "step.fuel_exhausted"
    hint = "the step ran out of fuel; raise fuel_per_step_max or make the step cheaper"


class StepMemoryExhaustedError(StepFault):
    code = "step.memory_exhausted"
    hint = "the step needed more linear memory than memory_bytes_max allows"


class StepOutputMalformedError(StepFault):
    code = "step.output_malformed"
    hint = "the output is not a canonical CBOR output envelope (spec/08-wasm.md)"


class StepOutputTooLargeError(StepFault):
    code = "step.output_too_large"
    hint = "the output envelope is larger than output_bytes_max"


class StepTooManyEffectsError(StepFault):
    code = "step.too_many_effects"
    hint = "the step emitted more effects than effects_per_step_max"


class StepTooManyEventsError(StepFault):
    code = "step.too_many_events"
    hint = "the step emitted more domain events than events_per_step_max"


class StepTooManyCancelsError(StepFault):
    code = "step.too_many_cancels"
    hint = "a step cancels at most cancels_per_step_max intents"


class StepReadRefusedError(StepFault):
    code = "step.read_refused"
    hint = (
        "a step reads at most reads_per_step_max blobs of read_bytes_per_step_max bytes in "
        "all, each one that is in the world's CAS, in at most two read rounds"
    )


class StepTooManyWritesError(StepFault):
    code = "step.too_many_writes"
    hint = "a step writes (and asks the hashes of) at most writes_per_step_max blobs"


class StepAnnotationTooLargeError(StepFault):
    code = "step.ann_too_large"
    hint = "a step's annotation is at most ann_bytes_max bytes; keep history small"


class StepNondeterministicError(StepFault):
    code = "step.nondeterministic"
    hint = "a warm instance and a fresh instance disagreed: the module keeps hidden state"


class WasmUsageError(AosError):
    """The runtime was configured with values that cannot work (a limit out of range)."""

    code = "wasm.usage"
    hint = "a wasm runtime API was called with arguments that cannot work; see its docstring"


class WasmLoadError(AosError):
    """Base of the errors that make a module unusable."""

    code = "wasm.load_failed"


class WasmImportsForbiddenError(WasmLoadError):
    code = "wasm.imports_forbidden"
    hint = "workflow modules may not import anything (no WASI, no host functions)"


class WasmInvalidModuleError(WasmLoadError):
    code = "wasm.invalid_module"
    hint = "the bytes are not a valid WebAssembly module or component of the declared ABI"


class WasmAbiMismatchError(WasmLoadError):
    code = "wasm.abi_mismatch"
    hint = "the module lacks an export of its ABI, or an export has the wrong type"


def short_reason(error: BaseException) -> str:
    """One line that says why wasmtime failed: the root cause of its message (the text after
    the last `Caused by:`), without the backtrace."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if "Caused by:" in lines:
        lines = lines[len(lines) - lines[::-1].index("Caused by:") :]
    reason = lines[-1] if lines else type(error).__name__
    reason = reason.removeprefix("wasm trap: ")
    return reason[:TRAP_REASON_CHARS_MAX]


def trap_frames(error: BaseException) -> list[str]:
    """The innermost frames of wasmtime's backtrace, as `module!function` names."""
    frames: list[str] = []
    for line in str(error).splitlines():
        match = _FRAME_LINE.match(line)
        if match:
            frames.append(match.group(1).strip()[:TRAP_FRAME_CHARS_MAX])
            if len(frames) == TRAP_FRAMES_MAX:
                break
    return frames
