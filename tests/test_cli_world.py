"""`aos world ...`: every command's output, `--json` shape, bad input and exit code (0 ok, 1 a
user-facing error with its code, 2 bad usage), on worlds made from `manifests/counter-c` (a C
counter: fast to build and to step) and `manifests/orders` (a Python workflow with effects)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aos.cli import world_cmd, world_text
from aos.cli.main import main
from aos.kernel import cbor
from aos.kernel.hashing import hash_value
from aos.kernel.world.world import World

REPO = Path(__file__).resolve().parent.parent
COUNTER_C = REPO / "manifests" / "counter-c"
ORDERS = REPO / "manifests" / "orders"
COUNTER = "demo/CounterEvent@1"
ORDER = {"order_id": "o-1", "amount_cents": 1250, "currency": "EUR"}


def increment(key: str, by: int) -> str:
    return json.dumps({"$tag": "Increment", "$value": {"id": key, "by": by}})


def run(*args: str, world: Path | None = None, stdin: str | None = None) -> tuple[int, str, str]:
    env = {"AOS_WORLD": str(world)} if world is not None else {}
    result = CliRunner(env=env).invoke(main, list(args), input=stdin)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str, world: Path | None = None, code: int = 0) -> Any:
    exit_code, out, err = run(*args, "--json", world=world)
    assert exit_code == code, (out, err)
    return json.loads(out)


def error_of(*args: str, world: Path | None = None) -> dict[str, Any]:
    """The `--json` error object of a command that must fail with exit 1."""
    body = run_json(*args, world=world, code=1)
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    return error


@pytest.fixture
def counter(tmp_path: Path) -> Path:
    """A counter world with cells a (count 12, one threshold event) and b (count 3)."""
    path = tmp_path / "counter"
    with World.create(path, COUNTER_C, sync=False) as world:
        world.send(COUNTER, json.loads(increment("a", 7)))
        world.send(COUNTER, json.loads(increment("a", 5)))
        world.send(COUNTER, json.loads(increment("b", 3)))
    return path


@pytest.fixture(scope="module")
def poke_manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """counter-c rekeyed by a nat (`demo/Poke@1 {n}`), which the C module cannot step: every
    poke faults its cell. Gives a non-text key and failed cells."""
    root = tmp_path_factory.mktemp("poke") / "manifest"
    shutil.copytree(COUNTER_C, root)
    defs = root / "defs"
    source = os.path.relpath(REPO / "modules/examples/counter_c/counter.c", defs)
    text = (defs / "counter.yaml").read_text()
    text = text.replace("key_schema: {text: {}}", "key_schema: {nat: {}}")
    text = text.replace("../../../modules/examples/counter_c/counter.c", source)
    (defs / "counter.yaml").write_text(text)
    schemas = (defs / "schemas.yaml").read_text()
    schemas = schemas.replace("    Reset:", "    Poke: {ref: demo/Poke@1}\n    Reset:", 1)
    schemas += "---\n$kind: defschema\nname: demo/Poke@1\ntype: {record: {n: {nat: {}}}}\n"
    (defs / "schemas.yaml").write_text(schemas)
    manifest = (root / "manifest.yaml").read_text()
    manifest = manifest.replace("schemas:\n", "schemas:\n  - name: demo/Poke@1\n")
    manifest = manifest.replace("event: demo/CounterEvent@1", "event: demo/Poke@1")
    manifest = manifest.replace("key_field: $value.id", "key_field: n")
    (root / "manifest.yaml").write_text(manifest)
    return root


@pytest.fixture(scope="module")
def orders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An order world after one order: two open intents (HTTP charge, timeout timer). Building
    the Python component takes seconds once; the build cache keeps it afterwards."""
    path = tmp_path_factory.mktemp("orders") / "world"
    code, _, err = run("world", "create", str(path), "--manifest", str(ORDERS), "--no-sync")
    assert code == 0, err
    code, _, err = run(
        "world", "send", "demo/OrderPlaced@1", "--value-json", json.dumps(ORDER), world=path
    )
    assert code == 0, err
    return path


# --------------------------------------------------------------------------------------------
# create


def test_create(tmp_path: Path) -> None:
    path = tmp_path / "w"
    code, out, err = run("world", "create", str(path), "--manifest", str(COUNTER_C))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"created   {path}"
    assert lines[1].startswith("manifest  blake3:")
    assert lines[2] == "height    1"
    assert run("world", "status", world=path)[0] == 0


def test_air_check_hashes_what_create_runs(tmp_path: Path) -> None:
    body = run_json("world", "create", str(tmp_path / "w"), "--manifest", str(COUNTER_C))
    assert body == {
        "world": str(tmp_path / "w"),
        "manifest": body["manifest"],
        "height": 1,
        "clock": "wall",
        "admin_token": body["admin_token"],  # the first identity's, printed once
    }
    assert body["admin_token"].startswith("aos_")
    assert body["admin_token"] not in (tmp_path / "w" / "identities.json").read_text()
    assert run_json("air", "check", str(COUNTER_C))["manifest_hash"] == body["manifest"]


def test_create_manual_clock_no_sync(tmp_path: Path) -> None:
    path = tmp_path / "w"
    args = ["world", "create", str(path), "--manifest", str(COUNTER_C), "--clock", "manual"]
    body = run_json(*args, "--no-sync")
    assert body["clock"] == "manual"
    status = run_json("world", "status", world=path)
    assert (status["clock"], status["logical_ns"]) == ("manual", 0)


def test_create_errors(tmp_path: Path, counter: Path) -> None:
    assert error_of("world", "create", str(counter), "--manifest", str(COUNTER_C))["code"] == (
        "world.exists"
    )
    broken = tmp_path / "broken"
    shutil.copytree(COUNTER_C, broken)
    (broken / "manifest.yaml").write_text(
        (broken / "manifest.yaml")
        .read_text()
        .replace("workflow: demo/counter@1", "workflow: x/y@1")
    )
    code, out, err = run("world", "create", str(tmp_path / "w"), "--manifest", str(broken))
    assert code == 1
    assert out.splitlines()[0].split() == ["CODE", "PATH", "MESSAGE", "FILE"]
    assert err.startswith("error[air.check_failed]: ")
    error = error_of("world", "create", str(tmp_path / "w2"), "--manifest", str(broken))
    assert error["code"] == "air.check_failed"
    # The copy also loses the module source (its path is relative): every issue is listed.
    issues = {(i["code"], i["path"]) for i in error["issues"]}
    assert ("air.dangling_ref", "manifest.routing.subscriptions[0].workflow") in issues
    assert ("air.module_build_failed", "demo/counter.module@1.artifact.path") in issues
    assert not (tmp_path / "w").exists()


def test_create_usage(tmp_path: Path) -> None:
    assert run("world", "create", str(tmp_path / "w"))[0] == 2  # no --manifest
    assert run("world", "create", str(tmp_path / "w"), "--manifest", str(tmp_path / "no"))[0] == 2
    args = ["world", "create", str(tmp_path / "w"), "--manifest", str(COUNTER_C)]
    assert run(*args, "--clock", "sundial")[0] == 2


# --------------------------------------------------------------------------------------------
# status


def test_status(counter: Path) -> None:
    code, out, err = run("world", "status", world=counter)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"world         {counter}"
    assert lines[1] == "height        8"
    assert "open intents  0" in lines and "queued        0" in lines
    assert "demo/counter@1  2      0" in out


def test_status_json(counter: Path) -> None:
    body = run_json("world", "status", "--world", str(counter))
    assert body == {
        "world": str(counter),
        "height": 8,
        "manifest": body["manifest"],
        "logical_ns": body["logical_ns"],
        "clock": "wall",
        "workflows": {"demo/counter@1": {"cells": 2, "failed": 0}},
        "open_intents": 0,
        "queued": 0,
        "intents": [],
    }
    assert body["manifest"].startswith("blake3:") and body["logical_ns"] > 0


def test_status_counts_failed_cells(tmp_path: Path, poke_manifest: Path) -> None:
    path = tmp_path / "w"
    with World.create(path, poke_manifest, sync=False) as world:
        world.send("demo/Poke@1", {"n": 7})
    status = run_json("world", "status", world=path)
    assert status["workflows"] == {"demo/counter@1": {"cells": 1, "failed": 1}}


def test_world_missing(tmp_path: Path) -> None:
    for args in (
        ["status"],
        ["send", COUNTER, "--value-json", "{}"],
        ["state", "get", "demo/counter@1", "a"],
        ["state", "cells", "demo/counter@1"],
        ["journal", "tail"],
        ["journal", "head"],
        ["trace", "blake3:" + "0" * 64],
    ):
        code, _, err = run("world", *args, world=tmp_path / "nothing")
        assert code == 1, args
        assert err.startswith("error[world.missing]: "), args
        assert "hint: create it first" in err
    assert error_of("world", "status", world=tmp_path / "nothing")["code"] == "world.missing"


def test_world_option_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert run("world", "status", "--world", str(tmp_path / "file"))[0] == 2


LOCK_HOLDER = """
import sys
from aos.kernel.world.world import World
world = World.open(sys.argv[1])
print("ready", flush=True)
sys.stdin.read()
world.close()
"""


def test_reads_work_and_writes_are_refused_while_another_process_holds_the_world(
    counter: Path,
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(counter)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        assert run_json("world", "status", world=counter)["height"] == 8  # read-only
        code, _, err = run("world", "cell", "reset", "demo/counter@1", "a", world=counter)
        assert code == 1
        assert err.startswith("error[store.locked]: ")
        assert f"world is locked by pid {holder.pid}" in err
        assert "hint: " in err
        error = error_of("world", "send", COUNTER, "--value-json", increment("a", 1), world=counter)
        assert error["code"] == "store.locked"
        assert error["detail"] == {"pid": holder.pid}
    finally:
        assert holder.stdin is not None
        holder.stdin.close()  # the holder exits at end of input, releasing the lock
        holder.wait(timeout=30)
    assert run("world", "status", world=counter)[0] == 0


# --------------------------------------------------------------------------------------------
# send


def test_send(counter: Path) -> None:
    code, out, err = run("world", "send", COUNTER, "--value-json", increment("a", 9), world=counter)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("admitted  seq 9  blake3:")
    assert lines[1] == "delivered 1"
    assert lines[2] == "run       1 steps, 0 faults, 0 dropped, 1 events, 0 intents"
    assert lines[3] == "journal   9..11"


def test_send_json(counter: Path) -> None:
    body = run_json("world", "send", COUNTER, "--value-json", increment("c", 1), world=counter)
    assert body == {
        "seq": 9,
        "event_hash": body["event_hash"],
        "deliveries": 1,
        "duplicate": False,
        "run": {
            "steps": 1,
            "faults": 0,
            "fault_codes": [],
            "dropped": 0,
            "events": 0,
            "intents": 0,
        },
        "problems": [],
        "journal": {"first": 9, "last": 10},
    }
    head = run_json("world", "journal", "tail", "--from", "9", "--limit", "1", world=counter)
    record = cbor.from_json(head["records"][0]["record"])
    assert hash_value(record) == body["event_hash"]


def test_send_value_from_file_and_stdin(tmp_path: Path, counter: Path) -> None:
    (tmp_path / "v.json").write_text(increment("a", 1))
    body = run_json(
        "world", "send", COUNTER, "--value-file", str(tmp_path / "v.json"), world=counter
    )
    assert body["seq"] == 9
    code, out, _ = run(
        "world",
        "send",
        COUNTER,
        "--value-json",
        "-",
        "--json",
        world=counter,
        stdin=increment("a", 1),
    )
    assert code == 0 and json.loads(out)["seq"] == 11
    code, out, _ = run(
        "world",
        "send",
        COUNTER,
        "--value-file",
        "-",
        "--json",
        world=counter,
        stdin=increment("a", 1),
    )
    assert code == 0 and json.loads(out)["seq"] == 13


def test_send_reports_faults_and_drops_by_cell_and_exits_1(
    tmp_path: Path, poke_manifest: Path
) -> None:
    path = tmp_path / "w"
    World.create(path, poke_manifest, sync=False).close()
    body = run_json("world", "send", "demo/Poke@1", "--value-json", '{"n": 7}', world=path, code=1)
    assert body["run"]["faults"] == 1 and body["run"]["fault_codes"] == ["step.trap"]
    [fault] = body["problems"]
    assert (fault["kind"], fault["workflow"], fault["key"]) == ("step_fault", "demo/counter@1", 7)
    assert fault["input"] == body["seq"] and fault["code"] == "step.trap"
    code, out, err = run("world", "send", "demo/Poke@1", "--value-json", '{"n": 7}', world=path)
    assert code == 1
    assert "0 steps, 0 faults, 1 dropped" in out
    assert "dropped   demo/counter@1[7]  seq 5  cell_failed (aos world explain 5)" in out
    assert err.startswith("error[world.event_not_applied]: ")
    assert "hint: aos world explain 5" in err


def test_send_unknown_schema(counter: Path) -> None:
    code, _, err = run("world", "send", "demo/Nope@1", "--value-json", "{}", world=counter)
    assert code == 1 and err.startswith("error[world.schema_unknown]: ")
    error = error_of("world", "send", "sys/WorkflowContext@1", "--value-json", "{}", world=counter)
    assert error["code"] == "world.schema_reserved"


def test_send_bad_json(counter: Path) -> None:
    code, _, err = run("world", "send", COUNTER, "--value-json", "{nope", world=counter)
    assert code == 1 and err.startswith("error[input.invalid_json]: ")
    assert error_of("world", "send", COUNTER, "--value-json", "", world=counter)["code"] == (
        "input.invalid_json"
    )


@pytest.mark.parametrize(
    ("arm", "fields", "code", "path"),
    [
        ("Increment", {"id": "a", "by": -1}, "air.value_out_of_range", "$.$value.by"),
        ("Increment", {"id": "a"}, "air.value_field_missing", "$.$value.by"),
        ("Increment", {"id": "a", "by": 1, "x": 1}, "air.value_field_unknown", "$.$value.x"),
        ("Increment", {"id": 5, "by": 1}, "air.value_invalid", "$.$value.id"),
    ],
)
def test_send_invalid_value_names_its_path(
    counter: Path, arm: str, fields: dict[str, Any], code: str, path: str
) -> None:
    value = json.dumps({"$tag": arm, "$value": fields})
    error = error_of("world", "send", COUNTER, "--value-json", value, world=counter)
    assert (error["code"], error["path"]) == (code, path)
    exit_code, _, err = run("world", "send", COUNTER, "--value-json", value, world=counter)
    assert exit_code == 1 and err.startswith(f"error[{code}]: {path}: ")
    assert run_json("world", "journal", "head", world=counter)["head"] == 8  # nothing journaled


def test_send_route_error_is_journaled_and_reported(counter: Path) -> None:
    value = json.dumps({"id": "a", "count": 1, "threshold": 1})
    code, _, err = run(
        "world", "send", "demo/CounterThreshold@1", "--value-json", value, world=counter
    )
    assert code == 1
    assert err.startswith("error[route.no_subscriber]: ")
    assert "journaled as ingress_rejected at seq 9" in err
    error = error_of(
        "world", "send", "demo/CounterThreshold@1", "--value-json", value, world=counter
    )
    assert error["code"] == "route.no_subscriber"
    assert error["detail"] == {"rejected_seq": 10}
    tail = run_json("world", "journal", "tail", "--kind", "ingress_rejected", world=counter)
    assert [r["seq"] for r in tail["records"]] == [9, 10]


def test_send_key_too_large_is_a_route_error(counter: Path) -> None:
    error = error_of(
        "world", "send", COUNTER, "--value-json", increment("k" * 2000, 1), world=counter
    )
    assert error["code"] == "route.key_too_large"
    assert error["detail"]["rejected_seq"] == 9


def test_send_usage(counter: Path, tmp_path: Path) -> None:
    assert run("world", "send", COUNTER, world=counter)[0] == 2  # no value
    both = ["--value-json", "{}", "--value-file", str(tmp_path / "v.json")]
    (tmp_path / "v.json").write_text("{}")
    assert run("world", "send", COUNTER, *both, world=counter)[0] == 2
    assert (
        run("world", "send", COUNTER, "--value-file", str(tmp_path / "no"), world=counter)[0] == 2
    )
    assert run("world", "send", world=counter)[0] == 2  # no schema


# --------------------------------------------------------------------------------------------
# state get, state cells


def test_state_get(counter: Path) -> None:
    code, out, err = run("world", "state", "get", "demo/counter@1", "a", world=counter)
    assert (code, err) == (0, "")
    assert json.loads(out) == {"count": 12, "resets": 0}
    body = run_json("world", "state", "get", "demo/counter@1", "b", world=counter)
    assert body == {
        "workflow": "demo/counter@1",
        "key": "b",
        "status": "completed",
        "state": {"count": 3, "resets": 0},
    }


def test_state_get_text_key_that_looks_like_json(counter: Path) -> None:
    run("world", "send", COUNTER, "--value-json", increment("42", 1), world=counter)
    body = run_json("world", "state", "get", "demo/counter@1", "42", world=counter)
    assert body["key"] == "42" and body["state"]["count"] == 1


def test_state_get_errors(counter: Path) -> None:
    code, _, err = run("world", "state", "get", "demo/counter@1", "zz", world=counter)
    assert code == 1 and err.startswith("error[world.cell_missing]: demo/counter@1[zz] has no cell")
    assert "hint: " in err
    assert error_of("world", "state", "get", "demo/nope@1", "a", world=counter)["code"] == (
        "world.workflow_unknown"
    )
    assert error_of("world", "state", "get", "demo/counter@1", world=counter)["code"] == (
        "world.key_required"
    )
    assert run("world", "state", "get", world=counter)[0] == 2


def test_state_get_nat_key_and_failed_cell(tmp_path: Path, poke_manifest: Path) -> None:
    path = tmp_path / "w"
    with World.create(path, poke_manifest, sync=False) as world:
        world.send("demo/Poke@1", {"n": 7})
    body = run_json("world", "state", "get", "demo/counter@1", "7", world=path)
    assert body == {"workflow": "demo/counter@1", "key": 7, "status": "failed", "state": None}
    assert error_of("world", "state", "get", "demo/counter@1", "8", world=path)["code"] == (
        "world.cell_missing"
    )
    error = error_of("world", "state", "get", "demo/counter@1", "seven", world=path)
    assert error["code"].startswith("air.value")
    # A negative key needs `--`, or it reads as an option.
    code, out, _ = run("world", "state", "get", "--json", "demo/counter@1", "--", "-1", world=path)
    assert code == 1 and json.loads(out)["error"]["code"] == "air.value_out_of_range"
    cells = run_json("world", "state", "cells", "demo/counter@1", world=path)
    assert [(c["key"], c["status"]) for c in cells["cells"]] == [(7, "failed")]


def test_state_unkeyed_workflow(tmp_path: Path) -> None:
    root = tmp_path / "manifest"
    shutil.copytree(COUNTER_C, root)
    defs = root / "defs" / "counter.yaml"
    source = os.path.relpath(REPO / "modules/examples/counter_c/counter.c", defs.parent)
    text = defs.read_text().replace("key_schema: {text: {}}\n", "")
    defs.write_text(text.replace("../../../modules/examples/counter_c/counter.c", source))
    manifest = (root / "manifest.yaml").read_text().replace("      key_field: $value.id\n", "")
    (root / "manifest.yaml").write_text(manifest)
    path = tmp_path / "w"
    with World.create(path, root, sync=False) as world:
        world.send(COUNTER, json.loads(increment("a", 4)))
    body = run_json("world", "state", "get", "demo/counter@1", world=path)
    assert body["key"] is None and body["state"] == {"count": 4, "resets": 0}
    assert error_of("world", "state", "get", "demo/counter@1", "a", world=path)["code"] == (
        "world.key_unexpected"
    )
    code, out, _ = run("world", "state", "cells", "demo/counter@1", world=path)
    assert code == 0 and out.splitlines()[2].split()[:2] == ["-", "completed"]


def test_state_cells(counter: Path) -> None:
    code, out, err = run("world", "state", "cells", "demo/counter@1", world=counter)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["KEY", "STATUS", "STATE", "LAST", "ACTIVE"]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert rows["a"][1] == "completed" and rows["a"][3] == "5"
    assert rows["b"][3] == "8"
    assert len(rows["a"][2]) == len("blake3:") + world_text.HASH_DIGITS_SHORT


def test_state_cells_json_and_limit(counter: Path) -> None:
    body = run_json("world", "state", "cells", "demo/counter@1", world=counter)
    assert body["workflow"] == "demo/counter@1"
    assert (body["count"], body["truncated"]) == (2, False)
    assert {c["key"] for c in body["cells"]} == {"a", "b"}
    assert set(body["cells"][0]) == {"key", "status", "state_hash", "last_active_seq"}
    limited = run_json("world", "state", "cells", "demo/counter@1", "--limit", "1", world=counter)
    assert (limited["count"], limited["truncated"], len(limited["cells"])) == (2, True, 1)
    code, out, _ = run("world", "state", "cells", "demo/counter@1", "--limit", "1", world=counter)
    assert code == 0 and out.splitlines()[-1] == "... 1 more (raise --limit)"


def test_state_cells_errors(counter: Path) -> None:
    assert error_of("world", "state", "cells", "demo/nope@1", world=counter)["code"] == (
        "world.workflow_unknown"
    )
    assert run("world", "state", "cells", "demo/counter@1", "--limit", "0", world=counter)[0] == 2


# --------------------------------------------------------------------------------------------
# journal tail, journal head


def test_journal_tail(counter: Path) -> None:
    code, out, err = run("world", "journal", "tail", world=counter)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [int(line.split()[0]) for line in lines] == list(range(1, 9))
    assert lines[0].split()[1] == "manifest"
    assert lines[1].split()[1:3] == ["domain_event", COUNTER]
    assert lines[2].split()[1:3] == ["step", "demo/counter@1[a]"]
    assert lines[5].endswith("(from step 5)")


def test_journal_tail_window_kind_and_from(counter: Path) -> None:
    def seqs(*args: str) -> list[int]:
        body = run_json("world", "journal", "tail", *args, world=counter)
        assert body["head"] == 8
        return [record["seq"] for record in body["records"]]

    assert seqs("--limit", "3") == [6, 7, 8]
    assert seqs("--from", "2", "--limit", "2") == [2, 3]
    assert seqs("--kind", "step") == [3, 5, 8]
    assert seqs("--kind", "step", "--limit", "1") == [8]
    assert seqs("--kind", "step", "--from", "4", "--limit", "1") == [5]
    assert seqs("--kind", "effect_intent") == []
    assert seqs("--from", "100") == []


def test_journal_tail_reads_back_across_windows(tmp_path: Path) -> None:
    path = tmp_path / "w"
    sends = 140  # 281 records: more than one backward read window
    with World.create(path, COUNTER_C, sync=False) as world:
        for index in range(sends):
            world.send(COUNTER, json.loads(increment(f"k{index}", 1)))
    args = ["world", "journal", "tail", "--kind", "step", "--limit", str(sends)]
    steps = run_json(*args, world=path)["records"]
    assert [r["seq"] for r in steps] == list(range(3, 2 * sends + 2, 2))
    everything = run_json("world", "journal", "tail", "--limit", "1000", world=path)["records"]
    assert [r["seq"] for r in everything] == list(range(1, 2 * sends + 2))


def test_journal_tail_json_is_the_exact_record(counter: Path) -> None:
    body = run_json("world", "journal", "tail", "--from", "3", "--limit", "1", world=counter)
    record = body["records"][0]["record"]
    assert record["kind"] == "step"
    assert record["key"] == {"$bytes": "d9d9f76161"}  # canonical key bytes of "a"
    assert set(record) == {
        "kind",
        "input",
        "delivery",
        "workflow",
        "key",
        "state",
        "events",
        "intents",
    }


def test_journal_usage(counter: Path) -> None:
    assert run("world", "journal", "tail", "--kind", "nope", world=counter)[0] == 2
    assert run("world", "journal", "tail", "--limit", "0", world=counter)[0] == 2
    assert run("world", "journal", "tail", "--from", "0", world=counter)[0] == 2


def test_journal_head(counter: Path) -> None:
    code, out, err = run("world", "journal", "head", world=counter)
    assert (code, err) == (0, "")
    assert out.split()[:3] == ["8", "step", "demo/counter@1[b]"]
    body = run_json("world", "journal", "head", world=counter)
    assert body["head"] == 8 and body["record"]["kind"] == "step"


# --------------------------------------------------------------------------------------------
# trace


def test_trace_an_event(counter: Path) -> None:
    sent = run_json("world", "send", COUNTER, "--value-json", increment("b", 7), world=counter)
    code, out, err = run("world", "trace", sent["event_hash"], world=counter)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"trace {sent['event_hash']}  (record at seq 9)"
    assert lines[1].startswith(">     9  domain_event")
    assert lines[2].startswith("     10    step")  # indented: caused by 9
    assert lines[3].startswith("     11      domain_event      demo/CounterThreshold@1")
    assert lines[4] == "11 records read"


def test_trace_json(counter: Path) -> None:
    sent = run_json("world", "send", COUNTER, "--value-json", increment("b", 7), world=counter)
    body = run_json("world", "trace", sent["event_hash"], world=counter)
    assert {k: v for k, v in body.items() if k != "entries"} == {
        "target": sent["event_hash"],
        "match": "record",
        "seq": 9,
        "scanned": 11,
        "limit": world_cmd.TRACE_RECORDS_MAX_DEFAULT,
        "truncated": False,
    }
    entries = [(e["seq"], e["role"], e["depth"], e["parent"]) for e in body["entries"]]
    assert entries == [(9, "target", 0, None), (10, "caused", 1, 9), (11, "caused", 2, 10)]
    assert body["entries"][1]["record"]["key"] == {"$bytes": "d9d9f76162"}


def test_trace_limit(counter: Path) -> None:
    sent = run_json("world", "send", COUNTER, "--value-json", increment("b", 7), world=counter)
    code, out, _ = run("world", "trace", sent["event_hash"], "--limit", "10", world=counter)
    assert code == 0
    assert "stopped at the limit of 10 before the head (11)" in out.splitlines()[-1]
    body = run_json("world", "trace", sent["event_hash"], "--limit", "10", world=counter)
    assert body["truncated"] and len(body["entries"]) == 2
    error = error_of("world", "trace", sent["event_hash"], "--limit", "5", world=counter)
    assert error["code"] == "world.not_found" and error["detail"]["truncated"] is True
    later = run_json(
        "world", "trace", sent["event_hash"], "--from", "9", "--limit", "3", world=counter
    )
    assert not later["truncated"]


def test_trace_errors(counter: Path) -> None:
    code, _, err = run("world", "trace", "blake3:" + "0" * 64, world=counter)
    assert code == 1 and err.startswith("error[world.not_found]: ")
    assert error_of("world", "trace", "nope", world=counter)["code"] == "hash.invalid"
    assert run("world", "trace", world=counter)[0] == 2
    assert run("world", "trace", "blake3:" + "0" * 64, "--limit", "0", world=counter)[0] == 2


# --------------------------------------------------------------------------------------------
# The order world: effects, open intents, a trace from an intent back to its order


def test_orders_open_intents(orders: Path) -> None:
    status = run_json("world", "status", world=orders)
    assert status["open_intents"] == 2
    assert run_json("air", "check", str(ORDERS))["manifest_hash"] == status["manifest"]
    assert {i["effect"] for i in status["intents"]} == {"demo/http.request@1", "sys/timer.set@1"}
    assert {i["key"] for i in status["intents"]} == {"o-1"}
    code, out, _ = run("world", "status", world=orders)
    assert code == 0 and "open intents  2" in out
    assert "demo/http.request@1  demo/Order@1[o-1]" in out
    state = run_json("world", "state", "get", "demo/Order@1", "o-1", world=orders)
    assert (state["status"], state["state"]["status"]) == ("waiting", "awaiting_payment")
    intents = run_json("world", "journal", "tail", "--kind", "effect_intent", world=orders)
    params = {r["record"]["effect"]: r["record"]["params"] for r in intents["records"]}
    assert params["demo/http.request@1"]["url"] == "https://payments.example/charges"
    assert set(params["sys/timer.set@1"]) == {"deliver_at_ns", "key"}


def test_trace_an_intent_back_to_its_order(orders: Path) -> None:
    status = run_json("world", "status", world=orders)
    http = next(i for i in status["intents"] if i["effect"] == "demo/http.request@1")
    body = run_json("world", "trace", http["intent"], world=orders)
    assert (body["match"], body["seq"]) == ("intent", http["seq"])
    roles = [(e["record"]["kind"], e["role"], e["depth"]) for e in body["entries"]]
    assert roles == [
        ("domain_event", "origin", 0),
        ("step", "origin", 1),
        ("effect_intent", "target", 2),
    ]
    assert body["entries"][0]["record"]["value"]["order_id"] == "o-1"
    code, out, _ = run("world", "trace", http["intent"], world=orders)
    lines = out.splitlines()
    assert code == 0 and lines[0].endswith(f"(intent at seq {http['seq']})")
    assert lines[3].startswith(">") and "demo/http.request@1" in lines[3]


def test_trace_an_order_event_shows_both_intents(orders: Path) -> None:
    placed = run_json("world", "journal", "tail", "--kind", "domain_event", world=orders)
    event_hash = hash_value(cbor.from_json(placed["records"][0]["record"]))
    body = run_json("world", "trace", event_hash, world=orders)
    kinds = [e["record"]["kind"] for e in body["entries"]]
    assert kinds == ["domain_event", "step", "effect_intent", "effect_intent"]
