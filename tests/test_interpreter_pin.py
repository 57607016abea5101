"""The flow interpreter's pin (aos.flows.interpreter, spec/09 §4): the committed pin matches
the sources (without building), it names the wheel's build environment, a stale or malformed
pin is a typed error naming the command that re-pins, and a flow world made by an installed
wheel names the shipped component by its pinned hash.

The real builds are elsewhere: `make interpreter-pin` writes the pin, `make install-check`
rebuilds the interpreter from fresh copies of the checkout and compares (.ci/install_check.sh).
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from aos.cli.main import main as aos_main
from aos.flows import interpreter
from aos.flows.interpreter import (
    InterpreterPin,
    InterpreterPinMalformedError,
    InterpreterPinStaleError,
    InterpreterSources,
    check,
    read_pin,
)
from aos.flows.serve import flow_world as world
from aos.kernel.air.errors import AirCheckError
from aos.kernel.hashing import hash_bytes

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = REPO / "pyproject.toml"


def _pins(requirements: list[str]) -> dict[str, str]:
    pinned = (re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", r.strip()) for r in requirements)
    return {m.group(1).lower(): m.group(2) for m in pinned if m}


def test_the_pin_matches_the_sources() -> None:
    try:
        check(InterpreterSources.installed(), read_pin())
    except InterpreterPinStaleError as error:
        pytest.fail(f"{error}\nhint: {error.hint}")


def test_the_checkout_sources_are_the_installed_ones() -> None:
    installed = InterpreterSources.installed()
    assert installed.source_hash() == InterpreterSources.checkout(REPO).source_hash()


def test_the_pin_names_the_wheel_build_environment() -> None:
    project = tomllib.loads(PYPROJECT.read_text())
    pinned = read_pin().environment
    assert _pins(project["build-system"]["requires"]) == pinned
    extra = _pins(project["project"]["optional-dependencies"]["build"])
    assert extra == {interpreter.TOOL_DISTRIBUTION: pinned[interpreter.TOOL_DISTRIBUTION]}
    assert InterpreterSources.installed().environment() == pinned


def test_a_stale_pin_says_the_sources_moved_and_the_command(tmp_path: Path) -> None:
    pin = read_pin()
    stale = InterpreterPin(hash_bytes(b"other sources"), pin.wasm_hash, pin.environment)
    with pytest.raises(InterpreterPinStaleError) as caught:
        check(InterpreterSources.installed(), stale)
    error = caught.value
    assert error.code == "install.interpreter_pin_stale"
    assert "make interpreter-pin" in error.hint
    assert "sources" in error.message and str(stale.source_hash) in error.message


def test_a_stale_pin_names_the_environment_that_moved() -> None:
    pin = read_pin()
    other = {**pin.environment, "jinja2": "0.1"}
    with pytest.raises(InterpreterPinStaleError, match=r"jinja2 \S+ here, 0\.1 pinned"):
        check(
            InterpreterSources.installed(), InterpreterPin(hash_bytes(b"x"), pin.wasm_hash, other)
        )


def test_an_edited_source_makes_the_pin_stale(tmp_path: Path) -> None:
    copy = tmp_path / "flow"
    sources = InterpreterSources.installed()
    shutil.copytree(sources.module_dir, copy, ignore=shutil.ignore_patterns("__pycache__"))
    edited = InterpreterSources(copy)
    check(edited, read_pin())  # a copy is the same sources
    # Files that are not sources change nothing: bytecode, editor files, a README.
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"stale bytecode")
    (copy / ".app.py.swp").write_bytes(b"swap")
    (copy / "app.py~").write_bytes(b"backup")
    (copy / "NOTES.md").write_text("notes")
    check(edited, read_pin())
    (copy / "app.py").write_text((copy / "app.py").read_text() + "\n# edited\n")
    with pytest.raises(InterpreterPinStaleError, match="sources"):
        check(edited, read_pin())


def test_an_edited_module_of_the_guest_package_makes_the_pin_stale(tmp_path: Path) -> None:
    copy = tmp_path / "flow"
    shutil.copytree(
        InterpreterSources.installed().module_dir,
        copy,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    marking = copy / "aos_flow" / "marking.py"
    marking.write_text(marking.read_text() + "\n# edited\n")
    with pytest.raises(InterpreterPinStaleError, match="sources"):
        check(InterpreterSources(copy), read_pin())


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"not json", "not a pin"),
        (b"{}", "not a pin"),
        (b'{"source_hash": "x", "wasm_hash": "y", "environment": {}}', "not a pin"),
        (b'{"source_hash": "", "wasm_hash": "", "environment": []}', "not a pin"),
        (b" " * (interpreter.PIN_BYTES_MAX + 1), "larger than"),
    ],
)
def test_a_malformed_pin_is_refused(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / "interpreter.pin.json"
    path.write_bytes(content)
    with pytest.raises(InterpreterPinMalformedError, match=why) as caught:
        read_pin(path)
    assert caught.value.code == "install.interpreter_pin_malformed"
    assert "make interpreter-pin" in caught.value.hint


def test_a_missing_pin_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InterpreterPinMalformedError, match="cannot read"):
        read_pin(tmp_path / "none.json")


def test_the_pin_round_trips() -> None:
    pin = read_pin()
    assert json.loads(pin.to_json())["command"] == "make interpreter-pin"
    assert interpreter.pin_path().read_text() == pin.to_json()


def test_the_check_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert interpreter.main(["check"]) == 0
    assert str(read_pin().source_hash) in capsys.readouterr().out
    assert interpreter.main(["check", "--checkout", str(REPO)]) == 0


def test_the_check_command_on_stale_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clone = tmp_path / "clone"
    for part in ("modules/flow", "modules/sdk/aos_sdk", "kernel/wasm/wit"):
        source = REPO / part
        for path in source.iterdir():
            if path.is_file():
                target = clone / part / path.name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(path.read_bytes())
    (clone / "modules/sdk/aos_sdk/__init__.py").write_text("# edited\n", encoding="utf-8")
    assert interpreter.main(["check", "--checkout", str(clone)]) == 1
    err = capsys.readouterr().err
    assert "install.interpreter_pin_stale" in err and "make interpreter-pin" in err


def test_the_version_names_the_interpreter() -> None:
    result = CliRunner().invoke(aos_main, ["--version"])
    assert result.exit_code == 0
    version, described = result.stdout.splitlines()
    assert version.startswith("aos, version ")
    # A checkout builds the sources; an installed wheel says "shipped" (install-check).
    assert "built from" in described and str(read_pin().wasm_hash) in described


def test_a_checkout_flow_world_builds_the_sources(tmp_path: Path) -> None:
    keys = world.load_or_make_keys(None)
    manifest = world.write_manifest(tmp_path / "flow", keys)
    text = (manifest / "defs" / "workflows.yaml").read_text()
    path = re.search(r"artifact:\n  path: (\S+)\n", text)
    assert path is not None and "hash:" not in text.split("---")[0]
    assert (manifest / "defs" / path.group(1)).resolve() == (REPO / "modules" / "flow").resolve()


def test_a_shipped_component_is_named_by_its_pinned_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What an installed wheel has beside aos/flows: a component whose bytes are not the
    # pinned ones is refused when the world loads it.
    component = tmp_path / "site" / "interpreter.wasm"
    component.parent.mkdir()
    component.write_bytes(b"\0asm not the pinned bytes")
    monkeypatch.setattr(interpreter, "shipped_component", lambda: (component, read_pin()))
    manifest = world.write_manifest(tmp_path / "flow", world.load_or_make_keys(None))
    text = (manifest / "defs" / "workflows.yaml").read_text()
    assert f'hash: "{read_pin().wasm_hash}"' in text
    with pytest.raises(AirCheckError) as caught:
        world.create_flow_world(tmp_path / "w")
    assert [issue.code for issue in caught.value.issues] == ["air.hash_mismatch"]
    assert not (tmp_path / "w").exists()
