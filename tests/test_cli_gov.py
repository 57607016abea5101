"""`aos gov ...`: each command's output, `--json` shape, refusals with their codes and exit
codes (0 ok, 1 a user-facing error, 2 bad usage), on counter-c worlds and C counter variants
(see tests/test_governance.py), and the scripted fixture for open intents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aos.cli.main import main
from aos.kernel.hashing import hash_value
from aos.kernel.wasm.build import build_c
from aos.kernel.world.world import World
from tests.test_governance import (
    ABOVE_20,
    DOUBLE,
    REFACTOR,
    counter_world,
    drop_noop_patch,
    variant,
)
from tests.test_world import COUNTER, SCRIPTED, create, reopen

PING = "demo/Ping@1"


def run(*args: str, world: Path) -> tuple[int, str, str]:
    result = CliRunner(env={"AOS_WORLD": str(world)}).invoke(main, ["gov", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str, world: Path, code: int = 0) -> Any:
    exit_code, out, err = run(*args, "--json", world=world)
    assert exit_code == code, (out, err)
    return json.loads(out)


def refused(*args: str, world: Path, code: str, hint: bool = True) -> str:
    """Run a command that must fail with `code`; check the human and the JSON report."""
    exit_code, out, err = run(*args, world=world)
    assert exit_code == 1, (out, err)
    assert err.startswith(f"error[{code}]: ") and ("\n  hint: " in err) == hint, err
    body = run_json(*args, world=world, code=1)
    assert body["error"]["code"] == code
    return err


@pytest.fixture
def counter(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    counter_world(path, {"a": [7, 7], "b": [15], "c": [30]})
    return path


def propose(world: Path, source: Path, *extra: str) -> str:
    body = run_json("propose", str(source), *extra, world=world)
    proposal: str = body["proposal"]
    return proposal


# --------------------------------------------------------------------------------------------
# The whole session


def test_propose_a_folder_shadow_approve_apply_ls_show(tmp_path: Path, counter: Path) -> None:
    folder = variant(tmp_path, "refactor", REFACTOR)
    code, out, err = run("propose", str(folder), world=counter)
    assert code == 0 and err == "", err
    assert out.startswith("proposed  blake3:")
    assert "~ defmodule demo/counter.module@1  blake3:" in out
    proposal = out.split()[1]
    short = proposal[len("blake3:") : len("blake3:") + 10]  # a prefix names it too
    assert f"next: aos gov shadow {proposal[:19]}" in out

    code, out, _ = run("ls", world=counter)
    assert code == 0 and "proposed" in out and "(current)" in out and proposal[:19] in out

    code, out, err = run("shadow", short, world=counter)
    assert code == 0 and err == ""  # no progress bar in a pipe
    assert "cells 3: 3 reproduce, 0 diverge" in out
    assert out.count("reproduces") == 3 and "recorded  seq" in out

    code, out, _ = run("approve", short, "--approver", "ann", "--reason", "clean", world=counter)
    assert code == 0 and out.startswith(f"approved  {proposal}") and "by        ann: clean" in out
    assert f"next: aos gov apply {proposal[:19]}" in out

    code, out, _ = run("apply", short, world=counter)
    assert code == 0 and out.startswith(f"applied   {proposal}")
    manifest = out.splitlines()[1].split()[1]
    with reopen(counter) as world:
        assert str(world.manifest_hash) == manifest
        world.send("demo/CounterEvent@1", {"$tag": "Increment", "$value": {"id": "a", "by": 1}})
        assert world.reader.state(COUNTER, "a") == {"count": 15, "resets": 0}

    code, out, _ = run("ls", world=counter)
    assert "applied" in out and "approved by ann" in out
    code, out, _ = run("show", short, world=counter)
    assert code == 0
    for text in (
        f"proposal  {proposal}",
        "status    applied",
        f"manifest  {manifest}",
        "patch     1 change",
        "~ defmodule demo/counter.module@1",
        "decision  approved by ann: clean",
        "cells 3: 3 reproduce",
    ):
        assert text in out, text
    verify = CliRunner().invoke(main, ["world", "replay", "--verify", "--world", str(counter)])
    assert verify.exit_code == 0, verify.output


def test_json_shapes(tmp_path: Path, counter: Path) -> None:
    body = run_json("propose", str(variant(tmp_path, "above", ABOVE_20)), world=counter)
    proposal = body["proposal"]
    assert body["status"] == "proposed" and body["shadow"] is None and body["decision"] is None
    assert body["diff"] and body["diff"][0].startswith("~ defmodule")
    report = run_json("shadow", proposal, world=counter)
    assert report["proposal"] == proposal
    assert report["summary"]["cells"] == 3 and report["summary"]["diverge"] == 1
    assert [c["key"] for c in report["cells"] if c["outcome"] == "diverges"] == ["c"]
    assert set(report) >= {"cells", "intents_affected", "routing", "allowlists", "summary"}
    listed = run_json("ls", world=counter)
    [entry] = listed["proposals"]
    assert entry["proposal"] == proposal and entry["status"] == "shadowed"
    assert entry["shadow_current"] is True and listed["state_height"] == report["state_height"]
    shown = run_json("show", proposal, world=counter)
    assert shown["report"] == report
    assert shown["patch"]["base_manifest"] == shown["base"] and shown["base_current"] is True
    decided = run_json("reject", proposal, "--approver", "bob", "--reason", "no", world=counter)
    assert decided["decision"] == {"action": "rejected", "approver": "bob", "reason": "no"}


def test_a_divergent_shadow_lists_divergent_cells_first(tmp_path: Path, counter: Path) -> None:
    proposal = propose(counter, variant(tmp_path, "double", DOUBLE))
    code, out, _ = run("shadow", proposal, "--limit", "2", world=counter)
    assert code == 0 and "cells 3: 0 reproduce, 3 diverge" in out
    rows = [line for line in out.splitlines() if line.startswith("demo/counter@1")]
    assert len(rows) == 2 and all("diverges" in r and "the state differs" in r for r in rows)
    assert "... 1 more cells" in out


# --------------------------------------------------------------------------------------------
# Patch files


def _schema_patch(world_path: Path, name: str) -> dict[str, Any]:
    with reopen(world_path) as world:
        base = str(world.manifest_hash)
    return {
        "$kind": "patch",
        "base_manifest": base,
        "ops": [{"add_def": {"def": {"$kind": "defschema", "name": name, "type": {"nat": {}}}}}],
    }


def test_propose_a_patch_file_with_an_expected_hash(tmp_path: Path, counter: Path) -> None:
    patch = _schema_patch(counter, "demo/Extra@1")
    file = tmp_path / "patch.json"
    file.write_text(json.dumps(patch))
    expected = str(hash_value(patch))
    tampered = dict(patch, ops=[{"remove_def": {"name": "demo/CounterThreshold@1"}}])
    file.write_text(json.dumps(tampered))
    refused(
        "propose", str(file), "--expect-hash", expected, world=counter, code="gov.patch_tampered"
    )
    file.write_text(json.dumps(patch))
    code, out, _ = run("propose", str(file), "--expect-hash", expected, world=counter)
    assert code == 0 and f"proposed  {expected}" in out and "+ defschema demo/Extra@1" in out
    refused("propose", str(file), world=counter, code="gov.duplicate_proposal")
    yaml_file = tmp_path / "patch.yaml"
    yaml_file.write_text(
        f"$kind: patch\nbase_manifest: {patch['base_manifest']}\n"
        "ops:\n  - remove_def: {name: demo/CounterThreshold@1}\n"
    )
    code, out, _ = run("propose", str(yaml_file), world=counter)
    assert code == 0 and "- demo/CounterThreshold@1" in out


def test_bad_patches_are_refused(tmp_path: Path, counter: Path) -> None:
    stale = dict(_schema_patch(counter, "demo/Extra@1"), base_manifest=str(hash_value("old")))
    (tmp_path / "stale.json").write_text(json.dumps(stale))
    refused("propose", str(tmp_path / "stale.json"), world=counter, code="gov.stale_base")
    (tmp_path / "bad.json").write_text(json.dumps({"$kind": "patch", "ops": []}))
    refused("propose", str(tmp_path / "bad.json"), world=counter, code="gov.patch_invalid")
    (tmp_path / "notes.txt").write_text("hello")
    refused("propose", str(tmp_path / "notes.txt"), world=counter, code="air.file_invalid")
    refused("propose", str(variant(tmp_path, "same", {})), world=counter, code="gov.patch_invalid")
    broken = variant(tmp_path, "broken", {"static void fail(void)": "static void fail(void"})
    code, out, _ = run("propose", str(broken), world=counter)
    assert code == 1 and "air.module_build_failed" in out  # the issue table
    refused("propose", str(broken), world=counter, code="air.check_failed")
    with reopen(counter) as world:
        assert world.proposals == {}


# --------------------------------------------------------------------------------------------
# Decisions and apply refusals


def test_decision_and_apply_refusals(tmp_path: Path, counter: Path) -> None:
    proposal = propose(counter, variant(tmp_path, "refactor", REFACTOR))
    refused("apply", proposal, world=counter, code="gov.not_shadowed")
    decide = ("--approver", "ann", "--reason", "ok")
    assert run("approve", proposal, *decide, world=counter)[0] == 0
    refused("approve", proposal, *decide, world=counter, code="gov.already_decided")
    refused("reject", proposal, *decide, world=counter, code="gov.already_decided")
    other = propose(counter, variant(tmp_path, "double", DOUBLE))
    assert run("reject", other, *decide, world=counter)[0] == 0
    refused("apply", other, world=counter, code="gov.rejected")
    refused("shadow", other, world=counter, code="gov.already_decided")
    third = propose(counter, variant(tmp_path, "above", ABOVE_20))
    blank = ("--approver", " ", "--reason", "x")
    refused("approve", third, *blank, world=counter, code="gov.approver_required")


def test_ids_unknown_ambiguous_and_usage(tmp_path: Path, counter: Path) -> None:
    refused("show", "blake3:00", world=counter, code="gov.unknown_proposal")
    refused("apply", str(hash_value("x")), world=counter, code="gov.unknown_proposal")
    propose(counter, variant(tmp_path, "refactor", REFACTOR))
    propose(counter, variant(tmp_path, "double", DOUBLE))
    err = refused("show", "blake3:", world=counter, code="gov.proposal_ambiguous")
    assert "names 2 proposals" in err
    assert run("approve", "blake3:", world=counter)[0] == 2  # --approver and --reason required
    assert run("frobnicate", world=counter)[0] == 2
    code, _, err = run("ls", world=tmp_path / "nowhere")
    assert code == 1 and err.startswith("error[world.missing]")


def test_apply_names_what_blocks_it(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with create(path, SCRIPTED, clock="manual") as world:
        world.send(PING, {"id": "x", "n": 2, "action": "effect"})
        patch_file = tmp_path / "drop-noop.json"
        patch_file.write_text(json.dumps(drop_noop_patch(world)))
    proposal = propose(path, patch_file)
    code, out, _ = run("shadow", proposal, world=path)
    assert code == 0 and "open intents affected:" in out
    assert "the workflow no longer declares its effect" in out
    assert "workflow demo/keyed@1 effects: -demo/noop@1" in out
    run("approve", proposal, "--approver", "ann", "--reason", "ok", world=path)
    code, out, err = run("apply", proposal, world=path)
    assert code == 1 and err.startswith("error[gov.not_quiescent]: 2 things block apply")
    assert err.count("  blocked by open intent blake3:") == 2 and "  hint: " in err
    body = run_json("apply", proposal, world=path, code=1)
    assert len(body["error"]["detail"]["blockers"]) == 2
    with World.open(path, sync=False) as world:
        assert world.proposals[proposal]["status"] == "approved"


def test_a_patch_file_brings_its_module_binary_with_wasm(tmp_path: Path, counter: Path) -> None:
    built = build_c(variant(tmp_path, "refactor", REFACTOR) / "counter.c")
    with reopen(counter) as world:
        base = str(world.manifest_hash)
    module = {
        "$kind": "defmodule",
        "name": "demo/counter.module@1",
        "abi": "core",
        "artifact": {"hash": str(built.wasm_hash)},
    }
    file = tmp_path / "module.json"
    file.write_text(
        json.dumps(
            {"$kind": "patch", "base_manifest": base, "ops": [{"replace_def": {"def": module}}]}
        )
    )
    err = refused("propose", str(file), world=counter, code="gov.patch_invalid")
    assert str(built.wasm_hash) in err  # its binary is not stored
    code, out, _ = run("propose", str(file), "--wasm", str(built.wasm_path), world=counter)
    assert code == 0 and "~ defmodule demo/counter.module@1" in out
