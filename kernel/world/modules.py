"""Turning a manifest's module artifacts into WASM bytes.

An authored `defmodule` may name a built `.wasm` file, or the source of one: a Python
workflow (a `.py` file or a folder) or a C/Zig file. Sources are built through the build cache
(`aos.kernel.wasm.build`), so an unchanged module is never rebuilt; the world stores the
resulting bytes in its own CAS, so it never depends on the cache afterwards.
"""

from __future__ import annotations

from pathlib import Path

from aos.kernel.air.errors import AirError
from aos.kernel.air.loader import ArtifactResolver, hash_artifact_file
from aos.kernel.errors import AosError
from aos.kernel.hashing import Hash
from aos.kernel.wasm.build import build_c, build_python

_C_SUFFIXES = frozenset({".c", ".zig"})


class ModuleBuildFailedError(AirError):
    code = "air.module_build_failed"
    hint = "the module's source did not build; run `aos module build SRC` to see the details"


def building_resolver(built: dict[Hash, Path]) -> ArtifactResolver:
    """An artifact resolver that builds sources and records where each hash's bytes are."""

    def resolve(path: Path) -> Hash:
        if path.suffix == ".wasm":
            hash_ = hash_artifact_file(path)
            built[hash_] = path
            return hash_
        try:
            if path.suffix in _C_SUFFIXES:
                result = build_c(path)
            elif path.suffix == ".py" or path.is_dir():
                result = build_python(path)
            else:
                raise ModuleBuildFailedError(
                    f"{path.name}: an artifact is a .wasm file, a .py file or folder, or .c/.zig"
                )
        except AirError:
            raise
        except AosError as error:
            raise ModuleBuildFailedError(f"{path}: {error.code}: {error.message}") from None
        built[result.wasm_hash] = result.wasm_path
        return result.wasm_hash

    return resolve
