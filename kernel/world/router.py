"""Routing: which workflow cells a domain event is delivered to.

`routing.subscriptions` is evaluated in manifest order and every match is a delivery (fan-out).
A keyed workflow's key is read from the event value at the subscription's `key_field` (a path
of record fields and `$value`, which steps into a variant value) and normalized against the
workflow's `key_schema`; the cell is named by the key's canonical bytes. When the workflow
takes a variant whose arm refs the event's schema, the event is wrapped as that arm.

Routing is a pure function of the manifest and the event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aos.kernel import cbor
from aos.kernel.air.errors import AirError
from aos.kernel.air.model import DefSchema, DefWorkflow, Subscription
from aos.kernel.air.normalize import normalize
from aos.kernel.air.types import RefType, VariantType, resolve
from aos.kernel.errors import AosError

KEY_BYTES_MAX_DEFAULT = 1024


class RouteError(AosError):
    code = "route.error"


class RouteNoSubscriberError(RouteError):
    code = "route.no_subscriber"
    hint = "add a routing.subscriptions entry for this event schema to the manifest"


class RouteKeyMissingError(RouteError):
    code = "route.key_missing"
    hint = "the event has no value at the subscription's key_field"


class RouteKeyInvalidError(RouteError):
    code = "route.key_invalid"
    hint = "the value at key_field does not fit the workflow's key_schema"


class RouteKeyTooLargeError(RouteError):
    code = "route.key_too_large"
    hint = "cell keys are limited in size (key_bytes_max)"


class RouteUnkeyedKeyError(RouteError):
    code = "route.key_on_unkeyed"
    hint = "the workflow has no key_schema; remove key_field from its subscription"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event delivered to one cell: the schema and value the workflow sees."""

    workflow: str
    key: bytes | None  # canonical CBOR of the normalized key; None for an unkeyed workflow
    schema: str  # the workflow's event schema
    value: Any  # the event value, wrapped as a variant arm when routed through one
    # `value`'s canonical stored form, when the router was given the event's (kept for the
    # step's input, so an event is encoded once); None: encode `value` when needed.
    encoded: bytes | None = None


class Router:
    """Routes events of one manifest."""

    def __init__(
        self,
        subscriptions: list[Subscription],
        workflows: Mapping[str, DefWorkflow],
        schemas: Mapping[str, DefSchema],
        *,
        key_bytes_max: int = KEY_BYTES_MAX_DEFAULT,
    ) -> None:
        self._workflows = workflows
        self._schemas = schemas
        self._key_bytes_max = key_bytes_max
        self._by_event: dict[str, list[tuple[int, Subscription]]] = {}
        for index, subscription in enumerate(subscriptions):
            self._by_event.setdefault(subscription.event, []).append((index, subscription))
        self._arms: dict[tuple[str, str], str | None] = {}
        self._accepts: dict[tuple[str, str], bool] = {}

    def subscribed(self, schema: str) -> bool:
        return schema in self._by_event

    def route(self, schema: str, value: Any, encoded: bytes | None = None) -> list[Delivery]:
        """Every delivery of an event, in manifest order. Raises a `RouteError` if any
        subscription cannot deliver it, so an event is delivered everywhere or nowhere.
        `encoded`, the normalized value's canonical stored form, is carried by each delivery
        (wrapped as the value is)."""
        deliveries = []
        for index, subscription in self._by_event.get(schema, []):
            workflow = self._workflows[subscription.workflow]
            key = self._key(index, subscription, workflow, value)
            arm = self._arm(workflow.event, schema)
            if arm is None:
                deliveries.append(Delivery(workflow.name, key, workflow.event, value, encoded))
                continue
            wrapped = {"$tag": arm, "$value": value}
            deliveries.append(
                Delivery(workflow.name, key, workflow.event, wrapped, _wrapped(arm, encoded))
            )
        return deliveries

    def _key(
        self, index: int, subscription: Subscription, workflow: DefWorkflow, value: Any
    ) -> bytes | None:
        path = f"routing.subscriptions[{index}].key_field"
        if subscription.key_field is None:
            return None
        if workflow.key_schema is None:
            raise RouteUnkeyedKeyError(f"{workflow.name} is not keyed", path=path)
        raw = _follow(value, subscription.key_field)
        if raw is _MISSING:
            raise RouteKeyMissingError(
                f"the event has no {subscription.key_field!r} for {workflow.name}", path=path
            )
        key_type: Any = workflow.key_schema
        if isinstance(key_type, str):
            key_type = RefType(ref=key_type)
        try:
            key_value = normalize(raw, key_type, self._schemas, path=f"$.{subscription.key_field}")
        except AirError as error:
            raise RouteKeyInvalidError(str(error), path=path) from None
        key = cbor.encode_built(key_value)  # normalized just above
        if len(key) > self._key_bytes_max:
            raise RouteKeyTooLargeError(
                f"the key is {len(key)} bytes; the limit is {self._key_bytes_max}", path=path
            )
        return key

    def accepts(self, workflow_event: str, schema: str) -> bool:
        """Whether a workflow taking `workflow_event` can be delivered `schema`."""
        if workflow_event == schema:
            return True
        # Asked for every settled receipt; the answer depends on the manifest only.
        found = self._accepts.get((workflow_event, schema))
        if found is None:
            types = {name: definition.type_ for name, definition in self._schemas.items()}
            resolved = resolve(types[workflow_event], types)
            found = isinstance(resolved, VariantType) and any(
                isinstance(arm, RefType) and arm.ref == schema for arm in resolved.variant.values()
            )
            self._accepts[(workflow_event, schema)] = found
        return found

    def wrap(self, workflow_event: str, schema: str, value: Any) -> Any:
        """`value` of `schema` as a workflow taking `workflow_event` receives it."""
        arm = self._arm(workflow_event, schema)
        return value if arm is None else {"$tag": arm, "$value": value}

    def _arm(self, workflow_event: str, schema: str) -> str | None:
        """None when the workflow takes the schema itself, else the arm that refs it."""
        if workflow_event == schema:
            return None
        cached = self._arms.get((workflow_event, schema))
        if cached is not None:
            return cached
        types = {name: definition.type_ for name, definition in self._schemas.items()}
        resolved = resolve(types[workflow_event], types)
        assert isinstance(resolved, VariantType), "manifest check guarantees a variant"
        for arm in sorted(resolved.variant):
            arm_type = resolved.variant[arm]
            if isinstance(arm_type, RefType) and arm_type.ref == schema:
                self._arms[(workflow_event, schema)] = arm
                return arm
        raise AssertionError("manifest check guarantees an arm refs the routed schema")


def _wrapped(arm: str, encoded: bytes | None) -> bytes | None:
    """The stored form of `{"$tag": arm, "$value": value}` from `value`'s (keys in canonical
    order: "$tag" is the shorter)."""
    if encoded is None:
        return None
    return cbor.encode_ordered({"$tag": arm, "$value": cbor.Encoded.of_stored(encoded)})


_MISSING = object()


def _follow(value: Any, key_field: str) -> Any:
    current = value
    for segment in key_field.split("."):
        if not isinstance(current, dict) or segment not in current:
            return _MISSING
        current = current[segment]
    return current
