"""The compact flow language of seed 004 (spec/11-flows.md §11): `.flow` files.

parse      text -> syntax tree (`syntax.Document`), errors with line and column
graph      syntax tree -> invocation graph (labels, meets, subflows, declarations)
mermaid    graph -> `stateDiagram-v2` in the seed's layout
compile    graph -> canonical flow definition (plain data, validated by `aos.flows.define.cfd`)
fmt        syntax tree -> the text in a canonical layout
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePath
from typing import Any

from aos.flows.define.flowlang.binding import Binding
from aos.flows.define.flowlang.compile import compile_graph
from aos.flows.define.flowlang.errors import FlowLangError, FlowSyntaxError, LiteralError
from aos.flows.define.flowlang.fmt import format_document
from aos.flows.define.flowlang.graph import Graph, build_graph
from aos.flows.define.flowlang.mermaid import to_mermaid
from aos.flows.define.flowlang.parser import parse
from aos.flows.limits import DefinitionLimits

SUFFIX = ".flow"

__all__ = [
    "SUFFIX",
    "FlowLangError",
    "Graph",
    "compile_text",
    "errors_of",
    "format_text",
    "graph_of",
    "is_flow_source",
    "load_flow",
    "parse",
    "read_workbook",
    "to_mermaid",
]


def is_flow_source(source: str | None) -> bool:
    """Whether a document is a `.flow` file, by its name."""
    return source is not None and PurePath(source).suffix == SUFFIX


def graph_of(
    text: str, *, source: str | None = None, limits: DefinitionLimits | None = None
) -> Graph:
    return build_graph(parse(text, source=source, limits=limits), source=source)


def compile_text(
    text: str,
    *,
    source: str | None = None,
    limits: DefinitionLimits | None = None,
    workbook: Iterable[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The CFD (plain data, before validation) of a `.flow` text; every task must be
    bound (a `flow.lang.task_unbound` error lists those that are not)."""
    graph = graph_of(text, source=source, limits=limits)
    binding = Binding(graph, workbook, source=source)
    binding.check_bound(graph)
    hint = PurePath(source).stem if source else "flow"
    return compile_graph(graph, binding, name_hint=hint)


def format_text(
    text: str, *, source: str | None = None, limits: DefinitionLimits | None = None
) -> str:
    """The text in the canonical layout (`aos flow fmt`)."""
    return format_document(parse(text, source=source, limits=limits))


def read_workbook(
    data: bytes | str, *, source: str, limits: DefinitionLimits | None = None
) -> list[dict[str, Any]]:
    """A workbook file: a YAML or JSON list of `{name, tool}` entries (or a map holding one
    under `workbook`), the entries playbooks use."""
    from aos.flows.define.document import read_document
    from aos.flows.define.flowlang.binding import workbook_entries

    value = read_document(data, source=source, limits=limits or DefinitionLimits())
    if isinstance(value, dict) and "workbook" in value:
        value = value["workbook"]
    return workbook_entries(value, source)


def load_flow(
    text: str,
    *,
    source: str,
    workbook: Iterable[dict[str, Any]] = (),
    limits: DefinitionLimits | None = None,
) -> Any:
    """A `.flow` text as a checked `FlowDefinition` (its tasks bound by `workbook` too)."""
    from aos.flows.define.cfd import definition_from_value

    limits = limits or DefinitionLimits()
    value = compile_text(text, source=source, limits=limits, workbook=workbook)
    return definition_from_value(value, source=source, limits=limits)


ERRORS_PER_CHECK_MAX = 20
"""Most errors `errors_of` reports for one text (past the first few, most are echoes)."""


def errors_of(
    text: str,
    *,
    source: str,
    workbook: Iterable[dict[str, Any]] = (),
    limits: DefinitionLimits | None = None,
) -> list[FlowLangError]:
    """Every error of a `.flow` text one check can find, in the order found (empty: it is a
    flow). The grammar stops at its first error, so each error's line is set aside (made
    blank, so that the others keep their numbers) and the text is read again, until it reads,
    an error is not the grammar's (one of the whole graph, which lists all it finds: unbound
    tasks, say) or has no line to set aside, or `ERRORS_PER_CHECK_MAX`. A later error may be
    an echo of an earlier one (a statement cut in two)."""
    lines = text.split("\n")
    errors: list[FlowLangError] = []
    while len(errors) < ERRORS_PER_CHECK_MAX:
        try:
            compile_text("\n".join(lines), source=source, limits=limits, workbook=workbook)
            break
        except FlowLangError as error:
            errors.append(error)
            if not isinstance(error, (FlowSyntaxError, LiteralError)):
                break
            index = error.line - 1
            if not 0 <= index < len(lines) or not lines[index].strip():
                break
            lines[index] = ""
    return errors
