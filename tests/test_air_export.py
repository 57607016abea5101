"""The JSON Schemas in spec/schemas are generated from the models and must not be stale."""

from __future__ import annotations

import json
from pathlib import Path

from aos.kernel.air import export_schemas, load_manifest_dir, schema_texts
from aos.kernel.air.json_schemas import SCHEMA_MODELS

SPEC_SCHEMAS = Path(__file__).resolve().parent.parent / "spec" / "schemas"
FIXTURES = Path(__file__).parent / "fixtures" / "air"


def test_checked_in_schemas_are_current() -> None:
    expected = schema_texts()
    found = {
        path.name: path.read_text(encoding="utf-8")
        for path in SPEC_SCHEMAS.glob("*.json")
        if not path.name.startswith("flow-")  # the flow definition's: tests/flows/test_schema.py
    }
    stale = sorted(name for name in expected if found.get(name) != expected[name])
    assert not stale, f"regenerate with `aos air schemas spec/schemas`: {stale}"
    assert sorted(found) == sorted(expected)


def test_export_writes_one_stable_file_per_kind(tmp_path: Path) -> None:
    written = export_schemas(tmp_path / "out")
    assert sorted(path.name for path in written) == sorted(
        f"{kind}.schema.json" for kind in SCHEMA_MODELS
    )
    first = {path.name: path.read_bytes() for path in written}
    second = {path.name: path.read_bytes() for path in export_schemas(tmp_path / "again")}
    assert first == second
    for text in first.values():
        assert text.endswith(b"}\n")
        schema = json.loads(text)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert list(schema) == sorted(schema)


def test_definitions_require_kind_and_share_the_type_union() -> None:
    defschema = json.loads(schema_texts()["defschema.schema.json"])
    assert "$kind" in defschema["required"]
    assert defschema["properties"]["type"]["$ref"] == "#/$defs/TypeExpr"
    assert (
        len(defschema["$defs"]["TypeExpr"]["oneOf"]) == 19
    )  # 12 primitives (any too), 7 composites
    manifest = json.loads(schema_texts()["manifest.schema.json"])
    assert "$kind" not in manifest.get("required", [])


def test_fixture_is_described_by_the_schemas() -> None:
    # Every property the fixture uses is one the exported schemas declare.
    loaded = load_manifest_dir(FIXTURES / "counter")
    workflow = json.loads(schema_texts()["defworkflow.schema.json"])
    used = set(loaded.workflows["demo/counter@1"].model_dump(by_alias=True, exclude_none=True))
    assert used <= set(workflow["properties"])
