"""The flow interpreter's workflow (spec/11): one workflow module for three workflows.

`aos/FlowRegistry@1` cells (keyed by flow name) keep the deployed versions of a flow;
`aos/FlowExec@1` cells (keyed by execution id) each step one execution of a canonical flow
definition, run to wait; `aos/FlowSchedule@1` cells (keyed by schedule name) fire
schedules' slots. Built into a component with jinja2, markupsafe and jsonpath
bundled (bundle.txt); `app.py` beside the package is the component's entry."""

from __future__ import annotations

from typing import Any

from aos_flow import execution, registry, schedule, warmup
from aos_sdk import Context, Workflow

REGISTRY_EVENT = "aos/FlowRegistryEvent@1"
EXEC_EVENT = "aos/FlowExecEvent@1"
SCHEDULE_EVENT = "aos/FlowScheduleEvent@1"

flow: Workflow[Any] = Workflow("aos/flow.module@1", state=Any)


@flow.on(EXEC_EVENT)
def on_exec_event(state: Any, event: Any, ctx: Context) -> Any:
    return execution.on_event(state, event, ctx)


@flow.on(REGISTRY_EVENT)
def on_registry_event(state: Any, event: Any, ctx: Context) -> Any:
    return registry.on_event(state, event, ctx)


@flow.on(SCHEDULE_EVENT)
def on_schedule_event(state: Any, event: Any, ctx: Context) -> Any:
    return schedule.on_event(state, event, ctx)


warmup.warm(flow, EXEC_EVENT)
