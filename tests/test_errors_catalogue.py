"""The error-code catalogue (spec/errors.md): one meaning per code, and the spec is current."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from aos.cli.errors_cmd import catalogue, duplicates, markdown
from aos.cli.main import main
from aos.kernel.node.errors import refused

SPEC_ERRORS = Path(__file__).resolve().parents[1] / "spec" / "errors.md"
CODE_PATTERN = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")


def test_no_code_is_defined_twice() -> None:
    assert duplicates(catalogue()) == {}


def test_a_mirrored_node_refusal_is_not_a_code_of_its_own() -> None:
    # The client's mirror of a node answer carries the node's code; it must not count twice.
    mirror = refused({"code": "node.world_unknown", "message": "no such world"}, "refused")
    assert mirror.code == "node.world_unknown"
    assert duplicates(catalogue()) == {}
    assert [e.code for e in catalogue()].count("node.world_unknown") == 1


def test_every_code_is_dotted_lower_case() -> None:
    assert [entry.code for entry in catalogue() if not CODE_PATTERN.match(entry.code)] == []


def test_spec_errors_md_is_the_generated_catalogue() -> None:
    # Regenerate with `aos errors --markdown > spec/errors.md` after adding an error class.
    assert SPEC_ERRORS.read_text(encoding="utf-8") == markdown(catalogue())


def test_duplicates_names_every_class_of_a_shared_code() -> None:
    entries = catalogue()
    first = entries[0]
    twin = type(first)(first.code, "Twin", "aos.tests", "", "", 400)
    assert duplicates([*entries, twin]) == {
        first.code: [f"{first.module}.{first.name}", "aos.tests.Twin"]
    }


def test_aos_errors_lists_codes_with_status_and_hint() -> None:
    result = CliRunner().invoke(main, ["errors", "--json"])
    assert result.exit_code == 0, result.output
    import json

    listed = {entry["code"]: entry for entry in json.loads(result.output)["errors"]}
    assert listed["world.cell_missing"]["http_status"] == 404
    assert listed["world.cell_missing"]["class"] == "aos.kernel.world.errors.CellMissingError"
    assert "leave the key out" in listed["world.key_unexpected"]["hint"]
