"""AIR definitions, the manifest, patch documents, and definition hashes.

Every definition is a JSON object with `$kind` and `name`:

    defschema    a named type (types.py)
    defmodule    a WASM artifact by hash, `abi: core | component`
    defworkflow  state/event schemas, optional context, annotations and key schema, the
                 effects it may emit, determinism mode, implementation, step limits
    defeffect    params and receipt schemas, and the adapters allowed to settle it
    defadapter   an adapter identity: a name and an Ed25519 public key

The `manifest` lists every definition of a world by name and hash and routes domain events to
workflows. A `patch` changes a manifest (governance).

A definition's hash is the hash of its canonical JSON form, `$kind` included (`def_hash`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Discriminator, Field, Tag, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from aos.kernel.air import limits as _limits
from aos.kernel.air.base import AirModel, HashText, Name, json_dump
from aos.kernel.air.errors import AirError
from aos.kernel.air.types import TypeExpr
from aos.kernel.hashing import Hash, hash_value

PLACEHOLDER_HASH = "blake3:" + "0" * 64
"""A hash an author writes where the loader should fill in the computed one."""

ARTIFACT_PATH_LENGTH_MAX = 1024
EFFECTS_EMITTED_MAX = 256
EFFECT_ADAPTERS_MAX = 64
MANIFEST_REFS_MAX = 4096
"""Most refs in one of the manifest's lists (schemas, modules, ...)."""
SUBSCRIPTIONS_MAX = 4096
KEY_FIELD_LENGTH_MAX = 256
PATCH_OPS_MAX = 1024
ENTRYPOINT_LENGTH_MAX = 64

ED25519_PUBLIC_KEY_BYTES = 32

_ENTRYPOINT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
KEY_FIELD_SEGMENT_PATTERN = r"(?:\$value|[A-Za-z_][A-Za-z0-9_-]*)"
KEY_FIELD_PATTERN = rf"^{KEY_FIELD_SEGMENT_PATTERN}(?:\.{KEY_FIELD_SEGMENT_PATTERN})*$"
_KEY_FIELD_RE = re.compile(KEY_FIELD_PATTERN)
_PUBLIC_KEY_RE = re.compile(r"^[0-9a-f]{64}$")


class ModuleUnresolvedError(AirError):
    """A defmodule names its artifact by path only; its hash is not known yet."""

    code = "air.module_unresolved"
    hint = "load the folder with load_manifest_dir (it hashes the file) or give artifact.hash"


class HashMissingError(AirError):
    """A manifest ref has no hash (or the placeholder); the manifest cannot be hashed yet."""

    code = "air.hash_missing"
    hint = "load the folder with load_manifest_dir, which fills placeholder hashes"


def _check_entrypoint(text: str) -> str:
    if len(text) > ENTRYPOINT_LENGTH_MAX or _ENTRYPOINT_RE.match(text) is None:
        raise PydanticCustomError(
            "air.def_invalid", "{text} is not an export name", {"text": repr(text[:80])}
        )
    return text


def _check_key_field(text: str) -> str:
    if len(text) > KEY_FIELD_LENGTH_MAX or _KEY_FIELD_RE.match(text) is None:
        raise PydanticCustomError(
            "air.key_field_invalid",
            "{text} is not a key path (field names and $value joined by '.')",
            {"text": repr(text[:80])},
        )
    return text


def _check_public_key(text: str) -> str:
    if _PUBLIC_KEY_RE.match(text) is None:
        raise PydanticCustomError(
            "air.public_key_invalid",
            "an Ed25519 public key is {size} bytes written as {digits} lowercase hex digits",
            {"size": ED25519_PUBLIC_KEY_BYTES, "digits": 2 * ED25519_PUBLIC_KEY_BYTES},
        )
    return text


def _check_artifact_path(text: str) -> str:
    if not text or len(text) > ARTIFACT_PATH_LENGTH_MAX or text.startswith(("/", "\\")):
        raise PydanticCustomError(
            "air.def_invalid",
            "an artifact path is relative to the file that names it, 1..{limit} characters",
            {"limit": ARTIFACT_PATH_LENGTH_MAX},
        )
    return text


Entrypoint = Annotated[
    str,
    AfterValidator(_check_entrypoint),
    WithJsonSchema({"type": "string", "pattern": _ENTRYPOINT_RE.pattern}),
]
KeyField = Annotated[
    str,
    AfterValidator(_check_key_field),
    WithJsonSchema(
        {"type": "string", "pattern": KEY_FIELD_PATTERN, "maxLength": KEY_FIELD_LENGTH_MAX}
    ),
]
PublicKeyHex = Annotated[
    str,
    AfterValidator(_check_public_key),
    WithJsonSchema({"type": "string", "pattern": _PUBLIC_KEY_RE.pattern}),
]
ArtifactPath = Annotated[
    str,
    AfterValidator(_check_artifact_path),
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": ARTIFACT_PATH_LENGTH_MAX}),
]


# --------------------------------------------------------------------------------------------
# Definitions


class DefSchema(AirModel):
    """A named type."""

    kind: Literal["defschema"] = Field(default="defschema", alias="$kind")
    name: Name
    type_: TypeExpr = Field(alias="type")


class Artifact(AirModel):
    """Where a module's WASM comes from.

    The canonical (hashed) form is `{"hash": ...}` only. Authors may instead, or as well, give
    `path`: a file relative to the definition's file, which the loader hashes (raw bytes) and
    replaces with `hash`; when both are given they must agree.
    """

    hash_: HashText | None = Field(default=None, alias="hash")
    path: ArtifactPath | None = None

    @model_validator(mode="after")
    def _hash_or_path(self) -> Artifact:
        if self.hash_ is None and self.path is None:
            raise PydanticCustomError("air.def_invalid", "an artifact needs a hash or a path")
        return self


class DefModule(AirModel):
    """A WASM artifact by hash and the guest ABI it speaks."""

    kind: Literal["defmodule"] = Field(default="defmodule", alias="$kind")
    name: Name
    abi: Literal["core", "component"]
    artifact: Artifact


class WorkflowImpl(AirModel):
    """The module that implements a workflow, and its exported step function."""

    module: Name
    entrypoint: Entrypoint = "step"


class WorkflowLimits(AirModel):
    """Per-workflow overrides of the kernel's step limits (limits.py)."""

    fuel_per_step_max: int | None = Field(default=None, ge=1, le=_limits.FUEL_PER_STEP_MAX_CEILING)
    memory_bytes_max: int | None = Field(
        default=None, ge=_limits.MEMORY_BYTES_MAX_FLOOR, le=_limits.MEMORY_BYTES_MAX_CEILING
    )
    output_bytes_max: int | None = Field(default=None, ge=1, le=_limits.OUTPUT_BYTES_MAX_CEILING)
    effects_per_step_max: int | None = Field(
        default=None, ge=0, le=_limits.EFFECTS_PER_STEP_MAX_CEILING
    )
    events_per_step_max: int | None = Field(
        default=None, ge=0, le=_limits.EVENTS_PER_STEP_MAX_CEILING
    )


def _name_or_type(value: Any) -> str | None:
    if isinstance(value, str):
        return ":name"
    if isinstance(value, dict) or hasattr(value, "TAG"):
        return ":type"
    return None


KeySchema = Annotated[
    Annotated[Name, Tag(":name")] | Annotated[TypeExpr, Tag(":type")],
    Discriminator(
        _name_or_type,
        custom_error_type="air.def_invalid",
        custom_error_message="a key schema is a schema name or an inline type",
    ),
]


class DefWorkflow(AirModel):
    """A deterministic state machine implemented by a WASM module."""

    kind: Literal["defworkflow"] = Field(default="defworkflow", alias="$kind")
    name: Name
    state: Name
    event: Name
    context: Name | None = None
    annotations: Name | None = None
    key_schema: KeySchema | None = None
    effects_emitted: list[Name] = Field(max_length=EFFECTS_EMITTED_MAX)
    determinism: Literal["strict", "checked"] | None = None
    impl: WorkflowImpl
    limits: WorkflowLimits | None = None

    @property
    def keyed(self) -> bool:
        """A keyed workflow has one cell per key."""
        return self.key_schema is not None

    def step_limits(self) -> _limits.StepLimits:
        """The effective limits: overrides where given, kernel defaults elsewhere."""
        given = self.limits or WorkflowLimits()
        overrides = {k: v for k, v in given.model_dump().items() if v is not None}
        return _limits.StepLimits.from_overrides(overrides)


class DefEffect(AirModel):
    """An effect workflows may request: its params and receipt schemas, and the adapters
    whose signed receipts may settle it."""

    kind: Literal["defeffect"] = Field(default="defeffect", alias="$kind")
    name: Name
    params: Name
    receipt: Name
    adapters: list[Name] = Field(min_length=1, max_length=EFFECT_ADAPTERS_MAX)


class DefAdapter(AirModel):
    """An adapter identity: receipts signed with this Ed25519 key speak for `name`."""

    kind: Literal["defadapter"] = Field(default="defadapter", alias="$kind")
    name: Name
    public_key: PublicKeyHex

    @property
    def public_key_bytes(self) -> bytes:
        """The 32 raw bytes of the public key."""
        return bytes.fromhex(self.public_key)


Definition = Annotated[
    DefSchema | DefModule | DefWorkflow | DefEffect | DefAdapter,
    Field(discriminator="kind"),
]
"""Any definition, by `$kind`."""

DEF_MODELS: dict[str, type[AirModel]] = {
    "defschema": DefSchema,
    "defmodule": DefModule,
    "defworkflow": DefWorkflow,
    "defeffect": DefEffect,
    "defadapter": DefAdapter,
}

REF_LISTS: dict[str, str] = {
    "defschema": "schemas",
    "defmodule": "modules",
    "defworkflow": "workflows",
    "defeffect": "effects",
    "defadapter": "adapters",
}
"""Which manifest list refers to each definition kind."""


def resolve_determinism(workflow: DefWorkflow, module: DefModule) -> Literal["strict", "checked"]:
    """The workflow's determinism mode: as declared, else `strict` for a core module and
    `checked` for a component (a component is costly to instantiate per step)."""
    if workflow.determinism is not None:
        return workflow.determinism
    return "strict" if module.abi == "core" else "checked"


# --------------------------------------------------------------------------------------------
# Manifest


class NamedRef(AirModel):
    """A manifest's reference to a definition. An authored manifest may leave `hash` out or
    write `PLACEHOLDER_HASH`; the loader fills it."""

    name: Name
    hash_: HashText | None = Field(default=None, alias="hash")

    @property
    def filled(self) -> bool:
        """True when the ref carries a real hash (not missing, not the placeholder)."""
        return self.hash_ is not None and self.hash_ != PLACEHOLDER_HASH


class Subscription(AirModel):
    """Route domain events of schema `event` to `workflow`. For a keyed workflow, `key_field`
    is the path of the key inside the event value (`order_id`, `$value.id`)."""

    event: Name
    workflow: Name
    key_field: KeyField | None = None


class Routing(AirModel):
    """Domain-event routing, evaluated in list order; matching subscriptions fan out."""

    subscriptions: list[Subscription] = Field(default_factory=list, max_length=SUBSCRIPTIONS_MAX)


_RefList = Annotated[list[NamedRef], Field(max_length=MANIFEST_REFS_MAX)]


class Manifest(AirModel):
    """Everything a world runs: refs to its definitions by name and hash, and routing."""

    kind: Literal["manifest"] = Field(default="manifest", alias="$kind")
    schemas: _RefList = Field(default_factory=list)
    modules: _RefList = Field(default_factory=list)
    workflows: _RefList = Field(default_factory=list)
    effects: _RefList = Field(default_factory=list)
    adapters: _RefList = Field(default_factory=list)
    routing: Routing = Field(default_factory=Routing)

    def ref_lists(self) -> dict[str, list[NamedRef]]:
        """The ref lists by definition kind (`defschema` -> `schemas` ...)."""
        return {kind: getattr(self, field) for kind, field in REF_LISTS.items()}


# --------------------------------------------------------------------------------------------
# Patch documents (governance). Each op is an object with one key, the op's name.


class AddDefBody(AirModel):
    def_: Definition = Field(alias="def")


class ReplaceDefBody(AirModel):
    def_: Definition = Field(alias="def")
    pre_hash: HashText | None = None


class RemoveDefBody(AirModel):
    name: Name
    pre_hash: HashText | None = None


class SetRoutingBody(AirModel):
    subscriptions: list[Subscription] = Field(max_length=SUBSCRIPTIONS_MAX)


class RefChange(AirModel):
    kind: Literal["defschema", "defmodule", "defworkflow", "defeffect", "defadapter"]
    name: Name
    hash_: HashText | None = Field(default=None, alias="hash")


class SetRefsBody(AirModel):
    add: list[RefChange] = Field(default_factory=list, max_length=MANIFEST_REFS_MAX)
    remove: list[RefChange] = Field(default_factory=list, max_length=MANIFEST_REFS_MAX)


class AddDefOp(AirModel):
    """Add a definition and its manifest ref."""

    add_def: AddDefBody


class ReplaceDefOp(AirModel):
    """Replace the definition of the same name (guarded by its current hash if given)."""

    replace_def: ReplaceDefBody


class RemoveDefOp(AirModel):
    """Remove a definition and its manifest ref."""

    remove_def: RemoveDefBody


class SetRoutingOp(AirModel):
    """Replace the routing subscriptions."""

    set_routing: SetRoutingBody


class AddSubscriptionOp(AirModel):
    """Append one subscription."""

    add_subscription: Subscription


class RemoveSubscriptionOp(AirModel):
    """Remove the subscription equal to this one."""

    remove_subscription: Subscription


class SetRefsOp(AirModel):
    """Add or remove manifest refs to definitions that already exist (in the CAS)."""

    set_refs: SetRefsBody


def _op_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        return ":" + next(iter(value)) if len(value) == 1 else None
    if isinstance(value, AirModel):
        return ":" + next(iter(type(value).model_fields))
    return None


PatchOp = Annotated[
    Annotated[AddDefOp, Tag(":add_def")]
    | Annotated[ReplaceDefOp, Tag(":replace_def")]
    | Annotated[RemoveDefOp, Tag(":remove_def")]
    | Annotated[SetRoutingOp, Tag(":set_routing")]
    | Annotated[AddSubscriptionOp, Tag(":add_subscription")]
    | Annotated[RemoveSubscriptionOp, Tag(":remove_subscription")]
    | Annotated[SetRefsOp, Tag(":set_refs")],
    Discriminator(
        _op_tag,
        custom_error_type="air.def_invalid",
        custom_error_message="a patch op is an object with one key: add_def, replace_def, "
        "remove_def, set_routing, add_subscription, remove_subscription or set_refs",
    ),
]


class Patch(AirModel):
    """A change to the manifest whose hash is `base_manifest`, applied op by op."""

    kind: Literal["patch"] = Field(default="patch", alias="$kind")
    base_manifest: HashText
    ops: list[PatchOp] = Field(min_length=1, max_length=PATCH_OPS_MAX)


# --------------------------------------------------------------------------------------------
# Canonical form and hashes

AirNode = DefSchema | DefModule | DefWorkflow | DefEffect | DefAdapter | Manifest | Patch


def canonical_form(node: AirNode) -> Any:
    """The canonical JSON form of a node: its JSON field names, `$kind` included, defaults
    filled, absent optionals left out, and for a module only `artifact.hash` (an authoring
    path is not part of what the module is)."""
    if isinstance(node, DefModule):
        if node.artifact.hash_ is None:
            raise ModuleUnresolvedError(
                f"module {node.name} has no artifact hash yet", path=f"{node.name}.artifact"
            )
        node = node.model_copy(update={"artifact": Artifact(hash=node.artifact.hash_)})
    if isinstance(node, Manifest):
        for kind, refs in node.ref_lists().items():
            for index, ref in enumerate(refs):
                if not ref.filled:
                    raise HashMissingError(
                        f"ref to {ref.name} has no hash",
                        path=f"manifest.{REF_LISTS[kind]}[{index}].hash",
                    )
    form = json_dump(node)
    if isinstance(node, Manifest):
        # The order of refs means nothing, so the canonical form picks one: by name. A
        # manifest has one hash however its author listed the refs (issue paths still use
        # the authored order).
        for field in REF_LISTS.values():
            form[field] = sorted(form[field], key=lambda ref: ref["name"])
    return form


def def_hash(node: AirNode) -> Hash:
    """The hash of a definition (or manifest, or patch): BLAKE3 of the canonical CBOR of its
    canonical JSON form. The same object always has the same hash."""
    return hash_value(canonical_form(node))
