"""Building workflow modules from source, cached by source hash (DESIGN §6).

* `build_python` turns a Python workflow (a file, or a directory with `app.py` or a single
  module) into a component with `componentize-py ... componentize --stub-wasi`: fresh copies
  of the module's Python files, of any extra `python_path` directories', and of the `aos_sdk`
  package beside the bundled ones are the only Python path (componentize-py mounts every
  folder it is given into the interpreter it snapshots, which lists them while importing and
  writes bytecode into them: a source folder's `__pycache__` and editor files would end up in
  the component, and the folder would gain a `__pycache__`); the result has no imports.
* `build_c` compiles one C (or Zig) file into a core module with
  `python -m ziglang cc --target=wasm32-freestanding -nostdlib`.

A build is keyed by the BLAKE3 of everything that can change its output: every source file
(path and bytes) of the module, of `aos_sdk` and the WIT world, the tool versions and the
build options. The artifact lives at `<cache>/<key>.wasm` with a `<key>.json` record; an
unchanged source is a cache hit that runs no tool (`BuildResult.cached`). The cache is
`$AOS_CACHE_DIR/builds`, else `~/.cache/aos/builds`.

Builds are reproducible: the same source and tools give the same bytes whatever the cache,
the source folder's other files, the file system and the machine's own Python packages.
componentize-py snapshots an interpreter, which keeps what it saw while it initialized: its
hash seed and PRNG state, the times, inode numbers and (for folders) sizes of the files it
imported (unpacked afresh on every run), the order folders list in, and the clock. So on
Linux x86_64/aarch64 the tool runs under the seccomp supervisor (`aos.kernel.wasm.seccomp`:
`getrandom` answered from a stream keyed by the build key, `statx` with fixed times, inodes
and folder sizes, `getdents64` in name order) with a fixed clock
(`aos.kernel.wasm.fixed_clock`), and with `VIRTUAL_ENV` naming an empty environment (else
the tool adds the site-packages of the `python3` on PATH to the snapshot's Python path).
Where that is not available the build still runs and `BuildResult.reproducible` (and the
record's `reproducible`) is False: then the cache, not a rebuild, is what keeps a module hash
stable. C/Zig builds are reproducible as they are (the output's name, which the linker
embeds, is fixed).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from aos.kernel.errors import AosError
from aos.kernel.hashing import Hash, hash_bytes, hash_value
from aos.kernel.package_data import package_path
from aos.kernel.wasm import fixed_clock, seccomp

Abi = Literal["core", "component"]

# 2: Python builds run under the entropy supervisor; 3: from staged copies of the sources,
# with fixed directory listings, and without the machine's site-packages
BUILDER_VERSION = 3
WORLD_NAME = "workflow"
WORLD_CLASS = "WitWorld"
SOURCE_FILES_MAX = 512
SOURCE_BYTES_MAX = 16 * 1024 * 1024
TOOL_TIMEOUT_S_DEFAULT = 600.0
STDERR_TAIL_CHARS = 4000
CACHE_ENTRIES_MAX = 32  # a Python component is ~18 MB
C_EXPORTS_DEFAULT = ("alloc", "step")
C_FLAGS = (
    "--target=wasm32-freestanding",
    "-nostdlib",
    "-O2",
    "-fno-stack-protector",
    "-Wl,--no-entry",
    "-Wl,--export-memory",
)
# The SDK's compiled codec (`aos_sdk/_cbor_c.c`): a CPython extension module for the
# component's interpreter (componentize-py 0.25's CPython 3.14, wasm32-wasi), built as a
# WebAssembly shared library that componentize-py links into the component. Compiled without
# CPython's headers (it declares the stable-ABI calls it makes) and without debug information
# or any path, so its bytes depend on the source and the zig version only.
SDK_EXTENSION_SOURCE = "_cbor_c.c"
SDK_EXTENSION_SUFFIX = ".cpython-314-wasm32-wasi.so"
SDK_EXTENSION_CFLAGS = (
    "--target=wasm32-wasi",
    "-O2",
    "-g0",
    "-fPIC",
    "-fno-stack-protector",
    "-nostdlib",
    "-Wall",
    "-Werror",
)
SDK_EXTENSION_LDFLAGS = ("--shared", "--experimental-pic", "--unresolved-symbols=import-dynamic")
_PYTHON_SUFFIXES = (".py",)
_C_SUFFIXES = (".c", ".zig")
BUNDLE_FILE = "bundle.txt"
_RESERVED_MODULES = frozenset({"wit_world", "aos_sdk", "componentize_py_types", "poll_loop"})

WIT_PACKAGE = "aos.kernel.wasm"  # the WIT world ships in the package: <package>/wit


# --------------------------------------------------------------------------------------------
# Errors and results


class BuildError(AosError):
    code = "build.error"


class BuildFailedError(BuildError):
    code = "build.failed"
    hint = "the build tool failed; its stderr tail is in the message"


class BuildUnsupportedSourceError(BuildError):
    code = "build.unsupported_source"
    hint = "build a .py file, a directory with app.py or one module, or a .c/.zig file"


class BuildCapabilityError(BuildError):
    code = "build.capability_denied"
    hint = (
        "workflows have no clock, filesystem, network, randomness or processes: "
        "use ctx.now_ns, ctx.entropy and effects instead"
    )


class BuildToolMissingError(BuildError):
    code = "build.tool_missing"
    hint = "install the build extra: pip install -e '.[build]'"


@dataclass(frozen=True)
class BuildResult:
    wasm_path: Path
    wasm_hash: Hash
    cached: bool
    abi: Abi
    source_hash: Hash
    # Whether a rebuild from the same source and tools gives the same bytes (as recorded
    # when the artifact was built); False for an unsupervised Python build.
    reproducible: bool


# --------------------------------------------------------------------------------------------
# Cache


def default_cache_dir() -> Path:
    root = os.environ.get("AOS_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "aos"
    return base / "builds"


def _cache_lookup(cache_dir: Path, key: Hash, abi: Abi) -> BuildResult | None:
    """A recorded artifact whose bytes still hash to what was recorded, else None."""
    wasm_path, record_path = _cache_paths(cache_dir, key)
    try:
        record = json.loads(record_path.read_text())
        data = wasm_path.read_bytes()
    except (OSError, ValueError):
        return None
    wasm_hash = hash_bytes(data)
    if record.get("wasm_hash") != wasm_hash or record.get("abi") != abi:
        return None  # a torn or tampered entry: rebuild over it
    _touch(wasm_path)
    return BuildResult(wasm_path, wasm_hash, True, abi, key, record.get("reproducible") is True)


def _cache_store(
    cache_dir: Path, key: Hash, abi: Abi, built: Path, *, reproducible: bool
) -> BuildResult:
    wasm_path, record_path = _cache_paths(cache_dir, key)
    wasm_hash = hash_bytes(built.read_bytes())
    built.chmod(0o644)
    os.replace(built, wasm_path)
    record = {
        "abi": abi,
        "reproducible": reproducible,
        "source_hash": str(key),
        "wasm_hash": str(wasm_hash),
    }
    _write_atomic(record_path, json.dumps(record, sort_keys=True).encode())
    _prune(cache_dir, keep=wasm_path)
    return BuildResult(wasm_path, wasm_hash, False, abi, key, reproducible)


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        return  # recency is a hint for pruning, never a reason to fail a build


def _prune(cache_dir: Path, *, keep: Path) -> None:
    """Keep the `CACHE_ENTRIES_MAX` most recently used artifacts (a Python component is
    ~18 MB); remove the rest with their records."""
    entries = sorted(cache_dir.glob("*.wasm"), key=_mtime_or_zero, reverse=True)
    for stale in entries[CACHE_ENTRIES_MAX:]:
        if stale != keep:
            stale.unlink(missing_ok=True)
            stale.with_suffix(".json").unlink(missing_ok=True)


def _mtime_or_zero(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _cache_paths(cache_dir: Path, key: Hash) -> tuple[Path, Path]:
    return cache_dir / f"{key.hex}.wasm", cache_dir / f"{key.hex}.json"


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _source_key(kind: str, inputs: dict[str, Any]) -> Hash:
    return hash_value({"builder": BUILDER_VERSION, "kind": kind, **inputs})


def _file_hashes(root: Path, files: Sequence[Path]) -> dict[str, str]:
    total = 0
    hashes: dict[str, str] = {}
    for path in files:
        data = path.read_bytes()
        total += len(data)
        if total > SOURCE_BYTES_MAX:
            raise BuildUnsupportedSourceError(
                f"sources are larger than {SOURCE_BYTES_MAX} bytes", path=str(root)
            )
        hashes[path.relative_to(root).as_posix()] = str(hash_bytes(data))
    return hashes


def _tool_version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        raise BuildToolMissingError(f"{distribution} is not installed") from None


# --------------------------------------------------------------------------------------------
# Python components


def build_python(
    src: str | Path,
    *,
    cache_dir: str | Path | None = None,
    entry: str | None = None,
    python_path: Sequence[str | Path] = (),
    check_capabilities: bool = True,
    wit_dir: str | Path | None = None,
    sdk_dir: str | Path | None = None,
    timeout_s: float = TOOL_TIMEOUT_S_DEFAULT,
) -> BuildResult:
    """Build a Python workflow into a component (cached by source hash). The entry module
    must define `WitWorld = aos_sdk.export(<workflow>)`. `sdk_dir` is a folder holding
    `aos_sdk` (default: the installed one's)."""
    sources = _python_sources(Path(src), entry, python_path, wit_dir, sdk_dir)
    if check_capabilities:
        check_python_capabilities(sources.module_files, sources.src_dir)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    hit = _cache_lookup(cache, sources.key, "component")
    if hit is not None:
        return hit
    cache.mkdir(parents=True, exist_ok=True)
    with _temp_output(cache) as out, _staged(sources.trees) as (stage_root, staged):
        if sources.sdk_extension is not None:
            sdk_package = staged[-1] / "aos_sdk"
            _build_sdk_extension(sources.sdk_extension, sdk_package, timeout_s=timeout_s)
        command = [
            *_componentize_py(),
            "-q",
            "-d",
            str(sources.wit),
            "-w",
            WORLD_NAME,
            "componentize",
            sources.module,
            *[arg for p in staged for arg in ("-p", str(p))],
            "-o",
            str(out),
            "--stub-wasi",
        ]
        supervised = _run_tool(
            command,
            timeout_s=timeout_s,
            cwd=stage_root,
            tool="componentize-py",
            entropy=sources.key,
            clock_dir=cache,
            # componentize-py appends `$VIRTUAL_ENV/lib/**/site-packages` to the Python path
            # it mounts and walks (without it, the site-packages of whatever `python3` is on
            # PATH: a machine's own packages in the snapshot): an empty one, always.
            virtual_env=stage_root / _EMPTY_ENV,
        )
        return _cache_store(cache, sources.key, "component", out, reproducible=supervised)


def python_source_hash(
    src: str | Path,
    *,
    entry: str | None = None,
    python_path: Sequence[str | Path] = (),
    wit_dir: str | Path | None = None,
    sdk_dir: str | Path | None = None,
) -> Hash:
    """The build key `build_python` would give these sources (its `source_hash`), without
    building: what a pinned module's record is checked against."""
    return _python_sources(Path(src), entry, python_path, wit_dir, sdk_dir).key


# One folder of the component's Python path: relative path -> the source file it copies.
_Tree = dict[str, Path]


@dataclass(frozen=True)
class _PythonSources:
    """Everything a Python build reads, and the key it is cached under."""

    src_dir: Path
    module: str
    module_files: list[Path]
    wit: Path
    # The component's Python path, in order: the module, the extra folders, then the SDK
    # beside the bundled packages (in an installed aos the SDK's parent folder is
    # site-packages, which must not become the component's Python path).
    trees: list[_Tree]
    key: Hash
    # The SDK's codec source, compiled into the staged SDK; None for an SDK without one.
    sdk_extension: Path | None


def _python_sources(
    src: Path,
    entry: str | None,
    python_path: Sequence[str | Path],
    wit_dir: str | Path | None,
    sdk_dir: str | Path | None,
) -> _PythonSources:
    src_dir, module = _python_entry(src, entry)
    extra = [Path(p).resolve() for p in python_path]
    bundled = _bundled_packages(src_dir)
    sdk_root = Path(sdk_dir).resolve() if sdk_dir is not None else _sdk_root()
    wit = Path(wit_dir) if wit_dir is not None else package_path(WIT_PACKAGE, "wit")
    module_files = _python_files(src_dir)
    _check_exports_world(src_dir / f"{module}.py")
    extension = sdk_root / "aos_sdk" / SDK_EXTENSION_SOURCE
    sdk_extension = extension if extension.is_file() else None
    inputs: dict[str, Any] = {
        "entry": module,
        "module": _file_hashes(src_dir, module_files),
        "extra": [_file_hashes(p, _python_files(p)) for p in extra],
        "bundle": {name: _file_hashes(path, _python_files(path)) for name, path in bundled},
        "sdk": _file_hashes(sdk_root, _python_files(sdk_root / "aos_sdk")),
        "wit": _file_hashes(wit, sorted(wit.glob("*.wit"))),
        "tools": {"componentize-py": _tool_version("componentize-py")},
        "options": {"stub_wasi": True, "world": WORLD_NAME},
    }
    if sdk_extension is not None:
        inputs["sdk_extension"] = {
            "source": _file_hashes(sdk_root, [sdk_extension]),
            "tools": {"ziglang": _tool_version("ziglang")},
            "options": {"cflags": SDK_EXTENSION_CFLAGS, "ldflags": SDK_EXTENSION_LDFLAGS},
            "suffix": SDK_EXTENSION_SUFFIX,
        }
    trees = [
        _python_tree(src_dir, module_files),
        *[_python_tree(p, _python_files(p)) for p in extra],
        _bundle_tree([*bundled, ("aos_sdk", sdk_root / "aos_sdk")]),
    ]
    key = _source_key("python-component", inputs)
    return _PythonSources(src_dir, module, module_files, wit, trees, key, sdk_extension)


def _build_sdk_extension(source: Path, package: Path, *, timeout_s: float) -> None:
    """Compile the SDK's codec into `package` as the extension module componentize-py links
    in: `zig cc -c`, then zig's `wasm-ld --shared` (the CPython symbols it calls stay imports
    that componentize-py resolves against the component's libpython). Fixed file names in a
    fresh folder, so nothing of the machine reaches the bytes."""
    name = Path(SDK_EXTENSION_SOURCE).stem
    with tempfile.TemporaryDirectory(prefix="aos-ext-") as tmp:
        folder = Path(tmp)
        shutil.copyfile(source, folder / SDK_EXTENSION_SOURCE)
        zig = [sys.executable, "-m", "ziglang"]
        compile_ = [*zig, "cc", *SDK_EXTENSION_CFLAGS, "-c", "-o", f"{name}.o"]
        _run_tool([*compile_, SDK_EXTENSION_SOURCE], timeout_s=timeout_s, cwd=folder, tool="zig cc")
        library = f"{name}{SDK_EXTENSION_SUFFIX}"
        link = [*zig, "wasm-ld", *SDK_EXTENSION_LDFLAGS, "-o", library, f"{name}.o"]
        _run_tool(link, timeout_s=timeout_s, cwd=folder, tool="zig wasm-ld")
        shutil.copyfile(folder / library, package / library)


def bundled_package_names(src_dir: Path) -> list[str]:
    """The pure-Python packages a module bundles: `bundle.txt` beside it names one importable
    package per line (`#` starts a comment), sorted."""
    listing = src_dir / BUNDLE_FILE
    if not listing.is_file():
        return []
    names = [line.split("#", 1)[0].strip() for line in listing.read_text().splitlines()]
    for name in names:
        if name and (not name.isidentifier() or name in _RESERVED_MODULES):
            raise BuildUnsupportedSourceError(f"{name!r} cannot be bundled", path=str(listing))
    return sorted({n for n in names if n})


def _bundled_packages(src_dir: Path) -> list[tuple[str, Path]]:
    """The bundled packages' folders, each taken from the build environment, so the
    packages' sources are part of the build key like the module's own."""
    listing = src_dir / BUNDLE_FILE
    found: list[tuple[str, Path]] = []
    for name in bundled_package_names(src_dir):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise BuildUnsupportedSourceError(
                f"{name} is not an installed package: pip install it into the build environment",
                path=str(listing),
            )
        found.append((name, Path(next(iter(spec.submodule_search_locations))).resolve()))
    return found


def _python_tree(root: Path, files: Sequence[Path]) -> _Tree:
    return {path.relative_to(root).as_posix(): path for path in files}


def _bundle_tree(packages: Sequence[tuple[str, Path]]) -> _Tree:
    """The bundled packages' Python files only: compiled extensions cannot load inside a
    component (a package with a pure-Python fallback, such as markupsafe, uses the fallback)."""
    tree: _Tree = {}
    for name, path in packages:
        for rel, source in _python_tree(path, _python_files(path)).items():
            tree[f"{name}/{rel}"] = source
    return tree


_EMPTY_ENV = "env"


@contextlib.contextmanager
def _staged(trees: Sequence[_Tree]) -> Iterator[tuple[Path, list[Path]]]:
    """A fresh temporary copy of each Python-path folder holding exactly the files the build
    key hashes, created in sorted order: componentize-py mounts every folder it is given into
    the interpreter it snapshots, which lists them while importing (the snapshot keeps what it
    saw: `__pycache__`, editor files, `~` backups, a README) and writes its own bytecode there
    (which a later build would then load instead of the source). Yields the staging root (the
    tool's working folder, holding an empty `env/lib/site-packages` too) and the folders, in
    Python-path order."""
    with tempfile.TemporaryDirectory(prefix="aos-stage-") as root:
        (Path(root) / _EMPTY_ENV / "lib" / "site-packages").mkdir(parents=True)
        folders = []
        for index, tree in enumerate(trees):
            folder = Path(root) / str(index)
            folder.mkdir()
            for rel in sorted(tree):
                target = folder / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(tree[rel], target)
            folders.append(folder)
        yield Path(root), folders


def _python_entry(src: Path, entry: str | None) -> tuple[Path, str]:
    if not src.exists():
        raise BuildUnsupportedSourceError("no such file or directory", path=str(src))
    if src.is_file():
        if src.suffix not in _PYTHON_SUFFIXES:
            raise BuildUnsupportedSourceError("not a Python file", path=str(src))
        return src.resolve().parent, _module_name(entry or src.stem, src)
    if entry is not None:
        return src.resolve(), _module_name(entry, src)
    if (src / "app.py").is_file():
        return src.resolve(), "app"
    candidates = [
        p
        for p in sorted(src.glob("*.py"))
        if not p.name.startswith(("test_", "conftest", "."))  # `.#x.py`: an editor's lock
    ]
    if len(candidates) != 1:
        raise BuildUnsupportedSourceError(
            f"cannot tell the entry module among {[p.name for p in candidates]}: "
            "add app.py or name the entry module",
            path=str(src),
        )
    return src.resolve(), _module_name(candidates[0].stem, src)


def _check_exports_world(entry_file: Path) -> None:
    """The entry module must bind the world at top level (`WitWorld = export(workflow)`);
    checked here because componentize-py takes seconds to say so."""
    if not entry_file.is_file():
        raise BuildUnsupportedSourceError("the entry module is not a file", path=str(entry_file))
    if not any(_binds_world(node) for node in _parse(entry_file).body):
        raise BuildUnsupportedSourceError(
            f"the entry module defines no top-level {WORLD_CLASS}: "
            f"add `{WORLD_CLASS} = aos_sdk.export(<your workflow>)`",
            path=str(entry_file),
        )


def _binds_world(node: ast.stmt) -> bool:
    if isinstance(node, ast.ClassDef):
        return node.name == WORLD_CLASS
    if isinstance(node, ast.ImportFrom):
        return any((alias.asname or alias.name) == WORLD_CLASS for alias in node.names)
    targets = node.targets if isinstance(node, ast.Assign) else []
    if isinstance(node, ast.AnnAssign):
        targets = [node.target]
    return any(isinstance(t, ast.Name) and t.id == WORLD_CLASS for t in targets)


def _parse(path: Path) -> ast.Module:
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as error:
        raise BuildFailedError(f"syntax error: {error}", path=str(path)) from None


def _module_name(name: str, src: Path) -> str:
    if not name.isidentifier() or name in _RESERVED_MODULES:
        raise BuildUnsupportedSourceError(f"{name!r} cannot be an entry module name", path=str(src))
    return name


def _python_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if any(part.startswith(".") or part == "__pycache__" for part in parts):
            continue
        files.append(path)
        if len(files) > SOURCE_FILES_MAX:
            raise BuildUnsupportedSourceError(
                f"more than {SOURCE_FILES_MAX} Python files", path=str(root)
            )
    return files


def _sdk_root() -> Path:
    import aos_sdk

    return Path(aos_sdk.__file__).resolve().parent.parent


def _componentize_py() -> list[str]:
    """The tool as this interpreter's `componentize_py` package runs it: the version the
    build key names, wherever its script may be (a pip build environment has it only on
    this process's PYTHONPATH)."""
    if importlib.util.find_spec("componentize_py") is None:
        raise BuildToolMissingError("componentize-py is not installed")
    return [sys.executable, "-c", _COMPONENTIZE_PY_MAIN]


_COMPONENTIZE_PY_MAIN = (
    "import sys; from componentize_py import script; "
    "sys.argv[0] = 'componentize-py'; sys.exit(script())"
)


# --------------------------------------------------------------------------------------------
# C / Zig core modules


def build_c(
    src: str | Path,
    *,
    cache_dir: str | Path | None = None,
    exports: Sequence[str] = C_EXPORTS_DEFAULT,
    flags: Sequence[str] = (),
    timeout_s: float = TOOL_TIMEOUT_S_DEFAULT,
) -> BuildResult:
    """Compile one C or Zig file into a core module exporting `memory` and `exports`."""
    path = Path(src)
    if not path.is_file() or path.suffix not in _C_SUFFIXES:
        raise BuildUnsupportedSourceError("not a .c or .zig file", path=str(path))
    root = path.resolve().parent
    headers = sorted(p for p in root.glob("*.h"))
    args = [*C_FLAGS, *(f"-Wl,--export={name}" for name in exports), *flags]
    inputs: dict[str, Any] = {
        "source": _file_hashes(root, [path.resolve(), *headers]),
        "tools": {"ziglang": _tool_version("ziglang")},
        "options": {"args": args},
    }
    key = _source_key("c-core", inputs)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    hit = _cache_lookup(cache, key, "core")
    if hit is not None:
        return hit
    cache.mkdir(parents=True, exist_ok=True)
    with _temp_output(cache) as out:
        command = [
            sys.executable,
            "-m",
            "ziglang",
            "cc",
            *args,
            "-o",
            str(out),
            str(path.resolve()),
        ]
        _run_tool(command, timeout_s=timeout_s, cwd=root, tool="zig cc")
        imports = core_imports(out.read_bytes())
        if imports:
            raise BuildFailedError(
                f"the module imports {imports}: aos modules may import nothing", path=str(path)
            )
        return _cache_store(cache, key, "core", out, reproducible=True)


def core_imports(wasm: bytes) -> list[str]:
    """The `module.name` of every import of a core module (reads the import section)."""
    if wasm[:4] != b"\0asm":
        raise BuildFailedError("the output is not a WebAssembly module")
    offset = 8
    while offset < len(wasm):
        section = wasm[offset]
        size, offset = _leb128(wasm, offset + 1)
        if section == 2:
            return _read_imports(wasm, offset)
        offset += size
    return []


def _read_imports(wasm: bytes, offset: int) -> list[str]:
    count, offset = _leb128(wasm, offset)
    names: list[str] = []
    for _ in range(count):
        module, offset = _name(wasm, offset)
        field, offset = _name(wasm, offset)
        names.append(f"{module}.{field}")
        kind = wasm[offset]
        offset += 1
        # Skip the import's type: func (typeidx), table (reftype+limits), memory (limits),
        # global (valtype+mut).
        if kind == 0:
            _, offset = _leb128(wasm, offset)
        elif kind == 1:
            offset = _skip_limits(wasm, offset + 1)
        elif kind == 2:
            offset = _skip_limits(wasm, offset)
        else:
            offset += 2
    return names


def _skip_limits(wasm: bytes, offset: int) -> int:
    has_max = wasm[offset] & 1
    _, offset = _leb128(wasm, offset + 1)
    if has_max:
        _, offset = _leb128(wasm, offset)
    return offset


def _name(wasm: bytes, offset: int) -> tuple[str, int]:
    size, offset = _leb128(wasm, offset)
    return wasm[offset : offset + size].decode("utf-8", "replace"), offset + size


def _leb128(data: bytes, offset: int) -> tuple[int, int]:
    result = shift = 0
    for _ in range(5):
        byte = data[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, offset
        shift += 7
    raise BuildFailedError("malformed LEB128 in the module")


# --------------------------------------------------------------------------------------------
# Dispatch, tools


def build(
    src: str | Path, *, abi: Abi | None = None, cache_dir: str | Path | None = None
) -> BuildResult:
    """Build `src` with the ABI its kind implies (Python: component, C/Zig: core)."""
    path = Path(src)
    is_c = path.suffix in _C_SUFFIXES
    chosen: Abi = abi if abi is not None else ("core" if is_c else "component")
    if chosen == "core" and is_c:
        return build_c(path, cache_dir=cache_dir)
    if chosen == "component" and not is_c:
        return build_python(path, cache_dir=cache_dir)
    raise BuildUnsupportedSourceError(
        f"cannot build {path.suffix or 'a directory'} source into a {chosen} module",
        path=str(path),
    )


class _temp_output:  # noqa: N801 - a context manager used like a function
    """A temporary output path inside the cache (same filesystem, so `os.replace` is
    atomic), removed on failure. Its file name is fixed, because linkers write the output's
    name into the module: only its folder's name is random."""

    def __init__(self, cache: Path) -> None:
        self.folder = Path(tempfile.mkdtemp(dir=cache, prefix=".build-"))
        self.path = self.folder / "module.wasm"

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _run_tool(
    command: list[str],
    *,
    timeout_s: float,
    cwd: Path,
    tool: str,
    entropy: Hash | None = None,
    clock_dir: Path | None = None,
    virtual_env: Path | None = None,
) -> bool:
    """Run a build tool. With `entropy` (and the fixed clock built into `clock_dir`), run it
    reproducibly: under the seccomp supervisor, whose `getrandom` answers come from a stream
    keyed by that hash and whose file times, inode numbers and directory listings are fixed,
    with its clock fixed too. True when all of that was in place. `VIRTUAL_ENV` is the given
    folder or unset; PYTHONPATH stays (a pip build environment is made of it)."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    if virtual_env is not None:
        env["VIRTUAL_ENV"] = str(virtual_env)
    if env.get("PYTHONPATH"):  # the tool runs in `cwd`: a relative entry would move
        entries = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(str(Path(e).resolve()) for e in entries if e)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["RUST_BACKTRACE"] = "0"  # the tool's own stack is noise; its Python traceback is not
    clock = fixed_clock.library(clock_dir) if clock_dir is not None else None
    if entropy is None or clock is None or not seccomp.supported():
        _finish(_start(command, cwd, env, ()), timeout_s=timeout_s, tool=tool)
        return False
    env["LD_PRELOAD"] = " ".join(filter(None, [str(clock), env.get("LD_PRELOAD", "")]))
    with seccomp.EntropySupervisor(entropy.digest) as supervisor:
        process = _start(supervisor.wrap(command), cwd, env, supervisor.pass_fds)
        supervisor.attach()
        _finish(process, timeout_s=timeout_s, tool=tool)
    return supervisor.intact


def _start(
    command: list[str], cwd: Path, env: dict[str, str], pass_fds: Sequence[int]
) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=pass_fds,
        )
    except FileNotFoundError:
        raise BuildToolMissingError(f"{command[0]} not found") from None


def _finish(process: subprocess.Popen[bytes], *, timeout_s: float, tool: str) -> None:
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise BuildFailedError(f"{tool} ran longer than {timeout_s}s") from None
    if process.returncode != 0:
        tail = (stderr or stdout).decode("utf-8", "replace")[-STDERR_TAIL_CHARS:]
        raise BuildFailedError(
            f"{tool} exited with {process.returncode}:\n{tail.strip()}",
            returncode=process.returncode,
        )


# --------------------------------------------------------------------------------------------
# Capabilities


_DENIED_IMPORTS = {
    "socket": "network",
    "ssl": "network",
    "http": "network",
    "urllib": "network",
    "asyncio": "network",
    "select": "network",
    "selectors": "network",
    "ftplib": "network",
    "smtplib": "network",
    "time": "clock",
    "secrets": "randomness",
    "uuid": "randomness",
    "tempfile": "filesystem",
    "shutil": "filesystem",
    "glob": "filesystem",
    "subprocess": "processes",
    "multiprocessing": "processes",
    "threading": "threads",
}
_DENIED_CALLS = {
    "open": "filesystem",
    "input": "stdin",
}
_DENIED_ATTRIBUTES = {
    ("os", "urandom"): "randomness",
    ("os", "environ"): "environment",
    ("os", "getenv"): "environment",
    ("os", "listdir"): "filesystem",
    ("os", "stat"): "filesystem",
    ("os", "remove"): "filesystem",
    ("os", "scandir"): "filesystem",
    ("datetime", "now"): "clock",
    ("datetime", "utcnow"): "clock",
    ("datetime", "today"): "clock",
    ("date", "today"): "clock",
    ("random", "random"): "randomness",
    ("random", "randint"): "randomness",
    ("random", "choice"): "randomness",
    ("random", "shuffle"): "randomness",
    ("random", "getrandbits"): "randomness",
    ("random", "uniform"): "randomness",
    ("random", "randbytes"): "randomness",
}


def check_python_capabilities(files: Sequence[Path], root: Path) -> None:
    """Reject sources that reach for a capability a workflow does not have (clock,
    filesystem, network, randomness, environment, processes). The component would trap at
    that point anyway; this names the capability and the line before anything runs.
    It is a lint on the module's own sources, not the sandbox: the sandbox is the absence of
    imports in the component."""
    uses = [
        (path, capability, line, what)
        for path in files
        for capability, line, what in _capability_uses(path)
    ]
    if not uses:
        return
    lines = [
        f"{path.relative_to(root).as_posix()}:{line}: {what} needs the {capability} capability"
        for path, capability, line, what in uses
    ]
    capabilities = sorted({capability for _, capability, _, _ in uses})
    raise BuildCapabilityError(
        f"the workflow reaches for {', '.join(capabilities)}, which workflows do not have:\n  "
        + "\n  ".join(lines),
        path=str(root),
        capabilities=capabilities,
    )


def _capability_uses(path: Path) -> Iterator[tuple[str, int, str]]:
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in _DENIED_IMPORTS:
                    yield _DENIED_IMPORTS[top], node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top = node.module.split(".")[0]
            if top in _DENIED_IMPORTS:
                yield _DENIED_IMPORTS[top], node.lineno, f"from {node.module} import"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in _DENIED_CALLS:
                yield _DENIED_CALLS[node.func.id], node.lineno, f"{node.func.id}()"
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            pair = (node.value.id, node.attr)
            if pair in _DENIED_ATTRIBUTES:
                yield _DENIED_ATTRIBUTES[pair], node.lineno, f"{pair[0]}.{pair[1]}"


# WASI functions the stubs of a `--stub-wasi` component trap in, by capability. The first
# frame of a trap's backtrace that names one of these says what the guest reached for.
_TRAP_FRAMES = (
    ("stderr_get_stderr", "guest exception"),
    ("stdout_get_stdout", "stdout"),
    ("stdin_get_stdin", "stdin"),
    ("wall_clock", "clock"),
    ("monotonic_clock", "clock"),
    ("clock_gettime", "clock"),
    ("random_get", "randomness"),
    ("getentropy", "randomness"),
    ("tcp_", "network"),
    ("udp_", "network"),
    ("ip_name_lookup", "network"),
    ("socket", "network"),
    ("environment_get", "environment"),
    ("filesystem_", "filesystem"),
    ("preopens", "filesystem"),
)


def trap_capability(trap_message: str) -> str | None:
    """Name what a trapped `--stub-wasi` component reached for ("clock", "filesystem",
    "network", "randomness", "stdout", ...), or "guest exception" when `aos_sdk` reported an
    uncaught exception; None when the trap is not a WASI stub (e.g. `unreachable` in code)."""
    for line in trap_message.splitlines():
        for fragment, capability in _TRAP_FRAMES:
            if fragment in line:
                return capability
    return None
