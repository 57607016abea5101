"""Binding task names to work (FLOWS.md §4): a task name is a workbook entry deployed with
the flow (`{name, tool}`, the shape playbooks use; given to the compiler, or in the `@flow`
parameters as `workbook: [...]`), or a `@task` whose parameters carry a `tool:`, or the
built-in `echo` (its output is its input). Any other name is unbound: a check-time error
listing every such name."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aos.flows.define.flowlang.errors import DeclarationError, UnboundTasksError
from aos.flows.define.flowlang.graph import Graph, Node

BUILTIN_ECHO = "echo"


class Binding:
    """Where each task's work is."""

    def __init__(
        self,
        graph: Graph,
        workbook: Iterable[dict[str, Any]] = (),
        *,
        source: str | None = None,
    ) -> None:
        self.source = source
        self.entries: dict[str, dict[str, Any]] = {}
        params = graph.flow_params if isinstance(graph.flow_params, dict) else {}
        for entry in [*workbook_entries(params.get("workbook"), source), *workbook]:
            self.entries[str(entry["name"])] = dict(entry["tool"])

    def tool_of(self, node: Node) -> dict[str, Any] | None:
        params = node.params if isinstance(node.params, dict) else {}
        if isinstance(params.get("tool"), dict):
            return dict(params["tool"])
        if node.name in self.entries:
            return dict(self.entries[node.name])
        if node.name == BUILTIN_ECHO:
            return {"kind": "echo"}
        return None

    def call_for(self, node: Node, value: str) -> tuple[dict[str, Any], Any]:
        """The tool and the `args` of the node's call, given the template of its input.
        `echo` gets the input itself; another tool gets `{input, params}` (its parameters
        besides `tool`)."""
        tool = self.tool_of(node)
        assert tool is not None, "check_bound first"
        if tool.get("kind") == "echo":
            return tool, value
        params = (
            {k: v for k, v in (node.params or {}).items() if k != "tool"}
            if isinstance(node.params, dict)
            else node.params
        )
        return tool, {"input": value, "params": params if params is not None else {}}

    def check_bound(self, graph: Graph) -> None:
        unbound: dict[str, Node] = {}
        for node in graph.nodes.values():
            if node.kind == "task" and self.tool_of(node) is None:
                unbound.setdefault(node.name, node)
        if unbound:
            first = min(unbound.values(), key=lambda n: n.number)
            names = ", ".join(sorted(unbound))
            message = f"unbound tasks: {names} (no workbook entry, @task with a tool, or built-in)"
            raise UnboundTasksError(message, first.pos.line, first.pos.column, source=self.source)


def workbook_entries(value: Any, source: str | None) -> list[dict[str, Any]]:
    """Checked workbook entries: a list of `{name: text, tool: {kind, ...}}`."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(item, dict)
        and isinstance(item.get("name"), str)
        and isinstance(item.get("tool"), dict)
        for item in value
    ):
        message = "a workbook is a list of {name, tool} entries"
        raise DeclarationError(message, 1, 1, source=source)
    return value
