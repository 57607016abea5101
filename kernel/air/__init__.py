"""AIR: the definition model of a world (spec/02-air.md).

    from aos.kernel import air

    loaded = air.load_manifest_dir("manifests/counter")     # raises AirCheckError
    loaded.manifest_hash, loaded.definitions, loaded.schemas
    normalize(value, "demo/CounterEvent@1", loaded.schemas)  # from aos.kernel.air.normalize
    air.def_hash(definition)

Modules: `types` (the type language), `model` (definitions, manifest, patches, hashes),
`builtins` (the `sys/` definitions), `loader`, `check`, `normalize`, `export`, `limits`.

Importing the package imports none of its modules: each name below is imported from its
module on first use (PEP 562), so that a command which needs only a constant or an error
class (`aos world status`, spec/03 §12) does not pay for the pydantic models and the wasm
limits behind the rest (~0.5 s). `normalize` is not among the names: it is also a module of
the package, which importing it binds over any lazy name (import it from
`aos.kernel.air.normalize`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aos.kernel.lazy_names import module_getattr

if TYPE_CHECKING:
    from aos.kernel.air.builtin_names import (
        BUILTIN_ADAPTER_NAMES,
        RECEIPT_ENVELOPE,
        RECEIPT_REJECTED,
        RECEIPT_STATUS,
        STEP_FAULT,
        TIMER_ADAPTER,
        TIMER_SET_EFFECT,
        TIMER_SET_PARAMS,
        TIMER_SET_RECEIPT,
        WORKFLOW_CONTEXT,
    )
    from aos.kernel.air.builtins import (
        BUILTIN_DEFINITIONS,
        BUILTIN_EFFECTS,
        BUILTIN_SCHEMAS,
    )
    from aos.kernel.air.check import AnyDefinition, check_definitions, check_manifest
    from aos.kernel.air.errors import (
        AirCheckError,
        AirError,
        Issue,
        SchemaUnknownError,
        ValueDuplicateKeyError,
        ValueFieldMissingError,
        ValueFieldUnknownError,
        ValueInvalidError,
        ValueOutOfRangeError,
        ValueTooDeepError,
        ValueVariantUnknownError,
    )
    from aos.kernel.air.json_schemas import export_schemas, schema_texts
    from aos.kernel.air.limits import DEFAULT_STEP_LIMITS, StepLimits
    from aos.kernel.air.loader import (
        ArtifactResolver,
        LoadedManifest,
        ModuleMissingError,
        assemble_manifest,
        hash_artifact_file,
        load_manifest_dir,
    )
    from aos.kernel.air.model import (
        PLACEHOLDER_HASH,
        Artifact,
        DefAdapter,
        DefEffect,
        Definition,
        DefModule,
        DefSchema,
        DefWorkflow,
        Manifest,
        NamedRef,
        Patch,
        Routing,
        Subscription,
        WorkflowImpl,
        WorkflowLimits,
        canonical_form,
        def_hash,
        resolve_determinism,
    )
    from aos.kernel.air.names import is_sys_name, name_problem, parse_name
    from aos.kernel.air.normalize import VALUE_DEPTH_MAX_DEFAULT, normalize_to_bytes
    from aos.kernel.air.types import TypeExpr, dump_type, parse_type

# Where each public name lives (a module of this package).
_HOMES: dict[str, str] = {
    "BUILTIN_ADAPTER_NAMES": "builtin_names",
    "BUILTIN_DEFINITIONS": "builtins",
    "BUILTIN_EFFECTS": "builtins",
    "BUILTIN_SCHEMAS": "builtins",
    "RECEIPT_ENVELOPE": "builtin_names",
    "RECEIPT_REJECTED": "builtin_names",
    "RECEIPT_STATUS": "builtin_names",
    "STEP_FAULT": "builtin_names",
    "TIMER_ADAPTER": "builtin_names",
    "TIMER_SET_EFFECT": "builtin_names",
    "TIMER_SET_PARAMS": "builtin_names",
    "TIMER_SET_RECEIPT": "builtin_names",
    "WORKFLOW_CONTEXT": "builtin_names",
    "AnyDefinition": "check",
    "check_definitions": "check",
    "check_manifest": "check",
    "AirCheckError": "errors",
    "AirError": "errors",
    "Issue": "errors",
    "SchemaUnknownError": "errors",
    "ValueDuplicateKeyError": "errors",
    "ValueFieldMissingError": "errors",
    "ValueFieldUnknownError": "errors",
    "ValueInvalidError": "errors",
    "ValueOutOfRangeError": "errors",
    "ValueTooDeepError": "errors",
    "ValueVariantUnknownError": "errors",
    "export_schemas": "json_schemas",
    "schema_texts": "json_schemas",
    "DEFAULT_STEP_LIMITS": "limits",
    "StepLimits": "limits",
    "ArtifactResolver": "loader",
    "LoadedManifest": "loader",
    "ModuleMissingError": "loader",
    "assemble_manifest": "loader",
    "hash_artifact_file": "loader",
    "load_manifest_dir": "loader",
    "PLACEHOLDER_HASH": "model",
    "Artifact": "model",
    "DefAdapter": "model",
    "DefEffect": "model",
    "Definition": "model",
    "DefModule": "model",
    "DefSchema": "model",
    "DefWorkflow": "model",
    "Manifest": "model",
    "NamedRef": "model",
    "Patch": "model",
    "Routing": "model",
    "Subscription": "model",
    "WorkflowImpl": "model",
    "WorkflowLimits": "model",
    "canonical_form": "model",
    "def_hash": "model",
    "resolve_determinism": "model",
    "is_sys_name": "names",
    "name_problem": "names",
    "parse_name": "names",
    "VALUE_DEPTH_MAX_DEFAULT": "normalize",
    "normalize_to_bytes": "normalize",
    "TypeExpr": "types",
    "dump_type": "types",
    "parse_type": "types",
}

__getattr__ = module_getattr(__name__, _HOMES, globals())


__all__ = [
    "BUILTIN_ADAPTER_NAMES",
    "BUILTIN_DEFINITIONS",
    "BUILTIN_EFFECTS",
    "BUILTIN_SCHEMAS",
    "DEFAULT_STEP_LIMITS",
    "PLACEHOLDER_HASH",
    "RECEIPT_ENVELOPE",
    "RECEIPT_REJECTED",
    "RECEIPT_STATUS",
    "STEP_FAULT",
    "TIMER_ADAPTER",
    "TIMER_SET_EFFECT",
    "TIMER_SET_PARAMS",
    "TIMER_SET_RECEIPT",
    "VALUE_DEPTH_MAX_DEFAULT",
    "WORKFLOW_CONTEXT",
    "AirCheckError",
    "AirError",
    "AnyDefinition",
    "Artifact",
    "ArtifactResolver",
    "DefAdapter",
    "DefEffect",
    "DefModule",
    "DefSchema",
    "DefWorkflow",
    "Definition",
    "Issue",
    "LoadedManifest",
    "Manifest",
    "ModuleMissingError",
    "NamedRef",
    "Patch",
    "Routing",
    "SchemaUnknownError",
    "StepLimits",
    "Subscription",
    "TypeExpr",
    "ValueDuplicateKeyError",
    "ValueFieldMissingError",
    "ValueFieldUnknownError",
    "ValueInvalidError",
    "ValueOutOfRangeError",
    "ValueTooDeepError",
    "ValueVariantUnknownError",
    "WorkflowImpl",
    "WorkflowLimits",
    "assemble_manifest",
    "canonical_form",
    "check_definitions",
    "check_manifest",
    "def_hash",
    "dump_type",
    "export_schemas",
    "hash_artifact_file",
    "is_sys_name",
    "load_manifest_dir",
    "name_problem",
    "normalize_to_bytes",
    "parse_name",
    "parse_type",
    "resolve_determinism",
    "schema_texts",
]
