"""Fault notices (spec/03 §7.1): a cell whose workflow takes `sys/StepFault@1` is told of its
own step fault, on its last good state, as its next delivery; handled, the cell is no longer
failed. A workflow that does not take it keeps today's rule (failed, deliveries dropped).
Tested on a copy of the scripted world whose keyed workflow's event variant gains the arm."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.kernel import cbor
from aos.kernel.audit import replay
from aos.kernel.world import records
from aos.kernel.world.operations import CELL_RETRY, Operation
from aos.kernel.world.world import World
from tests.test_world import SCRIPTED, create, journal, ping, reopen

KEYED = "demo/keyed@1"
GLOBAL = "demo/global@1"
FAULT_ARM = "    Fault: {ref: sys/StepFault@1}\n"


def noticed_manifest(tmp_path: Path) -> Path:
    """The scripted world with `demo/Inbox@1` (the keyed workflow's event) taking notices."""
    folder = tmp_path / "scripted"
    shutil.copytree(SCRIPTED, folder)
    schemas = folder / "defs" / "schemas.yaml"
    text = schemas.read_text()
    anchor = "    Rejected: {ref: sys/EffectReceiptRejected@1}\n"
    assert anchor in text
    schemas.write_text(text.replace(anchor, anchor + FAULT_ARM))
    return folder


@pytest.fixture
def path(tmp_path: Path) -> Path:
    world_path = tmp_path / "w"
    create(world_path, noticed_manifest(tmp_path), clock="manual").close()
    return world_path


@pytest.fixture
def world(path: Path) -> Iterator[World]:
    with reopen(path) as opened:
        yield opened


def status(world: World, workflow: str, key: str | None) -> str:
    key_bytes = world.reader.key_bytes(workflow, key) if key is not None else None
    return world.reader.status_of(workflow, key_bytes)


def kept(world: World, key: str) -> Any:
    return cbor.decode(world.reader.state(KEYED, key)["last_value"])


def records_of(world: World, workflow: str) -> list[tuple[int, dict[str, Any]]]:
    return [
        (seq, r)
        for seq, r in enumerate(journal(world), 1)
        if r.get("workflow") == workflow and r["kind"] in (records.STEP, records.STEP_FAULT)
    ]


def test_a_cell_that_takes_notices_handles_its_own_fault(world: World) -> None:
    world.send("demo/Ping@1", ping("x", "none"))
    _, report = world.send("demo/Ping@1", ping("x", "trap"))
    assert report.fault_codes == ["step.guest_exception"] * 2  # keyed and global
    (fault_seq, fault), (_, notice_step) = records_of(world, KEYED)[-2:]
    assert fault["kind"] == records.STEP_FAULT
    assert notice_step["kind"] == records.STEP and notice_step["input"] == fault_seq
    assert status(world, KEYED, "x") != "failed"  # handled
    assert status(world, GLOBAL, None) == "failed"  # no arm: the old rule
    notice = kept(world, "x")
    assert notice["$tag"] == "Fault"
    told = notice["$value"]
    assert (told["code"], told["seq"], told["input"]) == (
        "step.guest_exception",
        fault_seq,
        fault["input"],
    )
    assert "asked to trap" in told["message"] and told["module"] == fault["module"]
    assert cbor.decode(told["event"]) == {"$tag": "Ping", "$value": ping("x", "trap")}
    assert world.reader.state(KEYED, "x")["count"] == 2  # the last good state, then the notice
    world.send("demo/Ping@1", ping("x", "none"))  # a handled cell takes deliveries again
    assert world.reader.state(KEYED, "x")["count"] == 3


def test_a_cell_that_faults_on_its_first_step_is_told_with_no_state(world: World) -> None:
    world.send("demo/Ping@1", ping("fresh", "trap"))
    assert world.reader.state(KEYED, "fresh")["count"] == 1
    assert kept(world, "fresh")["$value"]["code"] == "step.guest_exception"


def test_a_notice_that_faults_too_leaves_the_cell_failed_and_is_not_repeated(
    world: World,
) -> None:
    world.send("demo/Ping@1", ping("x", "none"))
    _, report = world.send("demo/Ping@1", ping("x", "trap_again"))
    assert report.fault_codes == ["step.guest_exception"] * 3  # keyed, its notice, global
    faults = [r for _, r in records_of(world, KEYED) if r["kind"] == records.STEP_FAULT]
    assert len(faults) == 2  # the step, its notice, and nothing after
    assert status(world, KEYED, "x") == "failed"
    assert world.reader.state(KEYED, "x")["count"] == 1  # the last good state
    # A retry steps the delivery that failed the cell, not its notice.
    world.operate(Operation(CELL_RETRY, workflow=KEYED, key=world.reader.key_bytes(KEYED, "x")))
    world.run_to_idle()
    retried = [r for _, r in records_of(world, KEYED)][-2]
    assert retried["kind"] == records.STEP_FAULT and retried["input"] == faults[0]["input"]


def test_worlds_with_notices_reopen_and_replay(path: Path) -> None:
    with reopen(path) as world:
        for key, action in (("a", "none"), ("a", "trap"), ("b", "trap_again"), ("a", "none")):
            world.send("demo/Ping@1", ping(key, action))
        world.snapshot()
        world.send("demo/Ping@1", ping("c", "trap"))
    with reopen(path) as world:
        assert status(world, KEYED, "a") != "failed" and status(world, KEYED, "b") == "failed"
        assert world.reader.state(KEYED, "c")["count"] == 1
    for workers in (1, 2):
        report = replay.verify_replay(path, workers_max=workers, parallel_records_min=0)
        assert report.ok, report.divergence
