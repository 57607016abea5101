"""Receipts and timers in the world: signed receipts resume exactly the origin cell; every
kind of bad receipt is refused with its code, journaled, and changes nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.kernel import cbor
from aos.kernel.audit import replay
from aos.kernel.hashing import hash_bytes
from aos.kernel.signing.signatures import signed_receipt
from aos.kernel.world import receipts, records
from aos.kernel.world.errors import ClockManualOnlyError, TimeBackwardsError
from aos.kernel.world.receipts import REJECTED_TEXT_CHARS_MAX, ReceiptError
from aos.kernel.world.world import World, WorldLimits
from tests.test_world import SCRIPTED, create, journal, ping

ADAPTER_SEED = bytes(range(32))  # demo/adapter@1 in the scripted fixture
STRANGER_SEED = bytes(range(1, 33))  # demo/stranger@1: valid, but allowed for no effect


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with create(tmp_path / "s", SCRIPTED, clock="manual") as opened:
        yield opened


def open_intents(world: World, n: int = 1, key: str = "x") -> list[str]:
    world.send("demo/Ping@1", ping(key, "effect", n))
    return [i["intent"] for i in world.reader.open_intents() if cbor.decode(i["key"]) == key]


def body(world: World, intent: str, **changes: Any) -> dict[str, Any]:
    value = {
        "world": world.world_id,
        "intent": intent,
        "status": "ok",
        "payload": {"ok": True},
        "adapter": "demo/adapter@1",
        "started_ns": 10,
        "finished_ns": 20,
    }
    value.update(changes)
    return value


def receipt(world: World, intent: str, seed: bytes = ADAPTER_SEED, **changes: Any) -> Any:
    return signed_receipt(seed, body(world, intent, **changes))


def last_value(world: World, key: str) -> Any:
    return cbor.decode(world.reader.state("demo/keyed@1", key)["last_value"])


def test_a_receipt_resumes_the_origin_cell_with_its_envelope(world: World) -> None:
    [intent] = open_intents(world)
    settlement = world.settle(receipt(world, intent))
    assert settlement.duplicate is False and settlement.delivered
    report = world.run_to_idle()
    assert report.steps == 1
    event = last_value(world, "x")
    assert event["$tag"] == "Receipt"
    envelope = event["$value"]
    assert envelope["intent_hash"] == intent
    assert envelope["status"] == {"$tag": "ok"}
    assert cbor.decode(envelope["payload"]) == {"ok": True}
    assert envelope["issuer_ref"] == "ref-0"
    assert envelope["origin_key"] == cbor.encode("x")
    assert world.reader.open_intents() == []
    [cell] = world.reader.cells("demo/keyed@1")
    assert cell.status == "completed"
    [record] = [r for r in journal(world) if r["kind"] == records.EFFECT_RECEIPT]
    assert record["signature"] == receipt(world, intent)["signature"]


def test_receipts_never_cross_between_cells(world: World) -> None:
    intents = {key: open_intents(world, 2, key) for key in ("a", "b", "c")}
    for key in ("c", "a", "b"):
        for intent in intents[key]:
            world.settle(receipt(world, intent))
    world.run_to_idle()
    for key, expected in intents.items():
        state = world.reader.state("demo/keyed@1", key)
        assert state["count"] == 3  # the ping and its two receipts
        assert last_value(world, key)["$value"]["intent_hash"] == expected[-1]
        assert last_value(world, key)["$value"]["origin_key"] == cbor.encode(key)


def test_a_duplicate_receipt_is_a_no_op(world: World) -> None:
    [intent] = open_intents(world)
    world.settle(receipt(world, intent))
    world.run_to_idle()
    height = world.height
    again = world.settle(receipt(world, intent))
    assert again.duplicate and again.seq is None
    assert world.height == height


def test_a_keyed_effect_emitted_after_it_settled_is_the_same_work_opened_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w"
    with create(path, SCRIPTED, clock="manual") as world:
        world.send("demo/Ping@1", ping("x", "effect_idem", 1))
        [intent] = [i["intent"] for i in world.reader.open_intents()]
        first = receipt(world, intent)
        world.settle(first)
        world.run_to_idle()
        assert world.settle(first).duplicate  # while settled: a duplicate, nothing written
        world.send("demo/Ping@1", ping("x", "effect_idem", 1))
        # The workflow's key says this is the same work: the same intent, opened again.
        assert [i["intent"] for i in world.reader.open_intents()] == [intent]
        # So any valid receipt of that work settles it, a late copy of the first one too.
        late = world.settle(first)
        assert not late.duplicate and late.delivered
        world.run_to_idle()
        assert world.reader.open_intents() == []
        kinds = [r["kind"] for r in journal(world) if r["kind"].startswith("effect_")]
        assert kinds == ["effect_intent", "effect_receipt"] * 2
    assert replay.verify_replay(path).ok


def _refused(world: World, value: Any, code: str) -> None:
    before_height = world.height
    before_state = world.reader.state("demo/keyed@1", "x")
    before_open = world.reader.open_intents()
    with pytest.raises(ReceiptError) as caught:
        world.settle(value)
    assert caught.value.code == code
    [record] = journal(world, before_height + 1)
    assert record["kind"] == records.RECEIPT_REJECTED and record["code"] == code
    assert world.run_to_idle().steps == 0
    assert world.reader.state("demo/keyed@1", "x") == before_state
    assert world.reader.open_intents() == before_open


def test_a_forged_signature_is_refused(world: World) -> None:
    [intent] = open_intents(world)
    forged = receipt(world, intent)
    forged["body"]["payload"] = {"ok": False}  # signed body altered after signing
    _refused(world, forged, "receipt.signature_invalid")
    _refused(world, receipt(world, intent, seed=STRANGER_SEED), "receipt.signature_invalid")


def test_a_malleated_signature_is_refused(world: World) -> None:
    """The same signature with L added to its S (little-endian, the second half) is a valid
    point equation but not the signer's encoding: refused, and the receipt still settles."""
    [intent] = open_intents(world)
    signed = receipt(world, intent)
    group_order = 2**252 + 27742317777372353535851937790883648493
    r, s = signed["signature"][:32], int.from_bytes(signed["signature"][32:], "little")
    malleated = {**signed, "signature": r + (s + group_order).to_bytes(32, "little")}
    _refused(world, malleated, "receipt.signature_invalid")
    assert world.settle(signed).seq is not None


def test_a_receipt_outside_the_data_model_is_malformed(world: World) -> None:
    [intent] = open_intents(world)
    signed = receipt(world, intent)
    _refused(world, {**signed, "body": {**signed["body"], "payload": {1, 2}}}, "receipt.malformed")


def test_an_unknown_adapter_is_refused(world: World) -> None:
    [intent] = open_intents(world)
    _refused(world, receipt(world, intent, adapter="demo/nobody@1"), "receipt.adapter_unknown")
    _refused(world, receipt(world, intent, adapter="sys/timer@1"), "receipt.adapter_unknown")


def test_an_adapter_not_allowed_for_the_effect_is_refused(world: World) -> None:
    [intent] = open_intents(world)
    value = receipt(world, intent, seed=STRANGER_SEED, adapter="demo/stranger@1")
    _refused(world, value, "receipt.adapter_not_allowed")


def test_a_receipt_for_an_unknown_intent_is_refused(world: World) -> None:
    open_intents(world)
    _refused(world, receipt(world, "blake3:" + "0" * 64), "receipt.unknown_intent")


def test_a_receipt_for_another_world_is_refused(world: World) -> None:
    [intent] = open_intents(world)
    other = signed_receipt(ADAPTER_SEED, {**body(world, intent), "world": "blake3:" + "1" * 64})
    _refused(world, other, "receipt.wrong_world")


@pytest.mark.parametrize(
    "mangle",
    [
        lambda r: {"body": r["body"]},
        lambda r: {**r, "extra": 1},
        lambda r: {**r, "signature": "not bytes"},
        lambda r: {**r, "body": {**r["body"], "status": "maybe"}},
        lambda r: {**r, "body": {**r["body"], "intent": "sha256:abc"}},
        lambda r: {**r, "body": {**r["body"], "started_ns": -1}},
        lambda r: {**r, "body": {**r["body"], "finished_ns": 1}},
        lambda r: {**r, "body": {k: v for k, v in r["body"].items() if k != "adapter"}},
        lambda r: [r],
        lambda r: None,
    ],
)
def test_malformed_receipts_are_refused(world: World, mangle: Any) -> None:
    [intent] = open_intents(world)
    _refused(world, mangle(receipt(world, intent)), "receipt.malformed")


def test_receipt_size_limit(tmp_path: Path) -> None:
    with create(tmp_path / "s", SCRIPTED, limits=WorldLimits(receipt_bytes_max=400)) as world:
        [intent] = open_intents(world)
        big = receipt(world, intent, payload={"ok": True, "pad": "x" * 400})
        _refused(world, big, "receipt.too_large")
        kept = journal(world)[-1]["receipt"]
        # A bounded digest, never the receipt itself (kernel/world/receipts.py `rejection`).
        assert kept == {
            "digest": str(hash_bytes(cbor.encode(big))),
            "bytes": len(cbor.encode(big)),
            "intent": intent,
            "adapter": big["body"]["adapter"],
            "status": "ok",
        }


@pytest.mark.parametrize("signature_bytes", [0, 23, 24, 64, 255, 256, 70_000])
@pytest.mark.parametrize("pad_chars", [0, 23, 300, 70_000])
def test_the_size_limit_is_the_whole_receipt_encoding_at_its_edge(
    signature_bytes: int, pad_chars: int
) -> None:
    """`parse` sizes a receipt from its body's encoding (made once, for the signature check
    too): a receipt of exactly `receipt_bytes_max` bytes passes, one byte less refuses it."""
    value = {
        "body": {
            "world": "w",
            "intent": str(hash_bytes(b"i")),
            "status": "ok",
            "payload": {"pad": "x" * pad_chars},
            "adapter": "demo/adapter@1",
            "started_ns": 10,
            "finished_ns": 20,
        },
        "signature": bytes(signature_bytes),
    }
    size = len(cbor.encode(value))
    parsed = receipts.parse(value, receipt_bytes_max=size)
    assert parsed.body_bytes == cbor.encode(value["body"])
    with pytest.raises(receipts.ReceiptTooLargeError):
        receipts.parse(value, receipt_bytes_max=size - 1)


def test_a_refused_receipt_is_journaled_as_a_bounded_digest(tmp_path: Path) -> None:
    """Whatever a refused receipt carries, its record keeps a few hundred bytes of it, and
    the journal still replays."""
    path = tmp_path / "s"
    with create(path, SCRIPTED, clock="manual") as world:
        [intent] = open_intents(world)
        huge_name = "demo/" + "n" * 100_000 + "@1"
        value = receipt(world, intent, adapter=huge_name, payload={"pad": "x" * 100_000})
        _refused(world, value, "receipt.adapter_unknown")
        record = journal(world)[-1]
        assert len(cbor.encode(record)) < 1500
        assert record["receipt"]["adapter"].endswith("...")
        assert len(record["receipt"]["adapter"]) == REJECTED_TEXT_CHARS_MAX
        assert len(record["message"]) <= REJECTED_TEXT_CHARS_MAX
        assert "payload" not in record["receipt"] and "signature" not in record["receipt"]
    assert replay.verify_replay(path).ok


def test_a_payload_that_does_not_fit_is_delivered_as_rejected(world: World) -> None:
    [intent] = open_intents(world)
    settlement = world.settle(receipt(world, intent, payload={"ok": "yes"}))
    assert settlement.delivered
    world.run_to_idle()
    event = last_value(world, "x")
    assert event["$tag"] == "Rejected"
    assert event["$value"]["error_code"].startswith("air.value")
    assert world.reader.open_intents() == []
    [record] = [r for r in journal(world) if r["kind"] == records.EFFECT_RECEIPT]
    assert record["payload_error"]["code"].startswith("air.value")


def test_error_and_timeout_statuses_carry_any_payload(world: World) -> None:
    first, second = open_intents(world, 2)
    world.settle(receipt(world, first, status="error", payload={"message": "boom"}))
    world.settle(receipt(world, second, status="timeout", payload=None))
    world.run_to_idle()
    assert last_value(world, "x")["$value"]["status"] == {"$tag": "timeout"}


def test_kernel_timers_settle_when_logical_time_reaches_them(world: World) -> None:
    world.send("demo/Ping@1", ping("t", "timer", 1_000))
    [timer] = world.reader.open_intents()
    due = world.reader.next_timer_ns()
    assert due is not None and due == world.logical_ns + 1_000
    report = world.advance_time(999)
    assert report.steps == 0 and world.reader.open_intents() == [timer]
    report = world.jump_next_timer()
    assert report is not None and report.steps == 1
    assert world.logical_ns == due
    envelope = last_value(world, "t")["$value"]
    assert envelope["adapter"] == "sys/timer@1"
    assert cbor.decode(envelope["payload"]) == {"delivered_at_ns": due, "key": None}
    assert world.jump_next_timer() is None
    [record] = [r for r in journal(world) if r["kind"] == records.EFFECT_RECEIPT]
    assert record["signature"] is None and "cause" in record


def test_manual_time_rules(world: World, tmp_path: Path) -> None:
    with pytest.raises(TimeBackwardsError):
        world.advance_time(-1)
    with create(tmp_path / "wall", SCRIPTED) as wall:
        with pytest.raises(ClockManualOnlyError):
            wall.advance_time(1)
        assert wall.tick() is None


def test_open_intents_and_settlements_survive_reopen(tmp_path: Path) -> None:
    from tests.test_world import reopen

    path = tmp_path / "s"
    with create(path, SCRIPTED) as world:
        first, second = open_intents(world, 2)
        world.settle(receipt(world, first))
        world.run_to_idle()
        sealed = receipt(world, first)
        pending = receipt(world, second)
    with reopen(path) as again:
        assert [i["intent"] for i in again.reader.open_intents()] == [second]
        assert again.settle(sealed).duplicate
        assert again.settle(pending).seq is not None


def test_large_payloads_go_to_the_cas_by_hash_and_gc_keeps_them(tmp_path: Path) -> None:
    from aos.kernel.audit import gc
    from aos.kernel.world.errors import BlobTooLargeError
    from tests.test_world import reopen

    path = tmp_path / "s"
    with create(path, SCRIPTED) as world:
        [intent] = open_intents(world)
        kept = world.put_blob(b"x" * 100_000)
        orphan = world.put_blob(b"nobody names me")
        assert world.reader.open_intent(intent)["params"] == {"n": 0}  # type: ignore[index]
        assert world.reader.open_intent("blake3:" + "0" * 64) is None
        # An error receipt may carry any payload; this one names the blob.
        world.settle(receipt(world, intent, status="error", payload={"body_ref": str(kept)}))
        world.run_to_idle()
        with pytest.raises(BlobTooLargeError):
            world.put_blob(b"y" * (world.store.limits.blob_bytes_max + 1))
    gc.collect(path, apply=True)
    with reopen(path) as again:
        assert again.store.cas.get(kept) == b"x" * 100_000
        assert not again.store.cas.has(orphan)


def test_a_step_budget_error_from_send_names_the_admitted_event(tmp_path: Path) -> None:
    from aos.kernel.world.errors import StepBudgetExceededError

    with create(tmp_path / "s", SCRIPTED, limits=WorldLimits(steps_per_run_max=5)) as world:
        with pytest.raises(StepBudgetExceededError) as caught:
            world.send("demo/Ping@1", ping("x", "storm"))
        assert caught.value.detail["seq"] == 2
        assert caught.value.detail["event_hash"].startswith("blake3:")
