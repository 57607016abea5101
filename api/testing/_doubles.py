"""Tool doubles (spec/11 §13.2): what a test world's tool adapter answers instead of the real
tool, per task or per tool kind, with every tool call recorded for assertions.

A double is a function of the call (its return value is the result; raising `Failure` is an
error outcome) or a sequence of canned answers given in order, the last one repeated (each a
result, or a `Failure`). A call is matched by `STEP.TASK`, then its task's name, then its
step's name, then its tool kind; a call nothing matches runs the real tool. The doubles
answer inside the adapter, so the guest and the kernel run as they do in production: each
answer is a signed receipt, journaled and replayed like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aos.flows.serve.flow_world import FlowKeys
from aos.flows.serve.local import LocalAdapters
from aos.flows.tools.dispatch import EFFECT_OF_KIND
from aos.flows.tools.outcomes import ToolOutcome, failure
from aos.kernel import cbor
from aos.kernel.world.world import World

KIND_OF_EFFECT = {effect: kind for kind, effect in EFFECT_OF_KIND.items()}

CALLS_RECORDED_MAX = 100_000
"""How many calls one `ToolDoubles` keeps (a runaway loop in a test stops growing it)."""


class Failure(Exception):  # noqa: N818 - a tool's answer, raised or given, not a fault of the kit
    """A tool's error answer: `code`, `message`, the flow error `kind` (spec/11 §3.3) and
    whether a retry may help."""

    def __init__(
        self, code: str, message: str = "", *, kind: str = "transport", retryable: bool = True
    ) -> None:
        super().__init__(message or code)
        self.code, self.message, self.kind, self.retryable = code, message or code, kind, retryable

    def outcome(self) -> ToolOutcome:
        return failure(self.code, self.message, kind=self.kind, retryable=self.retryable)


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the adapter received it (`args` as JSON), and whether a double
    answered it."""

    exec: str
    step: str
    task: str
    attempt: int
    kind: str
    args: Any
    doubled: bool


Double = Callable[[ToolCall], Any] | Sequence[Any]


@dataclass
class ToolDoubles:
    """Doubles by task (`STEP.TASK`, a task's or a step's name) and by tool kind."""

    tasks: dict[str, Double] = field(default_factory=dict)
    kinds: dict[str, Double] = field(default_factory=dict)
    calls: list[ToolCall] = field(default_factory=list)
    answered: dict[str, int] = field(default_factory=dict)

    def calls_of(self, name: str) -> list[ToolCall]:
        """The calls of a task (`STEP.TASK`, its task's or its step's name) or a tool kind."""
        return [c for c in self.calls if name in (f"{c.step}.{c.task}", c.task, c.step, c.kind)]

    def answer(self, effect: str, params: Any) -> ToolOutcome | None:
        """The double's outcome for a tool call, or None: the real tool runs."""
        kind = KIND_OF_EFFECT.get(effect)
        if kind is None or not isinstance(params, dict):
            return None
        step, task = str(params.get("step")), str(params.get("task"))
        name, double = self._double(step, task, kind)
        attempt = params.get("attempt")
        call = ToolCall(
            exec=str(params.get("exec")),
            step=step,
            task=task,
            attempt=attempt if type(attempt) is int else 0,
            kind=kind,
            args=cbor.to_json(params.get("args")),
            doubled=double is not None,
        )
        if len(self.calls) < CALLS_RECORDED_MAX:
            self.calls.append(call)
        if double is None:
            return None
        return self._outcome(name, double, call)

    def _double(self, step: str, task: str, kind: str) -> tuple[str, Double | None]:
        for name in (f"{step}.{task}", task, step):
            if name in self.tasks:
                return name, self.tasks[name]
        return kind, self.kinds.get(kind)

    def _outcome(self, name: str, double: Double, call: ToolCall) -> ToolOutcome:
        if callable(double):
            try:
                return ToolOutcome("ok", cbor.from_json(double(call)))
            except Failure as failed:
                return failed.outcome()
        if not double:
            return failure("double.empty", f"the double of {name} has no answers")
        index = self.answered.get(name, 0)
        self.answered[name] = index + 1
        given = double[min(index, len(double) - 1)]
        if isinstance(given, Failure):
            return given.outcome()
        return ToolOutcome("ok", cbor.from_json(given))


class DoubledAdapters(LocalAdapters):
    """The in-process tool adapters with `doubles` answering before the real tools."""

    def __init__(self, world: World, keys: FlowKeys, doubles: ToolDoubles, **options: Any) -> None:
        super().__init__(world, keys, **options)
        self.doubles = doubles

    def outcome(self, intent: str, effect: str, params: Any) -> ToolOutcome:
        doubled = self.doubles.answer(effect, params)
        return doubled if doubled is not None else super().outcome(intent, effect, params)
