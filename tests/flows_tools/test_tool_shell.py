"""The shell tool (flows/tools/shell.py, spec/11 §1.2): refused unless the world enables it;
args reach the command as environment variables, never as command text (no injection); the
adapter's own environment (secrets included) never reaches the child; keychain placeholders
in env are the only way a secret gets in; output and time are bounded."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import run_tool
from aos.flows.tools.keychain import Keychain
from aos.flows.tools.outcomes import ToolOutcome
from aos.flows.tools.shell import ShellSettings

SHELL = "aos/tool.shell@1"
PLACEHOLDER_NAMES = re.compile(r"\$\{keychain:([A-Za-z_][A-Za-z0-9_]*)")


def call(
    tool: dict[str, Any],
    args: Any = None,
    *,
    enabled: bool = True,
    keychain: Keychain | None = None,
    grants: list[dict[str, Any]] | None = None,
    **settings: Any,
) -> ToolOutcome:
    """Run a shell call; `grants` are its `keychain` (by default each `env` variable may
    have the entries its placeholders name, as if the definition wrote `keychain.NAME`)."""
    context = ToolContext(
        intent="i", shell=ShellSettings(enabled=enabled, **settings), keychain=keychain
    )
    env = tool.get("env")
    if grants is None and isinstance(env, dict):
        grants = [
            {"path": ["env", key], "names": PLACEHOLDER_NAMES.findall(str(value))}
            for key, value in env.items()
        ]
    params = {"tool": {"kind": "shell", **tool}, "args": args, "keychain": grants}
    return run_tool(SHELL, params, context=context)


def ok(outcome: ToolOutcome) -> Any:
    assert outcome.status == "ok", outcome.payload
    return outcome.payload


def error(outcome: ToolOutcome, status: str = "error") -> dict[str, Any]:
    assert outcome.status == status, outcome.payload
    assert isinstance(outcome.payload, dict)
    return outcome.payload


def test_refused_unless_the_world_enables_it() -> None:
    refused = error(call({"command": "echo hi"}, enabled=False))
    assert refused["kind"] == "authorization" and refused["code"] == "shell.disabled"


def test_a_command_runs_and_its_output_is_the_result() -> None:
    assert ok(call({"command": "echo hi; echo oops >&2"})) == {
        "exit_code": 0,
        "stdout": "hi\n",
        "stderr": "oops\n",
    }
    assert ok(call({"argv": ["printf", "%s|", "a b", "c"]}))["stdout"] == "a b|c|"


def test_args_are_environment_never_command_text(tmp_path: Any) -> None:
    marker = tmp_path / "pwned"
    hostile = f"x; touch {marker}; $(touch {marker})"
    result = ok(call({"command": 'printf %s "$who"'}, {"who": hostile, "n": [1, 2]}))
    assert result["stdout"] == hostile
    assert not marker.exists()
    assert ok(call({"command": 'printf %s "$n"'}, {"n": [1, 2]}))["stdout"] == "[1, 2]"


def test_the_adapter_environment_does_not_reach_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AOS_SECRET_db", "hunter2")
    output = ok(call({"command": "env"}))["stdout"]
    assert "hunter2" not in output and "AOS_SECRET" not in output
    assert "PATH=" in output


def test_keychain_placeholders_in_env_become_the_secret() -> None:
    keychain = Keychain(env_prefix="T_", environ={"T_token": "s3cr3t"})
    env = {"TOKEN": "${keychain:token}"}
    check = {"command": '[ "$TOKEN" = s3cr3t ] && echo same', "env": env}
    assert ok(call(check, keychain=keychain))["stdout"] == "same\n"
    missing = error(call({"command": "true", "env": {"X": "${keychain:nope}"}}, keychain=keychain))
    assert missing["kind"] == "authorization" and missing["code"] == "keychain.missing"


def test_a_placeholder_the_definition_did_not_put_there_stays_text() -> None:
    """spec/11 §1.7: a secret goes only where the call's grants say the definition named
    it; a placeholder in `args` (a workload value, say) or in another variable is text."""
    keychain = Keychain(env_prefix="T_", environ={"T_token": "s3cr3t", "T_db": "pw"})
    command = 'printf "%s|%s|%s" "$FROM_ARGS" "$OTHER" "$TOKEN"'
    env = {"OTHER": "${keychain:token}", "TOKEN": "${keychain:token} ${keychain:db}"}
    grants = [{"path": ["env", "TOKEN"], "names": ["token"]}]
    printed = ok(call({"command": command, "env": env}, {"FROM_ARGS": "${keychain:token}"},
                      keychain=keychain, grants=grants))  # fmt: skip
    assert printed["stdout"] == "${keychain:token}|${keychain:token}|*** ${keychain:db}"
    spec = {"command": 'printf %s "$TOKEN"', "spec": {"env": {"TOKEN": "${keychain:token}"}}}
    granted = [{"path": ["spec", "env"], "names": ["token"]}]
    assert ok(call(spec, keychain=keychain, grants=granted))["stdout"] == "***"
    assert ok(call(spec, keychain=keychain, grants=[]))["stdout"] == "${keychain:token}"


def test_a_non_zero_exit_is_an_error_with_the_output_end() -> None:
    failed = error(call({"command": "echo partial; echo bad >&2; exit 3"}))
    assert failed["code"] == "shell.exit"
    assert failed["shell"] == {"exit_code": 3, "stdout": "partial\n", "stderr": "bad\n"}


def test_output_over_its_bound_is_an_error_at_the_edge() -> None:
    assert ok(call({"command": "printf 12345"}, output_bytes_max=5))["stdout"] == "12345"
    over = error(call({"command": "printf 123456"}, output_bytes_max=5))
    assert over["code"] == "shell.too_large"
    started = time.monotonic()
    flood = error(call({"command": "yes"}, output_bytes_max=1000))
    assert flood["code"] == "shell.too_large"
    assert time.monotonic() - started < 10


def test_a_command_over_its_time_is_killed_with_its_children() -> None:
    started = time.monotonic()
    timed = error(call({"command": "sleep 30 & sleep 30", "timeout_ms": 300}), "timeout")
    assert timed["code"] == "shell.timeout"
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    "tool",
    [
        {},
        {"command": "true", "argv": ["true"]},
        {"argv": []},
        {"argv": ["a", 1]},
        {"command": "   "},
        {"command": "true", "env": {"1BAD": "x"}},
        {"command": "true", "env": "X=1"},
        {"command": "true", "cwd": "/"},
        {"command": "a\0b"},
    ],
)
def test_bad_specs_are_tool_invalid(tool: dict[str, Any]) -> None:
    assert error(call(tool))["code"] == "tool.invalid"


def test_bad_args_keys_are_tool_invalid() -> None:
    assert error(call({"command": "true"}, {"not a name": 1}))["code"] == "tool.invalid"


def test_a_secret_the_command_prints_is_scrubbed_from_the_result() -> None:
    keychain = Keychain(env_prefix="T_", environ={"T_token": "s3cr3t-value"})
    env = {"TOKEN": "${keychain:token}"}
    printed = ok(call({"command": 'echo "got $TOKEN"', "env": env}, keychain=keychain))
    assert printed["stdout"] == "got ***\n"
    failed = error(call({"command": 'echo "$TOKEN" >&2; exit 1', "env": env}, keychain=keychain))
    assert "s3cr3t" not in str(failed)
