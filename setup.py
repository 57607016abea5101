"""Which packages and data files the distribution ships (the metadata is in pyproject.toml).

The source folders are not laid out as import paths (`kernel/` is `aos.kernel`), so the
packages are discovered under each root and renamed here: every subpackage ships without
anyone listing it. Data the package reads at run time lives inside it and is found through
it (`importlib.resources`), never through the source tree: the WIT world the module builds
use, the flow interpreter's sources and the flow world's manifest (links into `modules/` and
`manifests/`, which stay where their readers expect them).

A wheel also carries the flow interpreter component (`aos/flows/interpreter.wasm`), so a
plain `pip install` runs flows: it is built here from the packaged sources (through the build
cache) and refused unless it is the pinned one (`flows/interpreter.pin.json`,
`aos.flows.interpreter`); the build environment's versions are pinned in pyproject.toml. An
editable install has no component: its flow worlds build the sources through the cache.
"""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

PACKAGE_ROOTS = {
    # The public Python API (`import aos`, `aos.testing`): the package's own __init__.
    "aos": "api",
    "aos.kernel": "kernel",
    "aos.cli": "cli",
    "aos.flows": "flows",
    "aos_sdk": "modules/sdk/aos_sdk",
    # The flow interpreter's guest package: built into the component from
    # flows/interpreter-module, and importable natively (its tests, the bench's profile).
    "aos_flow": "modules/flow/aos_flow",
}

PACKAGE_DATA = {
    "aos.kernel.wasm.wit": ["*.wit"],
    # The SDK's compiled codec, built into every Python component (aos.kernel.wasm.build).
    "aos_sdk": ["*.c"],
    "aos.flows.examples": ["*.yaml", "*.flow", "*.json"],
    # The web inspector's pages, styles and vendored htmx; the flow pages' templates.
    "aos.kernel.node": ["templates/*.html", "static/*"],
    "aos.flows.serve": ["templates/*.html"],
    "aos.flows.serve.schedules": ["templates/*.html"],
    "aos.flows": [
        "interpreter-module/*.py",
        "interpreter-module/aos_flow/*.py",
        "interpreter-module/*.txt",
        "world-manifest/*.yaml",
        "world-manifest/defs/*.yaml",
        "interpreter.pin.json",
    ],
}


def discover() -> list[str]:
    """Every importable folder under each root (data folders such as `wit/` included, as
    namespace packages; the `-`-named links are data only)."""
    packages = []
    for name, folder in PACKAGE_ROOTS.items():
        packages.append(name)
        for sub in find_namespace_packages(folder):
            if all(part.isidentifier() for part in sub.split(".")):
                packages.append(f"{name}.{sub}")
    return packages


class BuildPyWithInterpreter(build_py):
    """`build_py`, then the pinned flow interpreter component into the built package."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            ship_interpreter(Path(self.build_lib).resolve())


def ship_interpreter(build_lib: Path) -> None:
    """Build the interpreter from the packaged sources, as an installed aos would (the
    packages just built come first on the path), check it against the pin, copy it in."""
    target = build_lib / "aos" / "flows" / "interpreter.wasm"
    path = os.pathsep.join(filter(None, [str(build_lib), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "aos.flows.interpreter", "ship", str(target)]
    subprocess.run(command, env={**os.environ, "PYTHONPATH": path}, check=True)


setup(
    packages=discover(),
    package_dir=PACKAGE_ROOTS,
    package_data=PACKAGE_DATA,
    cmdclass={"build_py": BuildPyWithInterpreter},
)
