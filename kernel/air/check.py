"""Semantic checks of AIR: what pydantic's structural validation cannot see.

`check_definitions` looks at the definitions alone (refs resolve, no cycles, sane types);
`check_manifest` at the manifest against them (refs and hashes, routing). Both return every
issue they find, in a deterministic order (definitions by name, manifest in list order).

Codes (each also in spec/02-air.md):

    air.reserved_name          a user definition in the `sys/` namespace, a route for a `sys/`
                               event, or a user effect settled by the kernel's own adapter
    air.dangling_ref           a name that no definition (user or built-in) has
    air.ref_kind_mismatch      a name that exists, but is another kind of definition
    air.duplicate_entry        the same name twice in one list (effects_emitted, refs, ...)
    air.ref_cycle              schemas that refer to each other in a cycle (types are not
                               recursive)
    air.type_too_deep          a schema nests more than TYPE_DEPTH_MAX composite types
    air.type_invalid           option directly inside option (ambiguous null)
    air.context_unsupported    a workflow context other than sys/WorkflowContext@1
    air.receipt_undeliverable  a workflow that emits effects but whose event schema does not
                               accept sys/EffectReceiptEnvelope@1
    air.hash_mismatch          a manifest ref whose hash is not the definition's hash
    air.def_unreferenced       a definition that the manifest does not list
    air.route_not_deliverable  a routed event the workflow's event schema does not accept
    air.route_ambiguous        a routed event that several arms of the event variant accept
    air.key_field_missing      routing to a keyed workflow without key_field
    air.key_field_unkeyed      key_field on a route to an unkeyed workflow
    air.key_field_invalid      key_field is not a path in the event schema
    air.key_type_mismatch      the value at key_field is not of the workflow's key type
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from aos.kernel.air import builtin_names, builtins
from aos.kernel.air.errors import AirError, Issue
from aos.kernel.air.model import (
    REF_LISTS,
    DefAdapter,
    DefEffect,
    DefModule,
    DefSchema,
    DefWorkflow,
    Manifest,
    Subscription,
    def_hash,
)
from aos.kernel.air.names import is_sys_name
from aos.kernel.air.types import (
    TYPE_DEPTH_MAX,
    OptionType,
    RecordType,
    RefType,
    TypeExpr,
    VariantType,
    children,
    depth,
    expand,
    iter_refs,
    resolve,
)
from aos.kernel.hashing import Hash

AnyDefinition = DefSchema | DefModule | DefWorkflow | DefEffect | DefAdapter

_KIND_WORDS = {
    "defschema": "schema",
    "defmodule": "module",
    "defworkflow": "workflow",
    "defeffect": "effect",
    "defadapter": "adapter",
}


@dataclass
class _Context:
    """What every check needs: the definitions by name, user and built-in."""

    definitions: Mapping[str, AnyDefinition]
    files: Mapping[str, str]
    kinds: dict[str, str] = field(default_factory=dict)
    types: dict[str, TypeExpr] = field(default_factory=dict)
    issues: list[Issue] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name, builtin in builtins.BUILTIN_DEFINITIONS.items():
            self.kinds[name] = builtin.kind
        for name in builtin_names.BUILTIN_ADAPTER_NAMES:
            self.kinds[name] = "defadapter"
        for name, definition in self.definitions.items():
            self.kinds.setdefault(name, definition.kind)
        self.types = builtins.builtin_types()
        for name, definition in self.definitions.items():
            if isinstance(definition, DefSchema) and not is_sys_name(name):
                self.types[name] = definition.type_

    def add(self, code: str, path: str, message: str, owner: str | None = None) -> None:
        self.issues.append(Issue(code, path, message, self.files.get(owner or "")))

    def expect(self, name: str, kind: str, path: str, owner: str | None) -> bool:
        """Report a dangling or wrong-kind reference; True when `name` is a `kind`."""
        found = self.kinds.get(name)
        if found is None:
            self.add("air.dangling_ref", path, f"no {_KIND_WORDS[kind]} named {name}", owner)
            return False
        if found != kind:
            self.add(
                "air.ref_kind_mismatch",
                path,
                f"{name} is a {_KIND_WORDS[found]}, not a {_KIND_WORDS[kind]}",
                owner,
            )
            return False
        return True


# --------------------------------------------------------------------------------------------
# Definitions


def check_definitions(
    definitions: Mapping[str, AnyDefinition], *, files: Mapping[str, str] | None = None
) -> list[Issue]:
    """Check user definitions (by name) on their own. `files` maps names to authored files,
    for `Issue.file`."""
    context = _Context(definitions, files or {})
    acyclic = _check_schema_graph(context)
    for name in sorted(definitions):
        definition = definitions[name]
        if is_sys_name(name):
            context.add(
                "air.reserved_name", name, "the sys/ namespace is reserved for built-ins", name
            )
            continue
        if isinstance(definition, DefSchema):
            _check_schema(context, definition, acyclic)
        elif isinstance(definition, DefWorkflow):
            _check_workflow(context, definition, acyclic)
        elif isinstance(definition, DefEffect):
            _check_effect(context, definition)
    return context.issues


def _check_schema_graph(context: _Context) -> set[str]:
    """Report ref cycles among schemas; return the schemas whose whole ref closure exists and
    is acyclic (the deeper type checks only run on those). Iterative, so a long chain of refs
    cannot exhaust Python's stack."""
    state: dict[str, str] = {}  # "open" while on the DFS stack, "done" after
    acyclic: set[str] = set()
    broken: set[str] = set()
    for root in sorted(context.types):
        if root in state:
            continue
        state[root] = "open"
        stack = [(root, iter_refs(context.types[root], f"{root}.type"))]
        while stack:
            name, refs = stack[-1]
            step = next(refs, None)
            if step is None:
                stack.pop()
                state[name] = "done"
                if name in broken and stack:
                    broken.add(stack[-1][0])
                elif name not in broken:
                    acyclic.add(name)
                continue
            target, path = step
            if target not in context.types:
                broken.add(name)  # reported as a dangling ref by _check_schema
            elif state.get(target) == "open":
                names = [entry[0] for entry in stack]
                cycle = " -> ".join([*names[names.index(target) :], target])
                context.add("air.ref_cycle", path, f"refs form a cycle: {cycle}", name)
                broken.add(name)
            elif target not in state:
                state[target] = "open"
                stack.append((target, iter_refs(context.types[target], f"{target}.type")))
            elif target not in acyclic:
                broken.add(name)
    return acyclic


def _check_schema(context: _Context, schema: DefSchema, acyclic: set[str]) -> None:
    name = schema.name
    for target, path in iter_refs(schema.type_, f"{name}.type"):
        context.expect(target, "defschema", path, name)
    if name not in acyclic:
        return
    if depth(schema.type_, context.types) > TYPE_DEPTH_MAX:
        context.add(
            "air.type_too_deep",
            f"{name}.type",
            f"the type nests more than {TYPE_DEPTH_MAX} composite types (refs expanded)",
            name,
        )
    for path in _nested_options(schema.type_, f"{name}.type", context.types):
        context.add(
            "air.type_invalid", path, "option inside option cannot tell null from none", name
        )


def _nested_options(type_: TypeExpr, path: str, types: Mapping[str, TypeExpr]) -> Iterator[str]:
    if isinstance(type_, OptionType) and isinstance(resolve(type_.item, types), OptionType):
        yield f"{path}.option"
    for suffix, child in children(type_):
        yield from _nested_options(child, path + suffix, types)


def _check_workflow(context: _Context, workflow: DefWorkflow, acyclic: set[str]) -> None:
    name = workflow.name
    for field_name in ("state", "event", "context", "annotations"):
        target = getattr(workflow, field_name)
        if target is not None:
            context.expect(target, "defschema", f"{name}.{field_name}", name)
    if isinstance(workflow.key_schema, str):
        context.expect(workflow.key_schema, "defschema", f"{name}.key_schema", name)
    elif workflow.key_schema is not None:
        for target, path in iter_refs(workflow.key_schema, f"{name}.key_schema"):
            context.expect(target, "defschema", path, name)
    if workflow.context is not None and workflow.context != builtin_names.WORKFLOW_CONTEXT:
        context.add(
            "air.context_unsupported",
            f"{name}.context",
            f"the kernel provides {builtin_names.WORKFLOW_CONTEXT} as context, not {workflow.context}",
            name,
        )
    seen: set[str] = set()
    for index, effect in enumerate(workflow.effects_emitted):
        path = f"{name}.effects_emitted[{index}]"
        if effect in seen:
            context.add("air.duplicate_entry", path, f"{effect} is listed twice", name)
        seen.add(effect)
        context.expect(effect, "defeffect", path, name)
    context.expect(workflow.impl.module, "defmodule", f"{name}.impl.module", name)
    if workflow.effects_emitted and workflow.event in acyclic:
        arms = _accepting_arms(workflow.event, builtin_names.RECEIPT_ENVELOPE, context.types)
        if not arms:
            context.add(
                "air.receipt_undeliverable",
                f"{name}.event",
                f"the workflow emits effects, so its event schema must be "
                f"{builtin_names.RECEIPT_ENVELOPE} or a variant with an arm that refs it",
                name,
            )


def _check_effect(context: _Context, effect: DefEffect) -> None:
    name = effect.name
    context.expect(effect.params, "defschema", f"{name}.params", name)
    context.expect(effect.receipt, "defschema", f"{name}.receipt", name)
    seen: set[str] = set()
    for index, adapter in enumerate(effect.adapters):
        path = f"{name}.adapters[{index}]"
        if adapter in seen:
            context.add("air.duplicate_entry", path, f"{adapter} is listed twice", name)
        seen.add(adapter)
        if adapter in builtin_names.BUILTIN_ADAPTER_NAMES:
            context.add(
                "air.reserved_name",
                path,
                f"{adapter} is the kernel's own adapter; it settles built-in effects only",
                name,
            )
            continue
        context.expect(adapter, "defadapter", path, name)


def _accepting_arms(event_schema: str, routed: str, types: Mapping[str, TypeExpr]) -> list[str]:
    """How `event_schema` accepts events of schema `routed`: `[""]` when they are the same
    schema, else the arms of its variant whose type is exactly `{"ref": routed}`."""
    if event_schema == routed:
        return [""]
    resolved = resolve(types[event_schema], types)
    if not isinstance(resolved, VariantType):
        return []
    arms = []
    for arm in sorted(resolved.variant):
        arm_type = resolved.variant[arm]
        if isinstance(arm_type, RefType) and arm_type.ref == routed:
            arms.append(arm)
    return arms


# --------------------------------------------------------------------------------------------
# Manifest


def check_manifest(
    manifest: Manifest,
    definitions: Mapping[str, AnyDefinition],
    *,
    files: Mapping[str, str] | None = None,
    manifest_file: str | None = None,
) -> list[Issue]:
    """Check a manifest against the user definitions: every ref resolves to a definition of
    its list's kind with the same hash (refs without a hash are not compared), every
    definition is referenced, and routing is deliverable."""
    files = dict(files or {})
    if manifest_file is not None:
        files["manifest"] = manifest_file
    context = _Context(definitions, files)
    _check_refs(context, manifest)
    acyclic = _check_schema_graph(_Context(definitions, {}))
    for index, subscription in enumerate(manifest.routing.subscriptions):
        _check_subscription(context, manifest, index, subscription, acyclic)
    return context.issues


def _check_refs(context: _Context, manifest: Manifest) -> None:
    referenced: set[str] = set()
    for kind, refs in manifest.ref_lists().items():
        for index, ref in enumerate(refs):
            path = f"manifest.{REF_LISTS[kind]}[{index}]"
            if ref.name in referenced:
                context.add("air.duplicate_entry", path, f"{ref.name} is listed twice", "manifest")
                continue
            referenced.add(ref.name)
            if not context.expect(ref.name, kind, f"{path}.name", "manifest"):
                continue
            if not ref.filled:
                continue
            expected = _definition_hash(context, ref.name, f"{path}.hash")
            if expected is not None and ref.hash_ != expected:
                context.add(
                    "air.hash_mismatch",
                    f"{path}.hash",
                    f"{ref.name} hashes to {expected}, the manifest says {ref.hash_}",
                    "manifest",
                )
    for name in sorted(context.definitions):
        if name not in referenced and not is_sys_name(name):
            kind = context.definitions[name].kind
            context.add(
                "air.def_unreferenced",
                name,
                f"{name} is defined but manifest.{REF_LISTS[kind]} does not list it",
                name,
            )


def _definition_hash(context: _Context, name: str, path: str) -> Hash | None:
    definition = context.definitions.get(name) or builtins.BUILTIN_DEFINITIONS.get(name)
    if definition is None:
        return None
    try:
        return def_hash(definition)
    except AirError as error:
        context.add(error.code, path, error.message, name)
        return None


def _check_subscription(
    context: _Context,
    manifest: Manifest,
    index: int,
    subscription: Subscription,
    acyclic: set[str],
) -> None:
    path = f"manifest.routing.subscriptions[{index}]"
    for earlier in manifest.routing.subscriptions[:index]:
        if (earlier.event, earlier.workflow) == (subscription.event, subscription.workflow):
            context.add(
                "air.duplicate_entry",
                path,
                f"{subscription.event} is already routed to {subscription.workflow}",
                "manifest",
            )
            break
    event_ok = context.expect(subscription.event, "defschema", f"{path}.event", "manifest")
    if is_sys_name(subscription.event):
        # Kernel records (receipt envelopes, ...) reach workflows only from the kernel; routing
        # them would let anyone who can send an event forge one.
        context.add(
            "air.reserved_name",
            f"{path}.event",
            f"{subscription.event} is produced by the kernel and cannot be routed",
            "manifest",
        )
        event_ok = False
    if not context.expect(subscription.workflow, "defworkflow", f"{path}.workflow", "manifest"):
        return
    workflow = context.definitions[subscription.workflow]
    assert isinstance(workflow, DefWorkflow)
    if not event_ok or workflow.event not in acyclic or subscription.event not in acyclic:
        return
    arms = _accepting_arms(workflow.event, subscription.event, context.types)
    if not arms:
        context.add(
            "air.route_not_deliverable",
            f"{path}.event",
            f"{workflow.name} takes {workflow.event}, which is neither {subscription.event} "
            "nor a variant with an arm that refs it",
            "manifest",
        )
    elif len(arms) > 1:
        context.add(
            "air.route_ambiguous",
            f"{path}.event",
            f"arms {', '.join(arms)} of {workflow.event} all ref {subscription.event}",
            "manifest",
        )
    _check_key_field(context, path, subscription, workflow)


def _check_key_field(
    context: _Context, path: str, subscription: Subscription, workflow: DefWorkflow
) -> None:
    if workflow.keyed and subscription.key_field is None:
        context.add(
            "air.key_field_missing",
            path,
            f"{workflow.name} is keyed: the route needs a key_field",
            "manifest",
        )
        return
    if subscription.key_field is None:
        return
    if not workflow.keyed:
        context.add(
            "air.key_field_unkeyed",
            f"{path}.key_field",
            f"{workflow.name} has no key_schema, so its routes take no key_field",
            "manifest",
        )
        return
    found = _key_field_types(
        context.types[subscription.event], subscription.key_field.split("."), context.types
    )
    if isinstance(found, str):
        context.add("air.key_field_invalid", f"{path}.key_field", found, "manifest")
        return
    key_type = workflow.key_schema
    assert key_type is not None
    try:
        wanted = expand(
            RefType(ref=key_type) if isinstance(key_type, str) else key_type, context.types
        )
        found_shapes = [expand(found_type, context.types) for found_type in found]
    except AirError:
        return  # the schemas' own problems are reported with their definitions
    for shape in found_shapes:
        if shape != wanted:
            context.add(
                "air.key_type_mismatch",
                f"{path}.key_field",
                f"the value at {subscription.key_field} is not of {workflow.name}'s key type",
                "manifest",
            )
            return


def _key_field_types(
    type_: TypeExpr, segments: list[str], types: Mapping[str, TypeExpr]
) -> list[TypeExpr] | str:
    """The types at the key path (one per variant arm crossed), or why there is none.
    `$value` steps into every arm of a variant; a name steps into a record field."""
    current: list[TypeExpr] = [type_]
    walked = ""
    for segment in segments:
        following: list[TypeExpr] = []
        for candidate in current:
            resolved = resolve(candidate, types)
            if segment == "$value" and isinstance(resolved, VariantType):
                following.extend(resolved.variant[arm] for arm in sorted(resolved.variant))
            elif isinstance(resolved, RecordType) and segment in resolved.record:
                following.append(resolved.record[segment])
            else:
                shown = walked or "the event"
                return f"{shown} has no {segment!r} (in every case) to follow"
        current = following
        walked = f"{walked}.{segment}" if walked else segment
    return current
