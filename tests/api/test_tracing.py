"""OpenTelemetry traces of a flow execution (spec/11 §14), with the SDK's in-memory exporter:
one trace per execution, its steps and task attempts as child spans with their attributes,
an adapter's own span joining it; and a replay emits nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from aos import Flows
from aos.flows.serve.routes import add_flow_routes
from aos.flows.serve.tracing import add_flow_tracing
from aos.kernel.adapters.sdk import Lease, Result
from aos.kernel.node import Node, models
from aos.kernel.node.app import create_app
from aos.testing import Failure, Replayer, ToolCall, ToolDoubles, test_world
from tests.auth_fixtures import authorize
from tests.flows_world.support import make_flow_world
from tests.flows_world.test_flow_requests import TestClient, ok
from tests.test_adapters_sdk import EFFECT, FakeNode, make_adapter
from tests.test_world import engine

THREE_STEPS = Path(__file__).with_name("three_steps.yaml")
"""fetch, transform (retried once after 60 s), store: python tasks."""

ECHO = "aos/echo@1"
EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        current = TracerProvider()
        trace.set_tracer_provider(current)
        current.add_span_processor(SimpleSpanProcessor(EXPORTER))
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def adapter_work(call: ToolCall) -> Any:
    """A tool adapter's own code: its span must join the task's."""
    with trace.get_tracer("an.adapter").start_as_current_span("adapter work"):
        if call.step == "transform" and call.attempt == 1:
            raise Failure("http.connect", "connection refused", kind="transport")
        return {"step": call.step}


def by_name(found: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in found:
        named.setdefault(span.name, []).append(span)
    return named


def test_a_three_step_playbook_is_one_trace_of_steps_and_tasks(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    doubles = ToolDoubles(kinds={"python": adapter_work})
    with test_world(doubles, path=tmp_path / "world") as flows:
        run = flows.run(THREE_STEPS)
        assert run.wait().ok
    found = spans.get_finished_spans()
    assert len({span.context.trace_id for span in found}) == 1
    named = by_name(found)
    (execution,) = named["execution traced/three"]
    assert execution.parent is None
    assert execution.attributes is not None
    assert dict(execution.attributes) == {
        "aos.execution": run.id,
        "aos.flow": "traced/three",
        "aos.flow.version": 1,
        "aos.status": "completed",
    }
    steps = [named[f"step {name}"][0] for name in ("fetch", "transform", "store")]
    assert all(
        s.parent is not None and s.parent.span_id == execution.context.span_id for s in steps
    )
    transform = named["task transform.transform_task"]
    assert [s.attributes["aos.attempt"] for s in transform if s.attributes] == [1, 2]
    failed, done = transform
    assert failed.attributes is not None and failed.attributes["aos.status"] == "failed"
    assert failed.attributes["aos.error.kind"] == "connection"  # NoETL's word (spec/12 §6)
    assert done.attributes is not None and done.attributes["aos.step"] == "transform"
    assert done.parent is not None and done.parent.span_id == steps[1].context.span_id
    # The retry waited 60 s of logical time: the task spans do not overlap.
    assert failed.end_time is not None and done.start_time is not None
    assert failed.end_time <= done.start_time
    adapter = named["adapter work"]
    assert len(adapter) == 4  # fetch, transform twice, store
    tasks = {
        s.context.span_id
        for name, group in named.items()
        if name.startswith("task ")
        for s in group
    }
    assert all(s.parent is not None and s.parent.span_id in tasks for s in adapter)


def test_the_w3c_trace_context_of_a_call_names_its_task_span(
    spans: InMemorySpanExporter,
) -> None:
    """What a node's lease would carry to an adapter elsewhere (`traceparent`)."""
    seen: list[str | None] = []
    handle: list[Flows] = []

    def remote(call: ToolCall) -> Any:
        adapters = handle[0].adapters
        assert adapters is not None and adapters.tracer is not None
        params = {"exec": call.exec, "step": call.step, "task": call.task, "attempt": call.attempt}
        seen.append(adapters.tracer.traceparent(params))
        return {}

    with test_world(ToolDoubles(kinds={"python": remote})) as flows:
        handle.append(flows)
        assert flows.run(THREE_STEPS).wait().ok
    tasks = [s for s in spans.get_finished_spans() if s.name.startswith("task ")]
    assert seen == [
        f"00-{s.context.trace_id:032x}-{s.context.span_id:016x}-{s.context.trace_flags:02x}"
        for s in tasks
    ]
    assert len(seen) == 3


def test_a_replay_emits_no_span(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    with test_world(ToolDoubles(kinds={"python": lambda call: {}}), path=tmp_path / "w") as flows:
        assert flows.run(THREE_STEPS).wait().ok
    spans.clear()
    assert Replayer(THREE_STEPS).replay(tmp_path / "w").ok
    assert spans.get_finished_spans() == ()


ECHO_FLOW = """
format: aos.flow/1
name: t/echo
steps:
  - name: call
    tasks:
      - name: say
        do: call
        tool: {kind: echo}
        args: {x: 1}
"""


class StartedSpans(SpanProcessor):
    """The spans started so far, ended or not (a lease is answered while its task runs)."""

    def __init__(self) -> None:
        self.started: list[Any] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started.append(span)


def test_a_node_traces_its_executions_and_a_lease_carries_the_task_span(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    started = StartedSpans()
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    provider.add_span_processor(started)
    made = make_flow_world(tmp_path / "w")
    made.world.close()
    with Node.open_path(made.path, sync=False, engine=engine()) as node:
        add_flow_tracing(node)
        app = create_app(node)
        add_flow_routes(app, node)
        with authorize(TestClient(app), node) as client:
            ok(client.post("/v1/flows", json={"text": ECHO_FLOW}))
            ok(client.post("/v1/flows/t%2Fecho/run", json={"exec": "e1"}))
            answer = asyncio.run(node.lease(ECHO, ECHO, [], 1, 0))
    (lease,) = answer.leases
    (task,) = [s for s in started.started if s.name == "task call.say"]
    context = task.get_span_context()
    assert lease.traceparent == (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    )
    assert task.attributes["aos.execution"] == "e1" and task.attributes["aos.attempt"] == 1
    wire = lease.model_dump(mode="json")  # what an adapter reads
    assert models.LeaseBody.model_validate(wire).traceparent == lease.traceparent


def test_an_sdk_adapter_handler_runs_in_the_lease_trace(spans: InMemorySpanExporter) -> None:
    tracer = trace.get_tracer("the.task")
    with tracer.start_as_current_span("task") as task:
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
    fake = FakeNode()
    intent = fake.add(1)
    fake.open[intent]["traceparent"] = carrier["traceparent"]

    def handler(params: Any, lease: Lease) -> Result:
        with trace.get_tracer("an.adapter").start_as_current_span("adapter call"):
            return Result("ok", {"n": params["n"]})

    with make_adapter(fake) as adapter:
        adapter.effect(EFFECT)(handler)
        [outcome] = adapter.run_once()
    assert outcome.settled
    (call,) = [s for s in spans.get_finished_spans() if s.name == "adapter call"]
    assert call.parent is not None and call.parent.span_id == task.get_span_context().span_id
    assert call.context.trace_id == task.get_span_context().trace_id
