"""Resource limits of one workflow step (DESIGN §6, §12), as AIR sees them.

The numbers belong to the WASM runtime (`aos.kernel.wasm.limits`), which enforces them; AIR
reads the same constants so that a `defworkflow.limits` override is checked against the same
ceilings when the definition is parsed (`air.def_invalid` otherwise) as when it is used.
"""

from __future__ import annotations

from aos.kernel.wasm.limits import (
    EFFECTS_PER_STEP_MAX_DEFAULT,
    EMITTED_PER_STEP_MAX_CEILING,
    EVENTS_PER_STEP_MAX_DEFAULT,
    FUEL_PER_STEP_MAX_CEILING,
    FUEL_PER_STEP_MAX_DEFAULT,
    MEMORY_BYTES_CEILING,
    MEMORY_BYTES_MAX_DEFAULT,
    OUTPUT_BYTES_MAX_CEILING,
    OUTPUT_BYTES_MAX_DEFAULT,
    WASM_PAGE_BYTES,
    StepLimits,
)

MEMORY_BYTES_MAX_CEILING = MEMORY_BYTES_CEILING
MEMORY_BYTES_MAX_FLOOR = WASM_PAGE_BYTES
EFFECTS_PER_STEP_MAX_CEILING = EMITTED_PER_STEP_MAX_CEILING
EVENTS_PER_STEP_MAX_CEILING = EMITTED_PER_STEP_MAX_CEILING

DEFAULT_STEP_LIMITS = StepLimits()

__all__ = [
    "DEFAULT_STEP_LIMITS",
    "EFFECTS_PER_STEP_MAX_CEILING",
    "EFFECTS_PER_STEP_MAX_DEFAULT",
    "EVENTS_PER_STEP_MAX_CEILING",
    "EVENTS_PER_STEP_MAX_DEFAULT",
    "FUEL_PER_STEP_MAX_CEILING",
    "FUEL_PER_STEP_MAX_DEFAULT",
    "MEMORY_BYTES_MAX_CEILING",
    "MEMORY_BYTES_MAX_DEFAULT",
    "MEMORY_BYTES_MAX_FLOOR",
    "OUTPUT_BYTES_MAX_CEILING",
    "OUTPUT_BYTES_MAX_DEFAULT",
    "StepLimits",
]
