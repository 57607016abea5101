"""`Run`: one input being applied to one execution (the state, the step's ctx, the
definition, the history), and the helpers every part of the engine shares."""

from __future__ import annotations

from typing import Any

from aos_flow.blobs import Blobs
from aos_flow.definition import LIMIT_DEFAULTS, Definition
from aos_flow.errors import EngineFailure, ExprError
from aos_flow.expressions import CLASSIC, PIPELINE, ROUTING, TASK, Evaluator, Mode
from aos_flow.history import History

TIMER_EFFECT = "sys/timer.set@1"
HUMAN_EFFECT = "aos/human.task@1"
START_EVENT = "aos/FlowStart@1"
ENDED_EVENT = "aos/FlowEnded@1"
CANCEL_EVENT = "aos/FlowCancel@1"
LOOKUP_EVENT = "aos/FlowLookup@1"
ITER_PARENT_KEY = "$iter_parent"
"""The reserved workload key of a child started inside an iteration: that iteration, which
the child's own iterations see as `iter.parent` (spec/11 §3.4)."""
NS_PER_MS = 1_000_000
TIME_NS_MAX = 2**63 - 1
_MASK64 = 2**64 - 1
_NUMBER_MASK = 2**63 - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3


def execution_number(exec_id: str) -> int:
    """An execution's number (spec/12 §6): NoETL's execution ids are positive 63-bit
    integers, which playbooks write into SQL and BIGINT columns as `{{ execution_id }}`.
    The 64-bit FNV-1a hash of the id's UTF-8 bytes, mixed by splitmix64's finalizer, its top
    bit cleared (0 is read as 1): a pure function of the id, so replay and the host
    (`flows/serve/numbers.py`) compute the same number."""
    value = _FNV_OFFSET
    for byte in exec_id.encode("utf-8"):
        value = ((value ^ byte) * _FNV_PRIME) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    value ^= value >> 31
    return (value & _NUMBER_MASK) or 1


class Run:
    """Mutable for the length of one input: the handler builds it, the engine applies the
    input and runs to wait, the handler returns `state` and annotates `history`."""

    def __init__(
        self,
        state: dict[str, Any],
        ctx: Any,
        defn: Definition | None,
        history: History,
        blobs: Blobs,
    ) -> None:
        self.state = state
        self.business: dict[str, Any] = state["business"]
        self.engine: dict[str, Any] = state["engine"]
        self.ctx = ctx
        self.now: int = ctx.now_ns
        self.defn = defn
        self.limits = defn.limits if defn is not None else dict(LIMIT_DEFAULTS)
        self.history = history
        self.blobs = blobs
        self.eval = Evaluator(blobs)
        noetl = defn is not None and defn.format >= 2  # spec/11 §3.6: NoETL's rules
        self.pipeline = PIPELINE if noetl else CLASSIC
        self.routing = ROUTING if noetl else CLASSIC
        self.task_mode = TASK if noetl else CLASSIC
        self.version: int = state["engine_version"]
        self.input_seq = journal_height(ctx)
        self.ctx_changed = False
        self.tasks_run = 0
        self.aborted = False  # fail_fast ended the execution's branches during this input

    # -- identity ---------------------------------------------------------------------------

    @property
    def exec_id(self) -> str:
        return self.state["exec"]

    def execution(self) -> dict[str, Any]:
        state = self.state
        return {
            "id": state["exec"],
            "number": execution_number(state["exec"]),
            "flow": state["flow"],
            "version": state["version"],
            "definition": state["definition"],
        }

    @property
    def noetl(self) -> bool:
        """An `aos.flow/2` definition (a playbook's): NoETL 2.13.1's rules (spec/11 §1.8)."""
        return self.defn is not None and self.defn.format >= 2

    def execution_id(self) -> str:
        """`{{ execution_id }}`: the execution's number as text in a playbook (NoETL's ids are
        numeric, rendered as text), the aos id in an `aos.flow/1` definition."""
        return str(execution_number(self.exec_id)) if self.noetl else self.exec_id

    def next_id(self, counter: str, prefix: str) -> str:
        counters = self.engine["counters"]
        counters[counter] = counters.get(counter, 0) + 1
        return f"{prefix}{counters[counter]}"

    # -- the template namespace (spec/11 §3.6) ----------------------------------------------

    def scope(
        self,
        token: dict[str, Any] | None = None,
        frame: dict[str, Any] | None = None,
        *,
        steps: dict[str, Any] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """Workload keys, then step results by name, then the token's args, then a loop
        step's item (under its iterator's name, its index as `loop_index`), then (`aos.flow/2`)
        the results of the frame's finished tasks by task name, at the top level (upstream
        playbooks read them there); the named namespaces win over all of them. `steps`: the
        step results to show, when not those of the business state (a step's own `set_ctx`
        sees its result before it is stored)."""
        business = self.business
        steps = business["steps"] if steps is None else steps
        scope: dict[str, Any] = dict(business["workload"])
        scope.update(steps)
        if token is not None:
            if type(token["args"]) is dict:
                scope.update(token["args"])
            if frame is not None:
                self._loop_names(scope, token, frame)
                if self.noetl:
                    scope.update(frame["results"])  # seed 003 §7.5: `{{ task_name.data }}`
        execution_id = self.execution_id()
        if self.noetl:  # NoETL's `job`: the execution's id under three names
            scope["job"] = {"uuid": execution_id, "execution_id": execution_id, "id": execution_id}
        scope.update(
            execution_id=execution_id,
            workload=business["workload"],
            ctx=business["ctx"],
            steps=steps,
            business_ref=business["business_ref"],
            keychain=business.get("keychain") or {},
            execution=self.execution(),
            args=token["args"] if token is not None else {},
            inputs=token["inputs"] if token is not None else None,
            iter=current_iter(frame) if frame is not None else self.step_iter(),
            event=None,
            _prev=frame["prev"] if frame is not None else None,
            results=frame["results"] if frame is not None else {},
        )
        if frame is not None:
            for block in frame["stack"]:
                if block["repeat"] is not None:
                    repeat = block["repeat"]
                    scope[repeat["as"]] = repeat["iter"][repeat["as"]]
        scope.update(extra)
        return scope

    def execution_context(self, token: dict[str, Any], frame: dict[str, Any]) -> dict[str, Any]:
        """What a playbook's python code reads as `context` (NoETL 2.13.1's render context,
        `noetl/core/dsl/v2/engine.py`, `ExecutionState.get_render_context`): workload keys and
        finished steps' results at the top level, `workload`, `ctx`, `iter`, `execution_id`
        and `job`. Results stored by reference stay references."""
        business = self.business
        execution_id = self.execution_id()
        found: dict[str, Any] = dict(business["workload"])
        found.update(business["steps"])
        found.update(
            workload=business["workload"],
            ctx=business["ctx"],
            iter=current_iter(frame),
            execution_id=execution_id,
            job={"uuid": execution_id, "execution_id": execution_id, "id": execution_id},
        )
        return found

    def _loop_names(
        self, scope: dict[str, Any], token: dict[str, Any], frame: dict[str, Any]
    ) -> None:
        loop = self.defn.step(token["step"])["loop"] if self.defn is not None else None
        if loop is None:
            return
        iteration = frame["iter"]
        if loop["iterator"] in iteration:
            scope[loop["iterator"]] = iteration[loop["iterator"]]
        scope["loop_index"] = iteration.get("index")

    def step_iter(self) -> dict[str, Any]:
        """`iter` outside any iteration: empty, or in an execution started inside one, just
        `parent` (so its admission, arcs and steps read `iter.parent` too)."""
        outer = self.engine["outer"]
        return {} if outer is None else {"parent": outer}

    def enclosing_iter(self, frame: dict[str, Any], skip: int = 0) -> dict[str, Any] | None:
        """The nearest iteration around a frame's current task (ignoring its `skip`
        innermost blocks): a repeat's, the loop iteration's, else the one this execution
        was started in; None at the top."""
        for block in reversed(frame["stack"][: len(frame["stack"]) - skip]):
            if block["repeat"] is not None:
                return block["repeat"]["iter"]
        if frame["index"] is not None:
            return frame["iter"]
        return self.engine["outer"]

    def check(self, guard: dict[str, str] | None, scope: dict[str, Any], **where: Any) -> bool:
        """A guard of the pipeline (a task's `when`, a rule's, a branch case's): its truth;
        one that cannot be evaluated is false, and recorded."""
        return self._check(guard, scope, self.pipeline, where)

    def check_routing(
        self, guard: dict[str, str] | None, scope: dict[str, Any], **where: Any
    ) -> bool:
        """An admission rule or an arc's `when`, as `check`."""
        return self._check(guard, scope, self.routing, where)

    def _check(
        self, guard: dict[str, str] | None, scope: dict[str, Any], mode: Mode, where: Any
    ) -> bool:
        try:
            return self.eval.guard(guard, scope, mode)
        except ExprError as error:
            self.history.add("template.failed", error=error.message, **where)
            return False

    def render(self, value: Any, scope: dict[str, Any]) -> Any:
        """A template of the pipeline: what a step's tasks render."""
        return self.eval.render(value, scope, self.pipeline)

    def render_task(self, value: Any, scope: dict[str, Any]) -> Any:
        """A task's tool fields and `args` (in a playbook, NoETL's `render_template`)."""
        return self.eval.render(value, scope, self.task_mode)

    def render_or_keep(self, text: Any, scope: dict[str, Any]) -> Any:
        """A task's template that is kept as written when it does not render to text, as
        NoETL's `render_template` keeps a template it cannot render (a playbook's python
        `code` with `{{ ... }}` in a comment)."""
        try:
            value = self.render_task(text, scope)
        except ExprError:
            return text
        return value if type(value) is str else text

    def render_routing(self, value: Any, scope: dict[str, Any]) -> Any:
        """A template of routing: an arc's `args`, a loop's `in`, a step's `set_ctx`."""
        return self.eval.render(value, scope, self.routing)

    # -- writes -----------------------------------------------------------------------------

    def set_ctx(self, path: str, value: Any) -> None:
        """`ctx.PATH = value` (copy on write: values read from ctx elsewhere stay as they
        were); pending tokens are re-evaluated afterwards."""
        parts = _parts(path, "ctx")
        self.business["ctx"] = set_path(self.business["ctx"], parts, value)
        self.ctx_changed = True

    def count_task(self) -> None:
        self.tasks_run += 1
        if self.tasks_run > self.limits["tasks_per_input_max"]:
            raise EngineFailure(
                "limit.tasks_per_input_max",
                f"more than {self.limits['tasks_per_input_max']} tasks ran on one input",
            )

    def effect(self, effect: str, params: dict[str, Any], issuer_ref: str) -> None:
        self.ctx.effect(effect, params, issuer_ref=issuer_ref)

    def arm_timer(self, wait_id: str, deliver_at_ns: int) -> None:
        """A `sys/timer.set@1` whose issuer_ref and key are the waiting token (its time
        clamped to the kernel's `time` range)."""
        at = min(max(0, deliver_at_ns), TIME_NS_MAX)
        self.effect(TIMER_EFFECT, {"deliver_at_ns": at, "key": wait_id}, wait_id)

    def emit(self, schema: str, value: dict[str, Any]) -> None:
        self.ctx.emit(schema, value)


def journal_height(ctx: Any) -> int:
    """The journal sequence of the input being delivered (0 from a host that sends none)."""
    try:
        return int(ctx.journal_height)
    except Exception:
        return 0


def current_iter(frame: dict[str, Any]) -> dict[str, Any]:
    """The innermost iteration context: a repeat's, else the frame's (loop or step)."""
    for block in reversed(frame["stack"]):
        if block["repeat"] is not None:
            return block["repeat"]["iter"]
    return frame["iter"]


def iter_depth(value: Any) -> int:
    """Levels of an iteration context: itself, its `parent`, that one's... (0 for None)."""
    depth = 0
    while type(value) is dict:
        depth += 1
        value = value.get("parent")
    return depth


def set_iter(frame: dict[str, Any], path: str, value: Any) -> None:
    """An iteration writes only its own `iter`: the enclosing iterations it sees as
    `iter.parent` are read-only (parallel siblings share them)."""
    parts = _parts(path, "iter")
    if parts[0] == "parent":
        raise ExprError(f"set_iter {path!r}: iter.parent is read-only")
    for block in reversed(frame["stack"]):
        if block["repeat"] is not None:
            block["repeat"]["iter"] = set_path(block["repeat"]["iter"], parts, value)
            return
    frame["iter"] = set_path(frame["iter"], parts, value)


def _parts(path: Any, namespace: str) -> list[str]:
    """A dotted PATH; a leading `ctx.` / `iter.` names the namespace written, not a key."""
    if type(path) is not str or not path:
        raise ExprError(f"{path!r} is not a path")
    parts = path.split(".")
    if len(parts) > 1 and parts[0] == namespace:
        parts = parts[1:]
    if not all(parts):
        raise ExprError(f"{path!r} is not a path")
    return parts


def set_path(container: Any, parts: list[str], value: Any) -> dict[str, Any]:
    """A copy of `container` with `value` at `parts` (maps on the way are copied, never
    modified: the old ones may be shared with step results or the definition)."""
    updated = dict(container) if type(container) is dict else {}
    head = parts[0]
    updated[head] = value if len(parts) == 1 else set_path(updated.get(head), parts[1:], value)
    return updated


def error_value(kind: str, code: str, message: str, retryable: bool = False) -> dict[str, Any]:
    """An error of the category `kind` (spec/11 §3.3): `kind` and `category` are the same
    word, until a playbook's tool error names what failed in NoETL's words (`waits`)."""
    return {
        "kind": kind,
        "category": kind,
        "code": code,
        "message": message,
        "retryable": retryable,
    }


def ok_outcome(result: Any, attempt: int, duration_ms: int = 0) -> dict[str, Any]:
    return {
        "status": "ok",
        "result": result,
        "meta": {"attempt": attempt, "duration_ms": duration_ms},
    }


def error_outcome(error: dict[str, Any], attempt: int, duration_ms: int = 0) -> dict[str, Any]:
    return {
        "status": "error",
        "error": error,
        "meta": {"attempt": attempt, "duration_ms": duration_ms},
    }
