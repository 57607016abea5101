"""`aos hash FILE [--raw]`: the content hash of a JSON/YAML value or of raw bytes."""

from __future__ import annotations

from pathlib import Path

import click

from aos.cli.common import emit_json, handles_errors, json_option
from aos.kernel import cbor
from aos.kernel.air.loader import read_document
from aos.kernel.hashing import hash_bytes


@click.command("hash")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--raw", is_flag=True, help="Hash the file's bytes as they are (WASM, blobs).")
@json_option
@handles_errors
def hash_command(file: Path, raw: bool, as_json: bool) -> None:
    """Print the BLAKE3 hash of FILE.

    Without --raw, FILE is one JSON (.json) or YAML (.yaml, .yml) value and the hash is that
    of its canonical CBOR; {"$bytes": "<hex>"} stands for a byte string. A definition written
    in its canonical form hashes to its definition hash (`aos air check --json` lists those).
    """
    if raw:
        data = file.read_bytes()
        digest = hash_bytes(data)
        size = len(data)
    else:
        encoded = cbor.encode(cbor.from_json(read_document(file)))
        digest = hash_bytes(encoded)
        size = len(encoded)
    if as_json:
        emit_json({"hash": str(digest), "mode": "raw" if raw else "value", "bytes": size})
    else:
        click.echo(digest)
