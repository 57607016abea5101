"""The pooling instance allocator: a pooled engine steps exactly as an unpooled one (same
output bytes, same fuel, same faults at every limit's edge), a strict step on a reused slot
still sees nothing of earlier steps, a pool that runs out of slots hands the instance to the
unpooled twin engine, and the compile cache is shared by both kinds of engine."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from aos.kernel import cbor
from aos.kernel.audit import replay
from aos.kernel.wasm import (
    LoadedModule,
    StepFault,
    StepLimits,
    StepMemoryExhaustedError,
    StepOutput,
    StepRunner,
    StepTrapError,
    WasmEngine,
    encode_input,
    encode_output,
)
from aos.kernel.wasm import engine as engine_module
from aos.kernel.wasm.abi_core import CoreInstance
from aos.kernel.wasm.build import build_python
from aos.kernel.wasm.limits import TABLE_ELEMENTS_MAX, WASM_PAGE_BYTES
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World
from tests.test_world import COUNTER_C, EVENT, inc
from tests.wasm_guests import (
    COUNTER_PY,
    counter_c,
    counter_input,
    increment,
    reset,
    session_dir,
    wat,
)

MIB = 1024 * 1024
COUNTER_EVENTS = [increment("a", 3), increment("b", 7), reset("a"), increment("a", 12)]


def _engines() -> tuple[WasmEngine, WasmEngine]:
    cache = session_dir() / "compiled"
    pooled = WasmEngine(cache_dir=cache)
    assert pooled.pooled
    return pooled, WasmEngine(cache_dir=cache, pooled=False)


def _any_input() -> bytes:
    return encode_input(state=None, event_schema="demo/E@1", event_value=cbor.encode(None))


def _outcomes(
    module: LoadedModule,
    inputs: list[bytes],
    *,
    determinism: str = "strict",
    sample_rate: float = 0.0,
    limits: StepLimits | None = None,
) -> list[tuple[object, ...]]:
    """(output bytes, fuel, verified, warm) of each step, or the fault's code and detail."""
    runner = StepRunner(module, limits=limits, determinism=determinism, sample_rate=sample_rate)
    found: list[tuple[object, ...]] = []
    for seq, data in enumerate(inputs):
        try:
            result = runner.step(data, seq=seq)
            found.append((result.output_bytes, result.fuel_used, result.verified, result.warm))
        except StepFault as fault:
            found.append((fault.code, fault.detail))
    return found


def _counter_inputs() -> list[bytes]:
    state: bytes | None = None
    inputs = []
    for event in COUNTER_EVENTS:
        inputs.append(counter_input(state, event))
        state = cbor.encode({"count": 3, "resets": 0})
    return inputs


# ---------------------------------------------------------------------------------------------
# The same steps, pooled or not


@pytest.mark.parametrize("determinism", ["strict", "checked"])
def test_the_c_counter_steps_the_same_pooled_and_unpooled(determinism: str) -> None:
    pooled, unpooled = _engines()
    inputs = _counter_inputs() * 3
    seen, expected = (
        _outcomes(
            engine.load(counter_c(), abi="core"), inputs, determinism=determinism, sample_rate=0.5
        )
        for engine in (pooled, unpooled)
    )
    assert seen == expected
    assert all(isinstance(outcome[0], bytes) for outcome in seen)
    assert pooled.stats.pool_fallbacks == 0


@pytest.mark.parametrize("determinism", ["strict", "checked"])
def test_the_python_counter_steps_the_same_pooled_and_unpooled(determinism: str) -> None:
    pooled, unpooled = _engines()
    wasm = build_python(COUNTER_PY).wasm_path.read_bytes()
    inputs = _counter_inputs()
    seen, expected = (
        _outcomes(
            engine.load(wasm, abi="component"), inputs, determinism=determinism, sample_rate=1.0
        )
        for engine in (pooled, unpooled)
    )
    assert seen == expected
    assert len({outcome[0] for outcome in seen}) == len(inputs)
    assert pooled.stats.pool_fallbacks == 0


@pytest.mark.parametrize("guest", ["trap", "loop", "memory_bomb", "oversized_output"])
def test_faults_are_the_same_pooled_and_unpooled(guest: str) -> None:
    pooled, unpooled = _engines()
    limits = StepLimits(fuel_per_step_max=200_000, memory_bytes_max=4 * MIB)
    inputs = [_any_input()] * 2
    seen, expected = (
        _outcomes(engine.load(wat(guest), abi="core"), inputs, limits=limits)
        for engine in (pooled, unpooled)
    )
    assert seen == expected
    assert all(isinstance(outcome[0], str) for outcome in seen)


def test_memory_edges_are_the_same_pooled_and_unpooled() -> None:
    data = encode_output(StepOutput(state=cbor.encode(b"x" * 200_000)))
    pages = -(-(1024 + len(data)) // WASM_PAGE_BYTES)
    for engine in _engines():
        module = engine.load(wat("echo"), abi="core")
        exact = StepLimits(memory_bytes_max=pages * WASM_PAGE_BYTES)
        assert StepRunner(module, limits=exact).step(data, seq=1).output_bytes == data
        under = StepLimits(memory_bytes_max=pages * WASM_PAGE_BYTES - 1)
        with pytest.raises(StepMemoryExhaustedError):
            StepRunner(module, limits=under).step(data, seq=1)


def _with_table(elements: int) -> bytes:
    memory = '(memory (export "memory") 1)'
    return wat("echo", **{memory: f"{memory} (table {elements} funcref)"})


def test_table_elements_edge_is_the_same_pooled_and_unpooled() -> None:
    data = encode_output(StepOutput(None))
    for engine in _engines():
        fits = engine.load(_with_table(TABLE_ELEMENTS_MAX), abi="core")
        assert StepRunner(fits).step(data, seq=1).output_bytes == data
        too_big = engine.load(_with_table(TABLE_ELEMENTS_MAX + 1), abi="core")
        with pytest.raises(StepTrapError) as caught:
            StepRunner(too_big).step(data, seq=1)
        assert caught.value.detail["phase"] == "instantiation"


# ---------------------------------------------------------------------------------------------
# Fresh on a reused slot


def test_a_strict_step_on_a_reused_slot_sees_nothing_of_earlier_steps() -> None:
    """The pool gives a module the slot it used last (its memory mapping kept, reset); the
    leftovers probe writes into its data segment, outside it and grows its memory every step,
    and still reads [1, 1, 1] each time."""
    pooled, _ = _engines()
    runner = StepRunner(pooled.load(wat("leftovers"), abi="core"), determinism="strict")
    states = [runner.step(_any_input(), seq=seq).output.state for seq in range(20)]
    assert states == [cbor.encode([1, 1, 1])] * 20
    assert pooled.stats.pool_fallbacks == 0


# ---------------------------------------------------------------------------------------------
# Slots used up


def _hold_every_memory_slot(module: LoadedModule) -> list[CoreInstance]:
    held = []
    with pytest.raises(StepTrapError):  # a typed fault, never a crash
        while True:
            held.append(CoreInstance(module, fuel_max=10_000, memory_bytes_max=4 * MIB))
    assert len(held) == engine_module.POOL_MEMORIES_MAX
    return held


def test_a_pool_without_free_slots_hands_the_step_to_the_unpooled_twin() -> None:
    pooled, unpooled = _engines()
    module = pooled.load(counter_c(), abi="core")
    inputs = _counter_inputs()
    expected = _outcomes(unpooled.load(counter_c(), abi="core"), inputs)
    held = _hold_every_memory_slot(module)
    assert _outcomes(module, inputs) == expected
    assert pooled.stats.pool_fallbacks == len(inputs)
    for instance in held:
        instance.close()
    assert _outcomes(module, inputs) == expected
    assert pooled.stats.pool_fallbacks == len(inputs)  # the pool serves again


def test_faulted_instances_give_their_slots_back_at_once() -> None:
    """A fault's traceback holds the instance that faulted; the runner closes every instance it
    is done with, so faults kept by a caller do not keep pool slots."""
    pooled, _ = _engines()
    module = pooled.load(wat("memory_bomb"), abi="core")
    runner = StepRunner(module, limits=StepLimits(memory_bytes_max=MIB))
    kept = []
    for seq in range(engine_module.POOL_MEMORIES_MAX * 2):
        with pytest.raises(StepMemoryExhaustedError) as caught:
            runner.step(_any_input(), seq=seq)
        kept.append(caught.value)
    assert pooled.stats.pool_fallbacks == 0


# ---------------------------------------------------------------------------------------------
# Engines and the compile cache


def test_the_allocator_is_not_part_of_the_fingerprint_and_caches_are_shared(
    tmp_path: Path,
) -> None:
    """Pooling changes no compiled code, so a file one kind of engine wrote, the other reads."""
    wasm = wat("echo")
    pooled = WasmEngine(cache_dir=tmp_path)
    pooled.load(wasm, abi="core")
    unpooled = WasmEngine(cache_dir=tmp_path, pooled=False)
    assert unpooled.fingerprint == pooled.fingerprint
    unpooled.load(wasm, abi="core")
    assert (unpooled.stats.disk_hits, unpooled.stats.disk_rejected) == (1, 0)
    again = WasmEngine(cache_dir=tmp_path)
    again.load(wasm, abi="core")
    assert (again.stats.disk_hits, again.stats.disk_rejected) == (1, 0)


def test_pooled_engines_beyond_the_budget_are_unpooled(monkeypatch: pytest.MonkeyPatch) -> None:
    gc.collect()
    monkeypatch.setattr(
        engine_module, "POOLED_ENGINES_MAX", engine_module.pooled_engines_alive() + 1
    )
    first = WasmEngine(disk_cache=False)
    second = WasmEngine(disk_cache=False)
    assert (first.pooled, second.pooled) == (True, False)
    module = second.load(counter_c(), abi="core")
    assert StepRunner(module).step(_counter_inputs()[0], seq=0).fuel_used > 0
    del first
    gc.collect()
    assert WasmEngine(disk_cache=False).pooled


def test_the_unpooled_twin_is_made_once() -> None:
    pooled, unpooled = _engines()
    module = pooled.load(counter_c(), abi="core")
    twin = pooled.unpooled_twin(module)
    assert twin.engine is not pooled and not twin.engine.pooled
    assert twin.module_hash == module.module_hash
    assert pooled.unpooled_twin(module) is twin
    assert pooled.stats.compiled + unpooled.stats.compiled <= 1
    alone = unpooled.load(counter_c(), abi="core")
    assert unpooled.unpooled_twin(alone) is alone


# ---------------------------------------------------------------------------------------------
# Replay


def test_a_world_stepped_pooled_replays_unpooled_and_back(tmp_path: Path) -> None:
    path = tmp_path / "w"
    world = World.create(
        path, COUNTER_C, sync=False, stamps=PinnedStampSource(), engine=WasmEngine()
    )
    with world:
        for n in range(20):
            world.send(EVENT, inc(f"k{n % 3}", n + 1))
    assert replay.verify_replay(path, engine=WasmEngine(pooled=False)).ok
    assert replay.verify_replay(path, engine=WasmEngine()).ok
