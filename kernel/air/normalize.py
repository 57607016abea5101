"""Typed values: check a value against an AIR type and bring it to its one canonical form.

Values arrive as JSON-ish Python (from the CLI or HTTP: `{"$bytes": "00ff"}` for bytes, RFC
3339 text for times, "250ms" for durations) or as decoded canonical CBOR. `normalize` returns
the canonical value, which is plain CBOR data (`None bool int str bytes list dict`) ready for
`cbor.encode`; `normalize_to_bytes` returns those bytes. Normalizing a canonical value returns
it unchanged, so the function is idempotent.

The canonical form of each type (spec/02-air.md, "Typed values", is the normative text):

    bool      true / false (not 0/1)
    int       integer in i64 [-2**63, 2**63-1]
    nat       integer in u64 [0, 2**64-1]
    dec128    decimal text, plain notation, no exponent, no trailing fractional zeros, no
              leading zeros, no '+', no '-0': "1.50" -> "1.5", "1e3" -> "1000", "-0.0" -> "0";
              at most 34 significant digits and within decimal128's exponent range (values
              are never rounded); input: such text in any common notation, or an integer
    bytes     a byte string; input: bytes, or {"$bytes": "<hex>"}
    text      a string (valid Unicode, kept as given: no case or Unicode normalization)
    time      integer nanoseconds since the Unix epoch in [0, 2**63-1]; input: such an
              integer, or RFC 3339 text with up to 9 fractional digits ("...Z" or "+hh:mm")
    duration  integer nanoseconds in i64; input: such an integer, or text like "250ms",
              "1h30m", "-1.5s" (units ns us ms s m h d; the total must be whole ns)
    hash      "blake3:<64 lowercase hex>"
    uuid      lowercase hyphenated text; input: the same in any case
    unit      {} (never null, so that option<unit> stays unambiguous)
    record    a map with exactly the declared fields; an `option` field may be omitted on
              input and is then written as null
    variant   {"$tag": arm, "$value": value}; for an arm of type unit `$value` is omitted
              (input may omit it or give {})
    list      a list, order kept
    set       a list sorted by the canonical encoding of its elements, duplicates removed
    option    null, or the inner value
    map       a map; keys are text (text/uuid/hash keys) or integers (int/nat keys; input may
              give them as decimal text, as JSON must); keys that collide after normalization
              are an error
    ref       the referenced schema's form

Maps and records are returned with their keys in canonical CBOR order, so no dict order leaks.
"""

from __future__ import annotations

import calendar
import datetime
import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from aos.kernel import cbor, hashing
from aos.kernel.air.builtins import BUILTIN_SCHEMAS
from aos.kernel.air.errors import (
    SchemaUnknownError,
    ValueDuplicateKeyError,
    ValueFieldMissingError,
    ValueFieldUnknownError,
    ValueInvalidError,
    ValueOutOfRangeError,
    ValueTooDeepError,
    ValueVariantUnknownError,
)
from aos.kernel.air.model import DefSchema
from aos.kernel.air.types import (
    TYPE_NODES,
    AnyType,
    ListType,
    MapType,
    OptionType,
    RecordType,
    RefCycleError,
    RefType,
    SetType,
    TypeExpr,
    UnitType,
    VariantType,
    resolve,
)

VALUE_DEPTH_MAX_DEFAULT = cbor.NESTING_DEPTH_MAX_DEFAULT
"""Most nested containers (records, variants, lists, sets, maps) in one value."""

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
NAT_MAX = 2**64 - 1
TIME_NS_MAX = 2**63 - 1

DEC128_DIGITS_MAX = 34
DEC128_EXPONENT_MIN = -6176
DEC128_EXPONENT_MAX = 6111
"""decimal128 holds coefficient * 10**q with at most 34 digits and q in [-6176, 6111]."""
DEC128_TEXT_LENGTH_MAX = 6400
"""Longest accepted dec128 text: the plain notation of the largest and smallest values is
about 6180 characters, and canonical text must be accepted back."""
TIME_TEXT_LENGTH_MAX = 64
DURATION_TEXT_LENGTH_MAX = 64
RECORD_ORDER_CACHE_ENTRIES_MAX = 4096
"""Record types whose canonical field order is remembered."""

SchemaSource = Mapping[str, DefSchema] | Mapping[str, TypeExpr]

_DECIMAL_RE = re.compile(r"^([+-]?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$")
_UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
_INT_KEY_RE = re.compile(r"^-?(?:0|[1-9][0-9]*)$")
_RFC3339_RE = re.compile(
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]{1,9}))?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
_DURATION_PART_RE = re.compile(r"([0-9]+)(?:\.([0-9]+))?(ns|us|ms|s|m|h|d)")
_DURATION_UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
    "d": 86400 * 1_000_000_000,
}


def normalize(
    value: Any,
    schema_type: TypeExpr | str,
    schemas: SchemaSource | None = None,
    *,
    depth_max: int = VALUE_DEPTH_MAX_DEFAULT,
    path: str = "$",
) -> Any:
    """The canonical form of `value` as a value of `schema_type` (a type, or a schema name).

    `schemas` maps schema names to definitions (or to bare types) for refs; the built-in `sys/`
    schemas are always available. Raises `ValueInvalidError` (or a finer subclass) with the
    path of the offending part of the value, or `SchemaUnknownError` for a ref to a schema
    that is not there.
    """
    normalizer = _Normalizer(schemas or {}, depth_max)
    return normalizer.value(value, normalizer.type_of(schema_type, path), path, depth_max)


def normalize_to_bytes(
    value: Any,
    schema_type: TypeExpr | str,
    schemas: SchemaSource | None = None,
    *,
    depth_max: int = VALUE_DEPTH_MAX_DEFAULT,
) -> bytes:
    """The canonical CBOR bytes (self-describe prefix included) of the normalized value."""
    return cbor.encode(normalize(value, schema_type, schemas, depth_max=depth_max))


class _Lookup(Mapping[str, TypeExpr]):
    """Schema types by name: the given schemas first, then the built-ins."""

    def __init__(self, schemas: SchemaSource) -> None:
        self._schemas = schemas

    def __getitem__(self, name: str) -> TypeExpr:
        found: Any = self._schemas.get(name)
        if found is None:
            builtin = BUILTIN_SCHEMAS.get(name)
            if builtin is None:
                raise KeyError(name)
            return builtin.type_
        return found.type_ if isinstance(found, DefSchema) else found

    def __iter__(self) -> Any:
        return iter(sorted({*self._schemas, *BUILTIN_SCHEMAS}))

    def __len__(self) -> int:
        return len({*self._schemas, *BUILTIN_SCHEMAS})


class _Normalizer:
    def __init__(self, schemas: SchemaSource, depth_max: int) -> None:
        self.types = _Lookup(schemas)
        self.depth_max = depth_max

    def type_of(self, schema_type: TypeExpr | str, path: str) -> TypeExpr:
        if isinstance(schema_type, str):
            try:
                return self.types[schema_type]
            except KeyError:
                raise SchemaUnknownError(f"unknown schema {schema_type!r}", path=path) from None
        return schema_type

    def resolved(self, type_: TypeExpr, path: str) -> TypeExpr:
        try:
            return resolve(type_, self.types)
        except (SchemaUnknownError, RefCycleError) as error:
            raise type(error)(error.message, path=path) from None

    def value(self, value: Any, type_: TypeExpr, path: str, depth_left: int) -> Any:
        kind = type(type_)
        if kind in _PLAIN_TYPE_KINDS:  # neither a ref, an option nor `any`: no isinstance chain
            container = _CONTAINERS.get(kind)
            if container is None:
                return _PRIMITIVES[type_.TAG](value, path)
        else:
            if isinstance(type_, RefType):
                type_ = self.resolved(type_, path)
            if isinstance(type_, OptionType):
                return None if value is None else self.value(value, type_.item, path, depth_left)
            if isinstance(type_, AnyType):
                return self._any(value, path, depth_left)
            container = _CONTAINERS.get(type(type_))
        if container is not None:
            if depth_left <= 0:
                raise ValueTooDeepError(
                    f"the value nests more than {self.depth_max} containers deep", path=path
                )
            return container(self, value, type_, path, depth_left - 1)
        return _PRIMITIVES[type_.TAG](value, path)

    def _any(self, value: Any, path: str, depth_left: int) -> Any:
        """A data-model value, checked in place and returned as it is: nothing is copied,
        since its encoding orders map keys canonically whatever order they are in (this is
        on the hot path: a flow's whole state is `any`). Paths are spelled only for an
        error."""
        if not _plain_any(value, depth_left):
            self._check_any(value, path, depth_left)
        return list(value) if type(value) is tuple else value

    def _check_any(self, value: Any, path: str, depth_left: int) -> None:
        """`_any`'s checks one item at a time: raises for the first fault, with its path."""
        stack: list[tuple[Any, Any, int]] = [(value, path, depth_left)]
        while stack:
            item, where, left = stack.pop()
            kind = type(item)
            if item is None or kind is bool or kind is str or kind is bytes or kind is float:
                continue
            if kind is int:
                if not -(2**64) <= item <= 2**64 - 1:
                    _ranged_int(item, _any_path(where), "an integer", -(2**64), 2**64 - 1)
                continue
            if kind is not list and kind is not tuple and kind is not dict:
                raise ValueInvalidError(
                    f"expected a data value, got {_describe(item)}", path=_any_path(where)
                )
            if left <= 0:
                raise ValueTooDeepError(
                    f"the value nests more than {self.depth_max} containers deep",
                    path=_any_path(where),
                )
            if kind is dict:
                for key, child in item.items():
                    if type(key) is not str and type(key) is not int:
                        raise ValueInvalidError(
                            "map keys are text or integers", path=_any_path(where)
                        )
                    stack.append((child, (where, f".{key}"), left - 1))
            else:
                stack.extend((child, (where, f"[{i}]"), left - 1) for i, child in enumerate(item))

    # Containers ---------------------------------------------------------------------------

    def _record(self, value: Any, type_: Any, path: str, depth_left: int) -> Any:
        assert isinstance(type_, RecordType)
        fields = _expect_text_keyed_map(value, "record", path)
        unknown = (
            sorted(fields.keys() - type_.record.keys())
            if fields.keys() - type_.record.keys()
            else []
        )
        if unknown:
            raise ValueFieldUnknownError(
                f"unknown field {unknown[0]!r} (fields: {', '.join(sorted(type_.record))})",
                path=_child(path, unknown[0]),
            )
        result: dict[str, Any] = {}
        for name in _field_order(tuple(type_.record)):
            field_type = type_.record[name]
            if name not in fields:
                if not isinstance(self.resolved(field_type, path), OptionType):
                    raise ValueFieldMissingError(f"missing field {name!r}", path=_child(path, name))
                result[name] = None
                continue
            result[name] = self.value(fields[name], field_type, _child(path, name), depth_left)
        return result

    def _variant(self, value: Any, type_: Any, path: str, depth_left: int) -> Any:
        assert isinstance(type_, VariantType)
        body = _expect_text_keyed_map(value, "variant", path)
        extra = sorted(body.keys() - _VARIANT_KEYS) if not body.keys() <= _VARIANT_KEYS else []
        if extra:
            raise ValueFieldUnknownError(
                f"a variant value has only $tag and $value, not {extra[0]!r}",
                path=_child(path, extra[0]),
            )
        tag = body.get("$tag")
        if not isinstance(tag, str):
            raise ValueInvalidError(
                'expected a variant {"$tag": <arm>, "$value": ...}', path=f"{path}.$tag"
            )
        if tag not in type_.variant:
            raise ValueVariantUnknownError(
                f"unknown arm {tag!r} (arms: {', '.join(sorted(type_.variant))})",
                path=f"{path}.$tag",
            )
        arm_type = type_.variant[tag]
        if isinstance(self.resolved(arm_type, path), UnitType):
            if body.get("$value", {}) != {}:
                raise ValueInvalidError(
                    f"arm {tag!r} is a unit arm: omit $value or give {{}}", path=f"{path}.$value"
                )
            return {"$tag": tag}
        if "$value" not in body:
            raise ValueFieldMissingError(f"arm {tag!r} needs a $value", path=f"{path}.$value")
        return {
            "$tag": tag,
            "$value": self.value(body["$value"], arm_type, f"{path}.$value", depth_left),
        }

    def _list(self, value: Any, type_: Any, path: str, depth_left: int) -> Any:
        assert isinstance(type_, ListType)
        if type(value) not in (list, tuple):
            raise ValueInvalidError(f"expected a list, got {_describe(value)}", path=path)
        return [
            self.value(item, type_.item, f"{path}[{index}]", depth_left)
            for index, item in enumerate(value)
        ]

    def _set(self, value: Any, type_: Any, path: str, depth_left: int) -> Any:
        assert isinstance(type_, SetType)
        if type(value) not in (list, tuple, set, frozenset):
            raise ValueInvalidError(f"expected a set (a list), got {_describe(value)}", path=path)
        # A Python set has no stable order to report paths by; its elements are sorted first.
        items = value if type(value) in (list, tuple) else sorted(value, key=repr)
        encoded: dict[bytes, Any] = {}
        for index, item in enumerate(items):
            element = self.value(item, type_.item, f"{path}[{index}]", depth_left)
            encoded.setdefault(cbor.encode(element, self_describe=False), element)
        return [encoded[key] for key in sorted(encoded)]

    def _map(self, value: Any, type_: Any, path: str, depth_left: int) -> Any:
        assert isinstance(type_, MapType)
        if type(value) is not dict:
            raise ValueInvalidError(f"expected a map, got {_describe(value)}", path=path)
        key_type = type_.map_.key
        entries: dict[str | int, Any] = {}
        for raw_key in sorted(value, key=repr):
            key_path = f"{path}[{json.dumps(raw_key) if isinstance(raw_key, str) else raw_key}]"
            key = _map_key(raw_key, key_type.TAG, key_path)
            if key in entries:
                raise ValueDuplicateKeyError(
                    f"key {raw_key!r} is the same as another key once normalized", path=key_path
                )
            entries[key] = self.value(value[raw_key], type_.map_.value, key_path, depth_left)
        return {key: entries[key] for key in _canonical_key_order(entries)}


_Container = Callable[[_Normalizer, Any, Any, str, int], Any]
_VARIANT_KEYS = frozenset({"$tag", "$value"})

_CONTAINERS: dict[type, _Container] = {
    RecordType: _Normalizer._record,
    VariantType: _Normalizer._variant,
    ListType: _Normalizer._list,
    SetType: _Normalizer._set,
    MapType: _Normalizer._map,
}


# Type classes `value` takes straight to their container or primitive (never a subclass).
_PLAIN_TYPE_KINDS = frozenset(TYPE_NODES) - {AnyType, OptionType, RefType}


# --------------------------------------------------------------------------------------------
# Primitives: each takes (value, path) and returns the canonical value.


def _bool(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise ValueInvalidError(f"expected bool, got {_describe(value)}", path=path)
    return value


def _ranged_int(value: Any, path: str, name: str, low: int, high: int) -> int:
    if type(value) is not int:
        raise ValueInvalidError(f"expected {name}, got {_describe(value)}", path=path)
    if not low <= value <= high:
        raise ValueOutOfRangeError(f"{name} must be in [{low}, {high}], got {value}", path=path)
    return value


def _int(value: Any, path: str) -> int:
    return _ranged_int(value, path, "int", INT_MIN, INT_MAX)


def _nat(value: Any, path: str) -> int:
    return _ranged_int(value, path, "nat", 0, NAT_MAX)


def _text(value: Any, path: str) -> str:
    if type(value) is not str:
        raise ValueInvalidError(f"expected text, got {_describe(value)}", path=path)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueInvalidError("text is not valid Unicode (lone surrogate)", path=path) from None
    return value


def _bytes(value: Any, path: str) -> bytes:
    if type(value) in (bytes, bytearray, memoryview):
        return bytes(value)
    if type(value) is dict and set(value) == {"$bytes"} and type(value["$bytes"]) is str:
        text = value["$bytes"]
        if len(text) % 2 == 0 and re.fullmatch(r"[0-9a-fA-F]*", text):
            return bytes.fromhex(text)
        raise ValueInvalidError("$bytes is not an even number of hex digits", path=path)
    raise ValueInvalidError(
        f'expected bytes (or {{"$bytes": "<hex>"}}), got {_describe(value)}', path=path
    )


def _unit(value: Any, path: str) -> dict[str, Any]:
    if type(value) is not dict or value:
        raise ValueInvalidError(f"expected unit {{}}, got {_describe(value)}", path=path)
    return {}


def _hash(value: Any, path: str) -> str:
    if type(value) is not str or not hashing.is_hash(value):
        raise ValueInvalidError(
            f"expected hash (blake3:<64 lowercase hex>), got {_describe(value)}", path=path
        )
    return value


def _uuid(value: Any, path: str) -> str:
    if type(value) is not str or _UUID_RE.match(value) is None:
        raise ValueInvalidError(
            f"expected uuid (8-4-4-4-12 hex digits), got {_describe(value)}", path=path
        )
    return value.lower()


def _dec128(value: Any, path: str) -> str:
    if type(value) is int:
        value = str(value)
    if type(value) is not str:
        raise ValueInvalidError(
            f"expected dec128 (decimal text or an integer), got {_describe(value)}", path=path
        )
    match = _DECIMAL_RE.match(value) if len(value) <= DEC128_TEXT_LENGTH_MAX else None
    if match is None:
        raise ValueInvalidError(f"expected dec128, got {_describe(value)}", path=path)
    sign, whole, fraction, exponent_text = match.groups()
    fraction = fraction or ""
    if exponent_text is not None and len(exponent_text.lstrip("+-")) > 9:
        raise ValueOutOfRangeError("dec128 exponent out of range", path=path)
    exponent = int(exponent_text or "0") - len(fraction)
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return "0"
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    _check_dec128_range(stripped, exponent, path)
    return ("-" if sign == "-" else "") + _plain_decimal(stripped, exponent)


def _check_dec128_range(digits: str, exponent: int, path: str) -> None:
    # Representable without rounding: at most 34 digits once the exponent is clamped into
    # decimal128's range by padding the coefficient with zeros.
    padding = max(0, exponent - DEC128_EXPONENT_MAX)
    if len(digits) + padding > DEC128_DIGITS_MAX or exponent < DEC128_EXPONENT_MIN:
        raise ValueOutOfRangeError(
            f"not representable as decimal128 without rounding ({len(digits)} significant "
            f"digits, exponent {exponent})",
            path=path,
        )


def _plain_decimal(digits: str, exponent: int) -> str:
    if exponent >= 0:
        return digits + "0" * exponent
    point = len(digits) + exponent
    if point > 0:
        return f"{digits[:point]}.{digits[point:]}"
    return "0." + "0" * -point + digits


def _time(value: Any, path: str) -> int:
    if type(value) is str:
        value = _parse_rfc3339(value, path)
    if type(value) is not int:
        raise ValueInvalidError(
            f"expected time (integer ns since the epoch, or RFC 3339 text), got {_describe(value)}",
            path=path,
        )
    return _ranged_int(value, path, "time", 0, TIME_NS_MAX)


def _parse_rfc3339(text: str, path: str) -> int:
    match = _RFC3339_RE.match(text) if len(text) <= TIME_TEXT_LENGTH_MAX else None
    if match is None:
        raise ValueInvalidError(f"expected RFC 3339 time, got {_describe(text)}", path=path)
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    fraction, zone = match.group(7) or "", match.group(8)
    try:
        moment = datetime.datetime(year, month, day, hour, minute, second)
    except ValueError as error:
        raise ValueInvalidError(f"invalid RFC 3339 time: {error}", path=path) from None
    seconds = calendar.timegm(moment.timetuple())
    if zone not in ("Z", "z"):
        if int(zone[1:3]) > 23 or int(zone[4:6]) > 59:
            raise ValueInvalidError(f"invalid UTC offset {zone!r}", path=path)
        offset = int(zone[1:3]) * 3600 + int(zone[4:6]) * 60
        seconds -= offset if zone[0] == "+" else -offset
    return seconds * 1_000_000_000 + int(fraction.ljust(9, "0") or "0")


def _duration(value: Any, path: str) -> int:
    if type(value) is str:
        value = _parse_duration(value, path)
    if type(value) is not int:
        raise ValueInvalidError(
            f'expected duration (integer ns, or text like "250ms"), got {_describe(value)}',
            path=path,
        )
    return _ranged_int(value, path, "duration", INT_MIN, INT_MAX)


def _parse_duration(text: str, path: str) -> int:
    body = text[1:] if text.startswith("-") else text
    parts = _DURATION_PART_RE.findall(body) if len(text) <= DURATION_TEXT_LENGTH_MAX else []
    if not parts or "".join(w + ("." + f if f else "") + u for w, f, u in parts) != body:
        raise ValueInvalidError(
            f"expected duration text like 250ms or 1h30m, got {_describe(text)}", path=path
        )
    total_scaled = 0  # in units of 1e-9 ns, so that fractions add exactly
    for whole, fraction, unit in parts:
        if len(fraction) > 9:
            raise ValueInvalidError("a duration has at most 9 fractional digits", path=path)
        scaled = int(whole) * 10**9 + int(fraction.ljust(9, "0") or "0")
        total_scaled += scaled * _DURATION_UNIT_NS[unit]
    nanoseconds, remainder = divmod(total_scaled, 10**9)
    if remainder:
        raise ValueInvalidError("a duration must be a whole number of nanoseconds", path=path)
    return -nanoseconds if text.startswith("-") else nanoseconds


_PRIMITIVES: dict[str, Callable[[Any, str], Any]] = {
    "bool": _bool,
    "int": _int,
    "nat": _nat,
    "dec128": _dec128,
    "bytes": _bytes,
    "text": _text,
    "time": _time,
    "duration": _duration,
    "hash": _hash,
    "uuid": _uuid,
    "unit": _unit,
}


# --------------------------------------------------------------------------------------------
# Helpers


def _map_key(raw: Any, tag: str, path: str) -> str | int:
    if tag in ("int", "nat"):
        if type(raw) is str:
            if _INT_KEY_RE.match(raw) is None or len(raw) > 21:
                raise ValueInvalidError(
                    f"map key {raw!r} is not a canonical decimal integer", path=path
                )
            raw = int(raw)
        return _int(raw, path) if tag == "int" else _nat(raw, path)
    if tag == "uuid":
        return _uuid(raw, path)
    if tag == "hash":
        return _hash(raw, path)
    return _text(raw, path)


def _expect_text_keyed_map(value: Any, kind: str, path: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise ValueInvalidError(f"expected a {kind} (a map), got {_describe(value)}", path=path)
    for key in value:
        if type(key) is not str:
            raise ValueInvalidError(f"{kind} keys are text, got {_describe(key)}", path=path)
    return value


_ANY_LEAVES = frozenset({type(None), bool, str, bytes, float})
_ANY_CONTAINERS = frozenset({list, tuple, dict})
_ANY_KEYS = frozenset({str, int})


def _plain_any(value: Any, depth_left: int) -> bool:
    """Whether `_check_any` would accept `value`, with the types of each container's items
    gathered at C speed and no path kept (a flow's whole state passes here every step)."""
    kind = type(value)
    if kind in _ANY_LEAVES:
        return True
    if kind is int:
        return bool(-(2**64) <= value <= 2**64 - 1)
    if kind not in _ANY_CONTAINERS or depth_left <= 0:
        return False
    if kind is dict:
        if not _ANY_KEYS.issuperset(map(type, value)):
            return False
        items: Any = value.values()
    else:
        items = value
    if _ANY_LEAVES.issuperset(map(type, items)):
        return True
    left = depth_left - 1
    return all(_plain_any(item, left) for item in items if type(item) not in _ANY_LEAVES)


def _any_path(where: Any) -> str:
    """A path kept as (parent, step) pairs while walking an `any` value, spelled out."""
    steps: list[str] = []
    while isinstance(where, tuple):
        where, step = where
        steps.append(step)
    return str(where) + "".join(reversed(steps))


def _canonical_key_order(keys: Any) -> list[Any]:
    """Keys in canonical CBOR map order: by encoded length, then bytewise."""
    keys = list(keys)
    if all(type(key) is str for key in keys):
        return sorted(keys, key=_text_key)
    encoded = [(cbor.encode(key, self_describe=False), key) for key in keys]
    return [key for _, key in sorted(encoded, key=lambda pair: (len(pair[0]), pair[0]))]


def _text_key(key: str) -> tuple[int, bytes]:
    # A text key's encoding is a head that grows with the UTF-8 length, then the UTF-8 bytes,
    # so (UTF-8 length, UTF-8 bytes) is the canonical order.
    encoded = key.encode()
    return len(encoded), encoded


@functools.lru_cache(maxsize=RECORD_ORDER_CACHE_ENTRIES_MAX)
def _field_order(fields: tuple[str, ...]) -> tuple[str, ...]:
    # Cached: a record type asks for the same order on every value it normalizes.
    return tuple(sorted(fields, key=_text_key))


def _child(path: str, field: str) -> str:
    return f"{path}.{field}"


def _describe(value: Any) -> str:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{type(value).__name__} {shown}"
