"""Router and effect admission, directly: the paths a checked manifest cannot reach through
a running world are still typed errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from aos.kernel import cbor
from aos.kernel.air import load_manifest_dir
from aos.kernel.wasm.envelope import EmittedEffect
from aos.kernel.world.effects import admit
from aos.kernel.world.errors import (
    EffectParamsInvalidError,
    EffectUndeclaredError,
    EffectUnknownError,
)
from aos.kernel.world.modules import building_resolver
from aos.kernel.world.router import (
    RouteKeyInvalidError,
    RouteKeyMissingError,
    RouteKeyTooLargeError,
    Router,
)

SCRIPTED = Path(__file__).resolve().parent / "fixtures" / "worlds" / "scripted"
LOADED = load_manifest_dir(SCRIPTED, artifact_resolver=building_resolver({}))
WORKFLOWS = LOADED.workflows
SCHEMAS = LOADED.schemas
EFFECTS = {n: d for n, d in LOADED.definitions.items() if d.kind == "defeffect"}


def router(**limits: int) -> Router:
    return Router(LOADED.manifest.routing.subscriptions, WORKFLOWS, SCHEMAS, **limits)


def test_routes_fan_out_in_manifest_order_and_wrap_arms() -> None:
    keyed, unkeyed = router().route("demo/Ping@1", {"id": "x", "n": 1, "action": "none"})
    assert (keyed.workflow, keyed.key, keyed.schema) == (
        "demo/keyed@1",
        cbor.encode("x"),
        "demo/Inbox@1",
    )
    assert keyed.value == {"$tag": "Ping", "$value": {"id": "x", "n": 1, "action": "none"}}
    assert (unkeyed.workflow, unkeyed.key, unkeyed.schema) == ("demo/global@1", None, "demo/Ping@1")


def test_unsubscribed_schema_routes_nowhere() -> None:
    assert not router().subscribed("demo/Unrouted@1")
    assert router().route("demo/Unrouted@1", {"id": "x"}) == []


def test_route_key_errors() -> None:
    with pytest.raises(RouteKeyMissingError) as missing:
        router().route("demo/Ping@1", {"n": 1, "action": "none"})
    assert missing.value.path == "routing.subscriptions[0].key_field"
    with pytest.raises(RouteKeyInvalidError):
        router().route("demo/Ping@1", {"id": 7, "n": 1, "action": "none"})
    ok = router(key_bytes_max=len(cbor.encode("abc"))).route(
        "demo/Ping@1", {"id": "abc", "n": 0, "action": ""}
    )
    assert ok[0].key == cbor.encode("abc")
    with pytest.raises(RouteKeyTooLargeError):
        router(key_bytes_max=len(cbor.encode("abc"))).route(
            "demo/Ping@1", {"id": "abcd", "n": 0, "action": ""}
        )


def _admit(effect: str, params: object, **given: object) -> object:
    emitted = EmittedEffect(effect, cbor.encode(params), **given)  # type: ignore[arg-type]
    return admit(
        emitted,
        index=0,
        workflow=WORKFLOWS["demo/keyed@1"],
        key=cbor.encode("x"),
        input_seq=7,
        effects=EFFECTS,
        schemas=SCHEMAS,
        module="blake3:" + "0" * 64,
    )


def test_admission_refusals() -> None:
    with pytest.raises(EffectUndeclaredError):
        _admit("demo/other@1", {"n": 1})
    workflow = WORKFLOWS["demo/keyed@1"].model_copy(
        update={"effects_emitted": ["demo/noop@1", "demo/gone@1"]}
    )
    with pytest.raises(EffectUnknownError):
        admit(
            EmittedEffect("demo/gone@1", cbor.encode({})),
            index=0,
            workflow=workflow,
            key=None,
            input_seq=1,
            effects=EFFECTS,
            schemas=SCHEMAS,
            module="m",
        )
    with pytest.raises(EffectParamsInvalidError) as bad:
        _admit("demo/noop@1", {"n": -1})
    assert bad.value.path == "effects[0]"


def test_intent_identity() -> None:
    first = _admit("demo/noop@1", {"n": 1})
    again = _admit("demo/noop@1", {"n": 1})
    other = _admit("demo/noop@1", {"n": 2})
    assert first.intent == again.intent != other.intent  # type: ignore[attr-defined]
    keyed_a = _admit("demo/noop@1", {"n": 1}, idempotency_key=b"k")
    assert keyed_a.intent != first.intent  # type: ignore[attr-defined]
