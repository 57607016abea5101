"""An adapter's handler in the trace of the work it does (spec/11 §14, spec/10): a lease
from a node that traces carries the work's W3C `traceparent`, and with OpenTelemetry
installed the handler runs with it as the current context, so the spans the handler makes
are children of the task's span. Without OpenTelemetry nothing is imported.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

TRACEPARENT_CHARS_MAX = 55
"""A version-00 `traceparent` is 55 characters; anything longer is not one (W3C)."""


def in_trace_context(traceparent: str | None) -> AbstractContextManager[None]:
    """The trace context `traceparent` names as the current one while the block runs."""
    if not traceparent or len(traceparent) > TRACEPARENT_CHARS_MAX:
        return nullcontext()
    try:
        if importlib.util.find_spec("opentelemetry.trace") is None:
            return nullcontext()
    except ModuleNotFoundError:  # not even the `opentelemetry` namespace is there
        return nullcontext()
    return _attached(traceparent)


@contextmanager
def _attached(traceparent: str) -> Iterator[None]:
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    token = context.attach(TraceContextTextMapPropagator().extract({"traceparent": traceparent}))
    try:
        yield
    finally:
        context.detach(token)
