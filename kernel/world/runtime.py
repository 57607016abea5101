"""The runtime view of one manifest: definitions by kind, the router, and step runners."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aos.kernel.air import BUILTIN_EFFECTS, BUILTIN_SCHEMAS
from aos.kernel.air.loader import LoadedManifest
from aos.kernel.air.model import (
    DEF_MODELS,
    DefAdapter,
    DefEffect,
    DefModule,
    DefSchema,
    DefWorkflow,
    Manifest,
)
from aos.kernel.air.names import is_sys_name
from aos.kernel.errors import KernelInvariantError
from aos.kernel.hashing import Hash
from aos.kernel.wasm import LoadedModule, StepLimits, StepRunner, WasmEngine
from aos.kernel.world.errors import WorkflowUnknownError
from aos.kernel.world.router import Router
from aos.kernel.world.staged import StagedWrites

# Builds the runner of one module under its limits in place of the profile's own (a replay
# audit's parallel path: kernel/audit/replay_parallel.py).
RunnerFactory = Callable[[LoadedModule, StepLimits], StepRunner]


class Runtime:
    def __init__(
        self,
        loaded: LoadedManifest,
        blobs: StagedWrites,
        engine: WasmEngine,
        *,
        sample_rate: float,
        key_bytes_max: int,
        fresh_instances: bool = False,
        runner_factory: RunnerFactory | None = None,
    ) -> None:
        self.loaded = loaded
        self.manifest_hash = loaded.manifest_hash
        self._blobs = blobs
        self._engine = engine
        self._sample_rate = sample_rate
        # A replay audit steps every input on a fresh instance, whatever the profile: strict
        # gives exactly what checked applies (08-wasm.md), with nothing carried between steps.
        self.fresh_instances = fresh_instances
        self.runner_factory = runner_factory
        self.schemas: dict[str, DefSchema] = dict(loaded.schemas)
        self.workflows: dict[str, DefWorkflow] = dict(loaded.workflows)
        self.effects: dict[str, DefEffect] = dict(BUILTIN_EFFECTS)
        self.modules: dict[str, DefModule] = {}
        self.adapters: dict[str, DefAdapter] = {}
        for name, definition in loaded.definitions.items():
            if isinstance(definition, DefAdapter):
                self.adapters[name] = definition
            elif isinstance(definition, DefEffect):
                self.effects[name] = definition
            elif isinstance(definition, DefModule):
                self.modules[name] = definition
        self.router = Router(
            loaded.manifest.routing.subscriptions,
            self.workflows,
            self.schemas,
            key_bytes_max=key_bytes_max,
        )
        self._runners: dict[str, StepRunner] = {}

    def workflow(self, name: str) -> DefWorkflow:
        found = self.workflows.get(name)
        if found is None:
            raise WorkflowUnknownError(f"no workflow {name} in the manifest")
        return found

    def module_hash(self, workflow: str) -> Hash:
        module = self.modules[self.workflows[workflow].impl.module]
        assert module.artifact.hash_ is not None
        return Hash(module.artifact.hash_)

    def runner(self, workflow: str) -> StepRunner:
        runner = self._runners.get(workflow)
        if runner is None:
            definition = self.workflows[workflow]
            module = self.modules[definition.impl.module]
            wasm = self._blobs.get(self.module_hash(workflow))
            loaded = self._engine.load(wasm, abi=module.abi, entrypoint=definition.impl.entrypoint)
            if self.runner_factory is not None:
                runner = self.runner_factory(loaded, definition.step_limits())
                self._runners[workflow] = runner
                return runner
            runner = StepRunner(
                loaded,
                limits=definition.step_limits(),
                determinism="strict" if self.fresh_instances else self.loaded.determinism(workflow),
                sample_rate=self._sample_rate,
            )
            self._runners[workflow] = runner
        return runner


def stored_definitions(manifest: Manifest, blobs: StagedWrites) -> dict[str, Any]:
    """Read a stored manifest's definitions back from the CAS (user definitions only: the
    kernel provides the `sys/` ones)."""
    definitions: dict[str, Any] = {}
    for kind, refs in manifest.ref_lists().items():
        model = DEF_MODELS[kind]
        for ref in refs:
            if is_sys_name(ref.name):
                continue
            if ref.hash_ is None:
                raise KernelInvariantError(f"stored manifest ref {ref.name} has no hash")
            value = blobs.get_value(Hash(ref.hash_))
            definitions[ref.name] = model.model_validate(value)
    return definitions


def builtin_schema_names() -> frozenset[str]:
    return frozenset(BUILTIN_SCHEMAS)
