"""A step writes blobs to the world's CAS (spec/08 §4.4): the kernel stores what the output's
`writes` hold when the step applies, the step record names their hashes, and a guest that
cannot hash learns each hash from a hash request (one more run of the same step). Tested on
the scripted component, and on the envelope without a guest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.kernel import cbor
from aos.kernel.audit import gc, replay
from aos.kernel.hashing import hash_bytes
from aos.kernel.wasm import StepLimits, StepOutput, decode_output, encode_output
from aos.kernel.wasm.faults import StepOutputMalformedError, StepTooManyWritesError
from aos.kernel.wasm.limits import WRITES_PER_STEP_MAX_DEFAULT
from aos.kernel.world import records
from aos.kernel.world.world import World
from tests.test_world import SCRIPTED, create, journal, ping, reopen

KEYED = "demo/keyed@1"
NULL = cbor.encode(None)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with create(tmp_path / "w", SCRIPTED, clock="manual") as opened:
        yield opened


def steps_of(world: World, workflow: str = KEYED) -> list[dict[str, Any]]:
    return [r for r in journal(world) if r["kind"] == records.STEP and r["workflow"] == workflow]


def kept(world: World, key: str = "x") -> Any:
    return cbor.decode(world.reader.state(KEYED, key)["last_value"])


def test_a_step_writes_a_blob_and_learns_its_hash(world: World) -> None:
    blob = b"a large result, say" * 50
    world.send("demo/Ping@1", ping("x", "write " + blob.decode()))
    expected = str(hash_bytes(blob))
    assert kept(world) == expected  # the hash the step kept is the blob's own
    assert world.read_blob(expected) == blob
    assert steps_of(world)[-1]["writes"] == [expected]


def test_a_step_without_writes_keeps_the_old_record_form(world: World) -> None:
    world.send("demo/Ping@1", ping("x", "none"))
    assert "writes" not in steps_of(world)[-1]


def test_a_step_reads_back_what_it_writes(world: World) -> None:
    world.send("demo/Ping@1", ping("x", "write_read same step"))
    assert kept(world) == b"same step"


def test_written_blobs_are_durable_kept_by_gc_and_replayed(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with create(path, SCRIPTED, clock="manual") as world:
        for key, text in (("a", "first"), ("b", "second"), ("a", "first")):
            world.send("demo/Ping@1", ping(key, f"write {text}"))
    written = str(hash_bytes(b"second"))
    gc.collect(path, apply=True)
    with reopen(path) as world:
        assert world.read_blob(written) == b"second"
    for workers in (1, 2):  # the reference replay, and steps checked in worker processes
        report = replay.verify_replay(path, workers_max=workers, parallel_records_min=0)
        assert report.ok, report.divergence


def test_writes_at_the_limit_apply_and_one_more_faults(world: World) -> None:
    most = WRITES_PER_STEP_MAX_DEFAULT
    _, report = world.send("demo/Ping@1", ping("x", "write_many", most))
    assert report.faults == 0
    assert len(steps_of(world)[-1]["writes"]) == most
    _, report = world.send("demo/Ping@1", ping("y", "write_many", most + 1))
    assert report.fault_codes == ["step.too_many_writes"] * 2  # the ping reaches two cells
    fault = journal(world)[-1]
    assert fault["kind"] == records.STEP_FAULT and fault["code"] == "step.too_many_writes"


# -- the envelope ------------------------------------------------------------------------------


def _output(**fields: Any) -> bytes:
    return encode_output(StepOutput(NULL, **fields))


def test_the_envelope_carries_writes_and_hash_requests() -> None:
    output = decode_output(_output(writes=(b"one", b"two")), StepLimits())
    assert output.writes == (b"one", b"two") and not output.is_request
    request = decode_output(_output(hash_request=(b"one",)), StepLimits())
    assert request.hash_request == (b"one",) and request.is_request
    assert "writes" not in cbor.decode(_output())  # none written, none in the envelope


def test_writes_are_bounded_at_the_edge() -> None:
    limits = StepLimits(writes_per_step_max=2)
    assert len(decode_output(_output(writes=(b"a", b"b")), limits).writes) == 2
    with pytest.raises(StepTooManyWritesError):
        decode_output(_output(writes=(b"a", b"b", b"c")), limits)
    with pytest.raises(StepTooManyWritesError):
        decode_output(_output(hash_request=(b"a", b"b", b"c")), limits)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("writes", ["text, not bytes"]),
        ("writes", [b"same", b"same"]),
        ("writes", b"not a list"),
        ("hash", [7]),
        ("hash", [b"same", b"same"]),
    ],
)
def test_malformed_writes_fault_the_step(field: str, value: Any) -> None:
    envelope = {"state": NULL, "domain_events": [], "effects": [], field: value}
    with pytest.raises(StepOutputMalformedError) as fault:
        decode_output(cbor.encode(envelope), StepLimits())
    assert str(fault.value.path).startswith(f"$.{field}")
