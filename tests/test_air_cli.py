"""`aos air check`, `aos air schemas`, `aos hash`: output, exit codes, --json shape."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from aos.cli.main import main
from aos.kernel import cbor
from aos.kernel.air import DefSchema, def_hash, load_manifest_dir, schema_texts
from aos.kernel.hashing import hash_bytes, hash_value
from tests.conftest import shared_json

FIXTURES = Path(__file__).parent / "fixtures" / "air"
COUNTER = FIXTURES / "counter"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def broken_counter(tmp_path: Path) -> Path:
    root = tmp_path / "counter"
    shutil.copytree(COUNTER, root)
    manifest = (root / "manifest.yaml").read_text()
    manifest = manifest.replace("workflow: demo/counter@1", "workflow: demo/nope@1")
    manifest = manifest.replace(
        "key_field: $value.id",
        "key_field: $value.id\n    - event: demo/Nope@1\n      workflow: demo/counter@1\n      key_field: id",
    )
    (root / "manifest.yaml").write_text(manifest)
    return root


def test_check_ok() -> None:
    code, out, err = run("air", "check", str(COUNTER))
    assert (code, err) == (0, "")
    loaded = load_manifest_dir(COUNTER)
    assert out.splitlines()[0] == f"OK  manifest {loaded.manifest_hash}"
    assert "defschema 3" in out and "subscriptions 1" in out


def test_check_ok_json() -> None:
    code, out, _ = run("air", "check", "--json", str(COUNTER))
    assert code == 0
    body = json.loads(out)
    loaded = load_manifest_dir(COUNTER)
    assert body["ok"] is True
    assert body["manifest_hash"] == loaded.manifest_hash
    assert body["counts"]["defworkflow"] == 1
    assert {d["name"]: d["hash"] for d in body["definitions"]} == dict(loaded.hashes)
    assert body["definitions"][0] == {
        "name": "demo/CounterEvent@1",
        "kind": "defschema",
        "hash": loaded.hashes["demo/CounterEvent@1"],
        "file": "defs/schemas.yaml",
    }


def test_check_errors_table_and_exit_1(tmp_path: Path) -> None:
    code, out, err = run("air", "check", str(broken_counter(tmp_path)))
    assert code == 1
    lines = out.splitlines()
    assert lines[0].split() == ["CODE", "PATH", "MESSAGE", "FILE"]
    assert "air.dangling_ref  manifest.routing.subscriptions[0].workflow" in out
    assert "manifest.routing.subscriptions[1].event" in out
    assert err.startswith("error[air.check_failed]: ")
    assert "hint: " in err


def test_check_errors_json(tmp_path: Path) -> None:
    code, out, _ = run("air", "check", "--json", str(broken_counter(tmp_path)))
    assert code == 1
    error = json.loads(out)["error"]
    assert error["code"] == "air.check_failed"
    assert error["issues"][0] == {
        "code": "air.dangling_ref",
        "path": "manifest.routing.subscriptions[0].workflow",
        "message": "no workflow named demo/nope@1",
        "file": "manifest.yaml",
    }
    assert [i["path"] for i in error["issues"]][1] == "manifest.routing.subscriptions[1].event"


def test_check_bad_usage_exit_2(tmp_path: Path) -> None:
    assert run("air", "check", str(tmp_path / "nope"))[0] == 2
    assert run("air", "check")[0] == 2


def test_schemas_export(tmp_path: Path) -> None:
    code, out, _ = run("air", "schemas", str(tmp_path / "out"))
    assert code == 0
    assert len(out.splitlines()) == len(schema_texts())
    for name, text in schema_texts().items():
        assert (tmp_path / "out" / name).read_text() == text
    code, out, _ = run("air", "schemas", "--json", str(tmp_path / "json"))
    assert code == 0
    assert len(json.loads(out)["written"]) == len(schema_texts())


def test_hash_of_a_value_and_of_raw_bytes(tmp_path: Path) -> None:
    value = {"b": [1, 2], "a": {"$bytes": "00ff"}}
    (tmp_path / "v.json").write_text(json.dumps(value))
    (tmp_path / "v.yaml").write_text("a: {$bytes: 00ff}\nb: [1, 2]\n")
    expected = hash_value({"a": b"\x00\xff", "b": [1, 2]})
    assert run("hash", str(tmp_path / "v.json")) == (0, f"{expected}\n", "")
    assert run("hash", str(tmp_path / "v.yaml"))[1] == f"{expected}\n"
    raw = (tmp_path / "v.json").read_bytes()
    assert run("hash", "--raw", str(tmp_path / "v.json"))[1] == f"{hash_bytes(raw)}\n"
    code, out, _ = run("hash", "--json", str(tmp_path / "v.json"))
    assert code == 0
    assert json.loads(out) == {
        "hash": expected,
        "mode": "value",
        "bytes": len(cbor.encode({"a": b"\x00\xff", "b": [1, 2]})),
    }


def test_hash_of_a_canonical_definition_is_its_definition_hash(tmp_path: Path) -> None:
    vector = shared_json("vectors", "agentos", "schemas.json")[0]
    (tmp_path / "point.json").write_text(json.dumps(vector["json"]))
    expected = def_hash(DefSchema.model_validate(vector["json"]))
    assert run("hash", str(tmp_path / "point.json"))[1] == f"{expected}\n"


def test_hash_errors(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{nope")
    code, _, err = run("hash", str(tmp_path / "bad.json"))
    assert code == 1
    assert err.startswith("error[air.file_invalid]")
    (tmp_path / "x.bin").write_bytes(b"\x00")
    code, out, _ = run("hash", "--json", str(tmp_path / "x.bin"))
    assert code == 1
    assert json.loads(out)["error"]["code"] == "air.file_invalid"
    assert run("hash", "--raw", str(tmp_path / "x.bin"))[0] == 0
    (tmp_path / "two.yaml").write_text("a: 1\n---\nb: 2\n")
    assert run("hash", str(tmp_path / "two.yaml"))[0] == 1
    assert run("hash", str(tmp_path / "missing.json"))[0] == 2
