"""Building the compiled hot path (spec/09 §5): the kernel's hottest modules through mypyc and
the system's C compiler, once per set of sources, Python and mypy.

    python -m aos.kernel.compiled_build      # what `make compile` (and `make setup`) runs

The build's key hashes the modules' sources and every kernel source they import (mypyc reads
those too: a `Final` constant of another module is inlined), the Python it is for and mypy's
version; a key already in the cache builds nothing. The build goes to a scratch folder and is
renamed into place whole, so a killed build leaves no half of one; a copy of its sources stays
beside it, so a compiled frame of a traceback shows its line. It never fails the caller:
without a C compiler, or when mypyc refuses, it says so in one line on stderr, and the kernel
runs from its sources (`aos.kernel.compiled`).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import time
import traceback
from collections.abc import Iterable, Iterator
from pathlib import Path

from aos.kernel.compiled import (
    KERNEL_DIR,
    MANIFEST_NAME,
    pointer_path,
    pure_python_requested,
    python_tag,
    sources_hash,
)

# The modules compiled, relative to kernel/: the hot host path of an event and an effect step
# (bench/HISTORY.md, "mypyc: the compiled host path"). Each must compile under mypyc and keep
# its behaviour there: no `str` subclasses (mypyc refuses them: `hashing.Hash` stays Python),
# nothing a test replaces on an instance (`staged.Staged.write`), no `__file__` lookups.
MODULES = (
    "cbor.py",
    "air/normalize.py",
    "wasm/envelope.py",
    "world/cellindex.py",
    "world/cells.py",
    "world/chain.py",
    "world/ingress.py",
    "world/journaler.py",
    "world/records.py",
    "world/stamps.py",
    "world/stepping.py",
)
# The build's shared library: `aos_kernel__mypyc`, a top-level module the finder serves too.
GROUP_NAME = "aos_kernel"
# Builds kept in the cache (~3 MB each), the most recently used: one per version of the
# kernel's sources, so every checkout and branch on the machine keeps its own while it is used.
BUILDS_KEPT_MAX = 8
# A build `KEY` keeps the source tree it was compiled from in `KEY.src` (`source_tree`).
SOURCE_TREE_SUFFIX = ".src"
OPT_LEVEL = "3"
PACKAGE = "aos.kernel"


def default_cache_dir() -> Path:
    """`$AOS_CACHE_DIR/mypyc`, else `~/.cache/aos/mypyc`."""
    root = os.environ.get("AOS_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "aos"
    return base / "mypyc"


def kernel_imports(path: Path) -> set[str]:
    """The `aos.kernel` modules a source names in its imports (at any depth of its code)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.startswith(PACKAGE + ".")}


def source_of(module: str, kernel_dir: Path) -> str | None:
    """The source (relative to kernel/) of an `aos.kernel` module, or None for a name that is
    not a module (`from aos.kernel.cbor import encode`)."""
    parts = module.split(".")[2:]
    for relative in ("/".join(parts) + ".py", "/".join([*parts, "__init__.py"])):
        if (kernel_dir / relative).is_file():
            return relative
    return None


def closure(modules: Iterable[str], kernel_dir: Path = KERNEL_DIR) -> list[str]:
    """The modules and every kernel source they import, transitively, with the packages that
    hold them, sorted: the sources a build depends on."""
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        relative = todo.pop()
        if relative in seen:
            continue
        seen.add(relative)
        parents = Path(relative).parents
        todo.extend(str(p / "__init__.py") for p in parents if str(p) != ".")
        todo.append("__init__.py")
        for name in kernel_imports(kernel_dir / relative):
            found = source_of(name, kernel_dir)
            if found is not None:
                todo.append(found)
    return sorted(seen)


def mypy_version() -> str:
    from mypy.version import __version__

    return __version__


def build_key(sources: list[str], kernel_dir: Path) -> str:
    recipe = {
        "modules": list(MODULES),
        "sources_hash": sources_hash(kernel_dir, sources),
        "python": python_tag(),
        "mypy": mypy_version(),
        "opt_level": OPT_LEVEL,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def missing_compiler() -> str | None:
    """Why no extension can be built here, or None when a C compiler and Python's headers are
    there."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler})"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return "no Python headers (Python.h)"
    return None


def source_tree(folder: Path, kernel_dir: Path) -> Path:
    """The folder beside a build (`KEY.src`) that mypy compiles from, `aos/kernel` in it a link
    to `kernel_dir` (mypy resolves `aos.kernel.x` through it: the editable install's mapping
    is invisible to it, as to `make lint`). mypyc records these paths in the compiled frames
    of a traceback; `freeze_sources` then makes the folder hold copies of the build's sources,
    so those frames show their lines whatever becomes of the checkout."""
    tree = folder.with_name(folder.name + SOURCE_TREE_SUFFIX)
    package = tree / "aos"
    package.mkdir(parents=True, exist_ok=True)  # a build of these sources may be running too
    (package / "__init__.py").write_text("")
    fresh = package / f".link-{os.getpid()}"
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(kernel_dir.resolve(), target_is_directory=True)
    try:
        os.replace(fresh, package / "kernel")  # atomic over a link a died build left
    except OSError:  # a concurrent build froze these sources already: mypy reads the copies
        fresh.unlink()
    return tree


def freeze_sources(tree: Path, kernel_dir: Path, sources: list[str]) -> None:
    """Replace the link of `source_tree` with copies of the build's `sources` (every compiled
    module is one of them)."""
    package = tree / "aos"
    frozen = package / f".kernel-{os.getpid()}"
    for name in sources:
        (frozen / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kernel_dir / name, frozen / name)
    link = package / "kernel"
    try:
        if link.is_symlink():
            link.unlink()
        os.rename(frozen, link)
    except OSError:  # a concurrent build of these sources froze them first
        shutil.rmtree(frozen, ignore_errors=True)


def _compile(scratch: Path, tree: Path) -> None:
    """mypyc, then the C compiler, into `scratch/lib` (modules laid out by their names), from
    the sources under `tree` (`source_tree`)."""
    from mypyc.build import mypycify
    from setuptools import Distribution

    os.environ["MYPYPATH"] = str(tree)
    extensions = mypycify(
        ["--no-warn-unused-configs", *(str(tree / "aos" / "kernel" / m) for m in MODULES)],
        opt_level=OPT_LEVEL,
        target_dir=str(scratch / "c"),
        group_name=GROUP_NAME,
        multi_file=True,
    )
    command = Distribution({"ext_modules": extensions}).get_command_obj("build_ext")
    command.build_lib = str(scratch / "lib")
    command.build_temp = str(scratch / "tmp")
    command.parallel = os.cpu_count() or 1
    command.ensure_finalized()
    command.run()


@contextlib.contextmanager
def _output_to(log: Path) -> Iterator[None]:
    """mypyc's and the compiler's output (a page per module) into a log, not the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with log.open("wb") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _record(lib: Path, sources: list[str], kernel_dir: Path) -> None:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    modules: dict[str, str] = {}
    for file in sorted(lib.rglob("*" + suffix)):
        relative = file.relative_to(lib).as_posix()
        modules[relative[: -len(suffix)].replace("/", ".")] = relative
    manifest = {
        "python": python_tag(),
        "mypy": mypy_version(),
        "sources": sources,
        "sources_hash": sources_hash(kernel_dir, sources),
        "modules": modules,
    }
    (lib / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def cached_build(cache_dir: Path, kernel_dir: Path = KERNEL_DIR) -> Path | None:
    """The cache's build of the current sources, or None."""
    folder = cache_dir / build_key(closure(MODULES, kernel_dir), kernel_dir)
    return folder if (folder / MANIFEST_NAME).is_file() else None


def build(cache_dir: Path, kernel_dir: Path = KERNEL_DIR) -> tuple[Path, bool]:
    """The build of the current sources, from the cache or made now: (its folder, cached)."""
    sources = closure(MODULES, kernel_dir)
    folder = cache_dir / build_key(sources, kernel_dir)
    if (folder / MANIFEST_NAME).is_file():
        os.utime(folder / MANIFEST_NAME)  # recently used: the last the pruning drops
        return folder, True
    cache_dir.mkdir(parents=True, exist_ok=True)
    tree = source_tree(folder, kernel_dir)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".building-") as scratch_name:
        scratch = Path(scratch_name)
        with _output_to(cache_dir / "last-build.log"):
            _compile(scratch, tree)
        _record(scratch / "lib", sources, kernel_dir)
        try:
            os.rename(scratch / "lib", folder)
        except OSError:
            if not (folder / MANIFEST_NAME).is_file():
                raise  # not a concurrent build that finished first
    freeze_sources(tree, kernel_dir, sources)
    prune(cache_dir, keep=folder)
    return folder, False


def prune(cache_dir: Path, *, keep: Path, kept_max: int = BUILDS_KEPT_MAX) -> None:
    """Drop all but the `kept_max` most recently used builds (`keep` always stays). A virtualenv
    whose build went runs its sources until its next `make setup`."""
    builds = [f for f in cache_dir.iterdir() if (f / MANIFEST_NAME).is_file() and f != keep]
    builds.sort(key=lambda f: (f / MANIFEST_NAME).stat().st_mtime, reverse=True)
    for old in builds[max(kept_max - 1, 0) :]:
        shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(old.with_name(old.name + SOURCE_TREE_SUFFIX), ignore_errors=True)


def _point_at(folder: Path) -> None:
    """Record the build for this virtualenv (the finder still checks it against the sources
    each time: a record that went stale loads nothing)."""
    pointer = pointer_path()
    scratch = pointer.with_name(pointer.name + ".tmp")
    scratch.write_text(json.dumps({"build": str(folder)}) + "\n")
    os.replace(scratch, pointer)


def main() -> int:
    """Build (or find) the compiled modules and record them for this virtualenv; 0 always."""
    if pure_python_requested():
        print("aos: AOS_PURE_PYTHON is set: the kernel runs as pure Python", file=sys.stderr)
        return 0
    cache_dir = default_cache_dir()
    reason = missing_compiler()
    if reason is not None and cached_build(cache_dir) is None:
        print(f"aos: {reason}: the kernel runs as pure Python (slower)", file=sys.stderr)
        return 0
    start = time.monotonic()
    try:
        folder, cached = build(cache_dir)
    except (Exception, SystemExit):
        log = cache_dir / "last-build.log"
        with log.open("a") as sink:
            sink.write(traceback.format_exc())
        print(
            f"aos: mypyc could not compile the kernel (see {log}): it runs as pure Python (slower)",
            file=sys.stderr,
        )
        return 0
    _point_at(folder)
    if not cached:
        print(f"aos: the kernel's hot path compiled in {time.monotonic() - start:.0f} s: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
