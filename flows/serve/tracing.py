"""OpenTelemetry traces of flow executions (spec/11 §14): one span per execution, per step
and per task attempt, made from the journal's records once they are committed.

A `JournalTracer` follows one world's journal: `observe` reads the records committed since
it last looked and turns the history events of the interpreter's step records (§6) into
spans: `playbook.started` opens the execution's span and `playbook.finished` ends it,
`step.started` / `step.done|failed` a step's, `task.started` / `task.done|attempt.failed|
failed|skipped` a task attempt's, each the child of the one before, with the attributes
`aos.flow`, `aos.flow.version`, `aos.execution`, `aos.step`, `aos.task`, `aos.attempt`,
`aos.status` and `aos.error.kind`. A span's times are the wall times the world recorded (the
stamp of the input that caused the step), so they are what happened, not when it was read.

Tracing only reads committed records: it never changes a step, and a replay, which commits
nothing to the world, emits nothing. The adapters join the trace: `joined(params)` makes a
tool call's task span the current one while the adapter in this process performs it, and
`traceparent(params)` is its W3C trace context for an adapter elsewhere (a node's lease).

Nothing here imports OpenTelemetry unless it is installed (the `otel` extra) and configured:
a tracer provider set by the application (the SDK's), or the standard OTLP environment
variables (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), which
make an OTLP/HTTP exporter here. Otherwise `tracer_for` is None and nothing is traced.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aos.flows.serve.cell_status import EXEC_WORKFLOW
from aos.kernel import cbor
from aos.kernel.node.leases import PublishedIntent
from aos.kernel.node.node import Node
from aos.kernel.world import records
from aos.kernel.world.world import World

log = logging.getLogger("aos.flows.tracing")

TRACER_NAME = "aos.flows"
OTLP_ENVIRONMENT = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
OPEN_SPANS_MAX = 100_000
"""How many spans a tracer keeps open at once; past it the oldest are ended as they are."""

STEP_ENDS = {"step.done": "ok", "step.failed": "failed"}
TASK_ENDS = {
    "task.done": "ok",
    "task.attempt.failed": "failed",
    "task.failed": "failed",
    "task.skipped": "skipped",
}


def tracer_for(world: World) -> JournalTracer | None:
    """A tracer of `world`'s executions from its head on, or None when OpenTelemetry is not
    installed or not configured."""
    if not installed("opentelemetry.sdk"):
        return None
    provider = _configured_provider()
    return None if provider is None else JournalTracer(world, provider)


def installed(module: str) -> bool:
    """Whether `module` can be imported, importing only its parent, the `opentelemetry`
    namespace (another distribution may bring that without the SDK)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def add_flow_tracing(node: Node) -> None:
    """Trace the flow executions of the world `node` serves, when OpenTelemetry is set up:
    spans after each commit on the node's world thread, each lease's `traceparent`."""
    if not installed("opentelemetry.sdk"):
        return
    provider = _configured_provider()
    if provider is not None:
        traced = _NodeTracing(provider)
        node.host.committed.append(traced.observe)
        node.trace_context = traced.traceparent


class _NodeTracing:
    """A node's tracer, made on its world thread when the world is open (from its head)."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.tracer: JournalTracer | None = None

    def observe(self, world: World, first: int) -> None:
        if self.tracer is None:
            self.tracer = JournalTracer(world, self.provider, since=first - 1)
        self.tracer.observe(world)

    def traceparent(self, published: PublishedIntent) -> str | None:
        return None if self.tracer is None else self.tracer.traceparent(published.params)


def _configured_provider() -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    if not any(os.environ.get(name) for name in OTLP_ENVIRONMENT):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        log.warning("OTLP export is configured but its exporter is not installed: aos[otel]")
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    made = TracerProvider(resource=Resource.create({"service.name": "aos"}))
    made.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(made)
    return made


class JournalTracer:
    """Spans of one world's flow executions, from the records committed after `since` (by
    default its head when the tracer is made)."""

    def __init__(self, world: World, provider: Any, *, since: int | None = None) -> None:
        self.tracer = provider.get_tracer(TRACER_NAME)
        self.seen = world.store.journal.head() if since is None else since
        self.wall_ns: int | None = None
        self.executions: dict[str, tuple[Any, dict[str, Any]]] = {}
        self.spans: dict[tuple[Any, ...], Any] = {}  # steps and task attempts, open
        self.calls: dict[tuple[Any, ...], Any] = {}  # a task attempt's span by its call

    def observe(self, world: World) -> None:
        """Make the spans of the records committed since the last look."""
        head = world.store.journal.head()
        if head <= self.seen:
            return
        for _, record in world.store.journal.read(self.seen + 1, head):
            self._record(record)
        self.seen = head

    @contextmanager
    def joined(self, params: Any) -> Iterator[None]:
        """The tool call's task span as the current span while the block runs."""
        span = self.calls.get(_call_key(params))
        if span is None:
            yield
            return
        from opentelemetry import context, trace

        token = context.attach(trace.set_span_in_context(span))
        try:
            yield
        finally:
            context.detach(token)

    def traceparent(self, params: Any) -> str | None:
        """The W3C `traceparent` of the tool call's task span, if it has one."""
        span = self.calls.get(_call_key(params))
        if span is None:
            return None
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier, trace.set_span_in_context(span))
        return carrier.get("traceparent")

    # -- records to spans ------------------------------------------------------------------

    def _record(self, record: Any) -> None:
        if not isinstance(record, dict):
            return
        stamp = record.get("stamp")
        if isinstance(stamp, dict) and type(stamp.get("wall_ns")) is int:
            self.wall_ns = int(stamp["wall_ns"])
        if record.get("kind") != records.STEP or record.get("workflow") != EXEC_WORKFLOW:
            return
        key = record.get("key")
        exec_id = cbor.decode(key) if isinstance(key, bytes) else None
        ann = record.get("ann")
        events = ann.get("events") if isinstance(ann, dict) else None
        if isinstance(exec_id, str) and isinstance(events, list):
            for event in events:
                if isinstance(event, dict):
                    self._event(exec_id, event)

    def _event(self, exec_id: str, event: dict[str, Any]) -> None:
        name = event.get("event")
        if name == "playbook.started":
            self._start_execution(exec_id, event)
        elif name == "playbook.finished":
            self._end_execution(exec_id, str(event.get("status")))
        elif name == "step.started":
            self._open(exec_id, event, ("step", event.get("token"), event.get("step")))
        elif name in STEP_ENDS:
            step = ("step", event.get("token"), event.get("step"))
            self._close(exec_id, step, STEP_ENDS[str(name)], event)
        elif name == "task.started":
            self._start_task(exec_id, event)
        elif name in TASK_ENDS:
            self._close(exec_id, _task_key(event), TASK_ENDS[str(name)], event)

    def _start_execution(self, exec_id: str, event: dict[str, Any]) -> None:
        attributes = {
            "aos.execution": exec_id,
            "aos.flow": str(event.get("flow")),
            "aos.flow.version": int(event.get("version") or 0),
        }
        span = self.tracer.start_span(
            f"execution {attributes['aos.flow']}", attributes=attributes, start_time=self.wall_ns
        )
        self.executions[exec_id] = (span, attributes)

    def _end_execution(self, exec_id: str, status: str) -> None:
        found = self.executions.pop(exec_id, None)
        if found is None:
            return
        span = found[0]
        for key in [k for k in self.spans if k[0] == exec_id]:
            self.spans.pop(key).end(end_time=self.wall_ns)
        span.set_attribute("aos.status", status)
        _set_status(span, status in ("completed",), status)
        span.end(end_time=self.wall_ns)

    def _start_task(self, exec_id: str, event: dict[str, Any]) -> None:
        span = self._open(exec_id, event, _task_key(event))
        if span is not None:
            attempt = event.get("attempt")
            call = (exec_id, event.get("step"), event.get("task"), attempt)
            self.calls[call] = span
            span.set_attribute("aos.attempt", attempt if type(attempt) is int else 0)

    def _open(self, exec_id: str, event: dict[str, Any], key: tuple[Any, ...]) -> Any:
        found = self.executions.get(exec_id)
        if found is None:
            return None
        execution, base = found
        parent = execution
        if key[0] == "task":
            parent = self.spans.get((exec_id, "step", key[1], key[2]), execution)
        from opentelemetry import trace

        attributes = {**base, "aos.step": str(event.get("step"))}
        if key[0] == "task":
            attributes["aos.task"] = str(event.get("task"))
        span = self.tracer.start_span(
            f"{key[0]} {'.'.join(str(k) for k in key[2:] if k is not None)}",
            context=trace.set_span_in_context(parent),
            attributes=attributes,
            start_time=self.wall_ns,
        )
        self._bound()
        self.spans[(exec_id, *key)] = span
        return span

    def _close(
        self, exec_id: str, key: tuple[Any, ...], status: str, event: dict[str, Any]
    ) -> None:
        span = self.spans.pop((exec_id, *key), None)
        if span is None:
            return
        span.set_attribute("aos.status", status)
        error = event.get("error")
        if isinstance(error, dict) and error.get("kind") is not None:
            span.set_attribute("aos.error.kind", str(error["kind"]))
        _set_status(span, status != "failed", str(event.get("event")))
        span.end(end_time=self.wall_ns)
        self._forget(span)

    def _bound(self) -> None:
        while len(self.spans) >= OPEN_SPANS_MAX:
            oldest = self.spans.pop(next(iter(self.spans)))
            oldest.end(end_time=self.wall_ns)
            self._forget(oldest)

    def _forget(self, span: Any) -> None:
        for call in [call for call, found in self.calls.items() if found is span]:
            del self.calls[call]


def _task_key(event: dict[str, Any]) -> tuple[Any, ...]:
    return ("task", event.get("token"), event.get("step"), event.get("task"))


def _call_key(params: Any) -> tuple[Any, ...]:
    if not isinstance(params, dict):
        return ()
    return (params.get("exec"), params.get("step"), params.get("task"), params.get("attempt"))


def _set_status(span: Any, ok: bool, description: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.OK) if ok else Status(StatusCode.ERROR, description))
