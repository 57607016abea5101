"""Run a playbook on the interpreter natively, with the real tools: the playbook is compiled
to its canonical definition, the interpreter steps it (tests/flow_interpreter/harness.py),
every tool call is performed by `aos.flows.tools.dispatch.run_tool` (the python worker, real HTTP to
a server the test starts) and every timer fires at its logical time, earliest first."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aos.flows.define.cfd import canonical_value
from aos.flows.define.document import load_flow
from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import TOOL_EFFECTS, run_tool
from aos.kernel.hashing import hash_bytes
from tests.flow_interpreter.harness import TIMER, Execution, names

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpora" / "noetl"
PLAYBOOKS = CORPUS / "noetl" / "tests" / "fixtures" / "playbooks"
INPUTS_MAX = 2_000


@dataclass
class Run:
    """One finished (or stuck) execution: its state, history and the calls it made."""

    execution: Execution
    history: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (effect, params)
    fired: list[int] = field(default_factory=list)  # the logical times timers fired at

    @property
    def status(self) -> str:
        return str(self.execution.status)

    @property
    def steps(self) -> dict[str, Any]:
        return dict(self.execution.business["steps"])

    @property
    def ctx(self) -> dict[str, Any]:
        return dict(self.execution.business["ctx"])

    def names(self) -> list[str]:
        return [str(event["event"]) for event in self.history]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [event for event in self.history if event["event"] == name]


def definition(text: str | bytes, source: str = "<test>") -> dict[str, Any]:
    return canonical_value(load_flow(text, source=source))


def run_playbook(text: str | bytes, workload: Any = None, *, source: str = "<test>") -> Run:
    """Start the playbook and answer every call and timer until it ends."""
    execution = Execution()
    run = Run(execution)
    _take(run, execution.start(definition(text, source), workload), pending := {})
    for _ in range(INPUTS_MAX):
        if execution.state is None or execution.status != "running" or not pending:
            break
        tool = next((e for e in pending.values() if e.effect != TIMER), None)
        if tool is not None:
            del pending[tool.issuer_ref]
            _take(run, _perform(run, tool), pending)
            continue
        timer = min(pending.values(), key=lambda e: e.params["deliver_at_ns"])
        del pending[timer.issuer_ref]
        run.fired.append(timer.params["deliver_at_ns"])
        _take(run, execution.fire(timer), pending)
    return run


def _take(run: Run, output: Any, pending: dict[str, Any]) -> None:
    run.history.extend(output.ann["events"] if output.has_ann else [])
    for ref in output.cancel:
        pending.pop(ref, None)
    for effect in output.effects:
        pending[effect.issuer_ref] = effect


def _perform(run: Run, effect: Any) -> Any:
    assert effect.effect in TOOL_EFFECTS, effect.effect
    run.calls.append((effect.effect, effect.params))
    intent = f"{effect.issuer_ref}:{len(run.calls)}"
    context = ToolContext(intent=intent, put_blob=lambda data: _put(run.execution, data))
    outcome = run_tool(effect.effect, effect.params, context=context)
    return run.execution.receipt(effect, outcome.payload, status=outcome.status)


def _put(execution: Execution, data: bytes) -> str:
    digest = str(hash_bytes(data))
    execution.blobs[digest] = data
    return digest


__all__ = ["PLAYBOOKS", "Run", "definition", "names", "run_playbook"]
