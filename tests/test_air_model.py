"""AIR models: names, the type language, definitions, manifest, patches, hashes, built-ins."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from pydantic import ValidationError

from aos.kernel import cbor
from aos.kernel.air import (
    BUILTIN_SCHEMAS,
    PLACEHOLDER_HASH,
    DefAdapter,
    DefModule,
    DefSchema,
    DefWorkflow,
    Manifest,
    Patch,
    canonical_form,
    check_definitions,
    def_hash,
    dump_type,
    limits,
    parse_name,
    parse_type,
    resolve_determinism,
)
from aos.kernel.air.model import HashMissingError, ModuleUnresolvedError
from aos.kernel.air.names import NAME_LENGTH_MAX, name_problem
from aos.kernel.air.types import TYPE_DEPTH_MAX, depth, expand, iter_refs
from aos.kernel.hashing import hash_value
from tests.conftest import shared_json

HASH_A = "blake3:" + "ab" * 32


def error_types(error: ValidationError) -> list[tuple[str, tuple[Any, ...]]]:
    return [(detail["type"], detail["loc"]) for detail in error.errors()]


# --------------------------------------------------------------------------------------------
# Names


@pytest.mark.parametrize(
    "text",
    [
        "demo/Counter@1",
        "com.acme/order.step@12",
        "a_b-c.d/X_y-z.1@999999999",
        "sys/WorkflowContext@1",
    ],
)
def test_valid_names(text: str) -> None:
    assert name_problem(text) is None
    assert str(parse_name(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "Demo/Counter@1",  # namespace is lowercase
        "demo/Counter",  # no version
        "demo/Counter@0",  # versions are positive
        "demo/Counter@01",  # no leading zeros
        "demo//Counter@1",
        ".demo/Counter@1",
        "demo./Counter@1",
        "demo/1Counter@1",  # the name starts with a letter
        "demo/Counter@1000000000",  # past VERSION_MAX
        "demo/Count er@1",
        "",
    ],
)
def test_invalid_names(text: str) -> None:
    assert name_problem(text) is not None
    with pytest.raises(ValueError):
        parse_name(text)


def test_name_length_limit_edge() -> None:
    prefix = "demo/N"
    at_limit = prefix + "x" * (NAME_LENGTH_MAX - len(prefix) - 2) + "@1"
    assert len(at_limit) == NAME_LENGTH_MAX
    assert name_problem(at_limit) is None
    assert name_problem(prefix + "x" + at_limit[len(prefix) :]) is not None


def test_name_that_is_not_text() -> None:
    assert name_problem(5) == "a name is text, not int"


# --------------------------------------------------------------------------------------------
# The type language and the AgentOS vector


ALL_TYPES: dict[str, Any] = {
    "record": {
        "b": {"bool": {}},
        "i": {"int": {}},
        "n": {"nat": {}},
        "d": {"dec128": {}},
        "y": {"bytes": {}},
        "t": {"text": {}},
        "tm": {"time": {}},
        "du": {"duration": {}},
        "h": {"hash": {}},
        "u": {"uuid": {}},
        "un": {"unit": {}},
        "v": {"variant": {"A": {"unit": {}}, "B": {"int": {}}}},
        "l": {"list": {"text": {}}},
        "s": {"set": {"nat": {}}},
        "o": {"option": {"ref": "demo/Other@1"}},
        "m": {"map": {"key": {"uuid": {}}, "value": {"list": {"int": {}}}}},
    }
}


def test_every_type_round_trips_to_identical_json() -> None:
    assert dump_type(parse_type(ALL_TYPES)) == ALL_TYPES


def test_agentos_schema_vector() -> None:
    for vector in shared_json("vectors", "agentos", "schemas.json"):
        encoded = cbor.encode(vector["json"])
        assert encoded.hex() == vector["cbor_hex"], vector["label"]
        assert "sha256:" + hashlib.sha256(encoded).hexdigest() == vector["hash"]
        schema = DefSchema.model_validate(vector["json"])
        assert canonical_form(schema) == vector["json"]
        assert cbor.encode(canonical_form(schema)).hex() == vector["cbor_hex"]


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        ({"int": {"x": 1}}, "extra_forbidden"),  # primitives carry exactly {}
        ({"int": {}, "nat": {}}, "air.type_invalid"),  # exactly one key
        ({"float": {}}, "air.type_invalid"),
        ({"variant": {}}, "too_short"),  # a variant has arms
        ({"map": {"key": {"bool": {}}, "value": {"int": {}}}}, "air.type_invalid"),
        ({"map": {"key": {"ref": "demo/K@1"}, "value": {"int": {}}}}, "air.type_invalid"),
        ({"record": {"$x": {"int": {}}}}, "air.field_name_invalid"),
        ({"record": {"a.b": {"int": {}}}}, "air.field_name_invalid"),
        ({"ref": "nope"}, "air.name_invalid"),
        ("int", "air.type_invalid"),
    ],
)
def test_bad_types(bad: Any, code: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_type(bad)
    assert code in [detail["type"] for detail in caught.value.errors()]


def test_iter_refs_depth_and_expand() -> None:
    types = {"demo/Other@1": parse_type({"list": {"int": {}}})}
    type_ = parse_type(ALL_TYPES)
    assert list(iter_refs(type_, "S")) == [("demo/Other@1", "S.record.o.option.ref")]
    assert depth(type_, types) == 3  # record > option > (ref expanded) list
    assert expand(type_, types)["record"]["o"] == {"option": {"list": {"int": {}}}}


def test_type_depth_limit_counts_composites() -> None:
    nested: Any = {"int": {}}
    for _ in range(TYPE_DEPTH_MAX):
        nested = {"list": nested}
    assert depth(parse_type(nested), {}) == TYPE_DEPTH_MAX


# --------------------------------------------------------------------------------------------
# Definitions and hashes


def workflow(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "$kind": "defworkflow",
        "name": "demo/w@1",
        "state": "demo/S@1",
        "event": "demo/E@1",
        "effects_emitted": [],
        "impl": {"module": "demo/m@1"},
    }
    body.update(changes)
    return body


def test_workflow_defaults_are_filled_in_the_canonical_form() -> None:
    form = canonical_form(DefWorkflow.model_validate(workflow()))
    assert form["impl"] == {"module": "demo/m@1", "entrypoint": "step"}
    assert "determinism" not in form and "key_schema" not in form


def test_key_schema_is_a_name_or_an_inline_type() -> None:
    assert DefWorkflow.model_validate(workflow(key_schema="demo/K@1")).keyed
    inline = DefWorkflow.model_validate(workflow(key_schema={"text": {}}))
    assert canonical_form(inline)["key_schema"] == {"text": {}}
    assert not DefWorkflow.model_validate(workflow()).keyed
    with pytest.raises(ValidationError):
        DefWorkflow.model_validate(workflow(key_schema=5))


def test_strict_models_do_not_coerce() -> None:
    with pytest.raises(ValidationError) as caught:
        DefWorkflow.model_validate(workflow(limits={"fuel_per_step_max": "5"}))
    assert error_types(caught.value) == [("int_type", ("limits", "fuel_per_step_max"))]
    with pytest.raises(ValidationError) as caught:
        DefWorkflow.model_validate(workflow(surprise=1))
    assert error_types(caught.value) == [("extra_forbidden", ("surprise",))]


@pytest.mark.parametrize(
    ("field", "floor", "ceiling", "default"),
    [
        (
            "fuel_per_step_max",
            1,
            limits.FUEL_PER_STEP_MAX_CEILING,
            limits.FUEL_PER_STEP_MAX_DEFAULT,
        ),
        (
            "memory_bytes_max",
            limits.MEMORY_BYTES_MAX_FLOOR,
            limits.MEMORY_BYTES_MAX_CEILING,
            limits.MEMORY_BYTES_MAX_DEFAULT,
        ),
        (
            "output_bytes_max",
            1,
            limits.OUTPUT_BYTES_MAX_CEILING,
            limits.OUTPUT_BYTES_MAX_DEFAULT,
        ),
        (
            "effects_per_step_max",
            0,
            limits.EFFECTS_PER_STEP_MAX_CEILING,
            limits.EFFECTS_PER_STEP_MAX_DEFAULT,
        ),
        (
            "events_per_step_max",
            0,
            limits.EVENTS_PER_STEP_MAX_CEILING,
            limits.EVENTS_PER_STEP_MAX_DEFAULT,
        ),
    ],
)
def test_step_limits_default_override_and_edges(
    field: str, floor: int, ceiling: int, default: int
) -> None:
    assert getattr(DefWorkflow.model_validate(workflow()).step_limits(), field) == default
    for good in (floor, ceiling):
        parsed = DefWorkflow.model_validate(workflow(limits={field: good}))
        assert getattr(parsed.step_limits(), field) == good
    for bad in (floor - 1, ceiling + 1):
        with pytest.raises(ValidationError) as caught:
            DefWorkflow.model_validate(workflow(limits={field: bad}))
        assert [detail["loc"] for detail in caught.value.errors()] == [("limits", field)]


def test_determinism_resolves_by_abi_unless_declared() -> None:
    core = DefModule.model_validate(
        {"$kind": "defmodule", "name": "demo/m@1", "abi": "core", "artifact": {"hash": HASH_A}}
    )
    component = core.model_copy(update={"abi": "component"})
    plain = DefWorkflow.model_validate(workflow())
    assert resolve_determinism(plain, core) == "strict"
    assert resolve_determinism(plain, component) == "checked"
    declared = DefWorkflow.model_validate(workflow(determinism="strict"))
    assert resolve_determinism(declared, component) == "strict"


def test_module_artifact_hash_or_path() -> None:
    by_path = DefModule.model_validate(
        {"$kind": "defmodule", "name": "demo/m@1", "abi": "core", "artifact": {"path": "m.wasm"}}
    )
    with pytest.raises(ModuleUnresolvedError):
        def_hash(by_path)
    both = by_path.model_copy(
        update={"artifact": by_path.artifact.model_copy(update={"hash_": HASH_A})}
    )
    # The authoring path is not part of what the module is.
    assert canonical_form(both)["artifact"] == {"hash": HASH_A}
    for artifact in ({}, {"path": "/abs/m.wasm"}, {"path": ""}, {"hash": "blake3:00"}):
        with pytest.raises(ValidationError):
            DefModule.model_validate(
                {"$kind": "defmodule", "name": "demo/m@1", "abi": "core", "artifact": artifact}
            )


def test_adapter_public_key_is_32_bytes_of_lowercase_hex() -> None:
    body = {"$kind": "defadapter", "name": "demo/a@1", "public_key": "0f" * 32}
    assert DefAdapter.model_validate(body).public_key_bytes == bytes([15]) * 32
    for bad in ("0f" * 31, "0f" * 33, "0F" * 32, "zz" * 32):
        with pytest.raises(ValidationError) as caught:
            DefAdapter.model_validate({**body, "public_key": bad})
        assert caught.value.errors()[0]["type"] == "air.public_key_invalid"


def test_def_hash_is_stable_and_order_independent() -> None:
    first = DefSchema.model_validate(
        {
            "$kind": "defschema",
            "name": "demo/P@1",
            "type": {"record": {"x": {"int": {}}, "y": {"text": {}}}},
        }
    )
    second = DefSchema.model_validate(
        {
            "name": "demo/P@1",
            "type": {"record": {"y": {"text": {}}, "x": {"int": {}}}},
            "$kind": "defschema",
        }
    )
    assert def_hash(first) == def_hash(second)
    # The hash covers $kind: the same body under another kind would not collide.
    body = {k: v for k, v in canonical_form(first).items() if k != "$kind"}
    assert def_hash(first) != hash_value(body)


def test_manifest_refs_sort_in_the_canonical_form_and_need_hashes_to_hash() -> None:
    manifest = Manifest.model_validate(
        {"schemas": [{"name": "demo/B@1", "hash": HASH_A}, {"name": "demo/A@1"}]}
    )
    assert [ref.name for ref in manifest.schemas] == ["demo/B@1", "demo/A@1"]  # as authored
    with pytest.raises(HashMissingError) as caught:
        def_hash(manifest)
    assert caught.value.path == "manifest.schemas[1].hash"
    hash_b = "blake3:" + "cd" * 32
    one = Manifest.model_validate(
        {"schemas": [{"name": "demo/B@1", "hash": HASH_A}, {"name": "demo/A@1", "hash": hash_b}]}
    )
    other = Manifest.model_validate({"schemas": list(reversed(canonical_form(one)["schemas"]))})
    assert [ref["name"] for ref in canonical_form(one)["schemas"]] == ["demo/A@1", "demo/B@1"]
    assert def_hash(one) == def_hash(other)
    placeholder = Manifest.model_validate(
        {"schemas": [{"name": "demo/A@1", "hash": PLACEHOLDER_HASH}]}
    )
    assert not placeholder.schemas[0].filled
    filled = Manifest.model_validate({"schemas": [{"name": "demo/A@1", "hash": HASH_A}]})
    assert def_hash(filled) == def_hash(Manifest.model_validate(canonical_form(filled)))


def test_patch_documents() -> None:
    patch = Patch.model_validate(
        {
            "base_manifest": HASH_A,
            "ops": [
                {
                    "add_def": {
                        "def": {"$kind": "defschema", "name": "demo/A@1", "type": {"int": {}}}
                    }
                },
                {"replace_def": {"def": workflow(), "pre_hash": HASH_A}},
                {"remove_def": {"name": "demo/B@1"}},
                {"set_routing": {"subscriptions": [{"event": "demo/A@1", "workflow": "demo/w@1"}]}},
                {
                    "add_subscription": {
                        "event": "demo/A@1",
                        "workflow": "demo/w@1",
                        "key_field": "id",
                    }
                },
                {"remove_subscription": {"event": "demo/A@1", "workflow": "demo/w@1"}},
                {"set_refs": {"add": [{"kind": "defschema", "name": "demo/C@1", "hash": HASH_A}]}},
            ],
        }
    )
    assert canonical_form(patch)["ops"][0]["add_def"]["def"]["name"] == "demo/A@1"
    assert def_hash(patch) == def_hash(Patch.model_validate(canonical_form(patch)))
    with pytest.raises(ValidationError) as caught:
        Patch.model_validate({"base_manifest": HASH_A, "ops": [{"rename_def": {}}]})
    assert error_types(caught.value) == [("air.def_invalid", ("ops", 0))]
    with pytest.raises(ValidationError):
        Patch.model_validate({"base_manifest": HASH_A, "ops": []})


# --------------------------------------------------------------------------------------------
# Built-ins


def test_builtins_are_valid_and_self_contained() -> None:
    assert check_definitions({}) == []
    for name, schema in BUILTIN_SCHEMAS.items():
        assert name.startswith("sys/")
        for target, _ in iter_refs(schema.type_, name):
            assert target in BUILTIN_SCHEMAS
    context = BUILTIN_SCHEMAS["sys/WorkflowContext@1"].type_
    assert set(dump_type(context)["record"]) >= {
        "now_ns",
        "entropy",
        "journal_height",
        "manifest_hash",
        "workflow",
        "key",
        "cell_mode",
    }
    assert "sys/EffectReceiptEnvelope@1" in BUILTIN_SCHEMAS
    assert "sys/EffectReceiptRejected@1" in BUILTIN_SCHEMAS
