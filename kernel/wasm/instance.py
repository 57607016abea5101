"""What both guest ABIs share: one store per instance, its limits, and its fuel meter.

Fuel: wasmtime checks fuel at function entries and loop headers, not after every instruction,
so a guest can finish a step having burnt slightly more than it was given, and the store then
reports 0 left. The meter therefore gives `fuel_max + 1` and calls the step exhausted when
nothing is left: a step that burns exactly `fuel_max` passes, one more unit fails, whether or
not wasmtime trapped.
"""

from __future__ import annotations

from typing import Protocol

import wasmtime

from aos.kernel.wasm.faults import (
    StepFault,
    StepFuelExhaustedError,
    StepTrapError,
    short_reason,
    trap_frames,
)
from aos.kernel.wasm.limits import TABLE_ELEMENTS_MAX


class GuestInstance(Protocol):
    """A live instance of a workflow module (either ABI)."""

    @property
    def fuel_used(self) -> int:
        """Fuel burnt by the last `call` (or by instantiation, before the first call)."""
        ...

    def call(self, data: bytes, *, output_bytes_max: int) -> bytes:
        """Run one step: input envelope bytes in, output envelope bytes out. Raises a
        `StepFault` (trap, fuel, output too large or out of bounds)."""
        ...

    def close(self) -> None:
        """Drop the store now (its pool slot is free again); the instance is unusable after."""
        ...


class MeteredStore:
    """A wasmtime store with a memory limit and a per-call fuel budget.

    The fuel left is read once after a call (`check_fuel`) and kept, since the runner asks
    for `fuel_used` right after; any other read asks the store."""

    def __init__(
        self, engine: wasmtime.Engine, *, fuel_max: int, memory_bytes_max: int, module_hash: str
    ) -> None:
        self.store = wasmtime.Store(engine)
        self.store.set_limits(memory_size=memory_bytes_max, table_elements=TABLE_ELEMENTS_MAX)
        self.module_hash = module_hash
        self._fuel_max = fuel_max
        self._fuel_left: int | None = None
        self.refuel()

    def close(self) -> None:
        self.store.close()

    def refuel(self) -> None:
        self.store.set_fuel(self._fuel_max + 1)
        self._fuel_left = None

    @property
    def fuel_used(self) -> int:
        left = self._fuel_left if self._fuel_left is not None else self.store.get_fuel()
        return self._fuel_max + 1 - left

    def check_fuel(self) -> None:
        """After a call that returned normally: fail if the budget was overrun."""
        self._fuel_left = self.store.get_fuel()
        if self._fuel_left == 0:
            raise self._exhausted()

    def fault(self, error: Exception, phase: str) -> StepFault:
        """The step fault for an error wasmtime raised while running guest code."""
        if self.store.get_fuel() == 0:
            return self._exhausted()
        return StepTrapError(
            f"the module trapped during {phase}: {short_reason(error)}",
            module_hash=self.module_hash,
            reason=short_reason(error),
            phase=phase,
            fuel_used=self.fuel_used,
            frames=trap_frames(error),
        )

    def _exhausted(self) -> StepFuelExhaustedError:
        return StepFuelExhaustedError(
            f"the step burnt more than its {self._fuel_max} units of fuel",
            module_hash=self.module_hash,
            fuel_per_step_max=self._fuel_max,
        )
