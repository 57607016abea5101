"""`aos air check DIR | aos air schemas OUT`: validate authored AIR, export JSON Schemas."""

from __future__ import annotations

from pathlib import Path

import click

from aos.cli.common import emit_json, fail, handles_errors, json_option, table
from aos.kernel.air import AirCheckError, export_schemas, load_manifest_dir
from aos.kernel.world.modules import building_resolver


@click.group("air")
def air_group() -> None:
    """AIR definitions: check an authored folder, export JSON Schemas."""


@air_group.command("check")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@json_option
@handles_errors
def check_command(directory: Path, as_json: bool) -> None:
    """Validate the authored AIR folder DIRECTORY (manifest.json|yaml and definition files).

    Prints the manifest hash and counts, or every issue found (exit 1). Module sources (a .py
    file or folder, .c, .zig) are built through the build cache, as `aos world create` does,
    so the hashes are those of the modules a world would run.
    """
    try:
        # Built paths are not needed here; the resolver records them for world genesis.
        loaded = load_manifest_dir(directory, artifact_resolver=building_resolver({}))
    except AirCheckError as error:
        if not as_json:
            rows = [[i.code, i.path, i.message, i.file or ""] for i in error.issues]
            click.echo(table(["CODE", "PATH", "MESSAGE", "FILE"], rows))
        fail(error, as_json=as_json)
        return
    counts = loaded.counts()
    if as_json:
        emit_json(
            {
                "ok": True,
                "manifest_hash": str(loaded.manifest_hash),
                "counts": counts,
                "definitions": [
                    {
                        "name": name,
                        "kind": definition.kind,
                        "hash": str(loaded.hashes[name]),
                        "file": loaded.files.get(name),
                    }
                    for name, definition in loaded.definitions.items()
                ],
            }
        )
        return
    click.echo(f"OK  manifest {loaded.manifest_hash}")
    click.echo("    " + ", ".join(f"{kind} {count}" for kind, count in counts.items()))


@air_group.command("schemas")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@json_option
@handles_errors
def schemas_command(out: Path, as_json: bool) -> None:
    """Write the JSON Schema of every AIR document kind into OUT (spec/schemas in the repo)."""
    written = export_schemas(out)
    if as_json:
        emit_json({"written": [str(path) for path in written]})
    else:
        for path in written:
            click.echo(path)
