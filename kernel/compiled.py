"""The compiled hot path: the kernel's hottest modules as mypyc builds of their own sources
(spec/09 §5), loaded in their place only when built from exactly the sources here.

`make setup` builds them (`aos.kernel.compiled_build`) into `$AOS_CACHE_DIR/mypyc/<key>`
(else `~/.cache/aos/mypyc/<key>`) and records that folder in the virtualenv
(`<sys.prefix>/aos-mypyc.json`). Importing `aos.kernel` calls `install()`, which puts a finder
first on `sys.meta_path` when, and only when, the build's recorded sources hash equals the hash
of the sources it was built from as they are now. Why a finder rather than `.so` files beside
the sources: the package is installed editable (setuptools' finder maps `aos.kernel` to
`kernel/`), and an extension module there would shadow its source whatever the source became;
a finder decides once per process, from the sources it would replace, and the modules' group
is all or nothing, since compiled modules share classes and call each other natively (one
compiled and one not would give two `Record` classes). A source edited since the build, another
Python, or `AOS_PURE_PYTHON=1` loads the sources: slower, never stale.

Only the standard library is imported here: this runs first in every process that imports the
kernel.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

# Set to anything but "" or "0": the kernel runs from its sources, compiled or not.
PURE_PYTHON_ENV = "AOS_PURE_PYTHON"
# The virtualenv's record of the build `make setup` made for it (a folder of the cache).
POINTER_NAME = "aos-mypyc.json"
# The build's own record, in its folder: what it was built from and what it holds.
MANIFEST_NAME = "build.json"
KERNEL_DIR = Path(__file__).resolve().parent


def pure_python_requested() -> bool:
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def python_tag() -> str:
    """What a compiled extension is bound to: the interpreter's version and ABI suffix."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return f"{sys.implementation.cache_tag}-{sys.hexversion:x}{suffix}"


def sources_hash(kernel_dir: Path, sources: Sequence[str]) -> str:
    """SHA-256 over each source's path (relative to `kernel/`) and bytes, in the given order."""
    digest = hashlib.sha256()
    for relative in sources:
        data = (kernel_dir / relative).read_bytes()
        digest.update(f"{relative}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def pointer_path() -> Path:
    return Path(sys.prefix) / POINTER_NAME


def current_build(kernel_dir: Path = KERNEL_DIR) -> dict[str, Path] | None:
    """The recorded build's module files (module name -> extension path) when it was built for
    this Python from the sources `kernel_dir` holds now, else None."""
    try:
        folder = Path(json.loads(pointer_path().read_text())["build"])
        manifest = json.loads((folder / MANIFEST_NAME).read_text())
        if manifest["python"] != python_tag():
            return None
        if manifest["sources_hash"] != sources_hash(kernel_dir, manifest["sources"]):
            return None
        return {name: folder / file for name, file in manifest["modules"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no build, or a torn record: the sources run


class CompiledFinder:
    """Finds the compiled build's modules (and its shared library) before any other finder."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(file))
        return importlib.machinery.ModuleSpec(fullname, loader, origin=str(file))


def installed_finder() -> CompiledFinder | None:
    return next((f for f in sys.meta_path if isinstance(f, CompiledFinder)), None)


def install() -> bool:
    """Put the compiled modules first on the import path when they may run; True if they do."""
    if pure_python_requested():
        return False
    if installed_finder() is not None:
        return True
    files = current_build()
    if files is None:
        return False
    sys.meta_path.insert(0, CompiledFinder(files))
    return True


def compiled_modules() -> list[str]:
    """The kernel modules imported compiled in this process (`aos version`, the tests)."""
    finder = installed_finder()
    if finder is None:
        return []
    extension = importlib.machinery.ExtensionFileLoader
    return sorted(
        name
        for name in finder.files
        if name.startswith("aos.kernel.")
        and isinstance(getattr(sys.modules.get(name), "__loader__", None), extension)
    )
