"""The keychain's host side (flows/tools/keychain.py, flows/tools/config.py): where secrets come from (a
secrets file, then environment variables), the resolver's answer (references and keyed
fingerprints, never values), placeholder substitution, and bad sources and configs refused
with typed errors whose messages never quote a secret."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from aos.flows.tools.config import CONFIG_BYTES_MAX, ToolConfigInvalidError, load_config
from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import run_tool
from aos.flows.tools.keychain import (
    GRANT_PATH_DEPTH_MAX,
    GRANTS_MAX,
    SECRET_BYTES_MAX,
    SECRETS_FILE_BYTES_MAX,
    Grants,
    Keychain,
    KeychainMissingError,
    KeychainSourceError,
    fingerprint_key,
    resolve,
    substitute,
)
from aos.kernel import cbor

KEY = fingerprint_key(bytes(32))


def _file(tmp_path: Path, content: Any) -> Path:
    path = tmp_path / "secrets.yaml"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_the_file_first_then_the_environment(tmp_path: Path) -> None:
    keychain = Keychain(
        file=_file(tmp_path, {"a": "from-file", "m": {"user": "u", "port": 5432}}),
        env_prefix="S_",
        environ={"S_a": "from-env", "S_b": "env-only", "S_j": '{"k": "v"}'},
    )
    assert keychain.lookup("a") == "from-file"
    assert keychain.lookup("m") == {"user": "u", "port": "5432"}
    assert keychain.lookup("b") == "env-only"
    assert keychain.lookup("j") == {"k": "v"}
    assert keychain.lookup("zz") is None
    assert keychain.lookup("../etc") is None
    assert Keychain(env_prefix=None, environ={"AOS_SECRET_b": "x"}).lookup("b") is None


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("a: [unclosed hunter2", "not YAML"),
        ("- just a list", "is a map"),
        ({"a": {"bad key": "hunter2"}}, "identifiers"),
        ({"a": {"k": ["hunter2"]}}, "text or a number"),
        ({"a": {}}, "1..64 fields"),
        ({"a": "x" * (SECRET_BYTES_MAX + 1)}, "at most"),
    ],
)
def test_a_bad_secrets_file_is_refused_without_quoting_it(
    tmp_path: Path, content: Any, says: str
) -> None:
    keychain = Keychain(file=_file(tmp_path, content), env_prefix=None)
    with pytest.raises(KeychainSourceError, match=says) as raised:
        keychain.lookup("a")
    assert "hunter2" not in str(raised.value)


def test_the_secrets_file_size_at_its_edge(tmp_path: Path) -> None:
    head = 'a: "'
    exact = head + "x" * (SECRETS_FILE_BYTES_MAX - len(head) - 1) + '"'
    path = _file(tmp_path, exact)
    assert path.stat().st_size == SECRETS_FILE_BYTES_MAX
    with pytest.raises(KeychainSourceError, match="at most"):  # one long secret: over its own
        Keychain(file=path).lookup("a")
    path.write_text(exact + " ")
    with pytest.raises(KeychainSourceError, match=f"over {SECRETS_FILE_BYTES_MAX} bytes"):
        Keychain(file=path).lookup("a")


def test_resolve_answers_references_never_values() -> None:
    keychain = Keychain(env_prefix="S_", environ={"S_t": "tok-123", "S_m": '{"user": "u"}'})
    params = {
        "exec": "e1",
        "entries": [{"name": "t", "kind": "bearer"}, {"name": "m", "kind": "x"}],
    }
    outcome = resolve(params, keychain, KEY)
    assert outcome.status == "ok"
    assert outcome.payload["entries"] == {"t": "${keychain:t}", "m": {"user": "${keychain:m.user}"}}
    assert set(outcome.payload["refs"]) == {"t", "m"}
    assert outcome.payload["refs"]["t"]["kind"] == "bearer"
    encoded = cbor.encode(outcome.payload)
    assert b"tok-123" not in encoded
    other = resolve(params, keychain, fingerprint_key(bytes([1]) * 32))
    assert other.payload["refs"]["t"]["fingerprint"] != outcome.payload["refs"]["t"]["fingerprint"]


def test_resolve_names_every_missing_entry_as_authorization() -> None:
    params = {"exec": "e", "entries": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}
    outcome = resolve(params, Keychain(env_prefix="S_", environ={"S_b": "x"}), KEY)
    assert outcome.status == "error"
    assert outcome.payload["kind"] == "authorization"
    assert outcome.payload["code"] == "keychain.missing"
    assert outcome.payload["missing"] == ["a", "c"]


@pytest.mark.parametrize(
    "params",
    [None, {"entries": "x"}, {"entries": [{"kind": "x"}]}, {"entries": [{"name": "a b"}]}],
)
def test_resolve_refuses_malformed_params(params: Any) -> None:
    outcome = resolve(params, Keychain(environ={}), KEY)
    assert outcome.status == "error" and outcome.payload["code"] == "keychain.invalid"


def test_resolve_reports_a_broken_source(tmp_path: Path) -> None:
    keychain = Keychain(file=_file(tmp_path, "a: [x"), env_prefix=None)
    outcome = resolve({"exec": "e", "entries": [{"name": "a"}]}, keychain, KEY)
    assert outcome.payload["code"] == "keychain.source"
    assert outcome.payload["kind"] == "authorization"


def granted(*names: str) -> Grants:
    """Every name allowed everywhere in a value."""
    return Grants.of_call({"keychain": [{"path": [], "names": list(names)}]})


def test_substitute_puts_secrets_into_strings_only() -> None:
    keychain = Keychain(env_prefix="S_", environ={"S_t": "tok", "S_m": '{"user": "u"}'})
    value = {"h": "Bearer ${keychain:t}", "l": ["${keychain:m.user}@x", 3], "${keychain:t}": 1}
    assert substitute(value, keychain, granted("t", "m")) == {
        "h": "Bearer tok",
        "l": ["u@x", 3],
        "${keychain:t}": 1,
    }
    for bad in ("${keychain:m}", "${keychain:m.pass}", "${keychain:t.x}", "${keychain:zz}"):
        with pytest.raises(KeychainMissingError):
            substitute(bad, keychain, granted("t", "m", "zz"))
    with pytest.raises(KeychainMissingError, match="no keychain"):
        substitute("${keychain:t}", None, granted("t"))


def test_substitute_puts_in_only_what_is_granted_where_it_stands() -> None:
    keychain = Keychain(env_prefix="S_", environ={"S_t": "tok", "S_db": "pw"})
    grants = Grants.of_call(
        {"keychain": [{"path": ["h", "A"], "names": ["t"]}, {"path": ["l"], "names": ["db"]}]}
    )
    value = {
        "h": {"A": "${keychain:t}/${keychain:db}", "B": "${keychain:t}"},
        "l": ["${keychain:db}", {"x": "${keychain:db}"}],
        "other": "${keychain:t}",
    }
    assert substitute(value, keychain, grants) == {
        "h": {"A": "tok/${keychain:db}", "B": "${keychain:t}"},
        "l": ["pw", {"x": "pw"}],
        "other": "${keychain:t}",
    }
    assert substitute(value["h"], keychain, grants.within("h"))["A"] == "tok/${keychain:db}"
    assert substitute(value, keychain, Grants()) == value  # nothing granted: all text
    # A name nobody granted is never looked up: a missing one is no error either.
    assert substitute("${keychain:zz}", Keychain(environ={}), granted("t")) == "${keychain:zz}"


@pytest.mark.parametrize(
    "keychain",
    [
        "x",
        [{"path": "h", "names": ["t"]}],
        [{"path": [], "names": "t"}],
        [{"path": [], "names": ["a b"]}],
        [{"path": [-1], "names": ["t"]}],
        [{"path": [1.5], "names": ["t"]}],
        [{"path": [0] * (GRANT_PATH_DEPTH_MAX + 1), "names": ["t"]}],
        [{"path": [], "names": ["t"]}] * (GRANTS_MAX + 1),
    ],
)
def test_malformed_grants_are_tool_invalid(keychain: Any) -> None:
    tool = {"kind": "echo"}
    context = ToolContext(intent="i", keychain=Keychain(environ={}))
    params = {"tool": tool, "args": None, "keychain": keychain}
    outcome = run_tool("aos/tool.echo@1", params, context=context)
    assert outcome.status == "error" and outcome.payload["code"] == "tool.invalid"


def test_grants_at_the_edge_are_taken() -> None:
    deepest = [{"path": [0] * GRANT_PATH_DEPTH_MAX, "names": ["t"]}] * GRANTS_MAX
    assert len(Grants.of_call({"keychain": deepest}).paths) == GRANTS_MAX


def test_an_http_header_naming_a_missing_entry_sends_nothing() -> None:
    tool = {"kind": "http", "url": "http://127.0.0.1:1/", "headers": {"A": "${keychain:zz}"}}
    context = ToolContext(intent="i", keychain=Keychain(environ={}))
    grants = [{"path": ["headers", "A"], "names": ["zz"]}]
    params = {"tool": tool, "args": None, "keychain": grants}
    outcome = run_tool("aos/tool.http@1", params, context=context)
    assert outcome.status == "error"
    assert outcome.payload["kind"] == "authorization"  # not http.connect: no request was made


def test_a_config_file_sets_the_keychain_shell_and_limits(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("k: v\n")
    path = tmp_path / "tools.yaml"
    path.write_text(
        "keychain: {file: s.yaml, env_prefix: null}\n"
        "shell: {enabled: true, timeout_s_max: 5, output_bytes_max: 10}\n"
        "postgres: {rows_max: 7}\n"
        "duckdb: {data_dir: data, external_access: true}\n"
    )
    config = load_config(path)
    assert config.keychain.lookup("k") == "v"
    assert config.keychain.env_prefix is None
    assert config.shell.enabled and config.shell.output_bytes_max == 10
    assert config.postgres.rows_max == 7
    assert config.duckdb.data_dir == tmp_path / "data" and config.duckdb.external_access
    defaults = load_config(None)
    assert not defaults.shell.enabled and defaults.keychain.env_prefix == "AOS_SECRET_"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("shell: {enabled: yes please}", "shell.enabled"),
        ("shell: {timeout_s_max: 0}", "shell.timeout_s_max"),
        ("shell: {timeout_s_max: 3601}", "shell.timeout_s_max"),
        ("postgres: {rows_max: -1}", "postgres.rows_max"),
        ("keychain: {env_prefix: 'a b'}", "keychain.env_prefix"),
        ("nonsense: 1", "nonsense"),
        ("a: [", "not YAML"),
        ("x" * (CONFIG_BYTES_MAX + 1), "over"),
    ],
)
def test_a_bad_config_is_a_typed_error(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text(text)
    with pytest.raises(ToolConfigInvalidError, match=says) as raised:
        load_config(path)
    assert raised.value.code == "adapter.tool_config_invalid"


def test_an_http_server_echoing_the_secret_does_not_put_it_in_the_result() -> None:
    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"you_sent": request.headers["Authorization"]})

    tool = {
        "kind": "http",
        "url": "http://x/",
        "headers": {"Authorization": "Bearer ${keychain:t}"},
    }
    context = ToolContext(
        intent="i",
        keychain=Keychain(env_prefix="S_", environ={"S_t": "tok-abc"}),
        http_transport=httpx.MockTransport(echo),
    )
    grants = [{"path": ["headers", "Authorization"], "names": ["t"]}]
    params = {"tool": tool, "args": None, "keychain": grants}
    outcome = run_tool("aos/tool.http@1", params, context=context)
    assert outcome.status == "ok"
    assert outcome.payload["json"] == {"you_sent": "Bearer ***"}
    # Without the grant (a placeholder that came in a value) the header is the text itself.
    outcome = run_tool("aos/tool.http@1", {"tool": tool, "args": None}, context=context)
    assert outcome.payload["json"] == {"you_sent": "Bearer ${keychain:t}"}


def test_deep_nesting_is_refused_not_a_crash(tmp_path: Path) -> None:
    deep = "a: " + "[" * 5000 + "]" * 5000 + "\n"
    with pytest.raises(KeychainSourceError):
        Keychain(file=_file(tmp_path, deep)).lookup("a")
    config = tmp_path / "tools.yaml"
    config.write_text("shell: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ToolConfigInvalidError):
        load_config(config)
