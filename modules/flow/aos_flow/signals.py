"""The signal buffer (spec/11 §3.2): a signal no open wait takes is kept, in the order it
came, until a `wait_signal` task of its name starts, which then takes the oldest at once.

A signal is never buffered when it could never be delivered (no step of the definition waits
for its name), when the buffer holds `signals_buffered_max` already, or when it names an
`expect_version` (it is for the wait that was open at that version). Those are recorded as
`signal.dropped` (or stale) and change nothing; the host refuses them before they are
journaled, so they reach the interpreter only by a race or by a raw `aos world send`. A payload
longer than a reference is kept in the CAS, so each buffered signal costs the state a few
hundred bytes at most. What is still buffered when the execution ends is dropped, each signal
recorded.

An execution started before buffering has no `signals` in its engine state and keeps the
rules it started with: a signal no wait takes is stale."""

from __future__ import annotations

from typing import Any

from aos_flow.blobs import REF_BYTES_MAX
from aos_flow.definition import Definition
from aos_flow.run import Run, ok_outcome
from aos_sdk import cbor

SIGNALS = "signals"
NEVER_WAITED = "no step waits for it"
BUFFER_FULL = "the buffer is full"


def buffers(state: dict[str, Any]) -> bool:
    """Whether the execution buffers signals (it started on an interpreter that does)."""
    return SIGNALS in state["engine"]


def refusal(
    state: dict[str, Any], defn: Definition | None, signal: dict[str, Any], seq: int
) -> dict[str, Any] | None:
    """The `signal.dropped` event of a signal no wait took and the buffer will not keep, or
    None to buffer it (pure: a dropped signal leaves the state untouched). An unreadable
    definition buffers it: applying it then fails the execution, as any input would."""
    if defn is None:
        return None
    if signal.get("name") not in defn.signals:
        reason = NEVER_WAITED
    elif len(state["engine"][SIGNALS]) >= defn.limits["signals_buffered_max"]:
        reason = BUFFER_FULL
    else:
        return None
    return {
        "event": "signal.dropped",
        "name": signal.get("name"),
        "signal_seq": seq,
        "reason": reason,
    }


def buffer(run: Run, signal: dict[str, Any]) -> None:
    entry: dict[str, Any] = {"name": signal["name"], "seq": run.input_seq}
    payload = signal.get("payload")
    data = cbor.encode(payload)
    if len(data) > REF_BYTES_MAX:
        entry["stored"] = run.blobs.store(data, payload)
    else:
        entry["payload"] = payload
    run.engine[SIGNALS] = [*run.engine[SIGNALS], entry]
    run.history.add(
        "signal.buffered",
        name=signal["name"],
        signal_seq=run.input_seq,
        buffered=len(run.engine[SIGNALS]),
    )


def take(
    run: Run, token: dict[str, Any], frame: dict[str, Any], task: dict[str, Any]
) -> dict[str, Any] | None:
    """A `wait_signal` task starting: the ok outcome of the oldest buffered signal of its
    name (no wait is opened, no timeout armed), or None when there is none."""
    buffered = run.engine.get(SIGNALS)
    if task["do"] != "wait_signal" or not buffered:
        return None
    index = next((i for i, e in enumerate(buffered) if e["name"] == task["signal"]), None)
    if index is None:
        return None
    entry = buffered[index]
    payload = entry["payload"] if "payload" in entry else run.blobs.deref(entry["stored"])
    run.engine[SIGNALS] = [*buffered[:index], *buffered[index + 1 :]]
    run.history.add(
        "signal.received",
        name=entry["name"],
        signal_seq=entry["seq"],
        step=token["step"],
        task=task["name"],
        token=token["id"],
    )
    return ok_outcome(payload, frame["attempt"])


def drop(run: Run, reason: str) -> None:
    """The execution ends: every signal still buffered is dropped, each recorded."""
    for entry in run.engine.get(SIGNALS) or ():
        run.history.add(
            "signal.dropped", name=entry["name"], signal_seq=entry["seq"], reason=reason
        )
    if run.engine.get(SIGNALS):
        run.engine[SIGNALS] = []
