"""The authoring API, natively: typed state and events, ctx, emitted events and effects, the
byte-level step, the test harness, and the two Python examples (counter, order)."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import pytest

from aos.kernel import cbor as kernel_cbor
from aos.kernel.wasm import envelope as kernel_envelope
from aos.kernel.wasm.limits import StepLimits
from aos_sdk import (
    DELETE,
    Context,
    ContextUnavailableError,
    SchemaError,
    StepError,
    UnhandledEventError,
    Variant,
    Workflow,
    cbor,
    envelope,
    export,
    from_value,
    to_value,
)
from aos_sdk.testing import (
    Divergence,
    Event,
    compare,
    compare_sequence,
    explain,
    input_bytes,
    make_ctx,
    run,
    step_bytes,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "modules" / "examples"


def load_example(relative: str, name: str) -> ModuleType:
    """Import an example module by path under a unique name (the examples' own module names,
    `counter`, `order`, are what componentize-py sees)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


counter_py = load_example("counter_py/counter.py", "aos_example_counter")
order_py = load_example("order_py/order.py", "aos_example_order")

COUNTER_EVENT = "demo/CounterEvent@1"


def inc(key: str, by: int) -> Event:
    return Event(COUNTER_EVENT, counter_py.Increment(key, by), key=key)


def reset(key: str) -> Event:
    return Event(COUNTER_EVENT, counter_py.Reset(key), key=key)


# --------------------------------------------------------------------------------------------
# The counter


def test_counter_starts_from_zero_and_adds() -> None:
    state, events, effects = run(counter_py.counter, None, inc("a", 7))
    assert state == counter_py.CounterState(count=7, resets=0)
    assert events == [] and effects == []


def test_counter_emits_one_threshold_event_per_crossing_step() -> None:
    state, events, _ = run(counter_py.counter, counter_py.CounterState(8, 0), inc("a", 25))
    assert state.count == 33
    assert [(e.schema, e.value) for e in events] == [
        ("demo/CounterThreshold@1", {"id": "a", "count": 33, "threshold": 30})
    ]
    _, events, _ = run(counter_py.counter, counter_py.CounterState(10, 0), inc("a", 9))
    assert events == []


def test_counter_reset_zeroes_and_counts() -> None:
    state, events, effects = run(counter_py.counter, counter_py.CounterState(42, 2), reset("a"))
    assert state == counter_py.CounterState(0, 3)
    assert events == [] and effects == []


def test_counter_wire_format() -> None:
    data = input_bytes(None, inc("a", 12))
    event = kernel_cbor.decode(kernel_cbor.decode(data)["event"]["value"])  # type: ignore[index,arg-type]
    assert event == {"$tag": "Increment", "$value": {"id": "a", "by": 12}}
    output = kernel_cbor.decode(step_bytes(counter_py.counter, data))
    assert output == {
        "state": kernel_cbor.encode({"count": 12, "resets": 0}),
        "domain_events": [
            {
                "schema": "demo/CounterThreshold@1",
                "value": kernel_cbor.encode({"id": "a", "count": 12, "threshold": 10}),
            }
        ],
        "effects": [],
    }


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({"$tag": "Increment", "$value": {"id": "a"}}, SchemaError),
        ({"$tag": "Increment", "$value": {"id": "a", "by": "1"}}, SchemaError),
        ({"$tag": "Double", "$value": {"id": "a"}}, SchemaError),
        ({"id": "a", "by": 1}, SchemaError),
        ({"$tag": "Increment", "$value": {"id": "a", "by": -1}}, ValueError),
    ],
)
def test_counter_rejects_bad_events(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        run(counter_py.counter, None, Event(COUNTER_EVENT, value, key="a"))


def test_unknown_schema_is_an_error() -> None:
    with pytest.raises(UnhandledEventError, match="no handler for demo/Other@1"):
        run(counter_py.counter, None, Event("demo/Other@1", {}))


# --------------------------------------------------------------------------------------------
# Envelopes: the SDK and the kernel read each other's bytes


def test_sdk_output_passes_the_kernel_output_check() -> None:
    data = input_bytes(None, inc("a", 10))
    output = kernel_envelope.decode_output(step_bytes(counter_py.counter, data), StepLimits())
    assert output.state == kernel_cbor.encode({"count": 10, "resets": 0})
    assert [e.schema for e in output.domain_events] == ["demo/CounterThreshold@1"]


def test_kernel_input_is_what_the_sdk_reads() -> None:
    ctx = make_ctx(workflow="demo/Counter@1", now_ns=5, key="a")
    ours = input_bytes(counter_py.CounterState(3, 1), inc("a", 1), ctx)
    theirs = kernel_envelope.encode_input(
        state=kernel_cbor.encode({"count": 3, "resets": 1}),
        event_schema=COUNTER_EVENT,
        event_value=kernel_cbor.encode({"$tag": "Increment", "$value": {"id": "a", "by": 1}}),
        key=kernel_cbor.encode("a"),
        ctx=kernel_cbor.encode(ctx),
    )
    assert ours == theirs
    step_input = envelope.decode_input(theirs)
    assert step_input.state == {"count": 3, "resets": 1} and step_input.key == "a"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda env: env.update(version=2),
        lambda env: env.update(state="x"),
        lambda env: env.pop("event"),
        lambda env: env["event"].update(schema=1),
        lambda env: env["event"].update(value="not bytes"),
        lambda env: env.update(ctx=cbor.encode([1])),
    ],
)
def test_bad_input_envelopes_are_rejected(mutate: Any) -> None:
    env = cbor.decode(input_bytes(None, inc("a", 1)))
    mutate(env)
    with pytest.raises(ValueError):
        envelope.decode_input(cbor.encode(env))


def test_non_canonical_input_is_rejected() -> None:
    data = input_bytes(None, inc("a", 1))
    with pytest.raises(cbor.CborError):
        step_bytes(counter_py.counter, data[3:])


# --------------------------------------------------------------------------------------------
# The authoring API


@dataclass
class Note:
    text: str
    tags: list[str] = field(default_factory=list)
    rank: int | None = None


@dataclass
class Ping(Variant):
    pass


@dataclass
class Renamed(Variant):
    TAG = "Other"
    n: int


notes: Workflow[Note] = Workflow("demo/Notes@1", state=Note, initial=lambda: Note(""))


@notes.on("demo/Write@1", Note)
def write(state: Note, event: Note, ctx: Context) -> Any:
    if event.text == "delete":
        return DELETE
    if event.text == "none":
        return None
    if event.text == "effect":
        ctx.effect(
            "http.request",
            {"method": "GET", "url": "https://x.example"},
            idempotency_key=b"k1",
            issuer_ref="r1",
        )
        ctx.effect("timer.set", {"after_ns": 5})
    if event.text == "bad-issuer":
        ctx.effect("timer.set", {}, issuer_ref=7)  # type: ignore[arg-type]
    if event.text == "ctx":
        ctx.annotate({"now": ctx.now_ns, "height": ctx.journal_height, "key": ctx.key})
        ctx.emit("demo/Seen@1", {"entropy": ctx.entropy[:2], "wf": ctx.workflow})
    return Note(state.text + event.text, state.tags + event.tags, event.rank)


def test_typed_state_round_trip_omits_none_fields() -> None:
    state, _, _ = run(notes, Note("a", ["x"]), Event("demo/Write@1", Note("b", ["y"])))
    assert state == Note("ab", ["x", "y"], None)
    assert to_value(state) == {"text": "ab", "tags": ["x", "y"]}


def test_delete_gives_a_null_state() -> None:
    state, _, _ = run(notes, Note("a"), Event("demo/Write@1", Note("delete")))
    assert state is DELETE
    output = kernel_cbor.decode(
        step_bytes(notes, input_bytes(Note("a"), Event("demo/Write@1", Note("delete"))))
    )
    assert output["state"] is None  # type: ignore[index]


def test_returning_none_is_an_error_not_a_delete() -> None:
    with pytest.raises(StepError, match="returned None"):
        run(notes, Note("a"), Event("demo/Write@1", Note("none")))


def test_effects_in_order_with_optional_fields() -> None:
    _, _, effects = run(notes, None, Event("demo/Write@1", Note("effect")))
    assert [(e.effect, e.params, e.idempotency_key, e.issuer_ref) for e in effects] == [
        ("http.request", {"method": "GET", "url": "https://x.example"}, b"k1", "r1"),
        ("timer.set", {"after_ns": 5}, None, None),
    ]
    raw = kernel_cbor.decode(
        step_bytes(notes, input_bytes(None, Event("demo/Write@1", Note("effect"))))
    )
    assert set(raw["effects"][1]) == {"effect", "params"}  # type: ignore[index]


def test_bad_effect_arguments_are_errors() -> None:
    with pytest.raises(StepError, match="issuer_ref"):
        run(notes, None, Event("demo/Write@1", Note("bad-issuer")))


def test_ctx_fields_annotation_and_events() -> None:
    ctx = make_ctx(
        workflow="demo/Notes@1", now_ns=99, journal_height=7, entropy=bytes(range(64)), key="k"
    )
    data = input_bytes(None, Event("demo/Write@1", Note("ctx"), key="k"), ctx)
    output = envelope.decode_output(step_bytes(notes, data))
    assert output.ann == {"now": 99, "height": 7, "key": "k"}
    assert output.domain_events[0].value == {"entropy": b"\x00\x01", "wf": "demo/Notes@1"}


def test_ctx_absent_is_a_clear_error() -> None:
    data = input_bytes(None, Event("demo/Write@1", Note("ctx")), ctx=None)
    with pytest.raises(ContextUnavailableError, match=r"ctx\.now_ns"):
        step_bytes(notes, data)


def test_variant_cases_without_fields_and_with_tag_override() -> None:
    assert to_value(Ping()) == {"$tag": "Ping"}
    assert to_value(Renamed(3)) == {"$tag": "Other", "$value": {"n": 3}}
    assert from_value(Ping | Renamed, {"$tag": "Other", "$value": {"n": 3}}) == Renamed(3)
    assert from_value(Ping | Renamed, {"$tag": "Ping"}) == Ping()


def test_schema_reading() -> None:
    assert from_value(dict[str, list[int]], {"a": [1, 2]}) == {"a": [1, 2]}
    assert from_value(Literal["ok", "error"], "ok") == "ok"
    assert from_value(float, 3) == 3.0
    assert from_value(Note, {"text": "t", "extra": 1}) == Note("t")  # unknown keys ignored
    for tp, value in [
        (Literal["ok"], "nope"),
        (int, True),
        (bool, 1),
        (Note, {"tags": []}),
        (list[int], [1, "2"]),
        (bytes, "text"),
    ]:
        with pytest.raises(SchemaError):
            from_value(tp, value)
    with pytest.raises(SchemaError):
        to_value({1, 2})


def test_export_binds_the_component_abi_natively() -> None:
    world = export(counter_py.counter)()
    data = input_bytes(None, inc("a", 3))
    assert world.step(data) == step_bytes(counter_py.counter, data)
    # An exception is returned as the step's fault (the host makes it step.guest_exception).
    fault = envelope_fault(world.step(input_bytes(None, Event("demo/Other@1", {}))))
    assert fault["type"] == UnhandledEventError.__name__ and "demo/Other@1" in fault["message"]


def envelope_fault(data: bytes) -> dict[str, str]:
    body = cbor.decode(data)
    assert set(body) == {"state", "fault"} and body["state"] is None
    return dict(body["fault"])


def test_two_handlers_for_one_schema_is_an_error() -> None:
    wf: Workflow[Any] = Workflow("demo/Dup@1")
    wf.on("demo/E@1")(lambda s, e, c: s)
    with pytest.raises(StepError, match="two handlers"):
        wf.on("demo/E@1")(lambda s, e, c: s)


# --------------------------------------------------------------------------------------------
# The harness


def test_explain_shows_the_native_traceback() -> None:
    bad = input_bytes(
        None, Event(COUNTER_EVENT, {"$tag": "Increment", "$value": {"id": "a", "by": -1}})
    )
    text = explain(counter_py.counter, bad)
    assert text is not None and "ValueError: Increment.by is a nat" in text
    assert explain(counter_py.counter, input_bytes(None, inc("a", 1))) is None


def test_compare_reports_the_first_divergence() -> None:
    inputs = [input_bytes(None, inc("a", n)) for n in (1, 2, 3)]
    assert compare(counter_py.counter, counter_py.counter.step_bytes, inputs) == 3

    def flaky(data: bytes) -> bytes:
        out = counter_py.counter.step_bytes(data)
        return out if data != inputs[1] else out[:-1] + b"\x00"

    with pytest.raises(Divergence) as caught:
        compare(counter_py.counter, flaky, inputs)
    assert caught.value.index == 1


def test_compare_sequence_threads_state_per_key() -> None:
    events = [inc("a", 6), inc("b", 1), inc("a", 6), reset("a"), inc("b", 9)]
    outputs = compare_sequence(counter_py.counter, counter_py.counter.step_bytes, events)
    states = [envelope.decode_output(o).state for o in outputs]
    assert states == [
        {"count": 6, "resets": 0},
        {"count": 1, "resets": 0},
        {"count": 12, "resets": 0},
        {"count": 0, "resets": 1},
        {"count": 10, "resets": 0},
    ]


# --------------------------------------------------------------------------------------------
# The order workflow


ORDER_CTX = make_ctx(workflow="demo/Order@1", now_ns=1_000, key="o-1")


def placed(amount: int = 1250) -> Event:
    return Event("demo/OrderPlaced@1", order_py.OrderPlaced("o-1", amount, "EUR"), key="o-1")


def receipt(effect: str, status: str = "ok", payload: Any = None, ref: str = "") -> Event:
    value = order_py.EffectReceipt(
        origin_workflow="demo/Order@1",
        intent_hash="blake3:" + "1" * 64,
        effect=effect,
        adapter="http" if effect == order_py.HTTP_EFFECT else "timer",
        status={"$tag": status},
        payload=cbor.encode(payload),
        emitted_seq=1,
        origin_key=cbor.encode("o-1"),
        issuer_ref=ref or None,
    )
    return Event("sys/EffectReceiptEnvelope@1", value, key="o-1")


def awaiting() -> Any:
    state, _, _ = run(order_py.order, None, placed(), ORDER_CTX)
    return state


def test_order_placed_charges_and_sets_a_timer() -> None:
    state, events, effects = run(order_py.order, None, placed(), ORDER_CTX)
    assert state.status == "awaiting_payment" and state.amount_cents == 1250
    assert events == []
    http, timer = effects
    assert http.effect == order_py.HTTP_EFFECT and http.issuer_ref == "charge:o-1"
    assert http.params["method"] == "POST" and http.idempotency_key == b"charge:o-1"
    assert cbor.decode(http.params["body"]) == {"order_id": "o-1", "amount_cents": 1250}
    assert timer.effect == order_py.TIMER_EFFECT and timer.issuer_ref == "timeout:o-1"
    assert timer.params == {"deliver_at_ns": 1_000 + order_py.PAYMENT_TIMEOUT_NS, "key": "o-1"}


@pytest.mark.parametrize(
    ("event", "status", "reason"),
    [
        (receipt(order_py.HTTP_EFFECT, "ok", {"status": 201}), "paid", None),
        (receipt(order_py.HTTP_EFFECT, "ok", None), "paid", None),
        (
            receipt(order_py.HTTP_EFFECT, "ok", {"status": 402}),
            "failed",
            "payment declined (HTTP 402)",
        ),
        (receipt(order_py.HTTP_EFFECT, "error"), "failed", "payment request error"),
        (receipt(order_py.HTTP_EFFECT, "timeout"), "failed", "payment request timeout"),
        (receipt(order_py.TIMER_EFFECT), "failed", "payment timed out"),
    ],
)
def test_order_receipts_settle(event: Event, status: str, reason: str | None) -> None:
    state, events, effects = run(order_py.order, awaiting(), event, ORDER_CTX)
    assert (state.status, state.reason, state.receipts) == (status, reason, 1)
    assert [(e.schema, e.value.get("status"), e.value.get("reason")) for e in events] == [
        ("demo/OrderSettled@1", status, reason)
    ]
    assert effects == []


def test_order_ignores_late_receipts_and_duplicate_placements() -> None:
    paid, _, _ = run(order_py.order, awaiting(), receipt(order_py.HTTP_EFFECT), ORDER_CTX)
    late, events, _ = run(order_py.order, paid, receipt(order_py.TIMER_EFFECT), ORDER_CTX)
    assert (late.status, late.receipts, events) == ("paid", 2, [])
    again, events, effects = run(order_py.order, paid, placed(), ORDER_CTX)
    assert again == paid and events == [] and effects == []


def test_order_with_no_amount_fails_at_once() -> None:
    state, events, effects = run(order_py.order, None, placed(0), ORDER_CTX)
    assert state.status == "failed" and effects == []
    assert events[0].value["reason"] == "amount must be positive"


# --------------------------------------------------------------------------------------------
# The warm instance's state memo


LOG_EVENT = "demo/Log@1"
BLOB = "blake3:" + "ab" * 32


def _log_workflow() -> Workflow[Any]:
    """A handler that changes its state in place, builds maps in non-canonical key order,
    returns tuples, and (on a `read` event) asks for a blob after changing its state."""
    wf: Workflow[Any] = Workflow("demo/Log@1")

    @wf.on(LOG_EVENT)
    def on_log(state: Any, event: Any, ctx: Context) -> Any:
        state = state if state is not None else {"zz": [], "a": {}}
        state["zz"].append({"z": event["n"], "b": (event["n"], 1.5)})
        state["a"][str(event["n"])] = list(state)  # the key order the handler sees
        if event.get("read"):
            state["read"] = ctx.read(BLOB)
        return state

    return wf


def _log_inputs(warm: Workflow[Any], events: list[dict[str, Any]]) -> list[bytes]:
    """Each event on the state the last output gave, as the host sends it; the read event
    runs twice (the read request, then the step with the blob)."""
    outputs, state = [], None
    for value in events:
        data = input_bytes(None, Event(LOG_EVENT, value))
        if state is not None:
            data = envelope.encode_input(
                state, LOG_EVENT, value, has_state=True, ctx=None, data=None
            )
        out = envelope.decode_output(warm.step_bytes(data))
        if out.reads:
            data = kernel_envelope.with_data(data, {BLOB: b"blob"})
            out = envelope.decode_output(warm.step_bytes(data))
        outputs.append(data)
        state = out.state
    return outputs


def test_state_memo_gives_what_a_fresh_instance_gives() -> None:
    warm = _log_workflow()
    events = [{"n": 1}, {"n": 2}, {"n": 3, "read": True}, {"n": 4}]
    inputs = _log_inputs(warm, events)
    assert len(warm.state_memo) == 1  # the last output's state, for the next input
    # Every input again: on a warm workflow fed in order (each state from the memo), and on
    # a new workflow per input (each state decoded): the same bytes.
    again = _log_workflow()
    for data in inputs:
        fresh = _log_workflow().step_bytes(data)
        warm_out = again.step_bytes(data)
        if envelope.decode_output(warm_out).reads:
            data = kernel_envelope.with_data(data, {BLOB: b"blob"})
            fresh = _log_workflow().step_bytes(data)
            warm_out = again.step_bytes(data)
        assert warm_out == fresh
        assert len(again.state_memo) == 1  # the input's state was taken, the output's kept


def test_state_memo_hands_a_state_out_once() -> None:
    memo = envelope.StateMemo()
    value = {"b": [1], "a": 2}
    encoded = cbor.encode(value)
    memo.keep(encoded, value)
    first = memo.take(encoded)
    assert list(first) == ["a", "b"] and first == value and first["b"] is not value["b"]
    first["b"].append(9)  # the handler may change what it is given
    assert memo.take(encoded) == value and len(memo) == 0  # decoded again


def test_state_memo_bounds() -> None:
    small = {"n": 1}
    encoded = cbor.encode(small)
    at_edge = envelope.StateMemo(state_bytes_max=len(encoded))
    at_edge.keep(encoded, small)
    assert len(at_edge) == 1
    over = envelope.StateMemo(state_bytes_max=len(encoded) - 1)
    over.keep(encoded, small)
    assert len(over) == 0
    two = envelope.StateMemo(entries_max=2)
    states = [{"n": n} for n in range(3)]
    for state in states:
        two.keep(cbor.encode(state), state)
    assert len(two) == 2
    assert two.take(cbor.encode(states[0])) == states[0]  # evicted: decoded
    assert len(two) == 2
    none = envelope.StateMemo(entries_max=0)
    none.keep(encoded, small)
    assert len(none) == 0
    assert envelope.StateMemo().entries_max == envelope.STATE_MEMO_ENTRIES_MAX_DEFAULT


def test_state_memo_stops_copying_after_a_state_too_large_to_keep() -> None:
    small, large = {"n": 1}, {"n": "x" * 100}
    memo = envelope.StateMemo(state_bytes_max=len(cbor.encode(small)))
    assert memo.copying
    memo.keep(cbor.encode(large), large)
    assert not memo.copying and len(memo) == 0
    encoded, copy = cbor.encode_copied(small)
    memo.keep(encoded, small, copy)
    assert memo.copying and memo.take(encoded) is copy
    assert not envelope.StateMemo(entries_max=0).copying


def test_a_state_the_encoder_refuses_fails_as_converting_it_would() -> None:
    wf: Workflow[Any] = Workflow("demo/Bad@1")
    wf.on("demo/Bad@1")(lambda state, event, ctx: {"tags": {1, 2}})
    fault = envelope_fault(export(wf)().step(input_bytes(None, Event("demo/Bad@1", {}))))
    with pytest.raises(SchemaError) as caught:
        to_value({"tags": {1, 2}})
    assert fault["type"] == "SchemaError" and fault["message"] == str(caught.value)
    assert len(wf.state_memo) == 0
