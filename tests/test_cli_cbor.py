"""`aos --version`, `aos cbor encode|decode`: output, exit codes, error codes."""

from __future__ import annotations

import json

from click.testing import CliRunner

from aos.cli.main import main


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_version() -> None:
    code, out, _ = run("--version")
    assert code == 0
    assert out.startswith("aos, version ")


def test_encode_prints_canonical_hex() -> None:
    assert run("cbor", "encode", '{"b":2,"a":1}') == (0, "d9d9f7a2616101616202\n", "")


def test_encode_bare_and_bytes_and_stdin() -> None:
    assert run("cbor", "encode", "--bare", '{"$bytes": "00ff"}')[1] == "4200ff\n"
    assert run("cbor", "encode", "-", stdin="[1, 2.5]")[1] == "d9d9f78201f94100\n"


def test_encode_json_output() -> None:
    code, out, _ = run("cbor", "encode", "--json", "{}")
    assert code == 0
    assert json.loads(out) == {"hex": "d9d9f7a0", "bytes": 4}


def test_decode_prints_json_and_diagnostic() -> None:
    assert run("cbor", "decode", "d9d9f7a2616101616202") == (0, '{"a": 1, "b": 2}\n', "")
    assert run("cbor", "decode", "--diag", "d9d9f7a2616101616202")[1] == '55799({"a": 1, "b": 2})\n'
    assert run("cbor", "decode", "--diag", "5f42010243030405ff")[1] == "(_ h'0102', h'030405')\n"


def test_decode_json_reports_canonical_form() -> None:
    code, out, _ = run("cbor", "decode", "--json", "a2616202616101")
    assert code == 0
    assert json.loads(out) == {"value": {"a": 1, "b": 2}, "canonical": False}


def test_decode_errors_exit_1_with_code_and_hint() -> None:
    code, out, err = run("cbor", "decode", "--require-canonical", "a2616202616101")
    assert code == 1
    assert err.startswith("error[cbor.non_canonical]")
    assert "hint:" in err
    code, out, _ = run("cbor", "decode", "--json", "d9d9f70102")
    assert code == 1
    assert json.loads(out)["error"]["code"] == "cbor.trailing_bytes"


def test_bad_arguments() -> None:
    assert run("cbor", "decode", "xyz")[0] == 1
    assert run("cbor", "decode", "--json", "xyz")[1].count("cli.invalid_hex") == 1
    assert run("cbor", "encode", "{")[2].startswith("error[input.invalid_json]")
    assert run("cbor", "encode", '{"k": 18446744073709551616}')[2].startswith(
        "error[cbor.integer_range]"
    )
    assert run("cbor", "frobnicate")[0] == 2
    assert run("cbor", "encode")[0] == 2
