"""Operating a world: a guest exception in the fault record, cell retry and reset, intent
cancel (journaled inputs a replay performs again), and receipts for deleted cells."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.kernel import cbor
from aos.kernel.air.model import canonical_form
from aos.kernel.audit import replay
from aos.kernel.errors import AosError
from aos.kernel.governance import proposals
from aos.kernel.world import records
from aos.kernel.world.errors import (
    CellBusyError,
    CellMissingError,
    CellNotFailedError,
    IntentNotOpenError,
    OperationInvalidError,
    WorkflowUnknownError,
)
from aos.kernel.world.operations import (
    CELL_RESET,
    CELL_RETRY,
    INTENT_CANCEL,
    OPERATION_REASON_CHARS_MAX,
    Operation,
)
from aos.kernel.world.receipts import ReceiptCellDeletedError, ReceiptIntentCancelledError
from aos.kernel.world.world import World
from tests.test_governance import KEYED, PING, run_shadow
from tests.test_receipts import receipt
from tests.test_world import SCRIPTED, create, journal, ping, reopen


@pytest.fixture
def path(tmp_path: Path) -> Path:
    world_path = tmp_path / "s"
    create(world_path, SCRIPTED, clock="manual").close()
    return world_path


@pytest.fixture
def world(path: Path) -> Iterator[World]:
    with reopen(path) as opened:
        yield opened


def key(world: World, name: str) -> bytes | None:
    return world.reader.key_bytes(KEYED, name)


def retry(world: World, name: str) -> int:
    seq = world.operate(Operation(CELL_RETRY, workflow=KEYED, key=key(world, name)))
    world.run_to_idle()
    return seq


def last_of(world: World, kind: str) -> tuple[int, dict[str, Any]]:
    found = [(s, r) for s, r in world.store.journal.read(1) if r["kind"] == kind]  # type: ignore[index]
    return found[-1]  # type: ignore[return-value]


def unchanged(world: World) -> tuple[int, int]:
    return world.height, len(journal(world))


def verified(path: Path) -> None:
    report = replay.verify_replay(path)
    assert report.ok, report.divergence and report.divergence.to_value()


# --------------------------------------------------------------------------------------------
# Guest exceptions


def test_a_guest_exception_is_journaled_with_its_type_and_message(world: World) -> None:
    _, report = world.send(PING, ping("x", "trap"))
    assert report.fault_codes == ["step.guest_exception"] * 2  # the keyed and the global cell
    _, fault = last_of(world, records.STEP_FAULT)
    assert fault["guest"]["type"] == "RuntimeError"
    assert fault["guest"]["message"] == "asked to trap"
    assert fault["guest"]["where"].startswith("_act:")
    assert fault["message"].startswith("RuntimeError: asked to trap")


# --------------------------------------------------------------------------------------------
# Retry and reset


def allow_other_effect(world: World) -> dict[str, Any]:
    """The keyed workflow also declares demo/other@1: the fix for `effect.undeclared`."""
    keyed = world.runtime.loaded.definitions[KEYED]
    changed = keyed.model_copy(
        update={"effects_emitted": ["demo/noop@1", "demo/other@1", "sys/timer.set@1"]}
    )
    return {
        "$kind": "patch",
        "base_manifest": str(world.manifest_hash),
        "ops": [{"replace_def": {"def": canonical_form(changed)}}],
    }


def test_retry_after_a_fix_steps_the_failed_delivery_again(path: Path) -> None:
    with reopen(path) as world:
        admitted, report = world.send(PING, ping("x", "undeclared"))
        assert report.fault_codes == ["effect.undeclared"] * 2  # keyed and global
        assert world.reader.cells(KEYED)[0].status == "failed"
        proposal = proposals.propose(world, allow_other_effect(world))
    run_shadow(path, proposal)
    with reopen(path) as world:
        proposals.decide(world, proposal, approve=True, approver="ann", reason="fix")
        proposals.apply(world, proposal)
        seq = retry(world, "x")
        step_seq, step = last_of(world, records.STEP)
        assert step_seq > seq and step["input"] == admitted.seq
        [intent] = world.reader.open_intents()
        assert intent["effect"] == "demo/other@1"
        assert world.reader.cells(KEYED)[0].status == "waiting"
        operation = journal(world)[seq - 1]
        assert operation["kind"] == records.OPERATION and operation["action"] == CELL_RETRY
    verified(path)


def test_retry_without_a_fix_faults_again_and_keeps_the_state(world: World, path: Path) -> None:
    world.send(PING, ping("x"))
    before = world.reader.state(KEYED, "x")
    admitted, _ = world.send(PING, ping("x", "trap"))
    retry(world, "x")
    fault_seq, fault = last_of(world, records.STEP_FAULT)
    assert fault["input"] == admitted.seq and fault_seq == world.height
    assert world.reader.cells(KEYED)[0].status == "failed"
    assert world.reader.state(KEYED, "x") == before
    world.close()
    verified(path)


def test_a_retried_cell_takes_new_events(world: World, path: Path) -> None:
    world.send(PING, ping("x", "trap"))
    _, dropped = world.send(PING, ping("x"))
    assert dropped.dropped == 2  # the keyed and the global cell failed
    retry(world, "x")  # faults again on the parked trap ...
    world.operate(Operation(CELL_RESET, workflow=KEYED, key=key(world, "x")))
    world.run_to_idle()
    _, report = world.send(PING, ping("x"))  # ... a reset cell starts afresh
    assert report.steps == 1 and world.reader.state(KEYED, "x")["count"] == 1
    world.close()
    verified(path)


def test_retry_and_reset_refusals_move_nothing(world: World) -> None:
    world.send(PING, ping("ok"))
    world.send(PING, ping("busy", "effect", 1))
    before = unchanged(world)
    with pytest.raises(CellNotFailedError):
        world.operate(Operation(CELL_RETRY, workflow=KEYED, key=key(world, "ok")))
    with pytest.raises(CellMissingError):
        world.operate(Operation(CELL_RETRY, workflow=KEYED, key=key(world, "nobody")))
    with pytest.raises(CellBusyError):
        world.operate(Operation(CELL_RESET, workflow=KEYED, key=key(world, "busy")))
    with pytest.raises(WorkflowUnknownError):
        world.operate(Operation(CELL_RESET, workflow="demo/nope@1", key=None))
    assert unchanged(world) == before


def test_a_snapshot_keeps_the_failed_delivery_for_a_later_retry(path: Path) -> None:
    with reopen(path) as world:
        world.send(PING, ping("x", "trap"))
        snapshot_seq, _ = world.snapshot()
    with reopen(path) as world:  # the parked delivery came back from the head checkpoint
        retry(world, "x")
        assert last_of(world, records.STEP_FAULT)[0] == world.height
    assert replay.verify_replay(path, from_snapshot=str(snapshot_seq)).ok
    verified(path)


# --------------------------------------------------------------------------------------------
# Cancel


def test_cancel_closes_the_intent_and_tells_its_cell(world: World, path: Path) -> None:
    world.send(PING, ping("z", "effect", 1))
    [intent] = world.reader.open_intents()
    seq = world.operate(Operation(INTENT_CANCEL, intent=intent["intent"], reason="not needed"))
    report = world.run_to_idle()
    assert report.steps == 1 and world.reader.open_intents() == []
    state = world.reader.state(KEYED, "z")
    assert state["last_schema"] == "demo/Inbox@1"
    envelope = cbor.decode(state["last_value"])["$value"]
    assert envelope["status"] == {"$tag": "cancelled"}
    assert envelope["adapter"] == "sys/operator@1" and cbor.decode(envelope["payload"]) is None
    assert journal(world)[seq - 1]["reason"] == "not needed"
    before = unchanged(world)
    with pytest.raises(IntentNotOpenError, match=f"cancelled at seq {seq}"):
        world.operate(Operation(INTENT_CANCEL, intent=intent["intent"]))
    assert unchanged(world) == before
    with pytest.raises(ReceiptIntentCancelledError):
        world.settle(receipt(world, intent["intent"]))
    assert last_of(world, records.RECEIPT_REJECTED)[1]["code"] == "receipt.intent_cancelled"
    world.close()
    verified(path)


def test_cancelling_a_timer_unblocks_time(world: World, path: Path) -> None:
    world.send(PING, ping("t", "timer", 10**12))
    [timer] = world.reader.open_intents()
    assert world.reader.next_timer_ns() is not None
    world.operate(Operation(INTENT_CANCEL, intent=timer["intent"]))
    world.run_to_idle()
    assert world.reader.next_timer_ns() is None and world.jump_next_timer() is None
    world.close()
    verified(path)


def test_cancel_of_a_settled_or_unknown_intent_is_refused(world: World) -> None:
    world.send(PING, ping("s", "effect", 1))
    [intent] = world.reader.open_intents()
    world.settle(receipt(world, intent["intent"]))
    world.run_to_idle()
    before = unchanged(world)
    with pytest.raises(IntentNotOpenError, match="settled at seq"):
        world.operate(Operation(INTENT_CANCEL, intent=intent["intent"]))
    with pytest.raises(IntentNotOpenError, match="not open"):
        world.operate(Operation(INTENT_CANCEL, intent="blake3:" + "0" * 64))
    assert unchanged(world) == before


# --------------------------------------------------------------------------------------------
# Receipts for deleted cells


def test_a_receipt_for_a_deleted_cell_is_rejected_not_a_new_cell(world: World, path: Path) -> None:
    world.send(PING, ping("d", "effect", 1))
    world.send(PING, ping("d", "delete"))
    assert [c.key for c in world.reader.cells(KEYED)] == []
    [intent] = world.reader.open_intents()
    height = world.height
    with pytest.raises(ReceiptCellDeletedError):
        world.settle(receipt(world, intent["intent"]))
    assert world.height == height + 1
    assert last_of(world, records.RECEIPT_REJECTED)[1]["code"] == "receipt.cell_deleted"
    assert [c.key for c in world.reader.cells(KEYED)] == [] and len(
        world.reader.open_intents()
    ) == 1
    world.operate(Operation(INTENT_CANCEL, intent=intent["intent"]))  # closes it, tells no one
    world.run_to_idle()
    assert world.reader.open_intents() == [] and [c.key for c in world.reader.cells(KEYED)] == []
    assert last_of(world, records.DELIVERY_DROPPED)[1]["reason"] == "cell_deleted"
    world.close()
    verified(path)


def test_a_timer_for_a_deleted_cell_settles_and_is_dropped(world: World, path: Path) -> None:
    world.send(PING, ping("t", "timer", 5))
    world.send(PING, ping("t", "delete"))
    world.advance_time(10)
    assert world.reader.open_intents() == [] and [c.key for c in world.reader.cells(KEYED)] == []
    assert last_of(world, records.DELIVERY_DROPPED)[1]["reason"] == "cell_deleted"
    world.close()
    verified(path)


# --------------------------------------------------------------------------------------------
# Bad operations


@pytest.mark.parametrize(
    "value",
    [
        "cell_retry",
        {"action": "cell_rewind", "workflow": KEYED},
        {"action": "intent_cancel", "intent": "not a hash"},
        {"action": "intent_cancel"},
        {"action": "cell_retry"},
        {"action": "cell_retry", "workflow": KEYED, "key": "x"},
        {"action": "cell_retry", "workflow": KEYED, "key": b"x" * 1025},
        {
            "action": "cell_reset",
            "workflow": KEYED,
            "reason": "r" * (OPERATION_REASON_CHARS_MAX + 1),
        },
        {"action": "cell_reset", "workflow": KEYED, "reason": 7},
    ],
)
def test_bad_operations_are_typed_errors(value: Any) -> None:
    with pytest.raises(OperationInvalidError) as caught:
        Operation.parse(value)
    assert isinstance(caught.value, AosError) and caught.value.code == "world.operation_invalid"


def test_a_reason_at_the_limit_is_kept() -> None:
    reason = "r" * OPERATION_REASON_CHARS_MAX
    parsed = Operation.parse({"action": "cell_reset", "workflow": KEYED, "reason": reason})
    assert parsed.target()["reason"] == reason
