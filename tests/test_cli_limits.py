"""Limits from one place (cli/limit_options.py, spec/04-effects.md §10.1): every field of
`NodeLimits` and `PythonLimits` is settable as its option, as `--limit NAME=VALUE` and from a
TOML settings file, with that precedence over the default; unknown names, bad values, values
past a bound and bad files are typed refusals that start nothing. Against a real `aos node up`
too."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from aos.cli.common import handles_errors, json_option
from aos.cli.limit_options import (
    LIMIT_PAIR_CHARS_MAX,
    LIMIT_PAIRS_MAX,
    LIMITS_FILE_BYTES_MAX,
    limit_options,
    option_name,
)
from aos.cli.main import main
from aos.kernel.adapters.builtin.python_limits import MEMORY_BYTES_MIN, PythonLimits
from aos.kernel.adapters.sdk import AdapterConfigInvalidError
from aos.kernel.limits_config import LimitField, limit_fields
from aos.kernel.node.errors import NodeConfigError
from aos.kernel.node.limits import NodeLimits
from tests.auth_fixtures import node_http
from tests.test_node_process import make_world, node_process


def shows(cls: type) -> click.Command:
    """A command that takes the limits of `cls` and prints what they resolved to."""

    @click.command()
    @json_option
    @handles_errors
    @limit_options(cls, into="limits")
    def show(limits: Any, as_json: bool) -> None:
        click.echo(json.dumps(dataclasses.asdict(limits)))

    return show


COMMANDS = {NodeLimits: shows(NodeLimits), PythonLimits: shows(PythonLimits)}
FIELDS = [(cls, field) for cls in COMMANDS for field in limit_fields(cls)]


def resolved(*args: str, cls: type = NodeLimits) -> dict[str, Any]:
    result = CliRunner().invoke(COMMANDS[cls], list(args))
    assert result.exit_code == 0, result.output
    found: dict[str, Any] = json.loads(result.output)
    return found


def refused(*args: str, cls: type = NodeLimits) -> dict[str, Any]:
    result = CliRunner().invoke(COMMANDS[cls], [*args, "--json"])
    assert result.exit_code == 1, result.output
    error: dict[str, Any] = json.loads(result.output)["error"]
    return error


def other_value(field: LimitField) -> Any:
    """A valid value of the field that is not its default."""
    return field.default + 1 if field.kind is int else field.default + "-other"


def toml_value(value: Any) -> str:
    return json.dumps(value)  # an integer, or a basic string, is spelled alike in both


def limits_file(tmp_path: Path, text: str, name: str = "limits.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --------------------------------------------------------------------------------------------
# Each limit, three ways


@pytest.mark.parametrize("cls", list(COMMANDS), ids=lambda cls: cls.__name__)
def test_every_limit_has_an_option_named_after_its_field(cls: type) -> None:
    fields = limit_fields(cls)
    options = {opt for param in COMMANDS[cls].params for opt in param.opts}
    assert {option_name(field.name) for field in fields} <= options
    assert all(field.help for field in fields)


@pytest.mark.parametrize(("cls", "field"), FIELDS, ids=lambda item: getattr(item, "name", ""))
def test_each_limit_is_settable_all_three_ways(
    cls: type, field: LimitField, tmp_path: Path
) -> None:
    value = other_value(field)
    option = option_name(field.name)
    assert resolved(cls=cls)[field.name] == field.default
    assert resolved(option, str(value), cls=cls)[field.name] == value
    assert resolved("--limit", f"{field.name}={value}", cls=cls)[field.name] == value
    file = limits_file(tmp_path, f"[limits]\n{field.name} = {toml_value(value)}\n")
    assert resolved("--limits-file", file, cls=cls)[field.name] == value


def test_an_option_beats_limit_which_beats_the_file_which_beats_the_default(
    tmp_path: Path,
) -> None:
    file = limits_file(tmp_path, "[limits]\nlease_ms = 1\ntimer_tick_ms = 1\nhost_batch_max = 1\n")
    found = resolved(
        "--limits-file",
        file,
        "--limit",
        "timer_tick_ms=2",
        "--limit",
        "host_batch_max=2",
        "--host-batch-max",
        "3",
    )
    assert (found["lease_ms"], found["timer_tick_ms"], found["host_batch_max"]) == (1, 2, 3)
    assert found["request_bytes_max"] == NodeLimits().request_bytes_max
    # The option beats --limit even when it spells the default.
    default = str(NodeLimits().lease_ms)
    assert resolved("--limit", "lease_ms=5", "--lease-ms", default)["lease_ms"] == int(default)


def test_a_settings_file_may_be_empty_or_name_no_limit(tmp_path: Path) -> None:
    assert resolved("--limits-file", limits_file(tmp_path, ""))["lease_ms"] == 30_000
    assert resolved("--limits-file", limits_file(tmp_path, "[limits]\n"))["lease_ms"] == 30_000


# --------------------------------------------------------------------------------------------
# Refusals


def test_an_unknown_name_is_limit_unknown(tmp_path: Path) -> None:
    error = refused("--limit", "lease_seconds=5")
    assert error["code"] == "cli.limit_unknown"
    assert "lease_ms" in error["detail"]["known"]
    assert refused("--limit", "lease-ms=5")["code"] == "cli.limit_unknown"  # the field's name
    file = limits_file(tmp_path, "[limits]\nlease_seconds = 5\n")
    error = refused("--limits-file", file)
    assert error["code"] == "cli.limit_unknown" and error["path"] == file


@pytest.mark.parametrize(
    "pair",
    [
        "lease_ms=abc",
        "lease_ms=1.5",
        "lease_ms=",
        "lease_ms",
        "=5",
        "lease_ms=0",  # below its bound
        "lease_ms=-1",
        f"memory_bytes_max={MEMORY_BYTES_MIN - 1}",
        "cpu_s_max=0",
    ],
)
def test_a_bad_limit_value_is_limit_invalid(pair: str) -> None:
    cls = PythonLimits if pair.startswith(("memory", "cpu")) else NodeLimits
    assert refused("--limit", pair, cls=cls)["code"] == "cli.limit_invalid"


def test_the_limit_options_are_bounded_in_count_length_and_repetition() -> None:
    assert refused("--limit", "lease_ms=5", "--limit", "lease_ms=6")["code"] == "cli.limit_invalid"
    many = [arg for _ in range(LIMIT_PAIRS_MAX + 1) for arg in ("--limit", "lease_ms=5")]
    error = refused(*many)
    assert error["code"] == "cli.limit_invalid" and str(LIMIT_PAIRS_MAX) in error["message"]
    long = "lease_ms=" + "1" * LIMIT_PAIR_CHARS_MAX
    assert refused("--limit", long)["code"] == "cli.limit_invalid"
    # Just under the length bound, an integer that long is read, and is past every bound.
    assert refused("--limit", long[:LIMIT_PAIR_CHARS_MAX])["code"] == "cli.limit_invalid"


@pytest.mark.parametrize(
    "line",
    [
        'lease_ms = "5"',
        "lease_ms = 5.0",
        "lease_ms = true",
        "lease_ms = 0",
        "lease_ms = [5]",
        "worker_user = 5",
        f"memory_bytes_max = {MEMORY_BYTES_MIN - 1}",
    ],
)
def test_a_bad_value_in_the_file_is_limit_invalid(line: str, tmp_path: Path) -> None:
    file = limits_file(tmp_path, f"[limits]\n{line}\n")
    cls = NodeLimits if line.startswith("lease") else PythonLimits
    error = refused("--limits-file", file, cls=cls)
    assert error["code"] == "cli.limit_invalid" and error["path"] == file


def test_an_option_past_its_bound_is_a_usage_error() -> None:
    for cls, args in (
        (NodeLimits, ["--lease-ms", "0"]),
        (PythonLimits, ["--memory-bytes-max", str(MEMORY_BYTES_MIN - 1)]),
    ):
        result = CliRunner().invoke(COMMANDS[cls], args)
        assert result.exit_code == 2, result.output


@pytest.mark.parametrize(
    "content",
    [
        b"[limits\nlease_ms = 5\n",  # not TOML
        b"lease_ms = 5\n",  # a limit outside [limits]
        b"[limits]\nlease_ms = 5\n[node]\nbind = 'x'\n",  # a table beside it
        b"limits = 5\n",  # not a table
        b"[limits]\nlease_ms = 5 # \xff\n",  # not UTF-8
        b"a = " + b"[" * 30_000 + b"]" * 30_000 + b"\n",  # nests deeper than a parser recurses
    ],
    ids=["not-toml", "no-table", "other-table", "not-a-table", "not-utf8", "deep"],
)
def test_a_file_that_is_no_settings_file_is_limits_file_invalid(
    content: bytes, tmp_path: Path
) -> None:
    path = tmp_path / "limits.toml"
    path.write_bytes(content)
    error = refused("--limits-file", str(path))
    assert error["code"] == "cli.limits_file_invalid" and error["path"] == str(path)


def test_a_file_too_large_is_refused_before_it_is_read(tmp_path: Path) -> None:
    text = "[limits]\nlease_ms = 5\n"
    edge = limits_file(tmp_path, text + "#" * (LIMITS_FILE_BYTES_MAX - len(text) - 1) + "\n")
    assert Path(edge).stat().st_size == LIMITS_FILE_BYTES_MAX
    assert resolved("--limits-file", edge)["lease_ms"] == 5
    past = limits_file(tmp_path, text + "#" * (LIMITS_FILE_BYTES_MAX - len(text)) + "\n", "big")
    error = refused("--limits-file", past)
    assert error["code"] == "cli.limits_file_invalid" and "bytes" in error["message"]


def test_a_missing_file_is_limits_file_invalid(tmp_path: Path) -> None:
    error = refused("--limits-file", str(tmp_path / "absent.toml"))
    assert error["code"] == "cli.limits_file_invalid"


# --------------------------------------------------------------------------------------------
# The commands


def test_node_up_refuses_a_bad_limit_and_leaves_the_world_as_it_was(tmp_path: Path) -> None:
    world = make_world(tmp_path / "w")
    before = {path.name: path.read_bytes() for path in world.iterdir() if path.is_file()}
    for args in (["--limit", "lease_seconds=5"], ["--limit", "lease_ms=0"]):
        result = CliRunner().invoke(main, ["node", "up", "--world", str(world), *args, "--json"])
        assert result.exit_code == 1, result.output
        code = json.loads(result.output)["error"]["code"]
        assert code in ("cli.limit_unknown", "cli.limit_invalid")
    after = {path.name: path.read_bytes() for path in world.iterdir() if path.is_file()}
    assert after == before


def test_node_up_serves_with_the_limits_of_its_file_and_its_limit_options(tmp_path: Path) -> None:
    world = make_world(tmp_path / "w")
    file = limits_file(tmp_path, "[limits]\nrequest_bytes_max = 4096\njson_depth_max = 8\n")
    with node_process(world, "--limits-file", file, "--limit", "request_bytes_max=8192") as (
        url,
        _,
    ):
        # --limit beat the file's request_bytes_max; the file's json_depth_max holds.
        body = {"schema": "demo/Nope@1", "value": "x" * 6000}
        middling = node_http.post(f"{url}/v1/events", json=body)
        assert middling.status_code != 413, middling.text
        large = node_http.post(f"{url}/v1/events", json={**body, "value": "x" * 10_000})
        assert large.status_code == 413
        assert large.json()["error"]["detail"]["limit_name"] == "request_bytes_max"
        deep = node_http.post(f"{url}/v1/events", content=b"[" * 9 + b"]" * 9)
        assert deep.json()["error"]["code"] == "input.json_too_deep", deep.text


def test_adapter_run_refuses_a_python_limit_for_another_kind(tmp_path: Path) -> None:
    base = ["adapter", "run", "http", "--node", "http://127.0.0.1:9", "--key", "k.key"]
    base += ["--name", "demo/http@1", "--effect", "demo/fetch@1"]
    for args in (["--limit", "cpu_s_max=5"], ["--cpu-s-max", "5"]):
        result = CliRunner().invoke(main, [*base, *args])
        assert result.exit_code == 2 and "--cpu-s-max" in result.output, result.output
    file = limits_file(tmp_path, "[limits]\ncpu_s_max = 5\n")  # a file may serve every kind
    result = CliRunner().invoke(main, [*base, "--limits-file", file, "--json"])
    assert json.loads(result.output)["error"]["code"] == "adapter.key_invalid"  # got past it


def test_adapter_run_refuses_a_bad_python_limit(tmp_path: Path) -> None:
    base = ["adapter", "run", "tool-python", "--node", "http://127.0.0.1:9", "--key", "k.key"]
    result = CliRunner().invoke(main, [*base, "--limit", "cpu_s_max=0", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.output)["error"]["code"] == "cli.limit_invalid"


def test_the_help_says_the_precedence() -> None:
    for command, option in (
        (["node", "up"], "--request-bytes-max N"),
        (["adapter", "run"], "--cpu-s-max N"),
    ):
        text = CliRunner().invoke(main, [*command, "--help"]).output
        assert "--limits-file" in text and "--limit NAME=VALUE" in text and option in text
        assert "beats --limits-file" in " ".join(text.split())


def test_python_limits_past_their_bounds_refuse_to_be_made() -> None:
    with pytest.raises(AdapterConfigInvalidError, match="cpu_s_max must be at least 1"):
        PythonLimits(cpu_s_max=0)
    with pytest.raises(NodeConfigError, match="lease_ms must be an integer"):
        NodeLimits(lease_ms=True)
