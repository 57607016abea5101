"""The python tasks of the bench playbooks' canonical-flow stand-ins (`cfd/*.flow.yaml`): each
function does what the playbook's inline `code` does, called by the `python` tool with the
task's rendered args. Standard library only: the tool runs it in its own interpreter."""

from __future__ import annotations

from typing import Any


def greet(args: dict[str, Any]) -> dict[str, Any]:
    return {"greeting": args["message"]}


def shout(args: dict[str, Any]) -> dict[str, Any]:
    return {"shout": str(args["message"]).upper()}


def hello_end(args: dict[str, Any]) -> dict[str, Any]:
    return {"done": True, "length": len(args["message"])}


def square(args: dict[str, Any]) -> dict[str, Any]:
    item = args["item"]
    return {"item": item, "square": item * item}


def loop_end(args: dict[str, Any]) -> dict[str, Any]:
    return {"done": True}
