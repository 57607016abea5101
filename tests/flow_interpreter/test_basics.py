"""Starting an execution, inline steps, the state's shape, determinism, the registry."""

from __future__ import annotations

from aos_flow import definition as definition_module
from aos_flow import workflow as app

from aos_sdk import cbor, testing
from aos_sdk import envelope as sdk_envelope
from tests.flow_interpreter.harness import (
    EXEC_EVENT,
    Execution,
    arc,
    domain,
    events,
    flow,
    names,
    registry_step,
    step,
    store,
    task,
)

STATE_FIELDS = [
    "exec",
    "flow",
    "version",
    "definition",
    "status",
    "engine_version",
    "started_seq",
    "business",
    "engine",
]


def test_a_run_of_ten_inline_steps_finishes_in_one_step_without_effects() -> None:
    steps = [
        step(
            f"s{i}",
            [task("add", "assign", set={"n": "{{ ctx.n + 1 if ctx.n is defined else 1 }}"})],
            arcs=[arc(f"s{i + 1}")] if i < 9 else [],
        )
        for i in range(10)
    ]
    ex = Execution()
    out = ex.start(flow(steps))
    assert out.effects == [] and out.domain_events == []
    assert ex.status == "completed"
    assert ex.business["ctx"] == {"n": 10}
    assert names(out).count("step.done") == 10
    assert names(out)[0] == "playbook.started" and names(out)[-1] == "playbook.finished"
    assert ex.state["engine_version"] == 1


def test_state_has_every_schema_field() -> None:
    ex = Execution()
    ex.start(flow([step("a")]), business_ref="order-1")
    assert sorted(ex.state) == sorted(STATE_FIELDS)
    assert sorted(ex.business) == ["business_ref", "ctx", "steps", "workload"]
    assert ex.business["business_ref"] == "order-1"
    assert ex.state["started_seq"] == 1


def test_workload_deep_merges_onto_the_definition_default_and_is_visible_at_top_level() -> None:
    definition = flow(
        [
            step(
                "a",
                [task("n", "noop", result="{{ api.url }}|{{ api.timeout }}|{{ workload.extra }}")],
            )
        ],
        workload={"api": {"url": "https://a", "timeout": 5}},
    )
    ex = Execution()
    ex.start(definition, {"api": {"timeout": 9}, "extra": 1})
    assert ex.business["workload"] == {"api": {"url": "https://a", "timeout": 9}, "extra": 1}
    assert ex.business["steps"]["a"] == "https://a|9|1"


def test_assign_and_business_ref() -> None:
    definition = flow(
        [
            step(
                "a",
                [
                    task("set", "assign", set={"order.id": "{{ workload.id }}", "ctx.count": 2}),
                    task("ref", "business_ref", value="order-{{ ctx.order.id }}"),
                ],
            )
        ]
    )
    ex = Execution()
    ex.start(definition, {"id": 42})
    assert ex.business["ctx"] == {"order": {"id": 42}, "count": 2}
    assert ex.business["business_ref"] == "order-42"
    assert ex.business["steps"]["a"] == "order-42"


def test_step_result_template_and_steps_namespace() -> None:
    definition = flow(
        [
            step(
                "a",
                [task("n", "noop", result={"v": 7})],
                arcs=[arc("b")],
                result="{{ _prev.v * 2 }}",
            ),
            step("b", [task("n", "noop", result="{{ a }}-{{ steps.a }}")]),
        ]
    )
    ex = Execution()
    ex.start(definition)
    assert ex.business["steps"] == {"a": 14, "b": "14-14"}


def test_same_input_twice_gives_byte_identical_output() -> None:
    definition = flow(
        [
            step(
                "a",
                [
                    task(
                        "c",
                        "call",
                        tool={"kind": "http", "url": "{{ workload.u }}"},
                        args={"x": 1},
                        timeout_ms=1000,
                    ),
                ],
                arcs=[arc("b")],
            ),
            step("b", [task("w", "wait_signal", signal="go")]),
        ]
    )
    first, second = Execution(), Execution()
    digest = first.deploy(definition)
    second.blobs = first.blobs
    ctx = testing.make_ctx(workflow="aos/FlowExec@1", now_ns=5, key="e1")
    start = {
        "$tag": "Start",
        "$value": {
            "exec": "e1",
            "flow": "t/flow",
            "version": 1,
            "definition": digest,
            "workload": {"u": "x"},
            "parent": None,
            "business_ref": None,
        },
    }
    data = testing.input_bytes(None, testing.Event(EXEC_EVENT, start, key="e1"), ctx)
    with_blob = _with_data(data, {digest: first.blobs[digest]})
    assert app.flow.step_bytes(with_blob) == app.flow.step_bytes(with_blob)
    a = first.start(digest, {"u": "x"})
    b = second.start(digest, {"u": "x"})
    assert first.state_bytes() == second.state_bytes()
    assert a.effects == b.effects and a.ann == b.ann


def _with_data(data: bytes, blobs: dict[str, bytes]) -> bytes:
    envelope = cbor.decode(data)
    envelope["data"] = blobs
    return cbor.encode(envelope)


def test_a_fresh_instance_asks_for_the_definition_and_a_warm_one_gives_the_same_bytes() -> None:
    """The memo of decoded definitions never changes a result (determinism: checked)."""
    ex = Execution()
    digest = ex.deploy(flow([step("a", [task("n", "noop", result=1)])]))
    ctx = testing.make_ctx(workflow="aos/FlowExec@1", now_ns=5, key="e1")
    start = {
        "$tag": "Start",
        "$value": {
            "exec": "e1",
            "flow": "t/flow",
            "version": 1,
            "definition": digest,
            "workload": {},
            "parent": None,
            "business_ref": None,
        },
    }
    data = testing.input_bytes(None, testing.Event(EXEC_EVENT, start, key="e1"), ctx)
    definition_module._CACHE.clear()
    cold = testing.step(
        app.flow, None, testing.Event(EXEC_EVENT, start, key="e1"), ctx, blobs=ex.blobs
    )
    warm = app.flow.step_bytes(data)  # no blob sent: the memo serves it
    assert sdk_envelope.encode_output(cold) == warm


def test_an_unreadable_definition_fails_the_execution_with_an_engine_error() -> None:
    ex = Execution()
    digest = store(ex.blobs, {"steps": "not a list"})
    out = ex.start(digest)
    assert ex.status == "failed"
    assert ex.engine["error"]["kind"] == "engine"
    assert ex.engine["error"]["code"] == "definition.invalid"
    assert names(out) == ["playbook.finished"]


def test_a_definition_that_is_not_cbor_fails_the_execution() -> None:
    ex = Execution()
    digest = "blake3:" + "ab" * 32
    ex.blobs[digest] = b"\xff\x00"
    ex.start(digest)
    assert ex.status == "failed" and ex.engine["error"]["code"] == "definition.invalid"


def test_inputs_to_a_missing_execution_leave_no_cell() -> None:
    ex = Execution()
    out = ex.signal("go")
    assert not out.has_state
    assert events(out)[0]["event"] == "signal.stale"


def test_a_second_start_is_stale() -> None:
    ex = Execution()
    definition = flow([step("a", [task("w", "wait_signal", signal="go")])])
    ex.start(definition)
    before = ex.state_bytes()
    out = ex.start(definition)
    assert ex.state_bytes() == before
    assert events(out)[0]["event"] == "start.stale"


def test_every_step_annotates_even_when_nothing_happens() -> None:
    ex = Execution()
    ex.start(flow([step("a", [task("w", "wait_signal", signal="go")])]))
    out = ex.signal("other")  # no step waits for it
    assert out.has_ann and events(out)[0]["event"] == "signal.dropped"


def test_continue_with_starts_a_new_execution_and_does_not_wait() -> None:
    definition = flow(
        [
            step(
                "a",
                [
                    task(
                        "next",
                        "continue_with",
                        flow="self",
                        workload={"page": "{{ workload.page + 1 }}"},
                    ),
                    task("again", "continue_with", flow="self", workload={}),
                ],
            )
        ]
    )
    ex = Execution()
    out = ex.start(definition, {"page": 1})
    starts = domain(out, "aos/FlowStart@1")
    assert [s.value["exec"] for s in starts] == ["e1~1", "e1~2"]
    assert starts[0].value["workload"] == {"page": 2}
    assert starts[0].value["parent"] is None
    assert starts[0].value["definition"] == ex.state["definition"]
    assert ex.status == "completed"
    assert ex.business["steps"]["a"] == {"exec": "e1~2"}


# -- the registry ---------------------------------------------------------------------------


def test_registry_appends_versions_and_ignores_a_redeploy_of_the_latest() -> None:
    h1, h2 = "blake3:" + "1" * 64, "blake3:" + "2" * 64
    out = registry_step(None, "orders/charge", h1, now_ns=10)
    assert out.state == {
        "name": "orders/charge",
        "versions": [{"version": 1, "definition": h1, "deployed_ns": 10}],
    }
    same = registry_step(out.state, "orders/charge", h1, now_ns=20)
    assert same.state == out.state
    second = registry_step(out.state, "orders/charge", h2, now_ns=30)
    assert [v["version"] for v in second.state["versions"]] == [1, 2]
    again = registry_step(second.state, "orders/charge", h1, now_ns=40)
    assert [v["definition"] for v in again.state["versions"]] == [h1, h2, h1]
    assert not again.effects and not again.domain_events
