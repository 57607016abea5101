"""`aos module build`: build a workflow module from source, cached by source hash."""

from __future__ import annotations

from pathlib import Path

import click

from aos.cli.common import emit_json, handles_errors, json_option
from aos.kernel.wasm import build as builder


@click.group("module")
def module_group() -> None:
    """Workflow modules: build Python or C sources into WASM."""


@module_group.command("build")
@click.argument("src", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--abi",
    type=click.Choice(["core", "component"]),
    default=None,
    help="Python builds a component, C/Zig a core module (the default for each).",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Build cache (default $AOS_CACHE_DIR/builds, else ~/.cache/aos/builds).",
)
@json_option
@handles_errors
def build_command(src: Path, abi: str | None, cache_dir: Path | None, as_json: bool) -> None:
    """Build SRC (a .py file, a directory with a Python workflow, or a .c/.zig file) and print
    the module hash and the artifact path. An unchanged source is a cache hit.

    Builds are reproducible (the same source and tools give the same bytes, whatever the
    cache) on Linux x86_64/aarch64 with seccomp user notification and the `build` extra's
    Zig; elsewhere a Python build still succeeds but is reported as NOT reproducible."""
    chosen: builder.Abi | None = "core" if abi == "core" else "component" if abi else None
    result = builder.build(src, abi=chosen, cache_dir=cache_dir)
    if as_json:
        emit_json(
            {
                "abi": result.abi,
                "cached": result.cached,
                "module_hash": str(result.wasm_hash),
                "path": str(result.wasm_path),
                "reproducible": result.reproducible,
                "source_hash": str(result.source_hash),
            }
        )
        return
    click.echo(result.wasm_hash)
    click.echo(result.wasm_path)
    cached = "cached" if result.cached else "built"
    size = result.wasm_path.stat().st_size
    click.echo(f"{result.abi}, {cached}, {size} bytes, {_reproducibility(result)}", err=True)


def _reproducibility(result: builder.BuildResult) -> str:
    if result.reproducible:
        return "reproducible"
    return "NOT reproducible: a rebuild may give other bytes (see `aos module build --help`)"
