"""Resources `<uri>` as tool calls: a source loads (JSON or YAML by content), a sink writes
its input. `http://` and `https://` URIs are `http` tool calls; anything else is a path for
the `file` tool, relative to the base directory the world (or `--local`) names: the adapter
refuses a path that escapes it. Parameters (`(- method: PUT -)`) go into the tool spec."""

from __future__ import annotations

from typing import Any

from aos.flows.define.flowlang.graph import Node


def is_http(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def _params(node: Node) -> dict[str, Any]:
    return dict(node.params) if isinstance(node.params, dict) else {}


def source_tool(node: Node) -> dict[str, Any]:
    params = _params(node)
    if is_http(node.name):
        return {"kind": "http", "method": "GET", **params, "url": node.name}
    return {"kind": "file", "op": "read", **params, "path": _path(node.name)}


def sink_tool(node: Node) -> dict[str, Any]:
    params = _params(node)
    if is_http(node.name):
        return {
            "kind": "http",
            "method": "POST",
            **params,
            "url": node.name,
            "json": "{{ results.input }}",
        }
    return {"kind": "file", "op": "write", **params, "path": _path(node.name)}


def source_tasks(node: Node, when: str | None) -> list[dict[str, Any]]:
    call: dict[str, Any] = {
        "name": "run",
        "do": "call",
        "tool": source_tool(node),
        "args": {},
    }
    if when is not None:
        call["when"] = when
    if is_http(node.name):
        # The response's JSON when it is JSON, else its text.
        json_case = {
            "when": "{{ results.run is mapping and 'json' in results.run }}",
            "tasks": [{"name": "json", "do": "noop", "result": "{{ results.run.json }}"}],
        }
        text = {"name": "text", "do": "noop", "result": "{{ results.run.text }}"}
        return [call, {"name": "content", "do": "branch", "cases": [json_case], "else": [text]}]
    return [call]


def _path(uri: str) -> str:
    return uri.removeprefix("file:")
