"""Drive the flow interpreter natively: canonical definitions written by hand, stored in a
fake CAS, and inputs built the way the kernel builds them (receipt envelopes included)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aos_flow import compact
from aos_flow import workflow as app

from aos.kernel import cbor
from aos.kernel.hashing import hash_bytes
from aos_sdk import testing
from aos_sdk.envelope import StepOutput

FLOW_DIR = Path(__file__).resolve().parents[2] / "modules" / "flow"
"""The component's source tree: the entry `app.py`, `bundle.txt` and the `aos_flow` package."""
EXEC_WORKFLOW = "aos/FlowExec@1"
EXEC_EVENT = "aos/FlowExecEvent@1"
REGISTRY_EVENT = "aos/FlowRegistryEvent@1"
TIMER = "sys/timer.set@1"
SEC = 1_000_000_000
ZERO_HASH = "blake3:" + "0" * 64

# -- canonical definitions --------------------------------------------------------------------


def guard(text: str | None) -> dict[str, str] | None:
    if text is None:
        return None
    return {"jsonpath": text} if text.startswith("$") else {"template": text}


def rule(when: str | None = None, do: str = "continue", **then: Any) -> dict[str, Any]:
    full = {
        "do": do,
        "attempts": 3,
        "backoff": "none",
        "delay_ms": 1000,
        "to": None,
        "set_ctx": {},
        "set_iter": {},
    }
    full.update(then)
    return {"when": guard(when), "then": full}


_TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "assign": {"set": {}},
    "business_ref": {"value": None},
    "call": {
        "tool": {"kind": "echo"},
        "args": {},
        "timeout_ms": None,
        "branches": {"ok": [], "error": [], "timeout": []},
    },
    "branch": {"cases": [], "else": []},
    "repeat": {"over": [], "as": "item", "tasks": []},
    "human": {
        "title": "",
        "description": None,
        "assignee": None,
        "roles": [],
        "form": None,
        "data": None,
        "timeout_ms": None,
    },
    "wait_signal": {"signal": "go", "timeout_ms": None},
    "wait_timer": {"duration_ms": None, "until_ns": None},
    "subflow": {"flow": "self", "workload": {}, "into": None},
    "continue_with": {"flow": "self", "workload": {}},
    "fail": {"message": "", "kind": "expression"},
    "noop": {"result": None},
}


def task(
    name: str, do: str, *, when: str | None = None, rules: list[Any] | None = None, **fields: Any
) -> dict[str, Any]:
    full = {
        "name": name,
        "do": do,
        "when": guard(when),
        "policy": {"rules": rules} if rules is not None else None,
    }
    full.update(_TASK_DEFAULTS[do])
    if do == "call" and "branches" in fields:
        fields["branches"] = {"ok": [], "error": [], "timeout": [], **fields["branches"]}
    full.update(fields)
    return full


def arc(to: str, when: str | None = None, args: Any = None) -> dict[str, Any]:
    return {"to": to, "when": guard(when), "args": {} if args is None else args}


def step(
    name: str,
    tasks: list[Any] | None = None,
    *,
    arcs: list[Any] | None = None,
    mode: str = "exclusive",
    admit: str | None = None,
    join: str = "none",
    loop: dict[str, Any] | None = None,
    result: Any = None,
    set_ctx: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if loop is not None:
        loop = {
            "iterator": "item",
            "mode": "sequential",
            "max_in_flight": None,
            "exec": "local",
            **loop,
        }
    written = {
        "name": name,
        "description": None,
        "admit": guard(admit),
        "join": join,
        "loop": loop,
        "tasks": tasks or [],
        "result": result,
        "next": {"mode": mode, "arcs": arcs or []},
    }
    if set_ctx is not None:  # aos.flow/2 (an aos.flow/1 step has no such field)
        written["set_ctx"] = set_ctx
    return written


def flow(
    steps: list[Any],
    *,
    name: str = "t/flow",
    workload: Any = None,
    entry: str | None = None,
    limits: Any = None,
    subflows: Any = None,
    format: str = "aos.flow/1",
    **policy: Any,
) -> dict[str, Any]:
    return {
        "format": format,
        "name": name,
        "description": None,
        "workload": workload or {},
        "entry": entry or steps[0]["name"],
        "policy": {
            "on_deny": "keep",
            "no_next_is_error": False,
            "failure_mode": "fail_fast",
            "final_step": None,
            **policy,
        },
        "limits": limits or {},
        "subflows": subflows or {},
        "steps": steps,
    }


def store(blobs: dict[str, bytes], value: Any) -> str:
    data = cbor.encode(value)
    digest = str(hash_bytes(data))
    blobs[digest] = data
    return digest


# -- driving an execution ---------------------------------------------------------------------


@dataclass
class Execution:
    """One execution cell: its state threaded from step to step, a clock, and the CAS."""

    exec_id: str = "e1"
    blobs: dict[str, bytes] = field(default_factory=dict)
    state: Any = None
    now_ns: int = 1_000 * SEC
    height: int = 1
    outputs: list[StepOutput] = field(default_factory=list)

    def deploy(self, definition: dict[str, Any]) -> str:
        return store(self.blobs, definition)

    def start(
        self,
        definition: dict[str, Any] | str,
        workload: Any = None,
        *,
        parent: Any = None,
        flow_name: str = "t/flow",
        business_ref: str | None = None,
    ) -> StepOutput:
        digest = definition if type(definition) is str else self.deploy(definition)
        return self.send(
            "Start",
            {
                "exec": self.exec_id,
                "flow": flow_name,
                "version": 1,
                "definition": digest,
                "workload": workload if workload is not None else {},
                "parent": parent,
                "business_ref": business_ref,
            },
        )

    def send(self, tag: str, value: Any) -> StepOutput:
        output = self.step_raw({"$tag": tag, "$value": value})
        if output.has_state:
            self.state = output.state
        else:
            self.state = None
        return output

    def step_raw(self, event: Any, *, advance: bool = True) -> StepOutput:
        ctx = testing.make_ctx(
            workflow=EXEC_WORKFLOW, now_ns=self.now_ns, journal_height=self.height, key=self.exec_id
        )
        output = testing.step(
            app.flow,
            self.state,
            testing.Event(EXEC_EVENT, event, key=self.exec_id),
            ctx,
            blobs=self.blobs,
        )
        if advance:
            self.height += 1
        self.outputs.append(output)
        return output

    # inputs -------------------------------------------------------------------------------

    def receipt(
        self, effect: Any, value: Any = None, *, status: str = "ok", issuer_ref: str | None = None
    ) -> StepOutput:
        """The receipt of an effect intent (by default ok, payload `value`)."""
        return self.send("Receipt", envelope(self.exec_id, effect, value, status, issuer_ref))

    def fire(self, timer: Any) -> StepOutput:
        """A timer's receipt, at its deliver time."""
        self.now_ns = max(self.now_ns, timer.params["deliver_at_ns"])
        return self.receipt(timer, {"delivered_at_ns": self.now_ns, "key": timer.params["key"]})

    def signal(
        self, name: str, payload: Any = None, expect_version: int | None = None
    ) -> StepOutput:
        return self.send(
            "Signal",
            {
                "exec": self.exec_id,
                "name": name,
                "payload": payload,
                "expect_version": expect_version,
            },
        )

    def ended(
        self,
        child: str,
        token: str,
        status: str = "completed",
        result: Any = None,
        error: Any = None,
    ) -> StepOutput:
        return self.send(
            "Ended",
            {
                "exec": self.exec_id,
                "child": child,
                "token": token,
                "status": status,
                "result": result,
                "error": error,
            },
        )

    def cancel(self, reason: str | None = None) -> StepOutput:
        return self.send("Cancel", {"exec": self.exec_id, "reason": reason})

    # reading ------------------------------------------------------------------------------

    @property
    def status(self) -> str:
        return self.state["status"]

    @property
    def business(self) -> dict[str, Any]:
        return self.state["business"]

    @property
    def engine(self) -> dict[str, Any]:
        """The engine state as the interpreter reads it (the stored records leave out the
        fields at their defaults, spec/11 §3.1)."""
        return compact.expanded(self.state)["engine"]

    def state_bytes(self) -> bytes:
        return cbor.encode(self.state)


def envelope(
    exec_id: str, effect: Any, value: Any, status: str = "ok", issuer_ref: str | None = None
) -> dict[str, Any]:
    """`sys/EffectReceiptEnvelope@1` as the kernel delivers it to the origin cell."""
    name = effect.effect if hasattr(effect, "effect") else effect
    ref = issuer_ref if issuer_ref is not None else getattr(effect, "issuer_ref", None)
    return {
        "origin_workflow": EXEC_WORKFLOW,
        "origin_key": cbor.encode(exec_id),
        "intent_hash": "blake3:" + "1" * 64,
        "effect": name,
        "adapter": "sys/timer@1" if name == TIMER else "aos/echo@1",
        "issuer_ref": ref,
        "emitted_seq": 1,
        "status": {"$tag": status},
        "payload": cbor.encode(value),
    }


def events(output: StepOutput) -> list[dict[str, Any]]:
    """The history events the step annotated."""
    assert output.has_ann, "every step annotates its history"
    return output.ann["events"]


def names(output: StepOutput) -> list[str]:
    return [event["event"] for event in events(output)]


def effects(output: StepOutput, name: str | None = None) -> list[Any]:
    return [e for e in output.effects if name is None or e.effect == name]


def domain(output: StepOutput, schema: str | None = None) -> list[Any]:
    return [e for e in output.domain_events if schema is None or e.schema == schema]


def registry_step(state: Any, name: str, definition: str, now_ns: int = 5) -> StepOutput:
    return registry_input(state, name, "Deploy", {"name": name, "definition": definition}, now_ns)


def registry_input(
    state: Any, name: str, tag: str, value: dict[str, Any], now_ns: int = 5
) -> StepOutput:
    ctx = testing.make_ctx(workflow="aos/FlowRegistry@1", now_ns=now_ns, key=name)
    event = {"$tag": tag, "$value": value}
    return testing.step(app.flow, state, testing.Event(REGISTRY_EVENT, event, key=name), ctx)
