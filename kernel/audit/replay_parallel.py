"""The parallel path of a replay audit: steps on a reused instance, every one of them re-run on
a fresh instance in worker processes (spec/05 §2.1).

A replay audit's rule is that every step runs on a fresh instance. On this path the replaying
process steps each module on one reused ("speculative") instance, and hands the exact input
envelope and the output it took to a worker process, which runs the same input on a fresh
instance under the same limits and checks that the output is the same bytes. When every
check agrees, the replay took exactly the outputs a fresh instance gives, so it followed the
same path, produced the same records and reached the same verdict as the reference replay
(one process, a fresh instance per step): what the audit proves is unchanged.

Whatever the speculative instance cannot decide alone goes to the reference in the replaying
process, as it would without workers: a fault (trap, fuel, memory, bad output; the fresh run
classifies it), a read or hash request (the fresh run serves it from the audited store), and
the first call on a new instance (which is a fresh run already, so needs no check).

When any check disagrees (or a worker is lost), the audit is done again by the reference
replay, and that is the report: the verdict and the first divergence never depend on the
number of workers.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from typing import BinaryIO

from aos.kernel.hashing import Hash
from aos.kernel.wasm import (
    Abi,
    Determinism,
    LoadedModule,
    StepFault,
    StepLimits,
    StepResult,
    StepRunner,
    WasmEngine,
    decode_output,
)
from aos.kernel.wasm.abi_component import ComponentInstance
from aos.kernel.wasm.abi_core import CoreInstance
from aos.kernel.wasm.instance import GuestInstance
from aos.kernel.wasm.runner import BlobReader

# Steps sent to a worker in one message (fewer, larger messages: less pickling per step).
CHECK_BATCH_STEPS = 64
# Batches a worker may have in hand before the replay waits for it: bounds the memory the
# inputs in flight take when the workers fall behind.
BATCHES_IN_FLIGHT_MAX = 8

_ModuleKey = tuple[str, str, str]  # module hash, abi, entrypoint


class ChecksDisagreedError(Exception):
    """A fresh run disagreed (or a worker was lost): the replay stops at the next step it
    would send, since only the reference replay can tell what happened. Internal: never
    leaves `replay.verify_replay`."""


class FreshChecks:
    """Worker processes that re-run steps on fresh instances and compare outputs. A worker
    is `python -m aos.kernel.audit.replay_parallel`, spoken to in pickles over its stdin and
    stdout (a process of its own: nothing of the replaying process, wasmtime's threads
    least of all, is forked)."""

    def __init__(
        self, workers: int, module_bytes: Callable[[Hash], bytes], engine: WasmEngine
    ) -> None:
        self._workers = workers
        self._module_bytes = module_bytes
        self._command = [sys.executable, "-m", "aos.kernel.audit.replay_parallel"]
        if engine.cache_dir is not None:
            self._command.append(str(engine.cache_dir))
        # Started at the first batch: a replay that never speculates starts none.
        self._processes: list[subprocess.Popen[bytes]] = []
        self._announced: list[set[_ModuleKey]] = [set() for _ in range(workers)]
        self._in_flight = [0] * workers
        self._batch: list[tuple[_ModuleKey, StepLimits, bytes, bytes]] = []
        self._next = 0
        self.checked = 0  # steps whose fresh run agreed
        self.agreed = True  # False once a check disagreed or a worker was lost

    def submit(self, module: LoadedModule, limits: StepLimits, data: bytes, output: bytes) -> None:
        if not self.agreed:
            raise ChecksDisagreedError("a fresh run disagreed with the output the replay took")
        key = (str(module.module_hash), module.abi.value, module.entrypoint)
        self._batch.append((key, limits, data, output))
        if len(self._batch) >= CHECK_BATCH_STEPS:
            self._send_batch()

    def finish(self) -> bool:
        """Wait for every check sent; whether all agreed."""
        if self._batch:
            self._send_batch()
        for index in range(len(self._processes)):
            while self._in_flight[index] and self.agreed:
                self._receive(index)
        return self.agreed

    def close(self) -> None:
        """Stop the workers. Called after `finish` (nothing is left to hear from them) or on
        an error, so they are killed rather than waited for."""
        for process in self._processes:
            process.kill()
            process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):  # a pipe to a dead worker
                        pipe.close()

    def __enter__(self) -> FreshChecks:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _send_batch(self) -> None:
        if not self._processes:
            self._processes = [
                subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                for _ in range(self._workers)
            ]
        index = self._next
        self._next = (index + 1) % self._workers
        while self._in_flight[index] >= BATCHES_IN_FLIGHT_MAX and self.agreed:
            self._receive(index)
        pipe = self._processes[index].stdin
        assert pipe is not None
        try:
            for key, _, _, _ in self._batch:
                if key not in self._announced[index]:
                    pickle.dump(("module", key, self._module_bytes(Hash(key[0]))), pipe)
                    self._announced[index].add(key)
            pickle.dump(("steps", self._batch), pipe)
            pipe.flush()
        except OSError:
            self.agreed = False
        self._batch = []
        self._in_flight[index] += 1

    def _receive(self, index: int) -> None:
        pipe = self._processes[index].stdout
        assert pipe is not None
        try:
            agreed, count = pickle.load(pipe)
        except (EOFError, OSError, pickle.UnpicklingError):
            agreed, count = False, 0
        self._in_flight[index] -= 1
        self.checked += count
        self.agreed = self.agreed and agreed


def serve(requests: BinaryIO, answers: BinaryIO, cache_dir: str | None) -> None:
    """A worker: load modules as announced, run each batch of steps fresh, answer whether
    every output was the one the replay took."""
    engine = WasmEngine(cache_dir=cache_dir, disk_cache=cache_dir is not None)
    modules: dict[_ModuleKey, LoadedModule] = {}
    while True:
        try:
            message = pickle.load(requests)
        except EOFError:
            return
        if message[0] == "module":
            key, wasm = message[1], message[2]
            modules[key] = engine.load(wasm, abi=key[1], entrypoint=key[2])
            continue
        agreed = all(
            _fresh_agrees(modules[key], limits, data, output)
            for key, limits, data, output in message[1]
        )
        pickle.dump((agreed, len(message[1])), answers)
        answers.flush()


def _fresh_agrees(module: LoadedModule, limits: StepLimits, data: bytes, output: bytes) -> bool:
    runner = StepRunner(module, limits=limits, determinism=Determinism.STRICT)
    try:
        return runner.step(data, seq=0).output_bytes == output
    except StepFault:
        return False


def audit_runner(module: LoadedModule, limits: StepLimits, checks: FreshChecks) -> StepRunner:
    """The runner of one module on the parallel path. Only components speculate: a fresh
    instance of one costs milliseconds (a componentize-py guest: ~1.5 ms, and its first
    call ~1 ms more), while a core module's costs ~0.05 ms, less than sending its step to a
    worker, so a core module runs fresh in the replaying process, as with 1 worker."""
    if module.abi is Abi.CORE:
        return StepRunner(module, limits=limits, determinism=Determinism.STRICT)
    return SpeculativeRunner(module, limits, checks)


class SpeculativeRunner(StepRunner):
    """A `strict` runner that steps on one reused instance and has every such step checked
    on a fresh instance by `checks`; the reference (its `strict` self) decides the rest."""

    def __init__(self, module: LoadedModule, limits: StepLimits, checks: FreshChecks) -> None:
        super().__init__(module, limits=limits, determinism=Determinism.STRICT)
        self._checks = checks
        self._instance: GuestInstance | None = None
        self._instance_steps = 0

    def step(
        self,
        input_bytes: bytes,
        *,
        seq: int,
        verify: bool = False,
        read_blob: BlobReader | None = None,
    ) -> StepResult:
        new = self._instance is None or self._instance_steps >= self.warm_steps_max
        try:
            instance = self._fresh_instance() if new or self._instance is None else self._instance
            self._instance = instance
            self._instance_steps = 1 if new else self._instance_steps + 1
            output_bytes = instance.call(input_bytes, output_bytes_max=self.limits.output_bytes_max)
            output = decode_output(output_bytes, self.limits, module_hash=self.module_hash)
        except StepFault:
            output = None
        if output is None or output.is_request:
            self.discard_warm()
            return super().step(input_bytes, seq=seq, verify=verify, read_blob=read_blob)
        if not new:
            self._checks.submit(self.module, self.limits, input_bytes, output_bytes)
        return StepResult(output, output_bytes, instance.fuel_used, new, not new)

    def discard_warm(self) -> None:
        super().discard_warm()
        self._instance = None
        self._instance_steps = 0

    def _fresh_instance(self) -> GuestInstance:
        kind = CoreInstance if self.module.abi is Abi.CORE else ComponentInstance
        return kind(
            self.module,
            fuel_max=self.limits.fuel_per_step_max,
            memory_bytes_max=self.limits.memory_bytes_max,
        )


def _main() -> None:
    # The answers go to the real stdout; anything else a library prints goes to stderr.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(sys.stdin.buffer, answers, sys.argv[1] if len(sys.argv) > 1 else None)


if __name__ == "__main__":
    _main()
