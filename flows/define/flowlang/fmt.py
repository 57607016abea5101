"""`aos flow fmt`: a `.flow` syntax tree printed back in one canonical layout.

Declarations first, one a line; then one statement a line, ` → ` between elements, each
ended with `;` (so no statement can run into the next); subflows inline in `{ }`; literals
as compact JSON (`({...})`, `([...])`, `<{...}>`, `<[...]>`; a scalar in the YAML form, since
JSON is YAML). Comments are not kept. Printing and parsing again gives the same graph."""

from __future__ import annotations

import json
from typing import Any

from aos.flows.define.flowlang.syntax import (
    Declaration,
    Document,
    Element,
    Label,
    LiteralValue,
    Resource,
    ResourceLiteral,
    Statement,
    Step,
    Subflow,
)


def format_document(document: Document) -> str:
    lines = [_declaration(d) for d in document.declarations]
    lines += [_statement(s) + ";" for s in document.statements]
    return "\n".join(lines) + "\n"


def _declaration(decl: Declaration) -> str:
    parts = [f"@{decl.kind} {decl.name}"]
    if decl.alias is not None:
        parts.append(f"= {decl.alias}")
    if decl.params is not None:
        parts.append(_params(decl.params))
    if decl.doc is not None:
        quote = '"""' if "'''" in decl.doc else "'''"
        parts.append(f"{quote}{decl.doc}{quote}")
    if decl.subflow is not None:
        parts.append(_subflow(decl.subflow))
    return " ".join(parts) + ";"


def _statement(statement: Statement) -> str:
    return " → ".join(_element(e) for e in statement.elements)


def _element(element: Element) -> str:
    merge = "> " if isinstance(element, Label | Resource) and element.merge else ""
    if isinstance(element, Label):
        return f"{merge}:{element.name}"
    if isinstance(element, Resource):
        params = f" {_params(element.params)}" if element.params is not None else ""
        return f"{merge}<{element.uri}>{params}"
    if isinstance(element, ResourceLiteral):
        return _literal(element.literal.value, "<", ">")
    return _step(element)


def _step(step: Step) -> str:
    parts = []
    if step.in_label is not None:
        parts.append(f":{step.in_label.name}")
    if step.guard is not None:
        parts.append(f"? `{step.guard.expression}`")
    if step.iterate:
        parts.append("*")
    if step.merge:
        parts.append(">")
    if isinstance(step.target, Subflow):
        parts.append(_subflow(step.target))
    else:
        tasks = []
        for task in step.target:
            params = f" {_params(task.params)}" if task.params is not None else ""
            tasks.append(task.name + params)
        parts.append(" | ".join(tasks))
    if step.out_label is not None:
        parts.append(f":{step.out_label.name}")
    return " ".join(parts)


def _subflow(subflow: Subflow) -> str:
    inner = " ".join(_statement(s) + ";" for s in subflow.statements)
    return "{ " + inner + " }" if inner else "{ }"


def _params(literal: LiteralValue) -> str:
    return _literal(literal.value, "(", ")")


def _literal(value: Any, opener: str, closer: str) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if isinstance(value, (dict, list)):
        return f"{opener}{text}{closer}"
    return f"{opener}- {text} -{closer}"
