"""JSON Schemas of the AIR documents, for editors and other tools (`spec/schemas/`).

Generated from the pydantic models, so they cannot drift from what the loader accepts; a test
fails when the checked-in files are stale (`aos air schemas spec/schemas` refreshes them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from aos.kernel.air.model import (
    DefAdapter,
    DefEffect,
    DefModule,
    DefSchema,
    DefWorkflow,
    Manifest,
    Patch,
)
from aos.kernel.air.types import TYPE_NODES

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

SCHEMA_MODELS: dict[str, type[BaseModel]] = {
    "defschema": DefSchema,
    "defmodule": DefModule,
    "defworkflow": DefWorkflow,
    "defeffect": DefEffect,
    "defadapter": DefAdapter,
    "manifest": Manifest,
    "patch": Patch,
}
"""Document kind -> model; each becomes `<kind>.schema.json`."""

# The loader dispatches definitions on `$kind`, so an authored definition must carry it even
# though the model has it as a default.
_KIND_REQUIRED = ("defschema", "defmodule", "defworkflow", "defeffect", "defadapter")


def schema_of(kind: str) -> dict[str, Any]:
    """The JSON Schema of one document kind."""
    schema = SCHEMA_MODELS[kind].model_json_schema(by_alias=True, mode="validation")
    schema = _share_type_expr(schema)
    schema["$schema"] = JSON_SCHEMA_DIALECT
    schema["title"] = f"AIR {kind}"
    if kind in _KIND_REQUIRED:
        schema["required"] = sorted({*schema.get("required", []), "$kind"})
    return schema


_TYPE_EXPR_ONE_OF = [{"$ref": f"#/$defs/{node.__name__}"} for node in TYPE_NODES]


def _share_type_expr(schema: dict[str, Any]) -> dict[str, Any]:
    """Name the type-expression union once, as `$defs.TypeExpr`, where pydantic repeats its
    18-way `oneOf` at every use (a tenth of the size, and readable)."""

    def visit(node: Any) -> Any:
        if isinstance(node, list):
            return [visit(item) for item in node]
        if not isinstance(node, dict):
            return node
        if node.get("oneOf") == _TYPE_EXPR_ONE_OF:
            rest = {key: visit(value) for key, value in node.items() if key != "oneOf"}
            return {**rest, "$ref": "#/$defs/TypeExpr"}
        return {key: visit(value) for key, value in node.items()}

    shared: dict[str, Any] = visit(schema)
    if "$defs" in shared and any(
        f"#/$defs/{name}" == ref["$ref"] for ref in _TYPE_EXPR_ONE_OF for name in shared["$defs"]
    ):
        shared["$defs"]["TypeExpr"] = {
            "description": "An AIR type: an object with exactly one key, the type's tag.",
            "oneOf": _TYPE_EXPR_ONE_OF,
        }
    return shared


def schema_texts() -> dict[str, str]:
    """File name -> file text for every schema: sorted keys, two-space indent, final
    newline, so the bytes are stable across runs and machines."""
    return {
        f"{kind}.schema.json": json.dumps(schema_of(kind), indent=2, sort_keys=True) + "\n"
        for kind in sorted(SCHEMA_MODELS)
    }


def export_schemas(out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write every schema into `out_dir` (created if needed); return the paths written."""
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, text in schema_texts().items():
        path = directory / file_name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
