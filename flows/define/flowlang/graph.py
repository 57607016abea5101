"""The flow graph of a `.flow` file (seed 004 "Stitching the graph").

Every task reference is its own invocation (a node); statements chain nodes with edges;
labels stitch statements together inside their (sub)flow: every node whose *output* carries a
label (`A :x`, `A → :x`) feeds every node whose *input* carries it (`:x A`, `:x → A`). A
statement that does not begin with a label begins at its scope's start; one that does not end
with a label ends at its scope's end. A subflow (`{ }`, `[ ]`, `A|B|C`, or a `@task` with a
subflow) is a fork node, its own statements, and a join node. Declarations are applied here:
aliases are resolved, default parameters merged, declared subflows expanded in place.

Numbering follows the text (seed 004's diagrams): a node is numbered when it is met, a
subflow's join after its contents; the flow's own start and end are `[*]`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aos.flows.define.flowlang import errors as e
from aos.flows.define.flowlang.syntax import (
    Declaration,
    Document,
    Element,
    Label,
    Pos,
    Resource,
    ResourceLiteral,
    Statement,
    Step,
    Subflow,
    Task,
)

INVOCATIONS_MAX = 10_000
"""Nodes of one flow, declared subflows expanded (expansion could otherwise blow up)."""
ALIAS_CHAIN_MAX = 64
RESERVED = ("start", "end")
START, END = 0, -1
"""The flow's own start and end (drawn `[*]`)."""


@dataclass
class Node:
    """One node: a task invocation, a resource (source or sink), a literal source, a
    subflow's fork or join, or the flow's start or end."""

    number: int
    kind: str  # task | source | sink | literal | fork | join | start | end
    name: str = ""
    pos: Pos = field(default_factory=lambda: Pos(1, 1))
    params: Any = None
    guard: str | None = None
    iterate: bool = False
    merge: bool = False
    gates: tuple[int, ...] = ()
    """The guarded subflows around this node (their fork numbers): it runs only if all hold."""
    doc: str | None = None
    invoked: str = ""
    """The name written at the invocation (before an alias is resolved)."""
    fork: int | None = None
    """A join's fork (and a fork's join, once known)."""


@dataclass
class Graph:
    name: str | None
    doc: str | None
    nodes: dict[int, Node]
    edges: list[tuple[int, int]]
    declarations: dict[str, Declaration]
    flow_params: Any = None
    _adjacent: tuple[dict[int, list[int]], dict[int, list[int]]] | None = field(
        default=None, repr=False, compare=False
    )

    def successors(self, number: int) -> list[int]:
        return list(self._adjacency()[0].get(number, ()))

    def predecessors(self, number: int) -> list[int]:
        return sorted(self._adjacency()[1].get(number, ()), key=self.order)

    def _adjacency(self) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
        """Successors and predecessors by node, made once (the graph is not changed after
        it is built)."""
        if self._adjacent is None:
            after: dict[int, list[int]] = {}
            before: dict[int, list[int]] = {}
            for a, b in self.edges:
                after.setdefault(a, []).append(b)
                before.setdefault(b, []).append(a)
            self._adjacent = (after, before)
        return self._adjacent

    def order(self, number: int) -> int:
        """Start first, then the text's order, end last."""
        return -1 if number == START else (10**12 if number == END else number)

    def task_names(self) -> list[str]:
        return sorted({n.name for n in self.nodes.values() if n.kind == "task"})


@dataclass
class _Use:
    node: int
    via: str  # step | dest (producers); step | source (consumers)
    pos: Pos


@dataclass
class _Scope:
    start: int
    gates: tuple[int, ...]
    iterate: bool
    to_end: list[tuple[int, Pos]] = field(default_factory=list)
    outputs: dict[str, list[_Use]] = field(default_factory=dict)
    inputs: dict[str, list[_Use]] = field(default_factory=dict)
    merges: set[str] = field(default_factory=set)
    """Labels a statement ends with `> :x`: whatever they feed merges its input (`end` too)."""
    unsure: dict[str, Pos] = field(default_factory=dict)
    """Output labels on the line after their task, read as that task's (as littleflow does)."""


def build_graph(
    document: Document, *, source: str | None = None, invocations_max: int = INVOCATIONS_MAX
) -> Graph:
    """The graph of a parsed flow, with at most `invocations_max` nodes."""
    return _Builder(document, source, invocations_max).build()


class _Builder:
    def __init__(self, document: Document, source: str | None, invocations_max: int) -> None:
        self.document = document
        self.source = source
        self.invocations_max = invocations_max
        self.nodes: dict[int, Node] = {}
        self.edges: list[tuple[int, int]] = []
        self.edge_set: set[tuple[int, int]] = set()
        self.count = 0
        self.expanding: list[str] = []
        self.flow: Declaration | None = None
        self.tasks: dict[str, Declaration] = {}

    def error(self, kind: type[e.FlowLangError], message: str, pos: Pos) -> e.FlowLangError:
        return kind(message, pos.line, pos.column, source=self.source)

    # -- declarations ---------------------------------------------------------------------

    def declare(self) -> None:
        for decl in self.document.declarations:
            if decl.kind == "flow":
                if self.flow is not None:
                    raise self.error(
                        e.DeclarationError, "there can only be one @flow declaration", decl.pos
                    )
                if decl.alias is not None or decl.subflow is not None:
                    message = "a @flow declaration has a name, parameters and documentation"
                    raise self.error(e.DeclarationError, message, decl.pos)
                self.flow = decl
                continue
            # A task declared again replaces its earlier declaration, as in littleflow.
            if decl.alias is not None and decl.subflow is not None:
                message = f"task {decl.name!r} has an alias, so it may not have a subflow"
                raise self.error(e.DeclarationError, message, decl.pos)
            self.tasks[decl.name] = decl

    # -- the whole flow -------------------------------------------------------------------

    def build(self) -> Graph:
        self.declare()
        self.nodes[START] = Node(START, "start", "start")
        scope = _Scope(START, (), False)
        for statement in self.document.statements:
            self.statement(statement, scope)
        self.nodes[END] = Node(END, "end", "end")
        self.close(scope, END)
        flow = self.flow
        return Graph(
            name=flow.name if flow else None,
            doc=flow.doc if flow else None,
            nodes=self.nodes,
            edges=self.edges,
            declarations=dict(self.tasks),
            flow_params=flow.params.value if flow and flow.params else None,
        )

    def new(self, kind: str, pos: Pos, scope: _Scope, **fields: Any) -> Node:
        self.count += 1
        if self.count > self.invocations_max:
            message = f"the flow has more than {self.invocations_max} invocations"
            raise self.error(e.FlowLangLimitError, message, pos)
        node = Node(self.count, kind, pos=pos, gates=scope.gates, **fields)
        self.nodes[node.number] = node
        return node

    def edge(self, a: int, b: int) -> None:
        if (a, b) not in self.edge_set:
            self.edge_set.add((a, b))
            self.edges.append((a, b))

    def close(self, scope: _Scope, end: int) -> None:
        """The scope's end edges, then its labels stitched (producers by consumers), the
        merges of `> :x` applied to what `:x` feeds."""
        for node, _ in scope.to_end:
            self.edge(node, end)
        self.nodes[end].merge = self.nodes[end].merge or "end" in scope.merges
        for name, consumers in scope.inputs.items():
            if name in scope.merges:
                for consumer in consumers:
                    self.nodes[consumer.node].merge = True
            producers = scope.outputs.get(name)
            if not producers:
                raise self.error(e.UnknownLabelError, f"unknown label '{name}'", consumers[0].pos)
            for producer in producers:
                for consumer in consumers:
                    self.edge(producer.node, consumer.node)
        for name, pos in scope.unsure.items():
            if name not in scope.inputs and len(scope.outputs.get(name, ())) > 1:
                raise self.error(e.AmbiguousMeetError, _ambiguous(name), pos)

    # -- statements -----------------------------------------------------------------------

    def statement(self, statement: Statement, scope: _Scope) -> None:
        elements = list(statement.elements)
        first = elements[0]
        previous: int | None = scope.start
        source_label: Label | None = None
        if isinstance(first, Label):
            elements.pop(0)
            if first.merge:
                message = f"a merge '> :{first.name}' ends a statement; it cannot begin one"
                raise self.error(e.FlowSyntaxError, message, first.pos)
            if first.name == "end":
                raise self.error(
                    e.ReservedLabelError, "reserved label ':end' begins a statement", first.pos
                )
            if first.name != "start":
                source_label, previous = first, None
        destination: Label | None = None
        if elements and isinstance(elements[-1], Label):
            last = elements.pop()
            assert isinstance(last, Label)
            destination = last
            if destination.name == "start":
                message = "reserved label ':start' ends a statement"
                raise self.error(e.ReservedLabelError, message, destination.pos)
        if not elements:
            message = "a statement needs a task, a subflow or a resource besides its labels"
            raise self.error(e.FlowSyntaxError, message, statement.pos)
        for index, element in enumerate(elements):
            if isinstance(element, Label):
                message = f"label ':{element.name}' stands alone in the middle of a statement"
                raise self.error(e.FlowSyntaxError, message, element.pos)
            entry, exit_ = self.element(element, scope, first=index == 0 and previous is not None)
            if index == 0 and source_label is not None:
                self.consume(scope, source_label, entry, "source")
            if previous is not None:
                self.edge(previous, entry)
            previous = exit_
        assert previous is not None
        if destination is not None and destination.merge:
            scope.merges.add(destination.name)
        if destination is None or destination.name == "end":
            scope.to_end.append((previous, statement.pos))
        else:
            self.produce(scope, destination, previous, "dest")

    def consume(self, scope: _Scope, label: Label, node: int, via: str) -> None:
        if label.name in RESERVED:
            message = f"reserved label ':{label.name}' labels a task's input"
            raise self.error(e.ReservedLabelError, message, label.pos)
        uses = scope.inputs.setdefault(label.name, [])
        if via == "step" and any(use.via == "step" for use in uses):
            raise self.error(
                e.DuplicateInputLabelError, f"duplicate input label '{label.name}'", label.pos
            )
        uses.append(_Use(node, via, label.pos))

    def produce(self, scope: _Scope, label: Label, node: int, via: str) -> None:
        if label.name in RESERVED:
            message = f"reserved label ':{label.name}' labels a task's output"
            raise self.error(e.ReservedLabelError, message, label.pos)
        uses = scope.outputs.setdefault(label.name, [])
        if via == "step" and any(use.via == "step" for use in uses):
            message = f"duplicate output label '{label.name}'"
            raise self.error(e.DuplicateOutputLabelError, message, label.pos)
        uses.append(_Use(node, via, label.pos))

    def element(self, element: Element, scope: _Scope, *, first: bool) -> tuple[int, int]:
        if isinstance(element, ResourceLiteral):
            if not first:
                message = "a literal may only begin a statement"
                raise self.error(e.FlowSyntaxError, message, element.pos)
            node = self.new("literal", element.pos, scope, name="literal")
            node.params = element.literal.value
            return node.number, node.number
        if isinstance(element, Resource):
            if first and element.merge:
                message = "a merging resource '> <uri>' is a sink; it cannot begin a statement"
                raise self.error(e.FlowSyntaxError, message, element.pos)
            kind = "source" if first else "sink"
            node = self.new(kind, element.pos, scope, name=element.uri, merge=element.merge)
            node.params = element.params.value if element.params else None
            return node.number, node.number
        assert isinstance(element, Step)
        return self.step(element, scope)

    def step(self, step: Step, scope: _Scope) -> tuple[int, int]:
        if step.out_label is not None and step.out_label.pos.line > step.end_line:
            # Read as the task's output label, as the grammar (and littleflow) reads it, unless
            # that reading cannot be meant: a second output of the name, or (at the scope's
            # close) a label fed by other statements too that nothing reads.
            label = step.out_label
            if any(use.via == "step" for use in scope.outputs.get(label.name, ())):
                raise self.error(e.AmbiguousMeetError, _ambiguous(label.name), label.pos)
            scope.unsure.setdefault(label.name, label.pos)
        target = step.target
        if isinstance(target, list) and len(target) == 1:
            entry, exit_ = self.task(target[0], step, scope)
        else:
            subflow = target if isinstance(target, Subflow) else _listed(target, step.pos)
            entry, exit_ = self.subflow(subflow, step, scope)
        if step.in_label is not None:
            self.consume(scope, step.in_label, entry, "step")
        if step.out_label is not None:
            self.produce(scope, step.out_label, exit_, "step")
        return entry, exit_

    def task(self, task: Task, step: Step, scope: _Scope) -> tuple[int, int]:
        name, params, decl = self.resolve(task)
        if decl is not None and decl.subflow is not None:
            if name in self.expanding:
                chain = " -> ".join([*self.expanding, name])
                message = f"task {name!r} expands into itself ({chain})"
                raise self.error(e.DeclarationError, message, task.pos)
            self.expanding.append(name)
            try:
                return self.subflow(decl.subflow, step, scope, params=params)
            finally:
                self.expanding.pop()
        node = self.new(
            "task",
            task.pos,
            scope,
            name=name,
            params=params,
            guard=step.guard.expression if step.guard else None,
            iterate=step.iterate or scope.iterate,
            merge=step.merge,
            doc=decl.doc if decl else None,
            invoked=task.name,
        )
        return node.number, node.number

    def resolve(self, task: Task) -> tuple[str, Any, Declaration | None]:
        """The invoked task after aliases, its parameters (defaults merged under the
        invocation's), and its declaration."""
        name = task.name
        layers = [task.params.value] if task.params is not None else []
        decl = self.tasks.get(name)
        for _ in range(ALIAS_CHAIN_MAX):
            if decl is None:
                break
            if decl.params is not None:
                layers.append(decl.params.value)
            if decl.alias is None:
                break
            name = decl.alias
            decl = self.tasks.get(name)
        else:
            message = f"the aliases of {task.name!r} go on for more than {ALIAS_CHAIN_MAX}"
            raise self.error(e.DeclarationError, message, task.pos)
        params: Any = None
        for layer in reversed(layers):
            params = merge_params(params, layer)
        return name, params, decl

    def subflow(
        self, subflow: Subflow, step: Step, scope: _Scope, params: Any = None
    ) -> tuple[int, int]:
        fork = self.new(
            "fork",
            subflow.pos,
            scope,
            name="start",
            guard=step.guard.expression if step.guard else None,
            merge=step.merge,
            params=params,
        )
        gates = scope.gates + ((fork.number,) if fork.guard is not None else ())
        inner = _Scope(fork.number, gates, step.iterate or scope.iterate)
        for statement in subflow.statements:
            self.statement(statement, inner)
        if not subflow.statements:
            inner.to_end.append((fork.number, subflow.pos))
        join = self.new("join", subflow.pos, scope, name="end")
        join.fork, fork.fork = fork.number, join.number
        self.close(inner, join.number)
        return fork.number, join.number


def _ambiguous(label: str) -> str:
    return (
        f"ambiguous meet: ':{label}' on the line after its task may label that task's "
        f"output or begin the next statement; end the statement with ';'"
    )


def _listed(tasks: list[Task], pos: Pos) -> Subflow:
    """`A|B|C` is `{ A B C }` (seed 004)."""
    statements = [
        Statement([Step(target=[task], pos=task.pos, end_line=task.pos.line)], task.pos)
        for task in tasks
    ]
    return Subflow(statements, "|", pos)


def merge_params(defaults: Any, invocation: Any) -> Any:
    """Maps merge deeply (the invocation wins); any other value replaces the default."""
    if isinstance(defaults, dict) and isinstance(invocation, dict):
        merged = dict(defaults)
        for key, value in invocation.items():
            merged[key] = merge_params(merged.get(key), value) if key in merged else value
        return merged
    return invocation if invocation is not None else defaults
