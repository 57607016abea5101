"""Which packages and data files the distribution ships (the metadata is in pyproject.toml).

The source folders are not laid out as import paths (`kernel/` is `aos.kernel`), so the
packages are discovered under each root and renamed here: every subpackage ships without
anyone listing it. Data the package reads at run time lives inside it and is found through
it (`importlib.resources`), never through the source tree: the WIT world the module builds
use, the flow interpreter's sources and the flow world's manifest (links into `modules/` and
`manifests/`, which stay where their readers expect them).
"""

from setuptools import find_namespace_packages, setup

PACKAGE_ROOTS = {
    "aos.kernel": "kernel",
    "aos.cli": "cli",
    "aos.flows": "flows",
    "aos_sdk": "modules/sdk/aos_sdk",
}

PACKAGE_DATA = {
    "aos.kernel.wasm.wit": ["*.wit"],
    "aos.flows.examples": ["*.yaml", "*.flow", "*.json"],
    # The web inspector's pages, styles and vendored htmx; the flow pages' templates.
    "aos.kernel.node": ["templates/*.html", "static/*"],
    "aos.flows": [
        "templates/*.html",
        "interpreter-module/*.py",
        "interpreter-module/*.txt",
        "world-manifest/*.yaml",
        "world-manifest/defs/*.yaml",
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


setup(packages=discover(), package_dir=PACKAGE_ROOTS, package_data=PACKAGE_DATA)
