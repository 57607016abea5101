"""`aos.kernel.air` and `aos.kernel.wasm` import their modules on first use (PEP 562): every
public name must be the object its home module defines, whatever was imported before it. A
name that is also a module of the package would be bound over by importing that module, so
none may be (this once broke `from aos.kernel.air import normalize`)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from types import ModuleType

import pytest

LAZY_PACKAGES = ["aos.kernel.air", "aos.kernel.wasm"]

_PROBE = """
import importlib, pkgutil, sys
package = importlib.import_module(sys.argv[1])
for found in pkgutil.iter_modules(package.__path__):   # every module first, then each name
    importlib.import_module(f"{package.__name__}.{found.name}")
for name in package.__all__:
    home = importlib.import_module(f"{package.__name__}.{package._HOMES[name]}")
    assert getattr(package, name) is getattr(home, name), name
print("ok")
"""


def _submodules(package: ModuleType) -> set[str]:
    return {found.name for found in pkgutil.iter_modules(package.__path__)}


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_every_public_name_has_a_home_and_none_is_a_module_name(name: str) -> None:
    package = importlib.import_module(name)
    homes: dict[str, str] = package._HOMES
    assert sorted(package.__all__) == sorted(homes)
    assert set(homes.values()) <= _submodules(package)
    assert not set(homes) & _submodules(package)


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_each_name_is_its_homes_object_after_every_module_was_imported(name: str) -> None:
    probed = subprocess.run(
        [sys.executable, "-c", _PROBE, name], capture_output=True, text=True, timeout=120
    )
    assert probed.stdout.strip() == "ok", probed.stderr
