"""The registry cell of `aos/FlowRegistry@1`, keyed by flow name (spec/11 §5): each
`Deploy {name, definition}` appends a version, unless that hash is already the latest; each
`Lookup` (a subflow task naming its child by a template, §3.5) starts the child at the
latest version, or tells the parent there is no such flow."""

from __future__ import annotations

from typing import Any

from aos_sdk import DELETE

START_EVENT = "aos/FlowStart@1"
ENDED_EVENT = "aos/FlowEnded@1"


def on_event(state: Any, event: Any, ctx: Any) -> Any:
    tag = event.get("$tag") if type(event) is dict else None
    value = event.get("$value") if type(event) is dict else None
    if type(value) is not dict:
        return state if state is not None else DELETE
    if tag == "Lookup":
        _lookup(state, value, ctx)
        return state if state is not None else DELETE
    if tag != "Deploy":
        return state if state is not None else DELETE
    return _deploy(state, value, ctx)


def _deploy(state: Any, deploy: dict[str, Any], ctx: Any) -> Any:
    if state is None:
        state = {"name": deploy.get("name"), "versions": []}
    versions = state["versions"]
    if versions and versions[-1]["definition"] == deploy.get("definition"):
        return state  # deploying the latest hash again changes nothing
    latest = versions[-1]["version"] if versions else 0
    version = {
        "version": latest + 1,
        "definition": deploy.get("definition"),
        "deployed_ns": ctx.now_ns,
    }
    return {"name": state["name"], "versions": [*versions, version]}


def _lookup(state: Any, lookup: dict[str, Any], ctx: Any) -> None:
    """The child's start at this flow's latest version; no version: the parent's wait ends
    with `subflow.unknown`, naming the flow and the path it was rendered from."""
    parent = lookup.get("parent") or {}
    if state is None or not state["versions"]:
        message = f"no flow named {lookup.get('name')!r} is deployed (path {lookup.get('path')!r})"
        error = {
            "kind": "engine",
            "code": "subflow.unknown",
            "message": message,
            "retryable": False,
        }
        ended = {
            "exec": parent.get("exec"),
            "child": lookup.get("exec"),
            "token": parent.get("token"),
            "status": "failed",
            "result": None,
            "error": error,
        }
        ctx.emit(ENDED_EVENT, ended)
        return
    latest = state["versions"][-1]
    start = {
        "exec": lookup.get("exec"),
        "flow": state["name"],
        "version": latest["version"],
        "definition": latest["definition"],
        "workload": lookup.get("workload"),
        "parent": parent,
        "business_ref": lookup.get("business_ref"),
    }
    ctx.emit(START_EVENT, start)
