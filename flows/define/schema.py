"""The JSON Schema of flow definitions as authored (shorthands included), for editors and
other tools: `spec/schemas/flow-definition.schema.json`.

Generated from the pydantic models, so it cannot drift from what the loader accepts; a test
fails when the checked-in file is stale (`python -m aos.flows.define.schema spec/schemas` refreshes
it). The schema describes shape only: the checks of spec/11-flows.md §1.6 (references,
templates, reachability, limits) need the loader.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from aos.flows.define.cfd import TASK_MODELS, FlowDefinition

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FILE_NAME = "flow-definition.schema.json"


def export_json_schema() -> dict[str, Any]:
    """The JSON Schema of an authored flow definition."""
    schema = _share_task_union(FlowDefinition.model_json_schema(by_alias=True, mode="validation"))
    schema["$schema"] = JSON_SCHEMA_DIALECT
    schema["title"] = "aos flow definition (aos.flow/1, aos.flow/2)"
    return schema


def _share_task_union(schema: dict[str, Any]) -> dict[str, Any]:
    """Name the task union once, as `$defs.Task`, where pydantic repeats its 12-way `oneOf`
    at every task list."""
    task_union = [{"$ref": f"#/$defs/{model.__name__}"} for model in TASK_MODELS]

    def visit(node: Any) -> Any:
        if isinstance(node, list):
            return [visit(item) for item in node]
        if not isinstance(node, dict):
            return node
        if node.get("oneOf") == task_union:
            rest = {key: visit(value) for key, value in node.items() if key != "oneOf"}
            return {**rest, "$ref": "#/$defs/Task"}
        return {key: visit(value) for key, value in node.items()}

    shared: dict[str, Any] = visit(schema)
    shared["$defs"]["Task"] = {
        "description": "A task: the object for its `do` (spec/11-flows.md §1.2).",
        "oneOf": task_union,
    }
    return shared


def schema_text() -> str:
    """The schema file's text: sorted keys, two-space indent, final newline, so the bytes are
    stable across runs and machines."""
    return json.dumps(export_json_schema(), indent=2, sort_keys=True) + "\n"


def write_json_schema(out_dir: str | os.PathLike[str]) -> Path:
    """Write `flow-definition.schema.json` into `out_dir` (created if needed); its path."""
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / SCHEMA_FILE_NAME
    path.write_text(schema_text(), encoding="utf-8")
    return path


if __name__ == "__main__":
    print(write_json_schema(sys.argv[1] if len(sys.argv) > 1 else "spec/schemas"))
