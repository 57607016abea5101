"""The README's keychain example as written (`aos flow run flows/examples/report.flow.yaml
--local --config flows/examples/tools.yaml`: DuckDB, then a shell command reading a secret
from the keychain), its refusal without the secret, and `--config` checked by `aos flow run`
and `aos adapter run` (a bad config is a typed error; the option is only for the kinds that
read it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aos.kernel.signing.keys import write_seed
from tests.flows_world.test_flow_cli import aos, failed_json, ok_json, refused

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "flows" / "examples" / "report.flow.yaml"
TOOLS = REPO / "flows" / "examples" / "tools.yaml"


def test_the_readme_report_example_runs_with_its_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AOS_SECRET_report_key", "s3cret")
    body = ok_json("flow", "run", REPORT, "--local", "--config", TOOLS)
    assert body["status"] == "completed"
    # sha256("ann")[:12], then the secret's length: the command saw the secret...
    assert body["result"] == {"exit_code": 0, "stderr": "", "stdout": "49915e0d7d4b\n6\n"}
    # ...and the history names it only by its placeholder.
    assert "s3cret" not in json.dumps(body["events"])


def test_the_report_example_without_its_secret_fails_as_authorization(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AOS_SECRET_report_key", raising=False)
    body = failed_json("flow", "run", REPORT, "--local", "--config", TOOLS)
    (finished,) = [e for e in body["events"] if e["event"] == "playbook.finished"]
    assert finished["error"]["kind"] == "authorization"
    assert finished["error"]["code"] == "keychain.missing"


def test_without_a_config_the_shell_tool_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AOS_SECRET_report_key", "s3cret")
    body = failed_json("flow", "run", REPORT, "--local")
    assert body["error"]["code"] == "shell.disabled"
    (failed,) = [e for e in body["events"] if e["event"] == "task.failed"]
    assert failed["error"]["code"] == "shell.disabled"


def test_a_bad_config_is_refused_before_anything_runs(tmp_path: Path) -> None:
    bad = tmp_path / "tools.yaml"
    bad.write_text("shell: {enabled: sometimes}\n")
    refused("adapter.tool_config_invalid", "flow", "run", REPORT, "--local", "--config", bad)
    key = tmp_path / "k.key"
    write_seed(key, bytes(32))
    node = ["--node", "http://127.0.0.1:1", "--key", key, "--config", bad]
    refused("adapter.tool_config_invalid", "adapter", "run", "tool-shell", *node)
    refused("adapter.tool_config_invalid", "adapter", "run", "keychain", *node)
    wrong_kind = aos("adapter", "run", "http", *node, "--name", "a/b@1", "--effect", "a/e@1")
    assert wrong_kind.exit_code == 2 and "--config is for" in wrong_kind.output


def test_the_config_may_come_from_aos_flow_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AOS_SECRET_report_key", "s3cret")
    monkeypatch.setenv("AOS_FLOW_TOOLS", str(TOOLS))
    assert ok_json("flow", "run", REPORT, "--local")["status"] == "completed"


def test_aos_flow_tools_does_not_bother_kinds_that_ignore_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AOS_FLOW_TOOLS", str(TOOLS))
    key = tmp_path / "k.key"
    write_seed(key, bytes(32))
    command = ["adapter", "run", "http", "--node", "http://127.0.0.1:1", "--key", key]
    result = aos(*command, "--name", "a/b@1", "--effect", "a/e@1", "--once", "--retries", "1")
    assert "--config is for" not in result.output
    assert result.exit_code == 1  # the node is not there: a typed error, not a usage error
