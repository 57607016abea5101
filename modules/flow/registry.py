"""The registry cell of `aos/FlowRegistry@1`, keyed by flow name (spec/11 §5): each
`Deploy {name, definition}` appends a version, unless that hash is already the latest."""

from __future__ import annotations

from typing import Any

from aos_sdk import DELETE


def on_event(state: Any, event: Any, ctx: Any) -> Any:
    deploy = event.get("$value") if type(event) is dict and event.get("$tag") == "Deploy" else None
    if type(deploy) is not dict:
        return state if state is not None else DELETE
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
