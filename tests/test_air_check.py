"""The loader and the semantic checks: every problem has its own code and a precise path."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aos.kernel.air import (
    PLACEHOLDER_HASH,
    AirCheckError,
    Artifact,
    DefWorkflow,
    Manifest,
    assemble_manifest,
    canonical_form,
    def_hash,
    load_manifest_dir,
)
from aos.kernel.air.loader import DOCUMENT_DEPTH_MAX, read_document
from aos.kernel.air.normalize import normalize
from aos.kernel.air.types import TYPE_DEPTH_MAX
from aos.kernel.hashing import hash_bytes

FIXTURES = Path(__file__).parent / "fixtures" / "air"
WASM = b"\0asm\1\0\0\0"

Defs = list[dict[str, Any]]


def base_defs() -> Defs:
    """A small valid world: a keyed workflow fed by a variant arm, emitting one effect."""
    return [
        {
            "$kind": "defschema",
            "name": "t/Event@1",
            "type": {
                "variant": {
                    "Add": {"ref": "t/Add@1"},
                    "Receipt": {"ref": "sys/EffectReceiptEnvelope@1"},
                }
            },
        },
        {
            "$kind": "defschema",
            "name": "t/Add@1",
            "type": {"record": {"id": {"text": {}}, "n": {"nat": {}}}},
        },
        {"$kind": "defschema", "name": "t/State@1", "type": {"record": {"total": {"nat": {}}}}},
        {"$kind": "defschema", "name": "t/Params@1", "type": {"record": {"url": {"text": {}}}}},
        {"$kind": "defschema", "name": "t/Receipt@1", "type": {"record": {"code": {"nat": {}}}}},
        {
            "$kind": "defmodule",
            "name": "t/mod@1",
            "abi": "component",
            "artifact": {"path": "w.wasm"},
        },
        {
            "$kind": "defworkflow",
            "name": "t/wf@1",
            "state": "t/State@1",
            "event": "t/Event@1",
            "key_schema": {"text": {}},
            "effects_emitted": ["t/fetch@1"],
            "impl": {"module": "t/mod@1"},
        },
        {
            "$kind": "defeffect",
            "name": "t/fetch@1",
            "params": "t/Params@1",
            "receipt": "t/Receipt@1",
            "adapters": ["t/http@1"],
        },
        {"$kind": "defadapter", "name": "t/http@1", "public_key": "11" * 32},
    ]


def base_manifest(defs: Defs) -> dict[str, Any]:
    lists = {"defschema": "schemas", "defmodule": "modules", "defworkflow": "workflows"}
    lists |= {"defeffect": "effects", "defadapter": "adapters"}
    manifest: dict[str, Any] = {"$kind": "manifest"}
    for definition in defs:
        manifest.setdefault(lists[definition["$kind"]], []).append({"name": definition["name"]})
    manifest["routing"] = {
        "subscriptions": [{"event": "t/Add@1", "workflow": "t/wf@1", "key_field": "id"}]
    }
    return manifest


def write_world(root: Path, defs: Defs, manifest: dict[str, Any] | None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "w.wasm").write_bytes(WASM)
    (root / "defs.json").write_text(json.dumps(defs))
    if manifest is not None:
        (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def find(defs: Defs, name: str) -> dict[str, Any]:
    return next(d for d in defs if d["name"] == name)


def issues_of(root: Path) -> list[tuple[str, str]]:
    with pytest.raises(AirCheckError) as caught:
        load_manifest_dir(root)
    return [(issue.code, issue.path) for issue in caught.value.issues]


# --------------------------------------------------------------------------------------------
# Good folders


def test_counter_fixture_loads() -> None:
    loaded = load_manifest_dir(FIXTURES / "counter")
    assert loaded.counts() == {
        "defschema": 3,
        "defmodule": 1,
        "defworkflow": 1,
        "defeffect": 0,
        "defadapter": 0,
        "subscriptions": 1,
    }
    module = loaded.definitions["demo/counter.module@1"]
    assert canonical_form(module)["artifact"] == {"hash": hash_bytes(WASM)}
    assert loaded.artifacts["demo/counter.module@1"].read_bytes() == WASM
    assert loaded.files["demo/CounterEvent@1"] == "defs/schemas.yaml"
    assert loaded.determinism("demo/counter@1") == "strict"
    # Every placeholder is filled with the definition's hash, and the manifest hash is its own.
    for refs in loaded.manifest.ref_lists().values():
        for ref in refs:
            assert ref.hash_ == loaded.hashes[ref.name] == def_hash(loaded.definitions[ref.name])
    assert loaded.manifest_hash == def_hash(loaded.manifest)
    event = {"$tag": "Increment", "$value": {"id": "c1", "by": 2}}
    assert normalize(event, "demo/CounterEvent@1", loaded.schemas)["$value"] == {
        "by": 2,
        "id": "c1",
    }


def test_loading_is_deterministic_and_placeholders_equal_omitted_hashes(tmp_path: Path) -> None:
    first = load_manifest_dir(FIXTURES / "counter")
    copy_root = tmp_path / "copy"
    shutil.copytree(FIXTURES / "counter", copy_root)
    text = (copy_root / "manifest.yaml").read_text().replace(PLACEHOLDER_HASH, "~")
    (copy_root / "manifest.yaml").write_text(text)
    assert load_manifest_dir(copy_root).manifest_hash == first.manifest_hash


def test_base_world_loads(tmp_path: Path) -> None:
    defs = base_defs()
    loaded = load_manifest_dir(write_world(tmp_path, defs, base_manifest(defs)))
    assert loaded.determinism("t/wf@1") == "checked"  # a component module
    assert loaded.step_limits("t/wf@1").fuel_per_step_max > 0
    assert sorted(loaded.workflows) == ["t/wf@1"]
    assert "sys/EffectReceiptEnvelope@1" in loaded.schemas


def test_given_correct_hashes_are_kept(tmp_path: Path) -> None:
    defs = base_defs()
    first = load_manifest_dir(write_world(tmp_path / "a", defs, base_manifest(defs)))
    filled = canonical_form(first.manifest)
    second = load_manifest_dir(write_world(tmp_path / "b", defs, filled))
    assert second.manifest_hash == first.manifest_hash


def test_manifest_may_list_builtins(tmp_path: Path) -> None:
    defs = base_defs()
    manifest = base_manifest(defs)
    manifest["schemas"].append({"name": "sys/WorkflowContext@1"})
    loaded = load_manifest_dir(write_world(tmp_path, defs, manifest))
    assert loaded.hashes["sys/WorkflowContext@1"].startswith("blake3:")


def test_assemble_manifest_checks_documents_from_elsewhere(tmp_path: Path) -> None:
    defs = base_defs()
    loaded = load_manifest_dir(write_world(tmp_path, defs, base_manifest(defs)))
    again = assemble_manifest(loaded.manifest, loaded.definitions)
    assert again.manifest_hash == loaded.manifest_hash
    broken = dict(loaded.definitions)
    del broken["t/State@1"]
    with pytest.raises(AirCheckError) as caught:
        assemble_manifest(loaded.manifest, broken)
    assert ("air.dangling_ref", "t/wf@1.state") in [(i.code, i.path) for i in caught.value.issues]
    unresolved = dict(loaded.definitions)
    module = loaded.definitions["t/mod@1"]
    unresolved["t/mod@1"] = module.model_copy(
        update={"artifact": Artifact.model_validate({"path": "w.wasm"})}
    )
    bare = Manifest.model_validate(
        {
            "modules": [{"name": "t/mod@1"}],
            **{k: v for k, v in canonical_form(loaded.manifest).items() if k != "modules"},
        }
    )
    with pytest.raises(AirCheckError) as caught:
        assemble_manifest(bare, unresolved)
    assert [(i.code, i.path) for i in caught.value.issues] == [
        ("air.module_unresolved", "manifest.modules[0].hash")
    ]


# --------------------------------------------------------------------------------------------
# One problem, one code, one path


def _set(target: str, /, **changes: Any) -> Callable[[Defs, dict[str, Any]], None]:
    def mutate(defs: Defs, _manifest: dict[str, Any]) -> None:
        find(defs, target).update(changes)

    return mutate


def _route(**changes: Any) -> Callable[[Defs, dict[str, Any]], None]:
    def mutate(_defs: Defs, manifest: dict[str, Any]) -> None:
        manifest["routing"]["subscriptions"][0].update(changes)

    return mutate


def _drop_key_schema(defs: Defs, manifest: dict[str, Any]) -> None:
    del find(defs, "t/wf@1")["key_schema"]


def _add_schema(name: str, type_: Any, *, listed: bool = True) -> Callable[..., None]:
    def mutate(defs: Defs, manifest: dict[str, Any]) -> None:
        defs.append({"$kind": "defschema", "name": name, "type": type_})
        if listed:
            manifest["schemas"].append({"name": name})

    return mutate


def _cycle(defs: Defs, manifest: dict[str, Any]) -> None:
    _add_schema("t/A@1", {"list": {"ref": "t/B@1"}})(defs, manifest)
    _add_schema("t/B@1", {"option": {"ref": "t/A@1"}})(defs, manifest)


def _deep(defs: Defs, manifest: dict[str, Any]) -> None:
    nested: Any = {"int": {}}
    for _ in range(TYPE_DEPTH_MAX + 1):
        nested = {"list": nested}
    _add_schema("t/Deep@1", nested)(defs, manifest)


def _ref_hash(value: str) -> Callable[..., None]:
    def mutate(_defs: Defs, manifest: dict[str, Any]) -> None:
        manifest["schemas"][0]["hash"] = value  # t/Event@1, first as authored

    return mutate


def _duplicate(defs: Defs, manifest: dict[str, Any]) -> None:
    defs.append(copy.deepcopy(find(defs, "t/State@1")))


def _unreferenced(defs: Defs, manifest: dict[str, Any]) -> None:
    _add_schema("t/Extra@1", {"int": {}}, listed=False)(defs, manifest)


def _listed_under_wrong_kind(defs: Defs, manifest: dict[str, Any]) -> None:
    manifest["workflows"] = []
    manifest["schemas"].append({"name": "t/wf@1"})


def _two_arms(defs: Defs, manifest: dict[str, Any]) -> None:
    find(defs, "t/Event@1")["type"]["variant"]["Again"] = {"ref": "t/Add@1"}


def _sys_definition(defs: Defs, manifest: dict[str, Any]) -> None:
    _add_schema("sys/Mine@1", {"int": {}}, listed=False)(defs, manifest)


def _second_route(defs: Defs, manifest: dict[str, Any]) -> None:
    subscriptions = manifest["routing"]["subscriptions"]
    subscriptions.append(dict(subscriptions[0]))


SEMANTIC_CASES: list[tuple[str, Callable[..., None], str, str]] = [
    (
        "schema ref",
        _set("t/Add@1", type={"record": {"id": {"text": {}}, "n": {"ref": "t/Nope@1"}}}),
        "air.dangling_ref",
        "t/Add@1.type.record.n.ref",
    ),
    ("state", _set("t/wf@1", state="t/Nope@1"), "air.dangling_ref", "t/wf@1.state"),
    ("key schema", _set("t/wf@1", key_schema="t/Nope@1"), "air.dangling_ref", "t/wf@1.key_schema"),
    (
        "inline key schema",
        _set("t/wf@1", key_schema={"ref": "t/Nope@1"}),
        "air.dangling_ref",
        "t/wf@1.key_schema.ref",
    ),
    (
        "effect",
        _set("t/wf@1", effects_emitted=["t/nope@1"]),
        "air.dangling_ref",
        "t/wf@1.effects_emitted[0]",
    ),
    (
        "adapter",
        _set("t/fetch@1", adapters=["t/nope@1"]),
        "air.dangling_ref",
        "t/fetch@1.adapters[0]",
    ),
    (
        "module",
        _set("t/wf@1", impl={"module": "t/nope@1"}),
        "air.dangling_ref",
        "t/wf@1.impl.module",
    ),
    ("wrong kind", _set("t/wf@1", state="t/fetch@1"), "air.ref_kind_mismatch", "t/wf@1.state"),
    (
        "manifest ref kind",
        _listed_under_wrong_kind,
        "air.ref_kind_mismatch",
        "manifest.schemas[5].name",  # appended after the five schemas
    ),
    ("duplicate name", _duplicate, "air.duplicate_name", "t/State@1"),
    (
        "route to unknown workflow",
        _route(workflow="t/nope@1"),
        "air.dangling_ref",
        "manifest.routing.subscriptions[0].workflow",
    ),
    (
        "route unknown event",
        _route(event="t/Nope@1"),
        "air.dangling_ref",
        "manifest.routing.subscriptions[0].event",
    ),
    (
        "not deliverable",
        _route(event="t/State@1", key_field="total"),
        "air.route_not_deliverable",
        "manifest.routing.subscriptions[0].event",
    ),
    (
        "ambiguous arms",
        _two_arms,
        "air.route_ambiguous",
        "manifest.routing.subscriptions[0].event",
    ),
    (
        "keyed without key_field",
        _route(key_field=None),
        "air.key_field_missing",
        "manifest.routing.subscriptions[0]",
    ),
    (
        "key_field on unkeyed",
        _drop_key_schema,
        "air.key_field_unkeyed",
        "manifest.routing.subscriptions[0].key_field",
    ),
    (
        "key_field not in event",
        _route(key_field="nope"),
        "air.key_field_invalid",
        "manifest.routing.subscriptions[0].key_field",
    ),
    (
        "key_field through a non-variant",
        _route(key_field="$value.id"),
        "air.key_field_invalid",
        "manifest.routing.subscriptions[0].key_field",
    ),
    (
        "key_field bad syntax",
        _route(key_field="a..b"),
        "air.key_field_invalid",
        "manifest.routing.subscriptions[0].key_field",
    ),
    (
        "key type",
        _route(key_field="n"),
        "air.key_type_mismatch",
        "manifest.routing.subscriptions[0].key_field",
    ),
    (
        "duplicate route",
        _second_route,
        "air.duplicate_entry",
        "manifest.routing.subscriptions[1]",
    ),
    ("sys in user files", _sys_definition, "air.reserved_name", "sys/Mine@1"),
    (
        "routing a kernel record",
        _route(event="sys/EffectReceiptEnvelope@1"),
        "air.reserved_name",
        "manifest.routing.subscriptions[0].event",
    ),
    (
        "kernel adapter on a user effect",
        _set("t/fetch@1", adapters=["sys/timer@1"]),
        "air.reserved_name",
        "t/fetch@1.adapters[0]",
    ),
    ("cycle", _cycle, "air.ref_cycle", "t/B@1.type.option.ref"),
    ("too deep", _deep, "air.type_too_deep", "t/Deep@1.type"),
    (
        "option in option",
        _add_schema("t/Opt@1", {"option": {"option": {"int": {}}}}),
        "air.type_invalid",
        "t/Opt@1.type.option",
    ),
    ("bad name", _set("t/State@1", name="T/State@1"), "air.name_invalid", "defs.json[2].name"),
    ("bad hash", _ref_hash("sha256:" + "0" * 64), "air.hash_invalid", "manifest.schemas[0].hash"),
    (
        "hash mismatch",
        _ref_hash("blake3:" + "1" * 64),
        "air.hash_mismatch",
        "manifest.schemas[0].hash",
    ),
    (
        "module missing",
        _set("t/mod@1", artifact={"path": "missing.wasm"}),
        "air.module_missing",
        "t/mod@1.artifact.path",
    ),
    (
        "module hash mismatch",
        _set("t/mod@1", artifact={"path": "w.wasm", "hash": "blake3:" + "2" * 64}),
        "air.hash_mismatch",
        "t/mod@1.artifact.hash",
    ),
    ("unreferenced", _unreferenced, "air.def_unreferenced", "t/Extra@1"),
    (
        "context",
        _set("t/wf@1", context="t/State@1"),
        "air.context_unsupported",
        "t/wf@1.context",
    ),
    (
        "receipts undeliverable",
        _set("t/wf@1", event="t/Add@1"),
        "air.receipt_undeliverable",
        "t/wf@1.event",
    ),
    (
        "duplicate effect",
        _set("t/wf@1", effects_emitted=["t/fetch@1", "t/fetch@1"]),
        "air.duplicate_entry",
        "t/wf@1.effects_emitted[1]",
    ),
    ("missing field", _set("t/fetch@1", params=None), "air.def_invalid", "t/fetch@1.params"),
    (
        "limit over ceiling",
        _set("t/wf@1", limits={"events_per_step_max": 10**6}),
        "air.def_invalid",
        "t/wf@1.limits.events_per_step_max",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "code", "path"),
    [case[1:] for case in SEMANTIC_CASES],
    ids=[case[0] for case in SEMANTIC_CASES],
)
def test_each_problem_has_its_code_and_path(
    tmp_path: Path, mutate: Callable[..., None], code: str, path: str
) -> None:
    defs = base_defs()
    manifest = base_manifest(defs)
    mutate(defs, manifest)
    found = issues_of(write_world(tmp_path, defs, manifest))
    assert (code, path) in found, found


def test_all_issues_are_collected_in_order(tmp_path: Path) -> None:
    defs = base_defs()
    manifest = base_manifest(defs)
    find(defs, "t/wf@1")["state"] = "t/Nope@1"
    find(defs, "t/fetch@1")["adapters"] = ["t/nope@1"]
    manifest["routing"]["subscriptions"][0]["workflow"] = "t/nope@1"
    with pytest.raises(AirCheckError) as caught:
        load_manifest_dir(write_world(tmp_path, defs, manifest))
    error = caught.value
    assert [(i.code, i.path) for i in error.issues] == [
        ("air.dangling_ref", "t/fetch@1.adapters[0]"),
        ("air.dangling_ref", "t/wf@1.state"),
        ("air.dangling_ref", "manifest.routing.subscriptions[0].workflow"),
    ]
    assert error.issues[0].file == "defs.json"
    assert error.issues[2].file == "manifest.json"
    # Usable as one error: the first issue's path, and a count.
    assert error.code == "air.check_failed"
    assert error.path == "t/fetch@1.adapters[0]"
    assert "2 more issues" in str(error)
    assert [i["code"] for i in error.to_dict()["issues"]] == error.codes


def test_a_clean_folder_raises_nothing_and_a_broken_one_is_not_half_loaded(tmp_path: Path) -> None:
    defs = base_defs()
    find(defs, "t/wf@1")["state"] = "t/Nope@1"
    with pytest.raises(AirCheckError):
        load_manifest_dir(write_world(tmp_path, defs, base_manifest(defs)))


# --------------------------------------------------------------------------------------------
# Files and folders


def test_missing_folder_and_manifest(tmp_path: Path) -> None:
    assert issues_of(tmp_path / "nope") == [("air.folder_missing", str(tmp_path / "nope"))]
    defs = base_defs()
    assert ("air.manifest_missing", "manifest") in issues_of(write_world(tmp_path, defs, None))


def test_two_manifests(tmp_path: Path) -> None:
    defs = base_defs()
    root = write_world(tmp_path, defs, base_manifest(defs))
    (root / "manifest.yaml").write_text("$kind: manifest\n")
    assert ("air.manifest_duplicate", "manifest") in issues_of(root)


@pytest.mark.parametrize(
    ("file_name", "text"),
    [
        ("bad.json", "{not json"),
        ("dup.json", '{"$kind": "defschema", "$kind": "defschema"}'),
        ("dup.yaml", "$kind: defschema\n$kind: defschema\n"),
        ("nan.json", '{"x": NaN}'),
        ("deep.json", "[" * (DOCUMENT_DEPTH_MAX + 1) + "]" * (DOCUMENT_DEPTH_MAX + 1)),
    ],
)
def test_unreadable_files(tmp_path: Path, file_name: str, text: str) -> None:
    defs = base_defs()
    root = write_world(tmp_path, defs, base_manifest(defs))
    (root / file_name).write_text(text)
    assert ("air.file_invalid", file_name) in issues_of(root)


def test_document_depth_limit_edge(tmp_path: Path) -> None:
    defs = base_defs()
    root = write_world(tmp_path, defs, base_manifest(defs))
    # Exactly at the limit the file parses (and is then no definition, a different code).
    (root / "edge.json").write_text("[" * DOCUMENT_DEPTH_MAX + "]" * DOCUMENT_DEPTH_MAX)
    found = issues_of(root)
    assert ("air.file_invalid", "edge.json") not in found
    assert ("air.kind_unknown", "edge.json[0]") in found


def test_unknown_kinds_and_misplaced_manifest(tmp_path: Path) -> None:
    defs = base_defs()
    root = write_world(tmp_path, defs, base_manifest(defs))
    (root / "more.yaml").write_text("$kind: defplan\nname: t/p@1\n---\n$kind: manifest\n---\n- 5\n")
    found = issues_of(root)
    assert ("air.kind_unknown", "more.yaml#0.$kind") in found
    assert ("air.kind_unknown", "more.yaml#1.$kind") in found
    assert ("air.kind_unknown", "more.yaml#2[0]") in found


def test_yaml_dates_stay_text_and_hidden_files_are_skipped(tmp_path: Path) -> None:
    defs = base_defs()
    root = write_world(tmp_path, defs, base_manifest(defs))
    (root / ".hidden.json").write_text("{broken")
    (root / "notes.txt").write_text("{broken")
    load_manifest_dir(root)
    (root / "date.yaml").write_text("when: 2024-01-01\n")
    assert read_document(root / "date.yaml") == {"when": "2024-01-01"}


def test_custom_artifact_resolver(tmp_path: Path) -> None:
    defs = base_defs()
    find(defs, "t/mod@1")["artifact"] = {"path": "src/"}
    root = write_world(tmp_path, defs, base_manifest(defs))
    built = hash_bytes(b"built")
    loaded = load_manifest_dir(root, artifact_resolver=lambda path: built)
    assert canonical_form(loaded.definitions["t/mod@1"])["artifact"] == {"hash": built}


def test_workflow_model_is_what_the_loader_returns(tmp_path: Path) -> None:
    defs = base_defs()
    loaded = load_manifest_dir(write_world(tmp_path, defs, base_manifest(defs)))
    assert isinstance(loaded.definitions["t/wf@1"], DefWorkflow)
    assert isinstance(loaded.manifest, Manifest)
