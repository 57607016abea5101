"""`aos cbor encode|decode`: canonical CBOR from the command line."""

from __future__ import annotations

import json
import sys

import click

from aos.cli.common import emit_json, handles_errors, json_option
from aos.kernel import cbor
from aos.kernel.errors import InvalidInputError
from aos.kernel.text import jsontext


class InvalidHexError(InvalidInputError):
    code = "cli.invalid_hex"
    hint = "pass the bytes as hexadecimal digits, e.g. d9d9f7a0, or - to read them from stdin"


def _argument_text(text: str) -> str:
    return sys.stdin.read() if text == "-" else text


@click.group("cbor")
def cbor_group() -> None:
    """Canonical CBOR: encode JSON, decode hex."""


@cbor_group.command("encode")
@click.argument("json_text", metavar="JSON")
@click.option("--bare", is_flag=True, help="Omit the self-describe tag 55799 (d9d9f7).")
@json_option
@handles_errors
def encode_command(json_text: str, bare: bool, as_json: bool) -> None:
    """Print the canonical CBOR of JSON as hex. `{"$bytes": "<hex>"}` stands for a byte string."""
    parsed = jsontext.parse(_argument_text(json_text))
    data = cbor.encode(cbor.from_json(parsed), self_describe=not bare)
    if as_json:
        emit_json({"hex": data.hex(), "bytes": len(data)})
    else:
        click.echo(data.hex())


@cbor_group.command("decode")
@click.argument("hex_text", metavar="HEX")
@click.option("--diag", is_flag=True, help="Print RFC 8949 diagnostic notation of any CBOR item.")
@click.option("--require-canonical", is_flag=True, help="Fail unless the bytes are aos-canonical.")
@json_option
@handles_errors
def decode_command(hex_text: str, diag: bool, require_canonical: bool, as_json: bool) -> None:
    """Decode hex CBOR and print it as JSON (strict aos rules), or as diagnostic notation."""
    text = "".join(_argument_text(hex_text).split())
    try:
        data = bytes.fromhex(text)
    except ValueError:
        raise InvalidHexError("not hexadecimal") from None
    if diag:
        notation = cbor.diagnostic(data)
        if as_json:
            emit_json({"diagnostic": notation})
        else:
            click.echo(notation)
        return
    value = cbor.decode(data, canonical=require_canonical)
    if as_json:
        emit_json({"value": cbor.to_json(value), "canonical": cbor.is_canonical(data)})
    else:
        click.echo(json.dumps(cbor.to_json(value), ensure_ascii=False, sort_keys=True))
