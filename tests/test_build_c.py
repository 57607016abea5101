"""C sources built into core modules with `python -m ziglang cc`, cached by source hash."""

from __future__ import annotations

from pathlib import Path

import pytest
import wasmtime

from aos.kernel.wasm import build
from aos.kernel.wasm.build import (
    BuildFailedError,
    BuildUnsupportedSourceError,
    build_c,
    core_imports,
    default_cache_dir,
)

ECHO_C = """
static unsigned char heap[65536];
static unsigned int top;

__attribute__((export_name("alloc"))) unsigned char *alloc(int n) {
  unsigned char *p = heap + top;
  top += (unsigned)n;
  return p;
}

__attribute__((export_name("step"))) long long step(unsigned char *p, int n) {
  unsigned char *out = alloc(n);
  for (int i = 0; i < n; i++) out[i] = p[i];
  return ((long long)(unsigned)out << 32) | (unsigned)n;
}
"""


def run_core(wasm_path: Path, data: bytes) -> bytes:
    engine = wasmtime.Engine()
    store = wasmtime.Store(engine)
    module = wasmtime.Module.from_file(engine, str(wasm_path))
    exports = wasmtime.Instance(store, module, []).exports(store)
    memory, alloc, step = exports["memory"], exports["alloc"], exports["step"]
    assert isinstance(memory, wasmtime.Memory)
    assert isinstance(alloc, wasmtime.Func) and isinstance(step, wasmtime.Func)
    ptr = alloc(store, len(data))
    memory.write(store, data, ptr)
    packed = step(store, ptr, len(data)) & 0xFFFFFFFFFFFFFFFF
    return bytes(memory.read(store, packed >> 32, (packed >> 32) + (packed & 0xFFFFFFFF)))


def test_c_builds_a_core_module_without_imports_and_caches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "echo.c"
    source.write_text(ECHO_C)
    first = build_c(source, cache_dir=tmp_path / "cache")
    assert (first.abi, first.cached) == ("core", False)
    wasm = first.wasm_path.read_bytes()
    assert core_imports(wasm) == []
    assert run_core(first.wasm_path, b"\xd9\xd9\xf7\x01") == b"\xd9\xd9\xf7\x01"

    def no_tool(*args: object, **kwargs: object) -> None:
        raise AssertionError("the compiler ran on a cache hit")

    monkeypatch.setattr(build, "_run_tool", no_tool)
    second = build_c(source, cache_dir=tmp_path / "cache")
    assert second.cached and second.wasm_hash == first.wasm_hash


def test_a_header_change_misses_the_cache(tmp_path: Path) -> None:
    source = tmp_path / "echo.c"
    source.write_text('#include "limits.h"\n' + ECHO_C)
    (tmp_path / "limits.h").write_text("#define LIMIT 1\n")
    first = build_c(source, cache_dir=tmp_path / "cache")
    (tmp_path / "limits.h").write_text("#define LIMIT 2\n")
    second = build_c(source, cache_dir=tmp_path / "cache")
    assert not second.cached and second.source_hash != first.source_hash


def test_an_undefined_function_fails_the_build(tmp_path: Path) -> None:
    source = tmp_path / "needs.c"
    source.write_text(
        "int host_time(void);\n"
        '__attribute__((export_name("step"))) long long step(int p, int n) '
        "{ return host_time(); }\n"
        '__attribute__((export_name("alloc"))) int alloc(int n) { return 0; }\n'
    )
    with pytest.raises(BuildFailedError) as caught:
        build_c(source, cache_dir=tmp_path / "cache")
    assert "host_time" in caught.value.message


def test_core_imports_reads_every_import_kind() -> None:
    wasm = wasmtime.wat2wasm(
        """(module
          (import "env" "f" (func (param i32)))
          (import "env" "t" (table 1 funcref))
          (import "env" "m" (memory 1 2))
          (import "wasi_snapshot_preview1" "g" (global (mut i32))))"""
    )
    assert core_imports(bytes(wasm)) == [
        "env.f",
        "env.t",
        "env.m",
        "wasi_snapshot_preview1.g",
    ]
    assert core_imports(bytes(wasmtime.wat2wasm("(module)"))) == []
    with pytest.raises(BuildFailedError):
        core_imports(b"not wasm")


@pytest.mark.parametrize(
    ("name", "abi"), [("x.txt", None), ("x.c", "component"), ("x.py", "core"), ("x.rs", None)]
)
def test_build_dispatch_refuses_mismatches(tmp_path: Path, name: str, abi: str | None) -> None:
    (tmp_path / name).write_text("WitWorld = 1\n")
    with pytest.raises(BuildUnsupportedSourceError):
        build.build(tmp_path / name, abi=abi, cache_dir=tmp_path / "cache")  # type: ignore[arg-type]


def test_default_cache_dir_follows_aos_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AOS_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path / "builds"
    monkeypatch.delenv("AOS_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "aos" / "builds"
