"""The AIR type language: the `type` of a `defschema`, and of inline key types.

A type is a JSON object with exactly one key, the type's tag:

    {"int": {}}                                   primitives carry an empty object
    {"record": {"x": <type>, "y": <type>}}        exact fields
    {"variant": {"Arm": <type>, ...}}             tagged union, values {"$tag", "$value"}
    {"list": <type>}  {"set": <type>}  {"option": <type>}
    {"map": {"key": <primitive key type>, "value": <type>}}
    {"ref": "namespace/Name@1"}                    another defschema, by name

This is the shape of the AgentOS AIR type expressions (spec/02-air.md). Map keys are limited
to `int nat text uuid hash`, because a map's canonical form is a CBOR map whose keys are
integers or text.

In pydantic, each tag is one model class; `TypeExpr` is their union, discriminated by the one
key of the input object.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from aos.kernel.air.base import AirModel, Name
from aos.kernel.air.errors import AirError, SchemaUnknownError

PRIMITIVE_TAGS = (
    "bool",
    "int",
    "nat",
    "dec128",
    "bytes",
    "text",
    "time",
    "duration",
    "hash",
    "uuid",
    "unit",
    "any",
)
COMPOSITE_TAGS = ("record", "variant", "list", "set", "option", "map", "ref")
MAP_KEY_TAGS = ("int", "nat", "text", "uuid", "hash")

# Bounds on a type's size. A field or arm name is also a path segment (`key_field`), so it
# is short and has no '.'; a leading '$' is reserved for the variant value form.
FIELD_NAME_LENGTH_MAX = 64
RECORD_FIELDS_MAX = 1024
VARIANT_ARMS_MAX = 1024
TYPE_DEPTH_MAX = 32
"""Most composite types (record, variant, list, set, option, map) nested in one schema, with
refs expanded. Checked by `aos air check` (`air.type_too_deep`)."""

FIELD_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"
_FIELD_NAME_RE = re.compile(FIELD_NAME_PATTERN)


def _check_field_name(text: str) -> str:
    if len(text) > FIELD_NAME_LENGTH_MAX or _FIELD_NAME_RE.match(text) is None:
        raise PydanticCustomError(
            "air.field_name_invalid",
            "{text} is not a field or arm name (a letter or '_', then letters, digits, '_' "
            "or '-'; at most {limit} characters)",
            {"text": repr(text[:80]), "limit": FIELD_NAME_LENGTH_MAX},
        )
    return text


FieldName = Annotated[
    str,
    AfterValidator(_check_field_name),
    WithJsonSchema(
        {"type": "string", "pattern": FIELD_NAME_PATTERN, "maxLength": FIELD_NAME_LENGTH_MAX}
    ),
]


class Empty(AirModel):
    """The empty object `{}` a primitive type carries."""


class _TypeNode(AirModel):
    TAG: ClassVar[str]

    @property
    def tag(self) -> str:
        """The type's tag: `int`, `record`, `ref`, ..."""
        return self.TAG


# Primitive types. Python attribute names get a trailing `_` where the tag is a builtin name.


class BoolType(_TypeNode):
    """`{"bool": {}}`: true or false."""

    TAG = "bool"
    bool_: Empty = Field(alias="bool")


class IntType(_TypeNode):
    """`{"int": {}}`: a signed 64-bit integer."""

    TAG = "int"
    int_: Empty = Field(alias="int")


class NatType(_TypeNode):
    """`{"nat": {}}`: an unsigned 64-bit integer."""

    TAG = "nat"
    nat: Empty


class Dec128Type(_TypeNode):
    """`{"dec128": {}}`: a decimal128 number, as canonical decimal text."""

    TAG = "dec128"
    dec128: Empty


class BytesType(_TypeNode):
    """`{"bytes": {}}`: a byte string."""

    TAG = "bytes"
    bytes_: Empty = Field(alias="bytes")


class TextType(_TypeNode):
    """`{"text": {}}`: a Unicode string."""

    TAG = "text"
    text: Empty


class TimeType(_TypeNode):
    """`{"time": {}}`: an instant, integer nanoseconds since the Unix epoch."""

    TAG = "time"
    time: Empty


class DurationType(_TypeNode):
    """`{"duration": {}}`: a signed span of time, integer nanoseconds."""

    TAG = "duration"
    duration: Empty


class HashType(_TypeNode):
    """`{"hash": {}}`: a `blake3:<hex>` content hash."""

    TAG = "hash"
    hash_: Empty = Field(alias="hash")


class UuidType(_TypeNode):
    """`{"uuid": {}}`: a UUID as lowercase hyphenated text."""

    TAG = "uuid"
    uuid: Empty


class UnitType(_TypeNode):
    """`{"unit": {}}`: the type with one value, written `{}`."""

    TAG = "unit"
    unit: Empty


class AnyType(_TypeNode):
    """`{"any": {}}`: any value of the data model (null, bool, integer, float, text, bytes,
    lists and maps with text or integer keys), for data whose shape the definitions do not
    fix: a flow's workload, a signal's payload, a tool's result."""

    TAG = "any"
    any_: Empty = Field(alias="any")


# Composite types.


class RecordType(_TypeNode):
    """`{"record": {field: type}}`: a map with exactly these fields."""

    TAG = "record"
    record: dict[FieldName, TypeExpr] = Field(max_length=RECORD_FIELDS_MAX)


class VariantType(_TypeNode):
    """`{"variant": {arm: type}}`: one of the arms, written `{"$tag": arm, "$value": v}`."""

    TAG = "variant"
    variant: dict[FieldName, TypeExpr] = Field(min_length=1, max_length=VARIANT_ARMS_MAX)


class ListType(_TypeNode):
    """`{"list": type}`: an ordered sequence."""

    TAG = "list"
    item: TypeExpr = Field(alias="list")


class SetType(_TypeNode):
    """`{"set": type}`: distinct elements, kept sorted by their canonical encoding."""

    TAG = "set"
    item: TypeExpr = Field(alias="set")


class OptionType(_TypeNode):
    """`{"option": type}`: null or a value of the type."""

    TAG = "option"
    item: TypeExpr = Field(alias="option")


def _key_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        return ":" + next(iter(value)) if len(value) == 1 else None
    if isinstance(value, _TypeNode):
        return ":" + value.TAG
    return None


MapKeyType = Annotated[
    Annotated[IntType, Tag(":int")]
    | Annotated[NatType, Tag(":nat")]
    | Annotated[TextType, Tag(":text")]
    | Annotated[UuidType, Tag(":uuid")]
    | Annotated[HashType, Tag(":hash")],
    Discriminator(
        _key_tag,
        custom_error_type="air.type_invalid",
        custom_error_message='a map key type is one of {"int": {}}, {"nat": {}}, '
        '{"text": {}}, {"uuid": {}}, {"hash": {}}',
    ),
]


class MapSpec(AirModel):
    """The body of a map type: `{"key": <key type>, "value": <type>}`."""

    key: MapKeyType
    value: TypeExpr


class MapType(_TypeNode):
    """`{"map": {"key": type, "value": type}}`: keys sorted canonically, no duplicates."""

    TAG = "map"
    map_: MapSpec = Field(alias="map")


class RefType(_TypeNode):
    """`{"ref": "ns/Name@1"}`: the type of another defschema."""

    TAG = "ref"
    ref: Name


TypeExpr = Annotated[
    Annotated[BoolType, Tag(":bool")]
    | Annotated[IntType, Tag(":int")]
    | Annotated[NatType, Tag(":nat")]
    | Annotated[Dec128Type, Tag(":dec128")]
    | Annotated[BytesType, Tag(":bytes")]
    | Annotated[TextType, Tag(":text")]
    | Annotated[TimeType, Tag(":time")]
    | Annotated[DurationType, Tag(":duration")]
    | Annotated[HashType, Tag(":hash")]
    | Annotated[UuidType, Tag(":uuid")]
    | Annotated[UnitType, Tag(":unit")]
    | Annotated[AnyType, Tag(":any")]
    | Annotated[RecordType, Tag(":record")]
    | Annotated[VariantType, Tag(":variant")]
    | Annotated[ListType, Tag(":list")]
    | Annotated[SetType, Tag(":set")]
    | Annotated[OptionType, Tag(":option")]
    | Annotated[MapType, Tag(":map")]
    | Annotated[RefType, Tag(":ref")],
    Discriminator(
        _key_tag,
        custom_error_type="air.type_invalid",
        custom_error_message="a type is an object with exactly one key, one of: "
        + ", ".join(PRIMITIVE_TAGS + COMPOSITE_TAGS),
    ),
]
"""Any AIR type expression."""

TYPE_NODES: tuple[type[AirModel], ...] = (
    BoolType,
    IntType,
    NatType,
    Dec128Type,
    BytesType,
    TextType,
    TimeType,
    DurationType,
    HashType,
    UuidType,
    UnitType,
    AnyType,
    RecordType,
    VariantType,
    ListType,
    SetType,
    OptionType,
    MapType,
    RefType,
)
"""The model class of each tag, in the order of the `TypeExpr` union."""

for _model in (RecordType, VariantType, ListType, SetType, OptionType, MapSpec, MapType):
    _model.model_rebuild()

_TYPE_ADAPTER: TypeAdapter[TypeExpr] = TypeAdapter(TypeExpr)


def parse_type(value: Any) -> TypeExpr:
    """Validate a JSON-shaped type expression (raises pydantic's ValidationError)."""
    return _TYPE_ADAPTER.validate_python(value)


def dump_type(type_: TypeExpr) -> Any:
    """The JSON shape of a type expression."""
    return _TYPE_ADAPTER.dump_python(type_, mode="json")


def children(type_: TypeExpr) -> list[tuple[str, TypeExpr]]:
    """The direct sub-types with their path suffixes, in sorted (deterministic) order."""
    if isinstance(type_, RecordType):
        return [(f".record.{name}", type_.record[name]) for name in sorted(type_.record)]
    if isinstance(type_, VariantType):
        return [(f".variant.{name}", type_.variant[name]) for name in sorted(type_.variant)]
    if isinstance(type_, (ListType, SetType, OptionType)):
        return [(f".{type_.TAG}", type_.item)]
    if isinstance(type_, MapType):
        return [(".map.key", type_.map_.key), (".map.value", type_.map_.value)]
    return []


def iter_refs(type_: TypeExpr, path: str) -> Iterator[tuple[str, str]]:
    """Every `ref` in the type tree as (schema name, path of the ref), depth first."""
    if isinstance(type_, RefType):
        yield type_.ref, f"{path}.ref"
        return
    for suffix, child in children(type_):
        yield from iter_refs(child, path + suffix)


class RefCycleError(AirError):
    """Schemas refer to each other in a cycle; AIR types are not recursive."""

    code = "air.ref_cycle"
    hint = "AIR types are not recursive: break the cycle of refs"


def resolve(type_: TypeExpr, types: Mapping[str, TypeExpr]) -> TypeExpr:
    """Follow refs until a non-ref type. `types` maps schema names to their types."""
    seen: list[str] = []
    while isinstance(type_, RefType):
        if type_.ref in seen:
            raise RefCycleError("refs form a cycle: " + " -> ".join([*seen, type_.ref]))
        seen.append(type_.ref)
        target = types.get(type_.ref)
        if target is None:
            raise SchemaUnknownError(f"unknown schema {type_.ref!r}")
        type_ = target
    return type_


def expand(type_: TypeExpr, types: Mapping[str, TypeExpr], depth_max: int = TYPE_DEPTH_MAX) -> Any:
    """The JSON shape of the type with every ref replaced by its definition, to compare types
    structurally. Raises `RefCycleError` past `depth_max` nested composites (which is also
    what a cycle through composites looks like)."""
    resolved = resolve(type_, types)
    if resolved.TAG in PRIMITIVE_TAGS:
        return {resolved.TAG: {}}
    if depth_max <= 0:
        raise RefCycleError(f"the type nests more than {TYPE_DEPTH_MAX} composite types deep")
    if isinstance(resolved, (RecordType, VariantType)):
        fields = resolved.record if isinstance(resolved, RecordType) else resolved.variant
        return {
            resolved.TAG: {
                name: expand(fields[name], types, depth_max - 1) for name in sorted(fields)
            }
        }
    if isinstance(resolved, (ListType, SetType, OptionType)):
        return {resolved.TAG: expand(resolved.item, types, depth_max - 1)}
    assert isinstance(resolved, MapType)
    return {
        "map": {
            "key": {resolved.map_.key.TAG: {}},
            "value": expand(resolved.map_.value, types, depth_max - 1),
        }
    }


def depth(type_: TypeExpr, types: Mapping[str, TypeExpr], limit: int = TYPE_DEPTH_MAX + 1) -> int:
    """How many composite types nest in `type_`, refs expanded; stops counting at `limit`
    (so a cycle through composites reports `limit` instead of looping)."""
    resolved = resolve(type_, types)
    if resolved.TAG in PRIMITIVE_TAGS or limit <= 0:
        return 0
    inner = [depth(child, types, limit - 1) for _, child in children(resolved)]
    return 1 + max(inner, default=0)
