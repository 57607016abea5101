"""AIR: the definition model of a world (spec/02-air.md).

    from aos.kernel import air

    loaded = air.load_manifest_dir("manifests/counter")     # raises AirCheckError
    loaded.manifest_hash, loaded.definitions, loaded.schemas
    air.normalize(value, "demo/CounterEvent@1", loaded.schemas)
    air.def_hash(definition)

Modules: `types` (the type language), `model` (definitions, manifest, patches, hashes),
`builtins` (the `sys/` definitions), `loader`, `check`, `normalize`, `export`, `limits`.
"""

from __future__ import annotations

from aos.kernel.air.builtins import (
    BUILTIN_ADAPTER_NAMES,
    BUILTIN_DEFINITIONS,
    BUILTIN_EFFECTS,
    BUILTIN_SCHEMAS,
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
from aos.kernel.air.normalize import VALUE_DEPTH_MAX_DEFAULT, normalize, normalize_to_bytes
from aos.kernel.air.types import TypeExpr, dump_type, parse_type

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
    "normalize",
    "normalize_to_bytes",
    "parse_name",
    "parse_type",
    "resolve_determinism",
    "schema_texts",
]
