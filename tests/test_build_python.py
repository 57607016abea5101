"""Python workflows built into components: no imports, the same bytes as the native run (and
as the C counter), clear failures for guests that reach for capabilities they do not have,
and hidden state caught by `checked` determinism.

Builds and compiled components are cached in pytest's cache directory, so only a cold run
pays for componentize-py (seconds per module) and for compiling the components.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
import wasmtime
from click.testing import CliRunner
from wasmtime import component as wc

from aos.cli.main import main as aos_main
from aos.kernel.hashing import hash_bytes, hash_value
from aos.kernel.wasm import (
    StepGuestExceptionError,
    StepNondeterministicError,
    StepRunner,
    WasmEngine,
)
from aos.kernel.wasm.build import (
    BuildCapabilityError,
    BuildFailedError,
    BuildResult,
    BuildUnsupportedSourceError,
    build_c,
    build_python,
    trap_capability,
)
from aos.kernel.wasm.envelope import decode_output
from aos.kernel.wasm.limits import StepLimits
from aos_sdk import cbor
from aos_sdk.testing import Event, compare_sequence, explain, input_bytes, step_bytes

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "modules" / "examples"
COUNTER_EVENT = "demo/CounterEvent@1"


def load_example(relative: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


counter_py = load_example("counter_py/counter.py", "aos_build_example_counter")
order_py = load_example("order_py/order.py", "aos_build_example_order")
bad_py = load_example("bad_py/capabilities/bad_capabilities.py", "aos_build_bad_capabilities")


# --------------------------------------------------------------------------------------------
# Session fixtures: build once, compile once


@pytest.fixture(scope="session")
def build_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    return cache.mkdir("aos_builds") if cache is not None else tmp_path_factory.mktemp("builds")


@pytest.fixture(scope="session")
def engine() -> wasmtime.Engine:
    config = wasmtime.Config()
    config.cranelift_nan_canonicalization = True
    return wasmtime.Engine(config)


@pytest.fixture(scope="session")
def load_component(
    engine: wasmtime.Engine, request: pytest.FixtureRequest, build_cache: Path
) -> Callable[[BuildResult], wc.Component]:
    """Compile a built component, keeping the compiled form next to the build cache (keyed by
    the wasm hash and the wasmtime version; a file that fails to deserialize is recompiled)."""
    compiled_dir = build_cache.parent / "aos_compiled"
    compiled_dir.mkdir(exist_ok=True)

    def load(result: BuildResult) -> wc.Component:
        key = hash_value({"wasm": str(result.wasm_hash), "wasmtime": metadata.version("wasmtime")})
        path = compiled_dir / f"{key.hex}.cwasm"
        if path.exists():
            try:
                return wc.Component.deserialize(engine, path.read_bytes())
            except wasmtime.WasmtimeError:
                path.unlink()
        component = wc.Component.from_file(engine, str(result.wasm_path))
        path.write_bytes(bytes(component.serialize()))
        return component

    return load


@pytest.fixture(scope="session")
def counter_build(build_cache: Path) -> BuildResult:
    return build_python(EXAMPLES / "counter_py", cache_dir=build_cache)


@pytest.fixture(scope="session")
def order_build(build_cache: Path) -> BuildResult:
    return build_python(EXAMPLES / "order_py", cache_dir=build_cache)


@pytest.fixture(scope="session")
def bad_build(build_cache: Path) -> BuildResult:
    return build_python(
        EXAMPLES / "bad_py" / "capabilities", cache_dir=build_cache, check_capabilities=False
    )


@pytest.fixture(scope="session")
def hidden_build(build_cache: Path) -> BuildResult:
    return build_python(EXAMPLES / "bad_py" / "hidden_state", cache_dir=build_cache)


class ComponentStep:
    """`step(input) -> output` on a component: a fresh instance per call, or one warm one."""

    def __init__(self, engine: wasmtime.Engine, component: wc.Component, *, warm: bool = False):
        self.engine = engine
        self.component = component
        self.linker = wc.Linker(engine)
        self.warm = warm
        self._store: wasmtime.Store | None = None
        self._func: wc.Func | None = None

    def _instance(self) -> tuple[wasmtime.Store, wc.Func]:
        if self._store is None or self._func is None or not self.warm:
            self._store = wasmtime.Store(self.engine)
            instance = self.linker.instantiate(self._store, self.component)
            func = instance.get_func(self._store, "step")
            assert func is not None
            self._func = func
        return self._store, self._func

    def __call__(self, data: bytes) -> bytes:
        store, func = self._instance()
        output = func(store, data)
        func.post_return(store)
        return bytes(output)


def counter_events() -> list[Event]:
    script = [("a", 7), ("b", 3), ("a", 5), ("a", 0), ("b", 120), ("a", 2**40)]
    events = [Event(COUNTER_EVENT, counter_py.Increment(k, by), key=k) for k, by in script]
    events.insert(4, Event(COUNTER_EVENT, counter_py.Reset("a"), key="a"))
    events.append(Event(COUNTER_EVENT, counter_py.Increment("a", 9), key="a"))
    return events


# --------------------------------------------------------------------------------------------
# The counter component


def test_component_has_no_imports_and_exports_step(
    engine: wasmtime.Engine,
    load_component: Callable[[BuildResult], wc.Component],
    counter_build: BuildResult,
) -> None:
    component = load_component(counter_build)
    assert component.type.imports(engine) == {}
    assert "step" in component.type.exports(engine)
    assert counter_build.wasm_hash == hash_bytes(counter_build.wasm_path.read_bytes())


@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "warm"])
def test_counter_component_matches_native_bytes(
    engine: wasmtime.Engine,
    load_component: Callable[[BuildResult], wc.Component],
    counter_build: BuildResult,
    warm: bool,
) -> None:
    wasm_step = ComponentStep(engine, load_component(counter_build), warm=warm)
    outputs = compare_sequence(counter_py.counter, wasm_step, counter_events())
    assert len(outputs) == len(counter_events())


def test_counter_component_matches_the_c_counter(
    engine: wasmtime.Engine,
    load_component: Callable[[BuildResult], wc.Component],
    counter_build: BuildResult,
    build_cache: Path,
) -> None:
    c_build = build_c(EXAMPLES / "counter_c" / "counter.c", cache_dir=build_cache)
    c_module = wasmtime.Module.from_file(engine, str(c_build.wasm_path))
    assert c_module.imports == []

    def c_step(data: bytes) -> bytes:
        store = wasmtime.Store(engine)
        exports = wasmtime.Instance(store, c_module, []).exports(store)
        memory, alloc, step = exports["memory"], exports["alloc"], exports["step"]
        assert isinstance(memory, wasmtime.Memory)
        assert isinstance(alloc, wasmtime.Func) and isinstance(step, wasmtime.Func)
        ptr = alloc(store, len(data))
        memory.write(store, data, ptr)
        packed = step(store, ptr, len(data)) & 0xFFFFFFFFFFFFFFFF
        out_ptr, out_len = packed >> 32, packed & 0xFFFFFFFF
        return bytes(memory.read(store, out_ptr, out_ptr + out_len))

    wasm_step = ComponentStep(engine, load_component(counter_build))
    python_outputs = compare_sequence(counter_py.counter, wasm_step, counter_events())
    c_outputs = compare_sequence(counter_py.counter, c_step, counter_events())
    assert python_outputs == c_outputs


def test_order_component_matches_native_bytes(
    engine: wasmtime.Engine,
    load_component: Callable[[BuildResult], wc.Component],
    order_build: BuildResult,
) -> None:
    receipt = order_py.EffectReceipt(
        origin_workflow="demo/Order@1",
        intent_hash="blake3:" + "2" * 64,
        effect=order_py.HTTP_EFFECT,
        adapter="demo/http@1",
        status={"$tag": "ok"},
        payload=cbor.encode({"status": 200}),
        emitted_seq=3,
        issuer_ref="charge:o-1",
    )
    events = [
        Event("demo/OrderPlaced@1", order_py.OrderPlaced("o-1", 1250), key="o-1"),
        Event("demo/OrderPlaced@1", order_py.OrderPlaced("o-2", 0), key="o-2"),
        Event("sys/EffectReceiptEnvelope@1", receipt, key="o-1"),
        Event("sys/EffectReceiptEnvelope@1", receipt, key="o-1"),
    ]
    wasm_step = ComponentStep(engine, load_component(order_build), warm=True)
    outputs = compare_sequence(order_py.order, wasm_step, events)
    assert len(outputs) == len(events)


# --------------------------------------------------------------------------------------------
# Guests that should not work


def test_capabilities_are_refused_at_build_time(build_cache: Path) -> None:
    with pytest.raises(BuildCapabilityError) as caught:
        build_python(EXAMPLES / "bad_py" / "capabilities", cache_dir=build_cache)
    error = caught.value
    assert error.code == "build.capability_denied"
    assert error.detail["capabilities"] == ["clock", "filesystem", "network"]
    assert "bad_capabilities.py:30: open() needs the filesystem capability" in error.message


@pytest.mark.parametrize(
    ("schema", "capability"),
    [
        ("demo/ReadClock@1", "clock"),
        ("demo/OpenFile@1", "filesystem"),
        ("demo/Connect@1", "network"),
    ],
)
def test_capabilities_trap_and_the_trap_names_them(
    engine: wasmtime.Engine,
    load_component: Callable[[BuildResult], wc.Component],
    bad_build: BuildResult,
    schema: str,
    capability: str,
) -> None:
    wasm_step = ComponentStep(engine, load_component(bad_build))
    data = input_bytes(None, Event(schema, {"n": 1}))
    with pytest.raises(wasmtime.WasmtimeError) as caught:
        wasm_step(data)
    assert trap_capability(str(caught.value)) == capability
    fine = input_bytes(None, Event("demo/Fine@1", {}))
    assert wasm_step(fine) == step_bytes(bad_py.bad_capabilities, fine)


def test_a_guest_exception_is_a_fault_output_not_a_trap(
    engine: wasmtime.Engine,
    load_component: Callable[[BuildResult], wc.Component],
    bad_build: BuildResult,
) -> None:
    # The SDK returns the exception in the envelope (spec/09): the component does not trap,
    # and the host reads it as step.guest_exception with the type and message.
    wasm_step = ComponentStep(engine, load_component(bad_build))
    data = input_bytes(None, Event("demo/Raise@1", {"n": 1}))
    with pytest.raises(StepGuestExceptionError) as caught:
        decode_output(wasm_step(data), StepLimits())
    assert caught.value.guest["type"] == "ValueError"
    assert "cannot handle {'n': 1}" in caught.value.guest["message"]


def test_a_guest_exception_is_explained_natively() -> None:
    text = explain(bad_py.bad_capabilities, input_bytes(None, Event("demo/Raise@1", {"n": 1})))
    assert text is not None and "ValueError: cannot handle {'n': 1}" in text


def test_trap_capability_of_other_traps() -> None:
    assert trap_capability("wasm trap: wasm `unreachable` instruction executed") is None
    assert trap_capability("  2: 0x1 - libc.so!random_get_random_bytes") == "randomness"


def test_hidden_state_diverges_on_a_warm_instance(
    engine: wasmtime.Engine,
    load_component: Callable[[BuildResult], wc.Component],
    hidden_build: BuildResult,
) -> None:
    component = load_component(hidden_build)
    data = input_bytes(None, Event("demo/Tick@1", {}))
    warm, fresh = ComponentStep(engine, component, warm=True), ComponentStep(engine, component)
    assert warm(data) == fresh(data)
    assert warm(data) != fresh(data)  # the second call on the warm instance sees the first


def test_checked_determinism_catches_hidden_state(
    hidden_build: BuildResult, build_cache: Path
) -> None:
    engine = WasmEngine(cache_dir=build_cache.parent / "aos_engine_compiled")
    runner = StepRunner(
        engine.load_file(hidden_build.wasm_path, abi="component"),
        determinism="checked",
        sample_rate=1.0,
    )
    data = input_bytes(None, Event("demo/Tick@1", {}))
    runner.step(data, seq=1)
    with pytest.raises(StepNondeterministicError):
        runner.step(data, seq=2)


# --------------------------------------------------------------------------------------------
# Build errors and the cache


@pytest.fixture
def scratch_module(tmp_path: Path) -> Iterator[Path]:
    src = tmp_path / "scratch"
    src.mkdir()
    (src / "scratch.py").write_text((EXAMPLES / "counter_py" / "counter.py").read_text())
    yield src


def test_a_cache_hit_runs_no_tool(
    counter_build: BuildResult, build_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aos.kernel.wasm import build

    def no_tool(*args: object, **kwargs: object) -> None:
        raise AssertionError("the build tool ran on a cache hit")

    monkeypatch.setattr(build, "_run_tool", no_tool)
    again = build_python(EXAMPLES / "counter_py", cache_dir=build_cache)
    assert again.cached
    assert (again.wasm_path, again.wasm_hash) == (counter_build.wasm_path, counter_build.wasm_hash)


def _fake_componentize(monkeypatch: pytest.MonkeyPatch, fake: Callable[..., bool]) -> None:
    """`fake` instead of componentize-py; the SDK's codec is still compiled by the real Zig
    (its steps are not what these tests look at)."""
    from aos.kernel.wasm import build

    real = build._run_tool

    def tool(command: list[str], **kwargs: object) -> bool:
        if str(kwargs.get("tool", "")).startswith("zig"):
            return real(command, **kwargs)  # type: ignore[arg-type]
        return fake(command, **kwargs)

    monkeypatch.setattr(build, "_run_tool", tool)


def test_the_cache_key_follows_the_sources(
    scratch_module: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    runs: list[list[str]] = []

    def fake_tool(command: list[str], **kwargs: object) -> bool:
        runs.append(command)
        out = Path(command[command.index("-o") + 1])
        out.write_bytes(b"\0asm\x01\0\0\0" + str(len(runs)).encode())
        return False  # not run under the supervisor: not reproducible

    _fake_componentize(monkeypatch, fake_tool)
    cache = tmp_path / "cache"
    first = build_python(scratch_module, cache_dir=cache)
    assert not first.cached and len(runs) == 1 and not first.reproducible
    assert runs[0][runs[0].index("componentize") + 1] == "scratch"
    assert "--stub-wasi" in runs[0]
    assert build_python(scratch_module, cache_dir=cache).cached and len(runs) == 1
    (scratch_module / "helper.py").write_text("X = 1\n")
    second = build_python(scratch_module / "scratch.py", cache_dir=cache)
    assert not second.cached and second.source_hash != first.source_hash
    second.wasm_path.write_bytes(b"torn")
    third = build_python(scratch_module / "scratch.py", cache_dir=cache)
    assert not third.cached and len(runs) == 3
    assert sorted(p.suffix for p in cache.iterdir()) == [".json", ".json", ".wasm", ".wasm"]


def test_the_tool_sees_staged_copies_of_the_hashed_sources_only(
    scratch_module: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # componentize-py mounts every folder it is given into the interpreter it snapshots: a
    # source folder's bytecode, editor files and backups must never reach it.
    from aos.kernel.wasm import build

    seen: list[dict[str, object]] = []

    def looking_tool(command: list[str], **kwargs: object) -> bool:
        folders = [Path(command[i + 1]) for i, arg in enumerate(command) if arg == "-p"]
        listing = [sorted(p.relative_to(f).as_posix() for p in f.rglob("*")) for f in folders]
        env = Path(str(kwargs["virtual_env"]))
        seen.append({"listing": listing, "cwd": kwargs["cwd"], "env": list(env.rglob("*"))})
        Path(command[command.index("-o") + 1]).write_bytes(b"\0asm\x01\0\0\0")
        return False

    _fake_componentize(monkeypatch, looking_tool)
    (scratch_module / "lib").mkdir()
    (scratch_module / "lib" / "__init__.py").write_text("X = 1\n")
    clean_key = build.python_source_hash(scratch_module)
    (scratch_module / "__pycache__").mkdir()
    (scratch_module / "__pycache__" / "scratch.cpython-314.pyc").write_bytes(b"bytecode")
    (scratch_module / ".scratch.py.swp").write_bytes(b"swap")
    (scratch_module / ".#scratch.py").write_text("an editor's lock")
    (scratch_module / "scratch.py~").write_text("backup")
    (scratch_module / "README.md").write_text("notes")
    (scratch_module / "lib" / "__pycache__").mkdir()
    before = sorted(p.name for p in scratch_module.rglob("*"))
    built = build_python(scratch_module, cache_dir=tmp_path / "cache")
    assert built.source_hash == clean_key == build.python_source_hash(scratch_module)
    [run] = seen
    module, sdk = run["listing"]  # type: ignore[misc]
    assert module == ["lib", "lib/__init__.py", "scratch.py"]
    extension = f"aos_sdk/_cbor_c{build.SDK_EXTENSION_SUFFIX}"  # compiled into the stage
    assert sdk[0] == "aos_sdk" and extension in sdk
    assert all(name.endswith(".py") for name in sdk[1:] if name != extension)
    assert run["cwd"] != scratch_module and run["env"][-1].name == "site-packages"  # type: ignore[index]
    assert sorted(p.name for p in scratch_module.rglob("*")) == before


def test_the_cache_keeps_a_bounded_number_of_entries(
    scratch_module: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aos.kernel.wasm import build

    def fake_tool(command: list[str], **kwargs: object) -> bool:
        Path(command[command.index("-o") + 1]).write_bytes(b"\0asm\x01\0\0\0")
        return False

    _fake_componentize(monkeypatch, fake_tool)
    monkeypatch.setattr(build, "CACHE_ENTRIES_MAX", 2)
    cache = tmp_path / "cache"
    results = []
    for version in range(3):
        (scratch_module / "helper.py").write_text(f"VERSION = {version}\n")
        results.append(build_python(scratch_module / "scratch.py", cache_dir=cache))
        os.utime(results[-1].wasm_path, (1_000 + version, 1_000 + version))
    assert sorted(cache.glob("*.wasm")) == sorted(r.wasm_path for r in results[1:])
    assert len(list(cache.glob("*.json"))) == 2


def test_tool_failures_are_typed_with_the_stderr_tail(tmp_path: Path) -> None:
    from aos.kernel.wasm import build

    noisy = "import sys; sys.stderr.write('x' * 9000 + 'RuntimeError: boom'); sys.exit(3)"
    with pytest.raises(BuildFailedError) as caught:
        build._run_tool([sys.executable, "-c", noisy], timeout_s=30, cwd=tmp_path, tool="noisy")
    assert caught.value.code == "build.failed"
    assert caught.value.message.endswith("RuntimeError: boom")
    assert len(caught.value.message) < build.STDERR_TAIL_CHARS + 100
    assert caught.value.detail["returncode"] == 3


def test_the_tool_gets_absolute_python_path_entries_and_no_virtualenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tool runs in its staging folder; a pip build environment is made of PYTHONPATH
    # (setup.py adds the packages just laid out), so its entries must not move.
    from aos.kernel.wasm import build

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["lib", "", str(tmp_path / "abs")]))
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / "venv"))
    seen = tmp_path / "seen.txt"
    code = (
        "import os, sys; "
        "open(sys.argv[1], 'w').write(os.environ['PYTHONPATH'] + '|' + "
        "os.environ.get('VIRTUAL_ENV', '-'))"
    )
    (tmp_path / "elsewhere").mkdir()
    build._run_tool(
        [sys.executable, "-c", code, str(seen)],
        timeout_s=60,
        cwd=tmp_path / "elsewhere",
        tool="probe",
    )
    assert seen.read_text() == f"{tmp_path / 'lib'}{os.pathsep}{tmp_path / 'abs'}|-"


def test_a_failed_build_leaves_nothing_in_the_cache(
    scratch_module: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aos.kernel.wasm import build

    def failing_tool(command: list[str], *, cwd: Path, **kwargs: object) -> None:
        # The first tool is zig compiling the SDK's codec, its output relative to `cwd`.
        (cwd / command[command.index("-o") + 1]).write_bytes(b"partial")
        raise BuildFailedError("componentize-py exited with 1")

    monkeypatch.setattr(build, "_run_tool", failing_tool)
    with pytest.raises(BuildFailedError):
        build_python(scratch_module, cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_syntax_error_fails_before_the_tool_runs(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("WitWorld = (\n")
    with pytest.raises(BuildFailedError, match="syntax error"):
        build_python(tmp_path / "broken.py", cache_dir=tmp_path / "cache")


@pytest.mark.parametrize(
    ("files", "target", "match"),
    [
        ({"notes.txt": "x"}, "notes.txt", "not a Python file"),
        ({"a.py": "WitWorld = 1", "b.py": "WitWorld = 1"}, ".", "cannot tell the entry module"),
        ({"wit_world.py": "WitWorld = 1"}, "wit_world.py", "cannot be an entry module"),
        ({"plain.py": "X = 1"}, "plain.py", "defines no top-level WitWorld"),
        ({}, "missing", "no such file"),
    ],
)
def test_unsupported_sources(
    tmp_path: Path, files: dict[str, str], target: str, match: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(BuildUnsupportedSourceError, match=match):
        build_python(tmp_path / target, cache_dir=tmp_path / "cache")


def test_cli_module_build(counter_build: BuildResult, build_cache: Path) -> None:
    runner = CliRunner()
    args = ["module", "build", str(EXAMPLES / "counter_py"), "--cache-dir", str(build_cache)]
    result = runner.invoke(aos_main, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        str(counter_build.wasm_hash),
        str(counter_build.wasm_path),
    ]
    result = runner.invoke(aos_main, [*args, "--json"])
    assert result.exit_code == 0
    assert f'"module_hash": "{counter_build.wasm_hash}"' in result.stdout
    assert '"cached": true' in result.stdout
    bad = ["module", "build", str(EXAMPLES / "bad_py" / "capabilities"), "--json"]
    result = runner.invoke(aos_main, [*bad, "--cache-dir", str(build_cache)])
    assert result.exit_code == 1
    assert '"code": "build.capability_denied"' in result.stdout
