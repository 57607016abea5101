"""The wasmtime engine of aos and its compile cache.

One configuration for every workflow module, chosen for determinism: NaN canonicalization,
no threads or shared memory, no relaxed SIMD, fuel metering, a fixed wasm stack, and no WASI
or host functions at all (a module or component with any import is refused at load).

Compiling is slow (a componentize-py guest is about 20 MB of wasm and takes seconds), so
compiled artifacts are kept twice: in memory (a small LRU) and on disk, keyed by the wasm
hash, the ABI, the wasmtime version and the configuration fingerprint. A disk entry carries a
BLAKE3 checksum of its payload; a file that fails it (or that wasmtime refuses) is deleted and
the module is compiled again.

Instances come from wasmtime's pooling allocator when the process may reserve the address
space (`POOL_*` below): a slot's memory mapping, copy-on-write data image and tables are made
once and reset when the store is dropped, instead of mapped and unmapped per instance. The
allocator changes no compiled code, so it is not part of the cache fingerprint. Whatever a
pooled engine cannot instantiate (slots used up, a module beyond a slot) is instantiated by an
unpooled twin engine, which decides as an unpooled engine always did.
"""

from __future__ import annotations

import functools
import os
import platform
import resource
import tempfile
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum
from importlib import metadata
from pathlib import Path

import wasmtime
from wasmtime import _ffi as ffi
from wasmtime import component as wc

from aos.kernel.hashing import Hash, digest_bytes, hash_bytes, hash_value
from aos.kernel.wasm.faults import (
    WasmAbiMismatchError,
    WasmImportsForbiddenError,
    WasmInvalidModuleError,
    WasmUsageError,
    short_reason,
)
from aos.kernel.wasm.limits import KIB, MEMORY_BYTES_CEILING, TABLE_ELEMENTS_MAX

# Native stack the guest may use. Part of the configuration fingerprint, so a change
# recompiles every module; a stack overflow is an ordinary `step.trap`.
WASM_STACK_BYTES_MAX = 512 * KIB
# Compiled artifacts kept in memory per engine. A compiled Python component maps ~40 MB.
COMPILED_MEMORY_ENTRIES_MAX = 16
# Files kept in the on-disk compile cache; the least recently used are deleted beyond this.
COMPILED_CACHE_FILES_MAX = 256
# Names in an error's detail are cut to this many, so a module with 10 000 imports still
# gives a readable error.
NAMES_LISTED_MAX = 32

DEFAULT_ENTRYPOINT = "step"

# The instance pool of one engine. Each linear-memory slot reserves ~4 GiB of address space
# (wasmtime's default reservation for a 32-bit memory, which compiled code relies on) but
# commits none, so an engine reserves ~65 GiB; a Python component takes ~35 core instances,
# one memory and one component instance, a C module one core instance and one memory.
POOL_MEMORIES_MAX = 16
POOL_CORE_INSTANCES_MAX = 512
POOL_TABLES_MAX = 512
POOL_COMPONENT_INSTANCES_MAX = 16
# Bytes of a linear memory left mapped (and reset in place) when its slot is freed; beyond
# them pages go back to the OS. Measured (bench/fresh_instance.py, bench/HISTORY.md): keeping
# 1-32 MiB made a fresh C counter slower (reset per drop > faults saved) and Python components
# no faster or slower, so none is kept and a freed slot holds no memory.
POOL_MEMORY_KEEP_RESIDENT_BYTES = 0
# Pooled engines alive at once in one process (see `_PoolBudget`); a world has one engine.
POOLED_ENGINES_MAX = 256

_CORE_PREAMBLE = b"\x00asm\x01\x00\x00\x00"
_COMPONENT_PREAMBLE = b"\x00asm\x0d\x00\x01\x00"
_CACHE_MAGIC = b"aos-cwasm-1\n"
_CACHE_SUFFIX = ".cwasm"

# The settings that make the engine deterministic; they also form the cache fingerprint.
_SETTINGS: tuple[tuple[str, bool | int], ...] = (
    ("cranelift_nan_canonicalization", True),
    ("consume_fuel", True),
    ("wasm_threads", False),
    ("shared_memory", False),
    ("wasm_relaxed_simd", False),
    ("wasm_memory64", False),
    ("wasm_component_model", True),
    ("epoch_interruption", False),
    ("max_wasm_stack", WASM_STACK_BYTES_MAX),
)


class Abi(StrEnum):
    """The two guest ABIs of `defmodule.abi`."""

    CORE = "core"
    COMPONENT = "component"


Artifact = wasmtime.Module | wc.Component


def parse_abi(name: Abi | str) -> Abi:
    try:
        return Abi(name)
    except ValueError:
        raise WasmUsageError(f"unknown ABI {name!r}; it is core or component") from None


@dataclass
class EngineStats:
    """What the compile cache did; tests assert on these, never on timings."""

    compiled: int = 0
    disk_hits: int = 0
    memory_hits: int = 0
    disk_rejected: int = 0
    # Instantiations a pooled engine left to its unpooled twin (slots used up, or a fault).
    pool_fallbacks: int = 0


@dataclass(frozen=True, eq=False)
class LoadedModule:
    """A compiled, checked workflow module, ready to instantiate (many times)."""

    module_hash: Hash
    abi: Abi
    entrypoint: str
    engine: WasmEngine
    artifact: Artifact
    # Core modules only: the declared minimum of the exported memory, in wasm pages.
    memory_pages_min: int = 0
    # Core modules only: the module pre-instantiated against the empty import list (imports
    # resolved and types checked once), so that a fresh instance per step costs only the
    # store, the memory and the module's own start-up.
    instance_pre: wasmtime.InstancePre | None = None


def default_cache_dir() -> Path:
    """`$AOS_CACHE_DIR/compiled`, else `~/.cache/aos/compiled`."""
    root = os.environ.get("AOS_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "aos"
    return base / "compiled"


@functools.cache
def wasmtime_version() -> str:
    # Read once per process (~0.5-1.8 ms from the package metadata, at every engine made
    # otherwise): the library this process loaded cannot change under it.
    return metadata.version("wasmtime")


def _config(*, pooled: bool) -> wasmtime.Config:
    config = wasmtime.Config()
    # wasmtime's own cache stays off (its default): ours is keyed by content and checksummed.
    for name, value in _SETTINGS:
        setattr(config, name, value)
    if pooled:
        _set_pooling(config)
    return config


def _set_pooling(config: wasmtime.Config) -> None:
    pool = ffi.wasmtime_pooling_allocation_config_new()
    try:
        ffi.wasmtime_pooling_allocation_config_total_memories_set(pool, POOL_MEMORIES_MAX)
        ffi.wasmtime_pooling_allocation_config_total_core_instances_set(
            pool, POOL_CORE_INSTANCES_MAX
        )
        ffi.wasmtime_pooling_allocation_config_total_tables_set(pool, POOL_TABLES_MAX)
        ffi.wasmtime_pooling_allocation_config_total_component_instances_set(
            pool, POOL_COMPONENT_INSTANCES_MAX
        )
        # No async stacks: nothing runs async.
        ffi.wasmtime_pooling_allocation_config_total_stacks_set(pool, 0)
        # A slot holds any memory a step may have and any table the store limit allows, so
        # growing behaves as on an unpooled engine (the store limits decide).
        ffi.wasmtime_pooling_allocation_config_max_memory_size_set(pool, MEMORY_BYTES_CEILING)
        ffi.wasmtime_pooling_allocation_config_table_elements_set(pool, TABLE_ELEMENTS_MAX)
        ffi.wasmtime_pooling_allocation_config_linear_memory_keep_resident_set(
            pool, POOL_MEMORY_KEEP_RESIDENT_BYTES
        )
        ffi.wasmtime_pooling_allocation_strategy_set(config.ptr(), pool)
    finally:
        ffi.wasmtime_pooling_allocation_config_delete(pool)


class _PoolBudget:
    """How many pooled engines are alive in this process. wasmtime aborts the process when a
    pool's reservation fails, so pools are made only while the total stays far below what a
    64-bit address space holds (~2,000 pools of ~65 GiB in 128 TiB), and never under a capped
    address space (`ulimit -v`); engines beyond it are unpooled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.alive = 0

    def take(self, owner: object) -> bool:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        with self._lock:
            if soft != resource.RLIM_INFINITY or self.alive >= POOLED_ENGINES_MAX:
                return False
            self.alive += 1
        weakref.finalize(owner, self._give_back)
        return True

    def _give_back(self) -> None:
        with self._lock:
            self.alive -= 1


_POOL_BUDGET = _PoolBudget()


def pooled_engines_alive() -> int:
    """Pooled engines this process holds now (at most `POOLED_ENGINES_MAX`)."""
    return _POOL_BUDGET.alive


def _fingerprint() -> Hash:
    settings = {name: value for name, value in _SETTINGS}
    return hash_value(
        {"wasmtime": wasmtime_version(), "machine": platform.machine(), "settings": settings}
    )


class WasmEngine:
    """One wasmtime engine, its compile caches, and the loader of workflow modules."""

    def __init__(
        self,
        *,
        cache_dir: Path | str | None = None,
        disk_cache: bool = True,
        pooled: bool = True,
    ) -> None:
        # Whether instances come from a pool; an engine asked for one may not get it.
        self.pooled = pooled and _POOL_BUDGET.take(self)
        self.wasmtime_engine = wasmtime.Engine(_config(pooled=self.pooled))
        self.fingerprint = _fingerprint()
        self.cache_dir: Path | None = None
        if disk_cache:
            self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.stats = EngineStats()
        self.component_linker = wc.Linker(self.wasmtime_engine)
        # Empty: core modules import nothing (refused at load).
        self._core_linker = wasmtime.Linker(self.wasmtime_engine)
        self._memory: OrderedDict[tuple[Hash, Abi], Artifact] = OrderedDict()
        self._unpooled: WasmEngine | None = None
        self._twins: dict[tuple[Hash, Abi, str], LoadedModule] = {}

    def load_file(
        self, path: Path | str, *, abi: Abi | str, entrypoint: str = DEFAULT_ENTRYPOINT
    ) -> LoadedModule:
        return self.load(Path(path).read_bytes(), abi=abi, entrypoint=entrypoint)

    def load(
        self, wasm: bytes, *, abi: Abi | str, entrypoint: str = DEFAULT_ENTRYPOINT
    ) -> LoadedModule:
        """Compile (or fetch from a cache) and check one module. Raises a `WasmLoadError`
        when the bytes are not valid for `abi`, import anything, or lack the ABI's exports."""
        abi = parse_abi(abi)
        module_hash = hash_bytes(wasm)
        _check_preamble(wasm, abi, module_hash)
        try:
            artifact, compiled_now = self._artifact(wasm, abi, module_hash)
        except WasmInvalidModuleError:
            if not self.pooled:
                raise
            # A pooled engine also refuses a module beyond its slots (a table longer than a
            # slot, a second memory): the unpooled twin loads it, or refuses it for good.
            return self._twin_engine().load(wasm, abi=abi, entrypoint=entrypoint)
        pages = 0
        if isinstance(artifact, wasmtime.Module):
            pages = _check_core(artifact, module_hash, entrypoint)
        else:
            _check_component(artifact, self.wasmtime_engine, module_hash, entrypoint)
        if compiled_now:
            self._write_disk(artifact, abi, module_hash)
        self._remember((module_hash, abi), artifact)
        return self._loaded(module_hash, abi, entrypoint, artifact, pages)

    def _loaded(
        self, module_hash: Hash, abi: Abi, entrypoint: str, artifact: Artifact, pages: int
    ) -> LoadedModule:
        pre = None
        if isinstance(artifact, wasmtime.Module):
            pre = self._core_linker.instantiate_pre(artifact)
        return LoadedModule(module_hash, abi, entrypoint, self, artifact, pages, pre)

    def unpooled_twin(self, module: LoadedModule) -> LoadedModule:
        """`module` on this engine's unpooled twin (made on first use, kept): where a pooled
        instantiation fails, the twin decides. Compiled code is the same on both engines, so
        the artifact moves across serialized, without compiling or checking again."""
        if not self.pooled:
            return module
        key = (module.module_hash, module.abi, module.entrypoint)
        twin = self._twins.get(key)
        if twin is None:
            twin = self._twin_engine().adopt(module)
            self._twins[key] = twin
        return twin

    def _twin_engine(self) -> WasmEngine:
        if self._unpooled is None:
            self._unpooled = WasmEngine(
                cache_dir=self.cache_dir, disk_cache=self.cache_dir is not None, pooled=False
            )
        return self._unpooled

    def adopt(self, module: LoadedModule) -> LoadedModule:
        """A module another engine of the same fingerprint loaded, on this engine."""
        if module.engine.fingerprint != self.fingerprint:
            raise WasmUsageError("a module moves only between engines of one fingerprint")
        artifact = self._deserialize_trusted(bytes(module.artifact.serialize()), module.abi)
        return self._loaded(
            module.module_hash, module.abi, module.entrypoint, artifact, module.memory_pages_min
        )

    # ----------------------------------------------------------------------------------------
    # The two caches

    def _artifact(self, wasm: bytes, abi: Abi, module_hash: Hash) -> tuple[Artifact, bool]:
        artifact = self._memory.get((module_hash, abi))
        if artifact is not None:
            self.stats.memory_hits += 1
            return artifact, False
        artifact = self._read_disk(abi, module_hash)
        if artifact is not None:
            self.stats.disk_hits += 1
            return artifact, False
        self.stats.compiled += 1
        return _compile(self.wasmtime_engine, wasm, abi, module_hash), True

    def _remember(self, key: tuple[Hash, Abi], artifact: Artifact) -> None:
        self._memory[key] = artifact
        self._memory.move_to_end(key)
        while len(self._memory) > COMPILED_MEMORY_ENTRIES_MAX:
            self._memory.popitem(last=False)

    def cache_path(self, abi: Abi | str, module_hash: Hash) -> Path | None:
        """Where the compiled form of a module lives on disk (None without a disk cache)."""
        if self.cache_dir is None:
            return None
        key = hash_value(
            {"wasm": str(module_hash), "abi": str(parse_abi(abi)), "engine": str(self.fingerprint)}
        )
        return self.cache_dir / f"{key.hex}{_CACHE_SUFFIX}"

    def _read_disk(self, abi: Abi, module_hash: Hash) -> Artifact | None:
        path = self.cache_path(abi, module_hash)
        if path is None:
            return None
        try:
            blob = path.read_bytes()
        except OSError:
            return None
        artifact = self._deserialize(blob, abi)
        if artifact is None:
            self.stats.disk_rejected += 1
            path.unlink(missing_ok=True)
            return None
        _touch(path)
        return artifact

    def _deserialize(self, blob: bytes, abi: Abi) -> Artifact | None:
        # wasmtime trusts what it deserializes (it is machine code), so a file is used only
        # when its checksum proves it is exactly what this engine wrote.
        header = len(_CACHE_MAGIC) + 32
        if not blob.startswith(_CACHE_MAGIC) or len(blob) <= header:
            return None
        payload = blob[header:]
        if digest_bytes(payload) != blob[len(_CACHE_MAGIC) : header]:
            return None
        try:
            return self._deserialize_trusted(payload, abi)
        except wasmtime.WasmtimeError:
            return None

    def _deserialize_trusted(self, payload: bytes, abi: Abi) -> Artifact:
        if abi is Abi.CORE:
            return wasmtime.Module.deserialize(self.wasmtime_engine, payload)
        return wc.Component.deserialize(self.wasmtime_engine, payload)

    def _write_disk(self, artifact: Artifact, abi: Abi, module_hash: Hash) -> None:
        # The cache is an optimization: failing to write it never fails a load. No fsync:
        # a file torn by a crash fails its checksum and is recompiled.
        path = self.cache_path(abi, module_hash)
        if path is None:
            return
        payload = bytes(artifact.serialize())
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, _CACHE_MAGIC + digest_bytes(payload) + payload)
            _prune(path.parent)
        except OSError:
            return


def _compile(engine: wasmtime.Engine, wasm: bytes, abi: Abi, module_hash: Hash) -> Artifact:
    try:
        if abi is Abi.CORE:
            return wasmtime.Module(engine, wasm)
        return wc.Component(engine, wasm)
    except wasmtime.WasmtimeError as exc:
        raise WasmInvalidModuleError(
            f"not a valid {abi} module: {short_reason(exc)}",
            module_hash=str(module_hash),
            abi=str(abi),
            found=str(abi),
            reason=short_reason(exc),
        ) from None


def _check_preamble(wasm: bytes, abi: Abi, module_hash: Hash) -> None:
    expected = _CORE_PREAMBLE if abi is Abi.CORE else _COMPONENT_PREAMBLE
    if wasm[:8] == expected:
        return
    found = {_CORE_PREAMBLE: "core", _COMPONENT_PREAMBLE: "component"}.get(wasm[:8], "unknown")
    if found == "unknown":
        message = "the bytes do not start with a WebAssembly preamble"
    else:
        message = f"the bytes are a {found} module, but the declared ABI is {abi}"
    raise WasmInvalidModuleError(message, module_hash=str(module_hash), abi=str(abi), found=found)


def _check_core(module: wasmtime.Module, module_hash: Hash, entrypoint: str) -> int:
    """Refuse imports and check the core ABI exports; return the memory's minimum pages."""
    imports = [f"{item.module}::{item.name}" for item in module.imports]
    _refuse_imports(imports, module_hash)
    exports = {item.name: item.type for item in module.exports}
    problems: list[str] = []
    memory = exports.get("memory")
    if not isinstance(memory, wasmtime.MemoryType) or memory.is_64 or memory.is_shared:
        problems.append("memory: a 32-bit, unshared linear memory")
    _expect_func(exports.get("alloc"), "alloc", ["i32"], ["i32"], problems)
    _expect_func(exports.get(entrypoint), entrypoint, ["i32", "i32"], ["i64"], problems)
    _refuse_problems(problems, module_hash, Abi.CORE)
    assert isinstance(memory, wasmtime.MemoryType)
    return int(memory.limits.min)


def _expect_func(
    item: object, name: str, params: list[str], results: list[str], problems: list[str]
) -> None:
    signature = f"({', '.join(params)}) -> {', '.join(results)}"
    if not isinstance(item, wasmtime.FuncType):
        problems.append(f"{name}: a function {signature}")
        return
    if [str(p) for p in item.params] != params or [str(r) for r in item.results] != results:
        problems.append(f"{name}: a function {signature}")


def _check_component(
    component: wc.Component, engine: wasmtime.Engine, module_hash: Hash, entrypoint: str
) -> None:
    component_type = component.type
    _refuse_imports(sorted(component_type.imports(engine)), module_hash)
    item = component_type.exports(engine).get(entrypoint)
    func = item.ty if item is not None else None
    if not (
        isinstance(func, wc.FuncType)
        and len(func.params) == 1
        and _is_bytes(func.params[0][1])
        and _is_bytes(func.result)
    ):
        problem = f"{entrypoint}: func(input: list<u8>) -> list<u8>"
        _refuse_problems([problem], module_hash, Abi.COMPONENT)


def _is_bytes(value_type: object) -> bool:
    return isinstance(value_type, wc.ListType) and isinstance(value_type.element, wc.U8)


def _refuse_imports(imports: list[str], module_hash: Hash) -> None:
    if imports:
        listed = imports[:NAMES_LISTED_MAX]
        raise WasmImportsForbiddenError(
            f"the module imports {len(imports)} item(s): {', '.join(listed)}",
            module_hash=str(module_hash),
            imports=listed,
            imports_count=len(imports),
        )


def _refuse_problems(problems: list[str], module_hash: Hash, abi: Abi) -> None:
    if problems:
        raise WasmAbiMismatchError(
            f"missing or mistyped {abi} ABI export(s): {'; '.join(problems)}",
            module_hash=str(module_hash),
            expected=problems,
        )


def _write_atomically(path: Path, blob: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(blob)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        return


def _prune(directory: Path) -> None:
    entries = sorted(directory.glob(f"*{_CACHE_SUFFIX}"), key=_mtime_or_zero)
    for stale in entries[: max(0, len(entries) - COMPILED_CACHE_FILES_MAX)]:
        stale.unlink(missing_ok=True)


def _mtime_or_zero(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
