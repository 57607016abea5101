"""The syntax tree of a `.flow` file: what the parser reads, before labels are resolved.

Every node keeps where it starts (`line`, `column`), so that later stages (the graph, the
checks) can point at the text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from typing import Literal as TypingLiteral

LiteralKind = TypingLiteral["yaml", "json_object", "json_array", "empty"]


@dataclass(frozen=True)
class Pos:
    line: int
    column: int


@dataclass
class LiteralValue:
    """A parameter literal `(- -)`, `({ })`, `([ ])` or a resource literal `<- ->`, `<{ }>`,
    `<[ ]>`: its kind, its text as written (between the delimiters) and its value."""

    kind: LiteralKind
    text: str
    value: Any
    pos: Pos


@dataclass
class Task:
    name: str
    params: LiteralValue | None
    pos: Pos


@dataclass
class Subflow:
    statements: list[Statement]
    bracket: str  # "{" or "["
    pos: Pos


@dataclass
class Step:
    """A task invocation, a `|` list of them (a subflow in disguise) or a subflow, with its
    optional input label, guard, iteration and merge operators and output label."""

    target: list[Task] | Subflow
    pos: Pos
    in_label: Label | None = None
    out_label: Label | None = None
    guard: Guard | None = None
    iterate: bool = False
    merge: bool = False
    end_line: int = 0  # the line the target ends on (an output label after it is ambiguous)


@dataclass
class Guard:
    expression: str  # between the backquotes
    pos: Pos


@dataclass
class Label:
    name: str
    pos: Pos
    merge: bool = False  # `→ > :x` ends a statement: the task(s) it feeds merge their input


@dataclass
class Resource:
    uri: str
    params: LiteralValue | None
    pos: Pos
    merge: bool = False  # `→ > <uri>`: a sink that merges its input before writing it


@dataclass
class ResourceLiteral:
    literal: LiteralValue
    pos: Pos


Element = Label | Step | Resource | ResourceLiteral


@dataclass
class Statement:
    elements: list[Element]
    pos: Pos


@dataclass
class Declaration:
    kind: str  # "flow" or "task"
    name: str
    pos: Pos
    alias: str | None = None
    params: LiteralValue | None = None
    doc: str | None = None
    subflow: Subflow | None = None


@dataclass
class Document:
    declarations: list[Declaration] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    items: list[Declaration | Statement] = field(default_factory=list)
