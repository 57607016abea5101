"""The start phase that resolves a flow's keychain (spec/11 §1.7, §3.2): before the first
step runs, one `aos/keychain.resolve@1` effect names the entries; its receipt brings back
references (placeholders), never secrets, which become the template namespace `keychain`.
A refused resolution (a missing entry) fails the execution with kind `authorization`."""

from __future__ import annotations

from typing import Any

from aos_flow import marking
from aos_flow.run import Run
from aos_sdk import cbor

KEYCHAIN_EFFECT = "aos/keychain.resolve@1"
WAIT_KIND = "keychain"


def request(run: Run, marker: Any) -> bool:
    """Ask for the definition's keychain entries, if it has any (True: the start waits,
    and `marker`, the distributed iteration it starts, if any, waits with it)."""
    entries = run.defn.keychain
    if not entries:
        return False
    wait_id = run.next_id("wait", "w")
    run.engine["waits"][wait_id] = {
        "kind": WAIT_KIND,
        "token": None,
        "frame": None,
        "version": run.version,
        "step": None,
        "task": None,
        "attempt": 1,
        "started_ns": run.now,
        "paired": None,
        "effect": KEYCHAIN_EFFECT,
        "signal": None,
        "child": None,
        "into": None,
        "timeout_ms": None,
        "start": marker,
    }
    run.effect(KEYCHAIN_EFFECT, {"exec": run.exec_id, "entries": entries}, wait_id)
    run.history.add("keychain.requested", wait=wait_id, entries=[e["name"] for e in entries])
    return True


def is_wait(state: dict[str, Any], wait_id: str) -> bool:
    return state["engine"]["waits"][wait_id]["kind"] == WAIT_KIND


def resolved(run: Run, wait_id: str, envelope: dict[str, Any]) -> tuple[bool, Any]:
    """Apply the resolution's receipt: (True, the start's marker) to go on, or (False, None)
    once the execution has failed."""
    wait = run.engine["waits"].pop(wait_id)
    status = (envelope.get("status") or {}).get("$tag")
    try:
        payload = cbor.decode(bytes(envelope.get("payload") or b""))
    except (cbor.CborError, TypeError):
        payload = None
    references = payload.get("entries") if type(payload) is dict else None
    names = [entry["name"] for entry in run.defn.keychain]
    if status == "ok" and type(references) is dict and all(n in references for n in names):
        run.business["keychain"] = {name: references[name] for name in names}
        refs = payload.get("refs") if type(payload.get("refs")) is dict else {}
        run.history.add("keychain.resolved", wait=wait_id, entries=names, refs=refs)
        return True, wait["start"]
    error = payload if type(payload) is dict else {}
    code = error["code"] if type(error.get("code")) is str else "keychain.unresolved"
    message = error["message"] if type(error.get("message")) is str else "not resolved"
    run.history.add("keychain.failed", wait=wait_id, code=code, message=message)
    marking.fail_execution(run, code, message, kind="authorization")
    return False, None
