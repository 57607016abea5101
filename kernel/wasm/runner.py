"""Running steps under a determinism profile.

* `strict`: every step runs on a fresh instance; nothing survives between steps.
* `checked`: steps run on a warm instance that is reused, for speed. A deterministic sample of
  steps (a pure function of the module hash and the step's sequence number) and every step the
  caller asks to verify (a replay audit) also run on a fresh instance, and the two outputs must
  be equal byte for byte; otherwise the step fails with `step.nondeterministic`. A warm
  instance that faulted or diverged is discarded, and the step is decided by a fresh instance,
  so whatever `checked` applies is exactly what `strict` would have applied.

A trap is classified once more before it is reported: the step is run again on a fresh
instance with twice the memory limit, and if it then behaves differently (another outcome, or
the same trap after a different amount of fuel) the memory limit caused it and the fault is
`step.memory_exhausted`. That is exact where a guess from the trap message would not be: a
guest whose `memory.grow` is refused usually traps later for a reason of its own.

The runner returns an output only when every check passed, so a fault never leaves anything
half-applied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from aos.kernel.hashing import digest_bytes, hash_bytes
from aos.kernel.wasm.abi_component import ComponentInstance
from aos.kernel.wasm.abi_core import CoreInstance
from aos.kernel.wasm.engine import Abi, LoadedModule
from aos.kernel.wasm.envelope import StepOutput, decode_output, with_data
from aos.kernel.wasm.faults import (
    StepFault,
    StepFuelExhaustedError,
    StepMemoryExhaustedError,
    StepNondeterministicError,
    StepReadRefusedError,
    StepTooManyWritesError,
    StepTrapError,
    WasmUsageError,
)
from aos.kernel.wasm.instance import GuestInstance
from aos.kernel.wasm.limits import MEMORY_BYTES_CEILING, StepLimits

# Share of steps a `checked` workflow re-runs on a fresh instance.
CHECKED_SAMPLE_RATE_DEFAULT = 0.05
# Steps one warm instance serves before it is replaced, so that whatever a guest accumulates
# (heap growth, caches) is bounded however long the world runs.
WARM_STEPS_MAX_DEFAULT = 10_000
# Warm faults that a fresh success excuses (see `_after_warm_fault`).
_WARM_FAULTS_EXCUSED = (StepTrapError, StepFuelExhaustedError, StepMemoryExhaustedError)
# The sample decision compares a 32-bit slice of a hash with the rate scaled to 2**32.
_SAMPLE_SPACE = 2**32


class Determinism(StrEnum):
    """`defworkflow.determinism`."""

    STRICT = "strict"
    CHECKED = "checked"


@dataclass(frozen=True, slots=True)
class StepResult:
    """A validated step. `verified`: the output came from (or was compared with) a fresh
    instance. `warm`: the output came from a reused instance."""

    output: StepOutput
    output_bytes: bytes
    fuel_used: int
    verified: bool
    warm: bool


def is_sampled(module_hash: str, seq: int, sample_rate: float) -> bool:
    """Whether `checked` re-runs step `seq` of `module_hash` on a fresh instance. A pure
    function, so a replay samples the same steps."""
    threshold = int(sample_rate * _SAMPLE_SPACE)
    if threshold <= 0:
        return False
    digest = digest_bytes(f"{module_hash}\n{seq}".encode())
    return int.from_bytes(digest[:4], "big") < threshold


BlobReader = Callable[[str], "bytes | None"]
"""Reads one CAS blob by its `blake3:` hash text; None when the store does not have it."""

READ_ROUNDS_MAX = 2
# The output keys `reads` and `hash` as canonical CBOR text (0x65, 0x64: text of 5 and 4
# bytes): outputs without these bytes cannot be requests, so most outputs skip the decode below.
_REQUEST_KEY_BYTES = (b"\x65reads", b"\x64hash")


def _request(
    output_bytes: bytes, limits: StepLimits, module_hash: str
) -> tuple[tuple[str, ...], tuple[bytes, ...]]:
    """What a request output asks for: hashes to read, blobs to hash (empty for an ordinary
    output)."""
    if not any(key in output_bytes for key in _REQUEST_KEY_BYTES):
        return (), ()
    output = decode_output(output_bytes, limits, module_hash=module_hash)
    return output.reads, output.hash_request


@dataclass
class _Given:
    """The blobs a step was given by hash in `data`: those it read, those it asked hashed."""

    data: dict[str, bytes] = field(default_factory=dict)
    read: int = 0
    read_bytes: int = 0
    hashed: int = 0


class StepRunner:
    """Runs the steps of one workflow module under its limits and determinism profile."""

    def __init__(
        self,
        module: LoadedModule,
        *,
        limits: StepLimits | None = None,
        determinism: Determinism | str = Determinism.STRICT,
        sample_rate: float = CHECKED_SAMPLE_RATE_DEFAULT,
        warm_steps_max: int = WARM_STEPS_MAX_DEFAULT,
    ) -> None:
        if not 0.0 <= sample_rate <= 1.0:
            raise WasmUsageError(f"sample_rate is {sample_rate}; it must be in 0.0..1.0")
        if warm_steps_max < 1:
            raise WasmUsageError("warm_steps_max must be at least 1")
        self.module = module
        self.limits = limits if limits is not None else StepLimits()
        if determinism not in tuple(Determinism):
            raise WasmUsageError(f"unknown determinism {determinism!r}; it is strict or checked")
        self.determinism = Determinism(determinism)
        self.sample_rate = sample_rate
        self.warm_steps_max = warm_steps_max
        self._warm: GuestInstance | None = None
        self._warm_steps = 0
        self._read_blob: BlobReader | None = None

    @property
    def module_hash(self) -> str:
        return str(self.module.module_hash)

    def step(
        self,
        input_bytes: bytes,
        *,
        seq: int,
        verify: bool = False,
        read_blob: BlobReader | None = None,
    ) -> StepResult:
        """Run one step. `seq` is the step's journal sequence number (it drives sampling);
        `verify` forces the fresh-instance comparison of `checked` (replay audits);
        `read_blob` serves the guest's read requests (None: the step may read nothing)."""
        self._read_blob = read_blob
        if self.determinism is Determinism.STRICT:
            output_bytes, fuel = self._run_fresh(input_bytes)
            return StepResult(self._decode(output_bytes), output_bytes, fuel, True, False)
        compare = verify or is_sampled(self.module_hash, seq, self.sample_rate)
        return self._step_checked(input_bytes, seq, compare)

    def discard_warm(self) -> None:
        """Drop the warm instance (a governance change, a snapshot, a test)."""
        if self._warm is not None:
            self._warm.close()
        self._warm = None
        self._warm_steps = 0

    # ----------------------------------------------------------------------------------------
    # checked

    def _step_checked(self, input_bytes: bytes, seq: int, compare: bool) -> StepResult:
        # The first call of a new instance is a fresh run already: it needs no second run,
        # and its faults are final, as under `strict`.
        first_call = self._warm is None or self._warm_steps >= self.warm_steps_max
        try:
            warm_bytes, warm_fuel = self._run_warm(input_bytes, first_call)
            warm_output = self._decode(warm_bytes)
        except StepFault as warm_fault:
            self.discard_warm()
            if first_call:
                raise self._classified(warm_fault, input_bytes) from None
            return self._after_warm_fault(input_bytes, seq, warm_fault)
        if first_call or not compare:
            return StepResult(warm_output, warm_bytes, warm_fuel, first_call, not first_call)
        try:
            fresh_bytes, _ = self._run_fresh(input_bytes)
        except StepFault as fresh_fault:
            self.discard_warm()
            raise self._diverged(seq, warm_bytes, None, fresh_fault) from None
        if fresh_bytes != warm_bytes:
            self.discard_warm()
            raise self._diverged(seq, warm_bytes, fresh_bytes, None)
        return StepResult(warm_output, warm_bytes, warm_fuel, True, True)

    def _after_warm_fault(self, input_bytes: bytes, seq: int, warm_fault: StepFault) -> StepResult:
        # The fresh instance decides, as under `strict`. A warm instance may trap or run out
        # of fuel or memory because of its own history (a heap grown over many steps), which
        # is no fault of this step; a warm instance that returned a bad output while a fresh
        # one returns a good one, though, kept state it should not have.
        output_bytes, fuel = self._run_fresh(input_bytes)
        output = self._decode(output_bytes)
        if not isinstance(warm_fault, _WARM_FAULTS_EXCUSED):
            raise self._diverged(seq, None, output_bytes, warm_fault)
        return StepResult(output, output_bytes, fuel, True, False)

    def _run_warm(self, input_bytes: bytes, renew: bool) -> tuple[bytes, int]:
        if renew or self._warm is None:
            self.discard_warm()
            self._warm = self._instantiate(self.limits.memory_bytes_max)
        self._warm_steps += 1
        output_bytes = self._call(self._warm, input_bytes)
        return output_bytes, self._warm.fuel_used

    def _diverged(
        self,
        seq: int,
        warm_bytes: bytes | None,
        fresh_bytes: bytes | None,
        fault: StepFault | None,
    ) -> StepNondeterministicError:
        detail: dict[str, object] = {"seq": seq}
        if warm_bytes is not None:
            detail["warm_output_hash"] = str(hash_bytes(warm_bytes))
        if fresh_bytes is not None:
            detail["fresh_output_hash"] = str(hash_bytes(fresh_bytes))
        if fault is not None:
            side = "fresh" if warm_bytes is not None else "warm"
            detail[f"{side}_fault"] = fault.code
        return StepNondeterministicError(
            f"module {self.module_hash} gave different results on a warm and a fresh instance",
            module_hash=self.module_hash,
            **detail,
        )

    # ----------------------------------------------------------------------------------------
    # strict, and the fresh half of checked

    def _run_fresh(self, input_bytes: bytes) -> tuple[bytes, int]:
        try:
            return self._attempt(input_bytes, self.limits.memory_bytes_max)
        except StepFault as fault:
            raise self._classified(fault, input_bytes) from None

    def _classified(self, fault: StepFault, input_bytes: bytes) -> StepFault:
        """The fault a fresh run reports: a trap the memory limit caused is a memory fault."""
        if isinstance(fault, StepTrapError) and self._memory_caused(fault, input_bytes):
            return self._memory_exhausted(fault)
        return fault

    def _attempt(self, input_bytes: bytes, memory_bytes_max: int) -> tuple[bytes, int]:
        instance = self._instantiate(memory_bytes_max)
        try:
            output_bytes = self._call(instance, input_bytes)
            return output_bytes, instance.fuel_used
        finally:
            # Now, not when the garbage collector gets to it (a fault's traceback holds the
            # instance): the store's pool slot is free for the next step.
            instance.close()

    def _call(self, instance: GuestInstance, input_bytes: bytes) -> bytes:
        """Call the guest; while its output is a request, call it again with what it asked
        for in `data` (at most `READ_ROUNDS_MAX` rounds): the blobs it reads, and the blobs it
        asked hashed, each under its hash. What it gets is content-addressed, so the final
        output depends only on the input and the CAS: a warm instance that kept a decoded
        blob and a fresh one that had to ask return the same bytes."""
        output_bytes = instance.call(input_bytes, output_bytes_max=self.limits.output_bytes_max)
        given = _Given()
        for _ in range(READ_ROUNDS_MAX):
            reads, blobs = _request(output_bytes, self.limits, self.module_hash)
            if not reads and not blobs:
                return output_bytes
            self._fetch(reads, given)
            self._hash(blobs, given)
            input_bytes = with_data(input_bytes, given.data)
            output_bytes = instance.call(input_bytes, output_bytes_max=self.limits.output_bytes_max)
        if any(_request(output_bytes, self.limits, self.module_hash)):
            raise StepReadRefusedError(
                f"the step still asks to read or hash after {READ_ROUNDS_MAX} rounds",
                module_hash=self.module_hash,
            )
        return output_bytes

    def _fetch(self, reads: tuple[str, ...], given: _Given) -> None:
        if reads and self._read_blob is None:
            raise StepReadRefusedError(
                "the step asked to read blobs, and this host serves no reads",
                module_hash=self.module_hash,
            )
        for hash_ in reads:
            if hash_ in given.data:
                raise StepReadRefusedError(
                    f"the step asked again for {hash_}, which it was given",
                    module_hash=self.module_hash,
                )
            assert self._read_blob is not None
            blob = self._read_blob(hash_)
            if blob is None:
                raise StepReadRefusedError(
                    f"the step asked to read {hash_}, which is not in the world's store",
                    module_hash=self.module_hash,
                    hash=hash_,
                )
            given.data[hash_] = blob
            given.read += 1
            given.read_bytes += len(blob)
        if given.read > self.limits.reads_per_step_max:
            raise StepReadRefusedError(
                f"the step read {given.read} blobs; the limit is {self.limits.reads_per_step_max}",
                module_hash=self.module_hash,
            )
        if given.read_bytes > self.limits.read_bytes_per_step_max:
            raise StepReadRefusedError(
                f"the step read {given.read_bytes} bytes; the limit is "
                f"{self.limits.read_bytes_per_step_max}",
                module_hash=self.module_hash,
            )

    def _hash(self, blobs: tuple[bytes, ...], given: _Given) -> None:
        """A hash request: each blob goes into `data` under its hash (spec/08 §4.4)."""
        for blob in blobs:
            hash_ = str(hash_bytes(blob))
            if hash_ in given.data:
                raise StepReadRefusedError(
                    f"the step asked again for the hash of {hash_}, which it was given",
                    module_hash=self.module_hash,
                )
            given.data[hash_] = blob
            given.hashed += 1
        if given.hashed > self.limits.writes_per_step_max:
            raise StepTooManyWritesError(
                f"the step asked the hashes of {given.hashed} blobs; the limit is "
                f"{self.limits.writes_per_step_max}",
                module_hash=self.module_hash,
                writes_per_step_max=self.limits.writes_per_step_max,
            )

    def _memory_caused(self, trap: StepTrapError, input_bytes: bytes) -> bool:
        relaxed = min(2 * self.limits.memory_bytes_max, MEMORY_BYTES_CEILING)
        if relaxed == self.limits.memory_bytes_max:
            return False
        try:
            self._attempt(input_bytes, relaxed)
        except StepTrapError as again:
            return (again.reason, again.fuel_used) != (trap.reason, trap.fuel_used)
        except StepFault:
            return True
        return True

    def _memory_exhausted(self, trap: StepTrapError) -> StepMemoryExhaustedError:
        return StepMemoryExhaustedError(
            f"the step needed more than {self.limits.memory_bytes_max} bytes of memory "
            f"(it trapped: {trap.reason})",
            module_hash=self.module_hash,
            memory_bytes_max=self.limits.memory_bytes_max,
            reason=trap.reason,
        )

    def _instantiate(self, memory_bytes_max: int) -> GuestInstance:
        """A fresh instance from the engine's pool; where the pool cannot make one (slots used
        up, a module beyond a slot, or a fault), the unpooled twin engine makes it or raises
        the fault, exactly as an unpooled engine would."""
        kind = CoreInstance if self.module.abi is Abi.CORE else ComponentInstance
        fuel_max = self.limits.fuel_per_step_max
        engine = self.module.engine
        try:
            return kind(self.module, fuel_max=fuel_max, memory_bytes_max=memory_bytes_max)
        except StepFault:
            if not engine.pooled:
                raise
        engine.stats.pool_fallbacks += 1
        twin = engine.unpooled_twin(self.module)
        return kind(twin, fuel_max=fuel_max, memory_bytes_max=memory_bytes_max)

    def _decode(self, output_bytes: bytes) -> StepOutput:
        return decode_output(output_bytes, self.limits, module_hash=self.module_hash)
