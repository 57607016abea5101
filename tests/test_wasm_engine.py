"""The WASM engine: deterministic configuration, what is refused at load, the compile cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from aos.kernel import cbor
from aos.kernel.hashing import hash_bytes
from aos.kernel.wasm import (
    Abi,
    StepRunner,
    WasmAbiMismatchError,
    WasmEngine,
    WasmImportsForbiddenError,
    WasmInvalidModuleError,
    WasmUsageError,
    default_cache_dir,
    encode_input,
)
from tests.wasm_guests import counter_c, shared_engine, wat

CANONICAL_NAN_BITS = 0x7FF8_0000_0000_0000


@pytest.fixture
def engine() -> WasmEngine:
    return shared_engine()


def _any_input() -> bytes:
    return encode_input(state=None, event_schema="demo/E@1", event_value=cbor.encode(None))


# ---------------------------------------------------------------------------------------------
# Configuration


def test_nan_results_are_canonical(engine: WasmEngine) -> None:
    # f64.add of a NaN carrying payload 4: x86 would propagate the payload.
    module = engine.load(wat("nan"), abi="core")
    result = StepRunner(module).step(_any_input(), seq=1)
    assert result.output.state is not None
    assert cbor.decode(result.output.state) == CANONICAL_NAN_BITS


def test_fingerprint_names_the_configuration(tmp_path: Path) -> None:
    one, two = WasmEngine(cache_dir=tmp_path), WasmEngine(cache_dir=tmp_path)
    assert one.fingerprint == two.fingerprint
    assert one.fingerprint.startswith("blake3:")


# ---------------------------------------------------------------------------------------------
# Refused at load


def test_core_module_with_imports_is_refused(engine: WasmEngine) -> None:
    with pytest.raises(WasmImportsForbiddenError) as caught:
        engine.load(wat("imports_wasi"), abi="core")
    error = caught.value
    assert error.code == "wasm.imports_forbidden"
    assert error.detail["imports"] == [
        "wasi_snapshot_preview1::fd_write",
        "wasi_snapshot_preview1::random_get",
    ]
    assert error.detail["module_hash"] == str(hash_bytes(wat("imports_wasi")))


def test_component_with_imports_is_refused(engine: WasmEngine) -> None:
    with pytest.raises(WasmImportsForbiddenError) as caught:
        engine.load(wat("component_imports"), abi="component")
    assert caught.value.detail["imports"] == ["wasi:cli/environment@0.2.0"]


@pytest.mark.parametrize(
    ("wasm", "abi", "found"),
    [
        (b"", "core", "unknown"),
        (b"not wasm at all", "core", "unknown"),
        (b"\x00asm\x01\x00\x00\x00\x01\xff", "core", "core"),
        (b"\x00asm\x0d\x00\x01\x00", "core", "component"),
        (b"\x00asm\x01\x00\x00\x00", "component", "core"),
    ],
)
def test_invalid_bytes_are_refused(engine: WasmEngine, wasm: bytes, abi: str, found: str) -> None:
    with pytest.raises(WasmInvalidModuleError) as caught:
        engine.load(wasm, abi=abi)
    assert caught.value.code == "wasm.invalid_module"
    assert caught.value.detail["found"] == found


def test_invalid_abi_name_is_refused(engine: WasmEngine) -> None:
    with pytest.raises(WasmUsageError):
        engine.load(wat("echo"), abi="python")


def test_missing_entrypoint_is_an_abi_mismatch(engine: WasmEngine) -> None:
    with pytest.raises(WasmAbiMismatchError) as caught:
        engine.load(wat("missing_step"), abi="core")
    assert caught.value.code == "wasm.abi_mismatch"
    assert caught.value.detail["expected"] == ["step: a function (i32, i32) -> i64"]


def test_entrypoint_name_comes_from_the_workflow(engine: WasmEngine) -> None:
    module = engine.load(wat("missing_step"), abi="core", entrypoint="run")
    assert module.entrypoint == "run"


def test_mistyped_core_exports_are_an_abi_mismatch(engine: WasmEngine) -> None:
    wasm = wat(
        "echo", **{"(param $len i32) (result i32)": "(param $len i32) (result i32) (local i64)"}
    )
    assert engine.load(wasm, abi="core")  # a local changes nothing
    no_memory = wat("trap", **{'(memory (export "memory") 1)': "(memory 1)"})
    with pytest.raises(WasmAbiMismatchError) as caught:
        engine.load(no_memory, abi="core")
    assert caught.value.detail["expected"] == ["memory: a 32-bit, unshared linear memory"]
    wrong_step = wat("trap", **{"(result i64)": "(result i32)", "unreachable": "i32.const 0"})
    with pytest.raises(WasmAbiMismatchError):
        engine.load(wrong_step, abi="core")


def test_component_with_wrong_signature_is_an_abi_mismatch(engine: WasmEngine) -> None:
    with pytest.raises(WasmAbiMismatchError) as caught:
        engine.load(wat("component_wrong_signature"), abi="component")
    assert caught.value.detail["expected"] == ["step: func(input: list<u8>) -> list<u8>"]


# ---------------------------------------------------------------------------------------------
# Compile cache


def test_second_load_in_a_process_reuses_the_compiled_module(tmp_path: Path) -> None:
    engine = WasmEngine(cache_dir=tmp_path)
    first = engine.load(counter_c(), abi="core")
    second = engine.load(counter_c(), abi="core")
    assert (engine.stats.compiled, engine.stats.memory_hits) == (1, 1)
    assert first.artifact is second.artifact


def test_a_new_engine_loads_from_disk_without_compiling(tmp_path: Path) -> None:
    WasmEngine(cache_dir=tmp_path).load(counter_c(), abi="core")
    engine = WasmEngine(cache_dir=tmp_path)
    module = engine.load(counter_c(), abi="core")
    assert (engine.stats.compiled, engine.stats.disk_hits) == (0, 1)
    assert StepRunner(module).step(_counter_reset_input(), seq=0).output.state is not None


def test_cache_files_are_written_whole(tmp_path: Path) -> None:
    engine = WasmEngine(cache_dir=tmp_path)
    engine.load(counter_c(), abi="core")
    engine.load(wat("echo"), abi="core")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 2
    assert all(name.endswith(".cwasm") and not name.startswith(".") for name in names)


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "foreign"])
def test_a_damaged_cache_file_is_recompiled(tmp_path: Path, damage: str) -> None:
    WasmEngine(cache_dir=tmp_path).load(counter_c(), abi="core")
    engine = WasmEngine(cache_dir=tmp_path)
    path = engine.cache_path("core", hash_bytes(counter_c()))
    assert path is not None
    _damage(path, damage)
    module = engine.load(counter_c(), abi="core")
    assert (engine.stats.disk_rejected, engine.stats.compiled) == (1, 1)
    assert StepRunner(module).step(_counter_reset_input(), seq=0).output.state is not None
    again = WasmEngine(cache_dir=tmp_path)
    again.load(counter_c(), abi="core")
    assert (again.stats.disk_hits, again.stats.compiled) == (1, 0)


def _damage(path: Path, how: str) -> None:
    blob = bytearray(path.read_bytes())
    if how == "flip":
        blob[len(blob) // 2] ^= 0xFF
    elif how == "truncate":
        del blob[len(blob) // 2 :]
    elif how == "empty":
        blob.clear()
    else:  # the checksum holds, but wasmtime must refuse what it covers
        blob[:] = b"aos-cwasm-1\n" + hash_bytes(b"junk").digest + b"junk"
    path.write_bytes(bytes(blob))


def test_imports_are_refused_on_a_cache_hit_too(tmp_path: Path) -> None:
    for _ in range(2):
        with pytest.raises(WasmImportsForbiddenError):
            WasmEngine(cache_dir=tmp_path).load(wat("imports_wasi"), abi="core")


def test_without_a_disk_cache_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AOS_CACHE_DIR", str(tmp_path))
    engine = WasmEngine(disk_cache=False)
    engine.load(wat("echo"), abi="core")
    assert engine.cache_dir is None
    assert list(tmp_path.iterdir()) == []


def test_default_cache_dir_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AOS_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path / "compiled"
    monkeypatch.delenv("AOS_CACHE_DIR")
    assert default_cache_dir() == Path.home() / ".cache" / "aos" / "compiled"


def test_same_bytes_under_two_abis_never_share_a_cache_file(engine: WasmEngine) -> None:
    module_hash = hash_bytes(wat("echo"))
    assert engine.cache_path(Abi.CORE, module_hash) != engine.cache_path(Abi.COMPONENT, module_hash)


def _counter_reset_input() -> bytes:
    value = cbor.encode({"$tag": "Reset", "$value": {"id": "c"}})
    return encode_input(state=None, event_schema="demo/CounterEvent@1", event_value=value)
