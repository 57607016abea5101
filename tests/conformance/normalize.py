"""What each side's answer says a playbook did, in one shape both can be compared in: its final
status, each step's result, and the requests the local HTTP server saw (`Outcome`).

A step's result is compared as **what NoETL 2.13.1 keeps of it**, because that is all its API
shows: its worker sends the server a result envelope `{status, context, reference}` whose
`context` holds only the result's scalar fields and its maps of scalars, without the keys its
reference-only contract keeps out of events (`data`, `result`, `rows`, ...), and nothing at all
past `CONTEXT_BYTES_MAX` (noetl/worker/v2_worker_nats.py: `V2Worker._extract_control_context`,
called by `_build_strict_result_envelope`). The engine stores that envelope as the step's
result (noetl/core/dsl/v2/engine.py: `ExecutionState.mark_step_completed`, called from
`ControlFlowEngine.handle_event` on `call.done`) and `call.done` events carry it, so
`STEP.context.FIELD` is the step's `FIELD`. `kept` applies the same rule to aos's results, so
that a list NoETL cannot show is not a difference; where losing it changes what later steps do,
those steps differ, and spec/12 §11 says why.

* A pipeline step (a `tool:` list, run by NoETL as `STEP:task_sequence`) reports
  `{status, _prev, ctx}` (noetl/worker/task_sequence_executor.py:
  `TaskSequenceExecutor.execute`): its result is `_prev`, the last task's result. aos's is the
  last task's result too, with `results: {TASK: result}` added (spec/12 §5), which NoETL does
  not keep: it is left out.
* A loop step's result is `{results: [one per iteration], stats: {total, success, failed}}`
  on both sides; NoETL's iterations are its `call.done` / `call.error` events of that step, in
  event order (`ExecutionState.add_loop_result` appends them as they arrive). A parallel
  loop's iterations end in any order on NoETL (aos orders them by item, FLOWS.md §3), so
  theirs are compared as a sorted list.
* The two engines' tools describe an answer each in its own words, and no seed fixes them: an
  http step's result is compared by its status code (NoETL: `status_code`, aos: `http.status`;
  the body is in neither's kept part), a postgres step's by the rows it affected (NoETL:
  `row_count`, -1 for a statement without a count, aos: `rowcount`, 0 then), a noop's and a
  duckdb step's as nothing in common (a noop: NoETL `{status: noop, step}`, aos its args or
  null; duckdb: NoETL `{task_id, database_path, executed_commands, ...}`, aos `{rowcount,
  rows}`): their status and the steps after them say what they did.
* NoETL's final status is its last `playbook.*` / `workflow.*` terminal event; without one the
  execution never ended (`no end`). aos's is its status; `running` is `no end` too.
* Each side's own execution id in a string is replaced by `<execution_id>`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CONTEXT_BYTES_MAX = 16_384
"""NoETL 2.13.1's `NOETL_EVENT_RESULT_CONTEXT_MAX_BYTES` default: a larger context is dropped."""
INLINE_BYTES_MAX = 65_536
"""NoETL 2.13.1's `NOETL_INLINE_MAX_BYTES` default: a larger result is stored elsewhere and
only its small fields stay (noetl/worker/result_handler.py: `ResultHandler.process_result`)."""
SMALL_TEXT_CHARS_MAX = 1000  # noetl/core/storage/extractor.py: `_is_small_value`
SHOWN_TEXT_CHARS_MAX = 500  # ... `extract_output_select`'s `max_string_len`
BLOCKED_KEYS = frozenset(
    {
        "_ref",
        "_preview",
        "_size_bytes",
        "_store",
        "_store_failed",
        "_store_error",
        "_inline",
        "_internal_data",
        "data",
        "response",
        "result",
        "payload",
        "rows",
        "columns",
    }
)
"""The keys NoETL 2.13.1's worker keeps out of an event's result context."""
TRANSPORT_KEYS = frozenset({"command_id", "worker_id", "loop_event_id"})
"""What NoETL's worker adds to a context about the command that carried it, not the result."""
TERMINAL_EVENTS = {
    "playbook.completed": "completed",
    "workflow.completed": "completed",
    "playbook.failed": "failed",
    "workflow.failed": "failed",
    "execution.cancelled": "cancelled",
}
TASK_SEQUENCE = ":task_sequence"
NO_END = "no end"
REFUSED = "refused"
ABSENT = "(absent)"
EXECUTION_ID = "<execution_id>"


@dataclass
class Outcome:
    """One side's run of one playbook."""

    status: str
    steps: dict[str, Any] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    note: str = ""  # why it ended as it did, when the answer says (a refusal's message)
    raw: Any = None  # the side's own answer (NoETL's events, aos's status), never compared

    def parts(self) -> dict[str, Any]:
        """Every compared part by name: `status`, `steps.NAME`, `requests`."""
        found: dict[str, Any] = {"status": self.status}
        found.update({f"steps.{name}": value for name, value in self.steps.items()})
        found["requests"] = self.requests
        return found

    def with_id(self, execution: str) -> Outcome:
        """The same, with the side's execution id in any string read as `EXECUTION_ID`."""
        self.steps = _replace_id(self.steps, execution)
        self.requests = _replace_id(self.requests, execution)
        return self

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "steps": self.steps,
            "requests": self.requests,
            "note": self.note,
        }


@dataclass(frozen=True)
class Shape:
    """What the comparison needs to know of the playbook itself."""

    steps: tuple[str, ...]
    loops: frozenset[str] = frozenset()
    parallel: frozenset[str] = frozenset()  # loop steps whose iterations may end in any order
    kinds: Mapping[str, str] = field(default_factory=dict)  # step -> its last task's kind
    pipelines: frozenset[str] = frozenset()  # steps whose tool is a list of tasks

    @classmethod
    def of(cls, playbook: Mapping[str, Any]) -> Shape:
        workflow = [s for s in playbook.get("workflow") or [] if isinstance(s, dict)]
        loops = {str(s["step"]): s["loop"] for s in workflow if isinstance(s.get("loop"), dict)}
        parallel = {
            name
            for name, loop in loops.items()
            if isinstance(loop.get("spec"), dict) and loop["spec"].get("mode") == "parallel"
        }
        workbook = {
            str(e.get("name")): e.get("tool")
            for e in playbook.get("workbook") or []
            if isinstance(e, dict)
        }
        kinds = {str(s.get("step")): _last_kind(s.get("tool"), workbook) for s in workflow}
        names = tuple(str(s.get("step")) for s in workflow)
        pipelines = frozenset(
            str(s.get("step")) for s in workflow if isinstance(s.get("tool"), list)
        )
        return cls(names, frozenset(loops), frozenset(parallel), kinds, pipelines)


def _last_kind(tool: Any, workbook: Mapping[str, Any]) -> str:
    task = tool[-1] if isinstance(tool, list) and tool else tool
    if not isinstance(task, Mapping):
        return ""
    kind = str(task.get("kind", ""))
    entry = workbook.get(str(task.get("name"))) if kind == "workbook" else None
    return str(entry.get("kind", "")) if isinstance(entry, Mapping) else kind


# --------------------------------------------------------------------------------------------
# What NoETL 2.13.1 keeps of a result


def kept(value: Any) -> Any:
    """The part of a result NoETL 2.13.1 keeps in an event's context (None: nothing)."""
    if not isinstance(value, Mapping):
        return None
    if len(json.dumps(value, default=str)) > INLINE_BYTES_MAX:
        value = _small_fields(value)
    context: dict[str, Any] = {}
    for key, child in value.items():
        name = str(key)
        if name in BLOCKED_KEYS or name.startswith("command_"):
            continue
        if _scalar(child):
            context[name] = child
        elif isinstance(child, Mapping):
            nested = {
                str(k): v for k, v in child.items() if _scalar(v) and str(k) not in BLOCKED_KEYS
            }
            if nested:
                context[name] = nested
    if not context or len(json.dumps(context, default=str)) > CONTEXT_BYTES_MAX:
        return None
    return context


def _small_fields(value: Mapping[str, Any]) -> dict[str, Any]:
    """What stays of a result NoETL stores elsewhere: its small scalars, long text cut
    (noetl/core/storage/extractor.py: `_auto_extract`, the nested levels left out: none of
    the compared playbooks has one)."""
    found: dict[str, Any] = {}
    for key, child in value.items():
        if isinstance(child, str) and len(child) <= SMALL_TEXT_CHARS_MAX:
            cut = len(child) > SHOWN_TEXT_CHARS_MAX
            found[str(key)] = child[:SHOWN_TEXT_CHARS_MAX] + "..." if cut else child
        elif _scalar(child) and not isinstance(child, str):
            found[str(key)] = child
    return found


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def facts(kind: str, value: Any) -> Any:
    """What both engines' tools of `kind` state about an answer, from a kept result."""
    if kind in ("noop", "duckdb") or not isinstance(value, Mapping):
        return None if kind in ("noop", "duckdb") else value
    if kind == "http":
        http = value.get("http")
        code = http.get("status") if isinstance(http, Mapping) else value.get("status_code")
        return {"http_status": code}
    if kind == "postgres":
        count = value.get("row_count", value.get("rowcount"))
        return {"row_count": max(count, 0) if isinstance(count, int) else count}
    return value


# --------------------------------------------------------------------------------------------
# NoETL: its events


def noetl_outcome(
    events: list[dict[str, Any]], shape: Shape, *, execution: str, requests: list[str]
) -> Outcome:
    """The outcome NoETL's events (`GET /api/executions/ID/events`, in id order) record."""
    status = NO_END
    plain: dict[str, Any] = {}
    iterations: dict[str, list[tuple[bool, Any]]] = {}
    for event in events:
        kind = str(event.get("event_type"))
        if kind in TERMINAL_EVENTS:
            status = TERMINAL_EVENTS[kind]
            continue
        if kind not in ("call.done", "call.error"):
            continue
        step = _step_of(str(event.get("node_name")), shape)
        if step is None:
            continue
        value = _envelope_result(event.get("result"), pipeline=_is_pipeline(event))
        value = facts(shape.kinds.get(step, ""), value)
        if step in shape.loops:
            iterations.setdefault(step, []).append((kind == "call.done", value))
        else:
            plain[step] = value
    steps = dict(plain)
    for step, done in iterations.items():
        steps[step] = _loop_result([v for _, v in done], sum(1 for ok, _ in done if not ok))
    found = Outcome(status, _ordered(steps, shape), _sorted_if(requests, shape), raw=events)
    return found.with_id(execution)


def _step_of(node: str, shape: Shape) -> str | None:
    """The workflow step an event belongs to (None: an inline task or the workflow itself)."""
    name = node.removesuffix(TASK_SEQUENCE)
    return name if name in shape.steps else None


def _is_pipeline(event: Mapping[str, Any]) -> bool:
    return str(event.get("node_name")).endswith(TASK_SEQUENCE)


def _envelope_result(envelope: Any, *, pipeline: bool) -> Any:
    """The result inside NoETL's envelope `{status, context, reference}`, without the keys the
    worker adds about the command that carried it."""
    context = envelope.get("context") if isinstance(envelope, Mapping) else None
    if not isinstance(context, Mapping):
        return None
    if pipeline:
        context = context.get("_prev")
        if not isinstance(context, Mapping):
            return context
    found = {k: v for k, v in context.items() if k not in TRANSPORT_KEYS}
    return found or None


# --------------------------------------------------------------------------------------------
# aos: `aos flow status --json`


def aos_outcome(
    state: Mapping[str, Any], shape: Shape, *, execution: str, requests: list[str]
) -> Outcome:
    """The outcome an aos execution's status (`ops.status`, `aos flow status --json`) says."""
    status = str(state.get("status"))
    business = state.get("business")
    raw = business.get("steps") if isinstance(business, Mapping) else None
    steps: dict[str, Any] = {}
    for step, value in (raw or {}).items():
        kind = shape.kinds.get(step, "")
        if step in shape.loops and isinstance(value, Mapping):
            results = value.get("results")
            stats = value.get("stats") if isinstance(value.get("stats"), Mapping) else {}
            done = [facts(kind, kept(_pipeline_last(r, step, shape))) for r in results or []]
            steps[step] = _loop_result(done, int(stats.get("failed", 0)))
        else:
            steps[step] = facts(kind, kept(_pipeline_last(value, step, shape)))
    ended = NO_END if status == "running" else status
    found = Outcome(ended, _ordered(steps, shape), _sorted_if(requests, shape), raw=state)
    return found.with_id(execution)


def _pipeline_last(value: Any, step: str, shape: Shape) -> Any:
    """A pipeline step's result without the `results` map aos adds to the last task's."""
    if step in shape.pipelines and isinstance(value, Mapping):
        return {k: v for k, v in value.items() if k != "results"}
    return value


# --------------------------------------------------------------------------------------------
# Both


def _loop_result(results: list[Any], failed: int) -> dict[str, Any]:
    stats = {"total": len(results), "success": len(results) - failed, "failed": failed}
    return {"results": results, "stats": stats}


def _ordered(steps: dict[str, Any], shape: Shape) -> dict[str, Any]:
    """Steps in workflow order; a parallel loop's iterations sorted (they end in any order)."""
    found: dict[str, Any] = {}
    for name in shape.steps:
        if name not in steps:
            continue
        value = steps[name]
        if name in shape.parallel and isinstance(value, dict):
            value = {**value, "results": sorted(value["results"], key=_canonical)}
        found[name] = value
    return found


def _sorted_if(requests: list[str], shape: Shape) -> list[str]:
    """Requests in arrival order, or sorted when a parallel loop makes that order free."""
    return sorted(requests) if shape.parallel else list(requests)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _replace_id(value: Any, execution: str) -> Any:
    if isinstance(value, str):
        return value.replace(execution, EXECUTION_ID) if execution else value
    if isinstance(value, list):
        return [_replace_id(v, execution) for v in value]
    if isinstance(value, dict):
        return {k: _replace_id(v, execution) for k, v in value.items()}
    return value


VOLATILE = "<volatile>"


def mask(outcome: Outcome, paths: Mapping[str, str]) -> Outcome:
    """The outcome with each dotted path (`steps.start.message`) read as `VOLATILE`: values
    that differ from run to run on either side (a draw of `random`), each with its reason."""
    for path in paths:
        head, _, rest = path.partition(".")
        if head != "steps" or not rest:
            raise ValueError(f"a volatile path starts with steps.: {path}")
        step, _, key = rest.partition(".")
        value = outcome.steps.get(step)
        if isinstance(value, dict) and key in value:
            outcome.steps[step] = {**value, key: VOLATILE}
    return outcome


@dataclass(frozen=True)
class Difference:
    """One part that differs: its name (`status`, `steps.NAME`, `requests`) and each side's."""

    part: str
    noetl: Any
    aos: Any


def compare(noetl: Outcome, aos: Outcome) -> list[Difference]:
    """Every part whose normalized value differs, in a stable order."""
    left, right = noetl.parts(), aos.parts()
    names = list(left) + [name for name in right if name not in left]
    return [
        Difference(name, left.get(name, ABSENT), right.get(name, ABSENT))
        for name in names
        if _canonical(left.get(name, ABSENT)) != _canonical(right.get(name, ABSENT))
    ]
