"""Resource limits of one workflow step (DESIGN §6, §12).

Each limit has a kernel default (`*_DEFAULT`), may be overridden per workflow in its
`defworkflow.limits`, and an override must lie in `1 .. *_CEILING` (checked when the
definition is parsed, `air.def_invalid` otherwise). Crossing a limit while stepping is a step
fault; that is the WASM runtime's business, these are the numbers it reads.
"""

from __future__ import annotations

from dataclasses import dataclass

# Fuel is wasmtime's instruction budget; a Python component spends much of it in the
# interpreter, so the default is generous and the ceiling bounds a runaway step to seconds.
FUEL_PER_STEP_MAX_DEFAULT = 1_000_000_000
FUEL_PER_STEP_MAX_CEILING = 100_000_000_000

# A componentize-py guest carries a CPython heap of tens of MiB before doing anything.
MEMORY_BYTES_MAX_DEFAULT = 256 * 1024 * 1024
MEMORY_BYTES_MAX_CEILING = 4 * 1024 * 1024 * 1024  # the whole wasm32 address space

OUTPUT_BYTES_MAX_DEFAULT = 1024 * 1024
OUTPUT_BYTES_MAX_CEILING = 64 * 1024 * 1024  # the canonical decoder's input limit

EFFECTS_PER_STEP_MAX_DEFAULT = 64
EFFECTS_PER_STEP_MAX_CEILING = 1024

EVENTS_PER_STEP_MAX_DEFAULT = 64
EVENTS_PER_STEP_MAX_CEILING = 1024


@dataclass(frozen=True)
class StepLimits:
    """The effective limits of a workflow's steps: every field filled."""

    fuel_per_step_max: int = FUEL_PER_STEP_MAX_DEFAULT
    memory_bytes_max: int = MEMORY_BYTES_MAX_DEFAULT
    output_bytes_max: int = OUTPUT_BYTES_MAX_DEFAULT
    effects_per_step_max: int = EFFECTS_PER_STEP_MAX_DEFAULT
    events_per_step_max: int = EVENTS_PER_STEP_MAX_DEFAULT


DEFAULT_STEP_LIMITS = StepLimits()
