"""Typed values: dataclasses in the workflow, plain CBOR values on the wire.

* A dataclass is a record: a map from field name to value. Fields whose value is `None` are
  left out of the map (an optional field is absent, never null), and map keys the dataclass
  does not declare are ignored when reading, so a schema can grow new optional fields.
* A dataclass that subclasses `Variant` is one case of a variant, written
  `{"$tag": <case name>, "$value": <record>}` (`$value` is left out for a case without
  fields). The case name is the class name unless the class sets `TAG`.
* `list[T]`, `dict[K, V]`, `X | None`, unions of `Variant` cases, `Literal[...]`, `int`,
  `float`, `bool`, `str`, `bytes` and `Any` are understood; `Any` passes values through.

Type hints are resolved once per class and cached, when a workflow registers its handlers, so
inside a component the work happens at build time (pre-initialization), not in a step.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")

_NONE_TYPE = type(None)
_UNION_ORIGINS: tuple[Any, ...] = (typing.Union, types.UnionType)


class SchemaError(ValueError):
    """A value does not have the shape its declared type asks for."""

    code = "sdk.schema"


class Variant:
    """Base of the cases of a variant. Subclasses are dataclasses; `TAG` overrides the tag."""

    TAG: ClassVar[str | None] = None

    @classmethod
    def tag(cls) -> str:
        return cls.TAG if cls.TAG is not None else cls.__name__


_HINTS: dict[type, dict[str, Any]] = {}


def _field_types(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        resolved = typing.get_type_hints(cls)
        hints = {field.name: resolved[field.name] for field in dataclasses.fields(cls)}
        _HINTS[cls] = hints
    return hints


def prepare(tp: Any) -> None:
    """Resolve and cache the type hints reachable from `tp` (idempotent)."""
    _prepare(tp, set())


def _prepare(tp: Any, seen: set[int]) -> None:
    if id(tp) in seen:
        return
    seen.add(id(tp))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        for field_type in _field_types(tp).values():
            _prepare(field_type, seen)
        return
    for arg in typing.get_args(tp):
        _prepare(arg, seen)


# --------------------------------------------------------------------------------------------
# Python objects -> CBOR values


_PLAIN_TYPES = frozenset({type(None), bool, int, float, str, bytes})


def to_value(obj: Any) -> Any:
    """The CBOR data-model value of a typed object (dataclasses become maps)."""
    kind = type(obj)
    # Exact types first: plain data, which is most of what flows through a step, is
    # dispatched without the isinstance chain below.
    if kind in _PLAIN_TYPES:
        return obj
    if kind is dict:
        # A map or list of plain items (checked at C speed) is copied as it is.
        if _PLAIN_TYPES.issuperset(map(type, obj.values())):
            return dict(obj)
        return {key: to_value(item) for key, item in obj.items()}
    if kind is list:
        if _PLAIN_TYPES.issuperset(map(type, obj)):
            return list(obj)
        return [to_value(item) for item in obj]
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return obj
    if isinstance(obj, Variant):
        record = _record_value(obj)
        return {"$tag": obj.tag(), "$value": record} if record else {"$tag": obj.tag()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _record_value(obj)
    if isinstance(obj, (list, tuple)):
        return [to_value(item) for item in obj]
    if isinstance(obj, dict):
        return {key: to_value(item) for key, item in obj.items()}
    raise SchemaError(f"no CBOR form for a value of type {type(obj).__name__}")


def _record_value(obj: Any) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for field in dataclasses.fields(obj):
        item = getattr(obj, field.name)
        if item is not None:
            record[field.name] = to_value(item)
    return record


# --------------------------------------------------------------------------------------------
# CBOR values -> Python objects


def from_value(tp: type[T] | Any, value: Any, path: str = "$") -> T:
    """Read a CBOR value as type `tp`; raise `SchemaError` naming the path on a mismatch."""
    return _read(tp, value, path)  # type: ignore[no-any-return]


def _read(tp: Any, value: Any, path: str) -> Any:
    if tp is Any or tp is object:
        return value
    if tp is _NONE_TYPE or tp is None:
        return _expect(value is None, value, "null", path)
    if isinstance(tp, type):
        return _read_class(tp, value, path)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in _UNION_ORIGINS:
        return _read_union(args, value, path)
    if origin is typing.Literal:
        return _expect(
            value in args and type(value) in {type(a) for a in args}, value, repr(args), path
        )
    if origin is list:
        _expect(type(value) is list, value, "a list", path)
        return [_read(args[0], item, f"{path}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        _expect(type(value) is dict, value, "a map", path)
        return {
            _read(args[0], key, path): _read(args[1], item, f"{path}.{key}")
            for key, item in value.items()
        }
    raise SchemaError(f"{path}: unsupported type {tp!r}")


def _read_class(tp: type, value: Any, path: str) -> Any:
    if issubclass(tp, Variant) and dataclasses.is_dataclass(tp):
        return _read_variant((tp,), value, path)
    if dataclasses.is_dataclass(tp):
        return _read_record(tp, value, path)
    if tp is bool:
        return _expect(type(value) is bool, value, "a boolean", path)
    if tp is int:
        return _expect(type(value) is int, value, "an integer", path)
    if tp is float:
        if type(value) is int:
            return float(value)
        return _expect(type(value) is float, value, "a float", path)
    if tp in (str, bytes, list, dict):
        return _expect(type(value) is tp, value, tp.__name__, path)
    raise SchemaError(f"{path}: unsupported type {tp.__name__}")


def _read_record(tp: type, value: Any, path: str) -> Any:
    _expect(type(value) is dict, value, f"a map for {tp.__name__}", path)
    kwargs: dict[str, Any] = {}
    for name, field_type in _field_types(tp).items():
        if name in value:
            kwargs[name] = _read(field_type, value[name], f"{path}.{name}")
    try:
        return tp(**kwargs)
    except TypeError as error:
        raise SchemaError(f"{path}: cannot make {tp.__name__}: {error}") from None


def _read_variant(cases: tuple[type, ...], value: Any, path: str) -> Any:
    _expect(type(value) is dict and type(value.get("$tag")) is str, value, "a variant", path)
    tag = value["$tag"]
    for case in cases:
        if case.tag() == tag:  # type: ignore[attr-defined]
            return _read_record(case, value.get("$value", {}), f"{path}.$value")
    names = ", ".join(case.tag() for case in cases)  # type: ignore[attr-defined]
    raise SchemaError(f"{path}: unknown variant case {tag!r} (expected one of {names})")


def _read_union(args: tuple[Any, ...], value: Any, path: str) -> Any:
    if value is None and _NONE_TYPE in args:
        return None
    options = [arg for arg in args if arg is not _NONE_TYPE]
    if options and all(isinstance(arg, type) and issubclass(arg, Variant) for arg in options):
        return _read_variant(tuple(options), value, path)
    for option in options:
        try:
            return _read(option, value, path)
        except SchemaError:
            continue
    raise SchemaError(f"{path}: {_describe(value)} matches none of {args!r}")


def _expect(ok: bool, value: Any, wanted: str, path: str) -> Any:
    if not ok:
        raise SchemaError(f"{path}: expected {wanted}, got {_describe(value)}")
    return value


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}"
