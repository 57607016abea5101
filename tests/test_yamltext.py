"""The bounded YAML reader (kernel/text/yamltext.py) and every YAML reader routed through it: an
alias bomb (a "billion laughs", or one made of merge keys) is refused at once with a typed
error by `aos hash`, `aos air check`, `aos flow check`, the tool config and a secrets file;
nesting reached through an alias counts; a cycle is refused; honest aliases still read."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from aos.cli.main import main
from aos.flows.tools.config import ToolConfigInvalidError, load_config
from aos.flows.tools.keychain import Keychain, KeychainSourceError
from aos.kernel.air.loader import DocumentInvalidError, read_document
from aos.kernel.text import yamltext

REFUSED_WITHIN_S = 1.0


def laughs(levels: int = 9) -> str:
    """Nine lists of nine aliases to the list before: 9**9 strings, in about 430 bytes."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def merges(levels: int = 30) -> str:
    """Each map merges the one before twice: PyYAML's merge flattening doubles per level."""
    lines = ["k0: &k0 {a: 1}"]
    lines += [f"k{i}: &k{i} {{<<: [*k{i - 1}, *k{i - 1}]}}" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


BOMB = laughs()


def test_the_bomb_is_small() -> None:
    assert len(BOMB.encode()) < 600


@pytest.mark.parametrize("text", [BOMB, merges()], ids=["laughs", "merges"])
def test_an_alias_bomb_is_refused_at_once(text: str) -> None:
    started = time.monotonic()
    with pytest.raises(yamltext.YamlTooLargeError) as caught:
        yamltext.parse(text)
    assert time.monotonic() - started < REFUSED_WITHIN_S
    assert caught.value.code == "input.yaml_too_large"
    assert caught.value.detail["limit"] == yamltext.YAML_NODES_MAX_DEFAULT


def test_the_node_bound_counts_aliases_expanded_at_its_edge() -> None:
    # The root map, its key and list, the anchored list (1 + 3), its key, and 2 aliases of 4.
    text = "a: &a [1, 2, 3]\nb: [*a, *a]\n"
    assert yamltext.parse(text, nodes_max=16) == {"a": [1, 2, 3], "b": [[1, 2, 3], [1, 2, 3]]}
    with pytest.raises(yamltext.YamlTooLargeError):
        yamltext.parse(text, nodes_max=15)


def test_nesting_reached_through_an_alias_counts() -> None:
    anchored = "a: &a " + "[" * 40 + "]" * 40 + "\n"
    assert yamltext.parse(anchored + "b: " + "[" * 20 + "*a" + "]" * 20)["b"]
    with pytest.raises(yamltext.YamlTooDeepError) as caught:
        yamltext.parse(anchored + "b: " + "[" * 30 + "*a" + "]" * 30)
    assert caught.value.code == "input.yaml_too_deep"
    with pytest.raises(yamltext.YamlTooDeepError):
        yamltext.parse("[" * 100_000)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("&a [*a]", "cycle"),
        ("a: &a {b: *a}", "cycle"),
        ("a: 1\na: 2", "duplicate key"),
        ("a: *nowhere", "undefined alias"),
        ("a: 1\n---\nb: 2", "2 documents"),
        ("a: [", "line 1"),
    ],
)
def test_bad_yaml_is_a_typed_error(text: str, says: str) -> None:
    with pytest.raises(yamltext.YamlInvalidError, match=says) as caught:
        yamltext.parse(text)
    assert caught.value.code == "input.invalid_yaml"


def test_honest_aliases_merges_and_streams_still_read() -> None:
    text = "base: &base {x: 1, y: 2}\nover: {<<: *base, y: 3}\nwhen: 2024-01-01\n"
    assert yamltext.parse(text) == {
        "base": {"x": 1, "y": 2},
        "over": {"x": 1, "y": 3},
        "when": "2024-01-01",  # dates stay text
    }
    assert str(yamltext.parse("when: 2024-01-01", timestamps=True)["when"]) == "2024-01-01"
    assert yamltext.parse_all("a: 1\n---\nb: &b [1]\nc: *b\n") == [{"a": 1}, {"b": [1], "c": [1]}]
    assert yamltext.parse("") is None


# --------------------------------------------------------------------------------------------
# Every reader


def invoke(*args: str) -> tuple[int, dict[str, object], float]:
    """Run the command twice and time the second: the first pays for the CLI's lazy imports."""
    CliRunner().invoke(main, [*args, "--json"])
    started = time.monotonic()
    result = CliRunner().invoke(main, [*args, "--json"])
    took = time.monotonic() - started
    return result.exit_code, json.loads(result.stdout), took


def test_aos_hash_refuses_the_bomb(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    code, answer, took = invoke("hash", str(bomb))
    assert code == 1 and took < REFUSED_WITHIN_S
    error = answer["error"]
    assert isinstance(error, dict) and error["code"] == "air.file_invalid"
    assert "yaml_nodes_max" in error["message"]
    with pytest.raises(DocumentInvalidError):
        read_document(bomb)


def test_aos_air_check_refuses_a_bomb_manifest(tmp_path: Path) -> None:
    folder = tmp_path / "air"
    folder.mkdir()
    (folder / "manifest.yaml").write_text(BOMB)
    code, answer, took = invoke("air", "check", str(folder))
    assert code == 1 and took < REFUSED_WITHIN_S
    assert "yaml_nodes_max" in json.dumps(answer)


def test_aos_flow_check_refuses_a_merge_bomb(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(merges())
    CliRunner().invoke(main, ["flow", "check", str(bomb), "--json"])  # the lazy imports
    started = time.monotonic()
    result = CliRunner().invoke(main, ["flow", "check", str(bomb), "--json"])
    assert time.monotonic() - started < REFUSED_WITHIN_S
    assert result.exit_code == 1
    assert "flow.limit" in result.stdout and "aliases expanded" in result.stdout


def test_the_tool_config_and_a_secrets_file_refuse_the_bomb(tmp_path: Path) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(BOMB)
    with pytest.raises(ToolConfigInvalidError, match="yaml_nodes_max"):
        load_config(config)
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(BOMB)
    with pytest.raises(KeychainSourceError, match="too large"):
        Keychain(file=secrets, env_prefix=None).lookup("a0")
