"""The flow definition's JSON Schema in spec/schemas is generated from the models and must not
be stale; it describes the authoring form (shorthands included)."""

from __future__ import annotations

import json
from pathlib import Path

from aos.flows.define.cfd import TASK_MODELS
from aos.flows.define.schema import (
    SCHEMA_FILE_NAME,
    export_json_schema,
    schema_text,
    write_json_schema,
)

SPEC_SCHEMA = Path(__file__).resolve().parents[2] / "spec" / "schemas" / SCHEMA_FILE_NAME


def test_checked_in_schema_is_current() -> None:
    assert SPEC_SCHEMA.read_text(encoding="utf-8") == schema_text(), (
        "regenerate with `.venv/bin/python -m aos.flows.define.schema spec/schemas`"
    )


def test_write_is_stable(tmp_path: Path) -> None:
    first = write_json_schema(tmp_path / "a").read_bytes()
    second = write_json_schema(tmp_path / "b").read_bytes()
    assert first == second
    assert first.endswith(b"}\n")
    schema = json.loads(first)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert list(schema) == sorted(schema)


def test_schema_describes_the_authoring_form() -> None:
    schema = export_json_schema()
    defs = schema["$defs"]
    assert schema["required"] == ["name", "steps"]  # `entry` defaults to the first step
    assert defs["Task"]["oneOf"] == [{"$ref": f"#/$defs/{m.__name__}"} for m in TASK_MODELS]
    assert defs["Step"]["properties"]["tasks"]["items"] == {"$ref": "#/$defs/Task"}
    for model in TASK_MODELS:
        assert "name" not in defs[model.__name__].get("required", [])  # task_N by default
    guard = defs["Step"]["properties"]["admit"]["anyOf"]
    assert {"type": "string"} in guard  # the string shorthand
    call = defs["CallTask"]["properties"]
    assert {"timeout_s", "timeout_ms"} <= set(call)
    next_forms = defs["Step"]["properties"]["next"]["anyOf"]
    assert {"$ref": "#/$defs/Next"} in next_forms
    assert any(form.get("type") == "array" for form in next_forms)
