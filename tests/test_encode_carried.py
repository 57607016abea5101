"""Values encoded once and carried (issue 15): an event's bytes go from its admission or the
guest's output to its record, its deliveries and the step input; records, contexts, input
envelopes and index nodes are built in canonical order and written without a walk. Each
fast path gives exactly the bytes of the path it replaces, and the strict decoder's one-walk
canonical check refuses what the step-by-step one refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aos.kernel import cbor
from aos.kernel.audit import replay
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.wasm.envelope import decode_input, encode_input
from aos.kernel.world import records
from aos.kernel.world.cellindex import CellEntry, CellIndex, key_hash
from aos.kernel.world.errors import StepBudgetExceededError
from aos.kernel.world.stamps import Stamp
from aos.kernel.world.world import WorldLimits
from tests.strategies import values
from tests.test_router_effects import router
from tests.test_world import EVENT, create, inc, journal, reopen

texts = st.text(max_size=20)
stamps = st.builds(
    Stamp,
    wall_ns=st.integers(0, 2**63),
    logical_ns=st.integers(0, 2**63),
    entropy=st.binary(min_size=64, max_size=64),
    height=st.integers(0, 2**40),
    manifest=texts,
)


# --------------------------------------------------------------------------------------------
# Records around carried bytes


@given(texts, values, stamps, st.one_of(st.none(), texts))
def test_an_ingress_record_around_its_carried_value_is_the_record_encoded_whole(
    schema: str, value: Any, stamp: Stamp, key: str | None
) -> None:
    carried = records.IngressEvent(schema, value, stamp.to_value(), key, cbor.encode(value))
    whole = records.IngressEvent(schema, value, stamp.to_value(), key)
    assert carried.encode() == whole.encode() == cbor.encode(whole.to_value())


@given(texts, values, stamps)
def test_a_stamp_not_as_the_kernel_builds_it_is_encoded_with_the_walk(
    schema: str, value: Any, stamp: Stamp
) -> None:
    reordered = dict(reversed(stamp.to_value().items()))
    floated = {**stamp.to_value(), "wall_ns": 1.5}
    for odd in (reordered, floated):
        carried = records.IngressEvent(schema, value, odd, None, cbor.encode(value))
        assert carried.encode() == cbor.encode(carried.to_value())


@given(texts, values, st.integers(0, 2**40), st.integers(0, 2**20))
def test_a_derived_record_around_its_carried_value_is_the_record_encoded_whole(
    schema: str, value: Any, cause: int, index: int
) -> None:
    carried = records.DerivedEvent(schema, value, cause, index, cbor.encode(value))
    whole = records.DerivedEvent(schema, value, cause, index)
    assert carried.encode() == cbor.encode(whole.to_value())


@given(texts, values)
def test_a_value_wrapped_as_a_variant_arm_keeps_the_canonical_bytes(arm: str, value: Any) -> None:
    wrapped = {"$tag": arm, "$value": cbor.Encoded.of_stored(cbor.encode(value))}
    assert cbor.encode_ordered(wrapped) == cbor.encode({"$tag": arm, "$value": value})


def test_encode_ordered_refuses_what_is_neither_data_nor_an_encoded_part() -> None:
    with pytest.raises(Exception):  # noqa: B017 - cbor2 wraps the error of the hook
        cbor.encode_ordered({"x": object()})


# --------------------------------------------------------------------------------------------
# The step's input envelope


@given(
    st.one_of(st.none(), values),
    texts,
    values,
    st.one_of(st.none(), values),
    st.one_of(st.none(), values),
    st.dictionaries(st.binary(min_size=32, max_size=32), st.binary(max_size=16), max_size=3),
)
def test_the_input_envelope_is_the_canonical_encoding_of_its_map(
    state: Any, schema: str, event: Any, key: Any, ctx: Any, blobs: dict[bytes, bytes]
) -> None:
    fields: dict[str, Any] = {
        "state": None if state is None else cbor.encode(state),
        "event_schema": schema,
        "event_value": cbor.encode(event),
        "key": None if key is None else cbor.encode(key),
        "ctx": None if ctx is None else cbor.encode(ctx),
    }
    data = {str(Hash.from_digest(digest)): blob for digest, blob in blobs.items()}
    written = encode_input(**fields, data=data)
    envelope: dict[str, Any] = {"version": 1, "state": fields["state"]}
    envelope["event"] = {"schema": schema, "value": fields["event_value"]}
    if key is not None:
        envelope["event"]["key"] = fields["key"]
    if ctx is not None:
        envelope["ctx"] = fields["ctx"]
    if data:
        envelope["data"] = data
    assert written == cbor.encode(envelope)
    assert decode_input(written).event_value == fields["event_value"]


# --------------------------------------------------------------------------------------------
# The strict decoder's one-walk canonical check


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"\xa1\xf5\x01", "cbor.key_type"),  # {true: 1} after {1: 1} was seen
        (b"\xa1\xf9\x3c\x00\x01", "cbor.key_type"),  # {1.0: 1}
        (b"\xa2\x61b\x01\x61a\x02", "cbor.non_canonical"),  # keys out of order
        (b"\x81\xa2\x61b\x01\x61a\x02", "cbor.non_canonical"),  # nested, out of order
        (b"\x82\x01\xfb\x3f\xf8\x00\x00\x00\x00\x00\x00", "cbor.non_canonical"),  # 1.5 as double
        (b"\xa1\x61a\xf7", "cbor.unsupported_value"),  # undefined as a map value
        (b"\x82\xf0\x01", "cbor.unsupported_value"),  # simple(16) in a list
    ],
)
def test_the_one_walk_check_refuses_as_the_step_by_step_one(raw: bytes, code: str) -> None:
    assert cbor.decode(cbor.encode({1: 1})) == {1: 1}  # the key order of (1,) is remembered
    with pytest.raises(cbor.CborError) as refused:
        cbor.decode(cbor.SELF_DESCRIBE_PREFIX + raw)
    assert refused.value.code == code


@given(values)
def test_values_with_floats_still_decode_through_the_canonical_mode(value: Any) -> None:
    nested = {"a": [value, 0.5], "b": {"c": value}}
    assert cbor.encode(cbor.decode(cbor.encode(nested))) == cbor.encode(nested)


# --------------------------------------------------------------------------------------------
# The CellIndex: canonical nodes without a walk, and its bounded node cache


class CountingCas:
    def __init__(self) -> None:
        self.blobs: dict[Hash, bytes] = {}
        self.reads = 0

    def put(self, data: bytes) -> Hash:
        assert cbor.encode(cbor.decode(data)) == data  # every node is canonical
        self.blobs[hash_bytes(data)] = data
        return hash_bytes(data)

    def get_value(self, hash_: Hash) -> Any:
        self.reads += 1
        return cbor.decode(self.blobs[hash_])


def _entry(n: int, seq: int) -> CellEntry:
    state = hash_bytes(cbor.encode({"n": n, "seq": seq}))
    return CellEntry(cbor.encode(f"k{n}"), state, n, seq, failed=n % 3 == 0)


@pytest.mark.parametrize("cache_max", [0, 1, 2, 512])
def test_index_roots_do_not_depend_on_the_node_cache(cache_max: int) -> None:
    reference = CellIndex(CountingCas(), bucket_entries_max=2, nodes_cached_max=0)
    index = CellIndex(CountingCas(), bucket_entries_max=2, nodes_cached_max=cache_max)
    roots = [reference.empty_root, index.empty_root]
    for seq in range(1, 6):
        changes = {key_hash(cbor.encode(f"k{n}")): _entry(n, seq) for n in range(seq, 40, seq)}
        changes[key_hash(cbor.encode(f"k{seq * 7}"))] = None
        roots = [reference.update(roots[0], changes), index.update(roots[1], changes)]
        assert roots[0] == roots[1]
    assert dict(index.items(roots[1])) == dict(reference.items(roots[0]))


def test_a_cached_index_reads_nothing_back_that_it_wrote() -> None:
    cas = CountingCas()
    index = CellIndex(cas, bucket_entries_max=2)
    root = index.update(index.empty_root, {key_hash(bytes([n])): _entry(n, 1) for n in range(30)})
    index.update(root, {key_hash(bytes([n])): _entry(n, 2) for n in range(30)})
    assert cas.reads == 0
    uncached = CellIndex(cas, bucket_entries_max=2, nodes_cached_max=0)
    assert uncached.get(root, key_hash(bytes([5]))) == _entry(5, 1) and cas.reads > 0


def test_a_negative_node_cache_bound_is_refused() -> None:
    with pytest.raises(ValueError):
        CellIndex(CountingCas(), nodes_cached_max=-1)


# --------------------------------------------------------------------------------------------
# Worlds: carried bytes are the bytes the value encodes to, live, restored and replayed


def _inputs(world: Any) -> list[bytes]:
    seen: list[bytes] = []
    world.on_step = lambda _message, step_input, _outcome: seen.append(step_input)
    return seen


def test_deliveries_restored_from_a_head_get_the_step_input_they_had_live(tmp_path: Path) -> None:
    events = [inc(f"k{n % 3}", n + 1) for n in range(6)]
    with create(tmp_path / "straight") as world:
        straight = _inputs(world)
        for event in events:
            world.ingress(EVENT, event)
        world.run_to_idle()
    with create(tmp_path / "cut") as world:
        cut = _inputs(world)
        for event in events:
            world.ingress(EVENT, event)
        with pytest.raises(StepBudgetExceededError):
            world.run_to_idle(steps_max=2)
    with reopen(tmp_path / "cut") as world:
        after = _inputs(world)
        world.run_to_idle()
    assert cut + after == straight and len(after) == 4
    assert replay.verify_replay(tmp_path / "cut").ok


def test_routing_carries_each_delivery_its_bytes_wrapped_as_the_value_is() -> None:
    value = {"id": "x", "n": 1, "action": "none"}
    keyed, unkeyed = router().route("demo/Ping@1", value, cbor.encode(value))
    assert keyed.value == {"$tag": "Ping", "$value": value}
    assert keyed.encoded == cbor.encode(keyed.value)
    assert unkeyed.encoded == cbor.encode(value)
    assert all(d.encoded is None for d in router().route("demo/Ping@1", value))


def test_a_world_without_a_node_cache_writes_the_same_journal_and_roots(tmp_path: Path) -> None:
    limits = [WorldLimits(checkpoint_every_records=7, index_nodes_cached_max=n) for n in (0, 1)]
    worlds = [create(tmp_path / f"w{n}", limits=limit) for n, limit in enumerate(limits)]
    with worlds[0] as uncached, worlds[1] as cached:
        for n in range(40):
            for world in (uncached, cached):
                world.send(EVENT, inc(f"k{n % 9}", n))
        assert journal(uncached) == journal(cached)
        assert uncached.snapshot()[1] == cached.snapshot()[1]


def test_a_negative_node_cache_bound_is_refused_by_the_world_limits() -> None:
    with pytest.raises(ValueError):
        WorldLimits(index_nodes_cached_max=-1)
