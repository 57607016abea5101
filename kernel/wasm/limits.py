"""The bounds of one workflow step. Every one is a named constant (unit last), a default, and a
field of `StepLimits` so that a manifest can override it; crossing one is a typed `step.*`
fault (see `faults.py`), tested at its edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from aos.kernel.wasm.faults import WasmUsageError

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# A WebAssembly page; linear memories grow in whole pages.
WASM_PAGE_BYTES = 64 * KIB
# wasm32 cannot address more than 4 GiB, so no memory limit above it means anything.
MEMORY_BYTES_CEILING = 4 * GIB
# Elements of one table of one instance (wasmtime store limit; a table grows past it as
# `table.grow` returning -1, and a module declaring more cannot be instantiated). One bound
# for pooled and unpooled engines alike, so that the pool's table slots (sized by it) never
# decide anything; the Python counter component's largest table holds 5,670 elements.
TABLE_ELEMENTS_MAX = 128 * KIB

# Fuel (about one unit per executed wasm instruction) one step may burn, instantiation not
# included. A pure-Python step of the SDK costs well under 1% of this; a tight loop burns it
# in well under a second.
FUEL_PER_STEP_MAX_DEFAULT = 1_000_000_000
# Bytes of one linear memory of one instance (wasmtime store limit). A componentize-py guest
# starts at about 16 MiB.
MEMORY_BYTES_MAX_DEFAULT = 128 * MIB
# Bytes of the output envelope one step returns (self-describe prefix included).
OUTPUT_BYTES_MAX_DEFAULT = 1 * MIB
# Effect intents and domain events one step may emit.
EFFECTS_PER_STEP_MAX_DEFAULT = 64
EVENTS_PER_STEP_MAX_DEFAULT = 64
# Open intents one step may cancel (by issuer_ref; spec/08 §4.2).
CANCELS_PER_STEP_MAX_DEFAULT = 256
# CAS blobs one step may read, and their total bytes (spec/08 §4.1): a read request that
# asks for more faults the step.
READS_PER_STEP_MAX_DEFAULT = 16
READ_BYTES_PER_STEP_MAX_DEFAULT = 16 * MIB
# CAS blobs one step may write (spec/08 §4.4), counting those whose hashes it asks for: their
# bytes travel in the output, so `output_bytes_max` bounds their size.
WRITES_PER_STEP_MAX_DEFAULT = 64
# Bytes of one step's annotation (`ann`), which the step record carries inline.
ANN_BYTES_MAX_DEFAULT = 256 * KIB
# Characters kept of each text of a guest exception (its type, message and place) that a
# step reports instead of a result; longer texts are cut, never refused.
GUEST_FAULT_CHARS_MAX_DEFAULT = 1000

# Upper bounds of the overrides themselves: fuel must fit wasmtime's u64 counter with room for
# the one extra unit the runner adds (see abi_core.py); output stays decodable by the default
# CBOR decoder bound.
FUEL_PER_STEP_MAX_CEILING = 2**62
OUTPUT_BYTES_MAX_CEILING = 64 * MIB
EMITTED_PER_STEP_MAX_CEILING = 65_536


@dataclass(frozen=True, slots=True)
class StepLimits:
    """The limits one workflow's steps run under. Build with keyword overrides, e.g.
    `StepLimits(fuel_per_step_max=10_000)`; the constructor refuses values out of range."""

    fuel_per_step_max: int = FUEL_PER_STEP_MAX_DEFAULT
    memory_bytes_max: int = MEMORY_BYTES_MAX_DEFAULT
    output_bytes_max: int = OUTPUT_BYTES_MAX_DEFAULT
    effects_per_step_max: int = EFFECTS_PER_STEP_MAX_DEFAULT
    events_per_step_max: int = EVENTS_PER_STEP_MAX_DEFAULT
    cancels_per_step_max: int = CANCELS_PER_STEP_MAX_DEFAULT
    reads_per_step_max: int = READS_PER_STEP_MAX_DEFAULT
    read_bytes_per_step_max: int = READ_BYTES_PER_STEP_MAX_DEFAULT
    writes_per_step_max: int = WRITES_PER_STEP_MAX_DEFAULT
    ann_bytes_max: int = ANN_BYTES_MAX_DEFAULT
    guest_fault_chars_max: int = GUEST_FAULT_CHARS_MAX_DEFAULT

    def __post_init__(self) -> None:
        for field in fields(self):
            if type(getattr(self, field.name)) is not int:
                raise WasmUsageError(f"step limit {field.name} must be an integer")
        _check_range("fuel_per_step_max", self.fuel_per_step_max, 1, FUEL_PER_STEP_MAX_CEILING)
        _check_range(
            "memory_bytes_max", self.memory_bytes_max, WASM_PAGE_BYTES, MEMORY_BYTES_CEILING
        )
        _check_range("output_bytes_max", self.output_bytes_max, 1, OUTPUT_BYTES_MAX_CEILING)
        for name in (
            "effects_per_step_max",
            "events_per_step_max",
            "cancels_per_step_max",
            "reads_per_step_max",
            "writes_per_step_max",
        ):
            _check_range(name, getattr(self, name), 0, EMITTED_PER_STEP_MAX_CEILING)
        _check_range("read_bytes_per_step_max", self.read_bytes_per_step_max, 0, 1 * GIB)
        _check_range("ann_bytes_max", self.ann_bytes_max, 0, OUTPUT_BYTES_MAX_CEILING)
        _check_range(
            "guest_fault_chars_max", self.guest_fault_chars_max, 1, OUTPUT_BYTES_MAX_CEILING
        )

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, Any]) -> StepLimits:
        """Defaults with a manifest's overrides applied; an unknown name is refused so that a
        typo never silently leaves a default in place."""
        known = {field.name for field in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise WasmUsageError(
                f"unknown step limit(s): {', '.join(unknown)}", known=sorted(known)
            )
        return cls(**dict(overrides))


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise WasmUsageError(f"step limit {name} is {value}; it must be in {low}..{high}")
