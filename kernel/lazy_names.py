"""A package's public names imported from their modules on first use (PEP 562): the
`__getattr__` of `aos.kernel.air` and `aos.kernel.wasm`, so that importing the package (or
one light module of it) does not import every module behind its names. A name must not also
be a module of the package: importing that module would bind over it
(tests/test_lazy_packages.py checks both packages)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def module_getattr(
    package: str, homes: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """The `__getattr__` of `package`, whose public names live in the modules `homes` maps
    them to; each name found is kept in `namespace` (the package's globals), so later reads
    skip it."""

    def find(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        namespace[name] = value
        return value

    return find
