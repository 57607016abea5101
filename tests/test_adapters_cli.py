"""`aos adapter keygen` and `aos adapter run`: output, `--json`, argument errors, exit codes
(0 ok, 1 a user-facing error with its code, 2 bad usage)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aos.cli.main import main
from aos.kernel.signing.keys import read_seed, write_seed
from aos.kernel.signing.signatures import public_key_of
from tests.test_adapters_sdk import ADAPTER, EFFECT, SEED, FakeNode


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def error_of(*args: str) -> dict[str, Any]:
    code, out, err = run(*args, "--json")
    assert code == 1, (out, err)
    error: dict[str, Any] = json.loads(out)["error"]
    return error


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "adapter.key"
    write_seed(path, SEED)
    return path


# --------------------------------------------------------------------------------------------
# keygen


def test_keygen_writes_a_private_key_file_and_prints_the_public_key(tmp_path: Path) -> None:
    out = tmp_path / "http.key"
    code, stdout, stderr = run("adapter", "keygen", "demo/http@1", "--out", str(out))
    assert code == 0
    public_key = stdout.strip()
    assert len(public_key) == 64 and public_key == public_key_of(read_seed(out)).hex()
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert f"public_key: {public_key}" in stderr and "defadapter" in stderr


def test_keygen_json_and_default_file_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, stdout, _ = run("adapter", "keygen", "com.acme/pay-http@2", "--json")
    assert code == 0
    body = json.loads(stdout)
    assert body["name"] == "com.acme/pay-http@2"
    assert body["key_file"] == "com.acme_pay-http_2.key"
    assert public_key_of(read_seed(tmp_path / body["key_file"])).hex() == body["public_key"]


def test_keygen_refuses_to_replace_a_key_unless_forced(key_file: Path) -> None:
    error = error_of("adapter", "keygen", ADAPTER, "--out", str(key_file))
    assert error["code"] == "adapter.key_invalid"
    assert read_seed(key_file) == SEED
    code, _, _ = run("adapter", "keygen", ADAPTER, "--out", str(key_file), "--force")
    assert code == 0 and read_seed(key_file) != SEED


def test_keygen_usage_errors(tmp_path: Path) -> None:
    assert run("adapter", "keygen", "not a name")[0] == 2
    assert run("adapter", "keygen")[0] == 2


# --------------------------------------------------------------------------------------------
# run: argument errors


def base(key_file: Path, node: str = "http://127.0.0.1:9") -> list[str]:
    return ["--node", node, "--key", str(key_file), "--name", ADAPTER, "--effect", EFFECT]


@pytest.mark.parametrize(
    "args",
    [
        ["adapter", "run", "ftp"],
        ["adapter", "run", "http", "--key", "k", "--name", ADAPTER, "--effect", EFFECT],
        ["adapter", "run", "http", "--node", "http://x", "--key", "k", "--name", ADAPTER],
        [
            "adapter",
            "run",
            "http",
            "--node",
            "x:1",
            "--key",
            "k",
            "--name",
            ADAPTER,
            "--effect",
            "e",
        ],
        [
            "adapter",
            "run",
            "http",
            "--node",
            "http://x",
            "--key",
            "k",
            "--name",
            "bad",
            "--effect",
            "e",
        ],
        ["adapter", "run", "http", "--concurrency", "0"],
    ],
)
def test_run_usage_errors(args: list[str]) -> None:
    assert run(*args)[0] == 2


def test_run_options_of_the_other_kind_are_usage_errors(key_file: Path) -> None:
    assert run("adapter", "run", "python", *base(key_file), "--url-map", "a=http://b")[0] == 2
    assert run("adapter", "run", "http", *base(key_file), "--function", "m:f")[0] == 2
    assert run("adapter", "run", "python", *base(key_file))[0] == 2  # no --function


def test_run_key_file_errors(tmp_path: Path) -> None:
    missing = error_of("adapter", "run", "http", *base(tmp_path / "absent.key"))
    assert missing["code"] == "adapter.key_invalid"
    bad = tmp_path / "bad.key"
    bad.write_text("not hex\n")
    assert error_of("adapter", "run", "http", *base(bad))["code"] == "adapter.key_invalid"


def test_run_configuration_errors(key_file: Path, tmp_path: Path) -> None:
    error = error_of("adapter", "run", "python", *base(key_file), "--function", "no_colon")
    assert error["code"] == "adapter.config_invalid"
    error = error_of("adapter", "run", "http", *base(key_file), "--url-map", "https://a=ftp://b")
    assert error["code"] == "adapter.config_invalid"


def test_run_against_no_node_gives_up_after_its_retries(key_file: Path) -> None:
    error = error_of("adapter", "run", "http", *base(key_file), "--retries", "2")
    assert error["code"] == "adapter.node_unreachable"


# --------------------------------------------------------------------------------------------
# run --once against a fake node


def test_run_once_settles_and_prints_json_lines(key_file: Path, module_folder: Path) -> None:
    (module_folder / "fns.py").write_text(
        "def answer(params):\n    return {'ok': params['n'] == 1}\n"
    )
    node = FakeNode()
    intent = node.add(1)
    with node.serve() as url:
        code, stdout, stderr = run(
            "adapter", "run", "python", *base(key_file, url), "--once", "--json",
            "--function", "fns:answer", "--module-path", str(module_folder),
        )  # fmt: skip
    assert code == 0, stderr
    outcome, summary = (json.loads(line) for line in stdout.splitlines())
    assert outcome["intent"] == intent and outcome["status"] == "ok" and outcome["seq"] == 101
    assert outcome["issuer_ref"] == "ref-1"
    assert summary == {
        "summary": {
            "leases": 1,
            "settled": 1,
            "duplicates": 0,
            "refused": 0,
            "unposted": 0,
            "by_status": {"ok": 1},
        }
    }
    assert node.settled[intent]["payload"] == {"ok": True}
    assert "serving demo/noop@1" in stderr


def test_run_once_exits_1_when_a_receipt_is_refused(key_file: Path, module_folder: Path) -> None:
    (module_folder / "fns.py").write_text("def answer(params):\n    return {}\n")
    node = FakeNode()
    node.add(1)
    node.refuse_receipts = "receipt.adapter_not_allowed"
    with node.serve() as url:
        code, stdout, stderr = run(
            "adapter", "run", "python", *base(key_file, url), "--once",
            "--function", "fns:answer", "--module-path", str(module_folder),
        )  # fmt: skip
    assert code == 1
    assert "refused" in stdout and "receipt.adapter_not_allowed" in stdout
    assert "adapter.unsettled" in stderr
