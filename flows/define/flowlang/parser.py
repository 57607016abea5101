"""Parsing a `.flow` text into its syntax tree (`syntax.Document`).

The grammar is Lark's LALR(1) over the hand-read tokens of `lexer`. Two shift/reduce
choices are the language's own: a label after a task is that task's output label (not the
start of the next statement), and a label before a name is that task's input label (not the
end of the statement before). The seed asks for a `;` where an author means otherwise; an
output label on the line after its task is refused as an ambiguous meet (`graph`)."""

from __future__ import annotations

from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import (
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
    VisitError,
)

from aos.flows.define.flowlang.errors import DeclarationError, FlowLangError, FlowSyntaxError
from aos.flows.define.flowlang.lexer import NESTING_MAX, TERMINALS, FlowLexer, Source
from aos.flows.define.flowlang.syntax import (
    Declaration,
    Document,
    Guard,
    Label,
    LiteralValue,
    Pos,
    Resource,
    ResourceLiteral,
    Statement,
    Step,
    Subflow,
    Task,
)
from aos.flows.limits import DefinitionLimits

GRAMMAR = (
    r"""
start: _item*
_item: declaration | statement
declaration: DECLARE NAME alias? PARAMS? DOC? subflow? SEMI?
alias: EQ NAME
statement: element (ARROW element)* SEMI?
?element: LABEL -> label
        | MERGE LABEL -> merge_label
        | step
        | URI PARAMS? -> resource
        | MERGE URI PARAMS? -> merge_resource
        | RESLIT -> resource_literal
step: LABEL? guard? modifier* target LABEL?
guard: QMARK EXPR
modifier: STAR | MERGE
?target: tasks | subflow
tasks: task (BAR task)*
task: NAME PARAMS?
subflow: LBRACE statement* RBRACE
       | LSQB statement* RSQB
%declare """
    + TERMINALS
)

_NAMES = {
    "ARROW": "an arrow",
    "SEMI": "';'",
    "BAR": "'|'",
    "STAR": "'*'",
    "MERGE": "'>'",
    "QMARK": "'?'",
    "EQ": "'='",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "LSQB": "'['",
    "RSQB": "']'",
    "EXPR": "a guard",
    "LABEL": "a label",
    "DECLARE": "a declaration",
    "NAME": "a task name",
    "PARAMS": "a parameter literal",
    "RESLIT": "a resource literal",
    "URI": "a resource",
    "DOC": "a documentation comment",
    "$END": "the end of the text",
}

_PARSER: Lark | None = None


def _parser() -> Lark:
    """One LALR table per process (building it costs milliseconds; parsing reuses it). The
    syntax nodes are built as the parser reduces (Lark's inline transformer): no parse tree
    is made and walked again."""
    global _PARSER
    if _PARSER is None:
        _PARSER = Lark(
            GRAMMAR,
            parser="lalr",
            lexer=FlowLexer,
            propagate_positions=False,
            transformer=_Build(),
        )
    return _PARSER


def parse(
    text: str,
    *,
    source: str | None = None,
    limits: DefinitionLimits | None = None,
    nesting_max: int = NESTING_MAX,
) -> Document:
    """The syntax tree of `text`; a FlowLangError (with line and column) if it is not one.
    Subflows nest at most `nesting_max` deep."""
    src = Source(text, source, limits or DefinitionLimits(), nesting_max)
    try:
        parsed: Any = _parser().parse(src)  # type: ignore[arg-type,unused-ignore]
    except UnexpectedInput as error:
        raise _unexpected(error, src) from None
    except _BuildError as error:
        raise error.kind(error.message, error.line, error.column, source=source) from None
    except VisitError as error:  # Lark wraps what a callback raises in some versions
        if isinstance(error.orig_exc, _BuildError):
            built = error.orig_exc
            raise built.kind(built.message, built.line, built.column, source=source) from None
        raise
    except RecursionError:
        raise FlowSyntaxError("the text nests too deeply", 1, 1, source=source) from None
    document: Document = parsed  # the inline transformer's `start`
    return document


class _BuildError(Exception):
    """A problem the tree builder finds (it does not know the source's name)."""

    def __init__(self, kind: type[FlowLangError], message: str, pos: Pos) -> None:
        super().__init__(message)
        self.kind, self.message, self.line, self.column = kind, message, pos.line, pos.column


def _unexpected(error: UnexpectedInput, src: Source) -> FlowLangError:
    if isinstance(error, UnexpectedToken):
        token = error.token
        found = _NAMES.get(token.type, token.type)
        if token.type == "$END":
            pos = src.pos(len(src.text))
            return FlowSyntaxError("the text ends too early", pos.line, pos.column, source=src.name)
        expected = sorted({_NAMES.get(name, name) for name in error.expected if name in _NAMES})
        message = f"unexpected {found} {_shown(token)}; expected {', '.join(expected)}"
        return FlowSyntaxError(message, token.line, token.column, source=src.name)
    if isinstance(error, UnexpectedEOF):
        pos = src.pos(len(src.text))
        return FlowSyntaxError("the text ends too early", pos.line, pos.column, source=src.name)
    assert not isinstance(error, UnexpectedCharacters)  # our own lexer reads characters
    return FlowSyntaxError(str(error), 1, 1, source=src.name)


def _shown(token: Token) -> str:
    value = token.value
    if isinstance(value, LiteralValue):
        return ""
    text = str(value)
    return repr(text[:40])


def _pos(token: Token) -> Pos:
    return Pos(int(token.line or 1), int(token.column or 1))


class _Build(Transformer[Token, Any]):
    """Lark's reductions into `syntax` nodes (stateless: one per parser)."""

    def start(self, items: list[Any]) -> Document:
        document = Document(items=list(items))
        for item in items:
            if isinstance(item, Declaration):
                document.declarations.append(item)
            else:
                document.statements.append(item)
        return document

    def declaration(self, children: list[Any]) -> Declaration:
        head, name = children[0], children[1]
        if head.value not in ("flow", "task"):
            message = f"unknown declaration @{head.value}; use @flow or @task"
            raise _BuildError(DeclarationError, message, _pos(head))
        decl = Declaration(kind=str(head.value), name=str(name.value), pos=_pos(head))
        for child in children[2:]:
            if isinstance(child, Subflow):
                decl.subflow = child
            elif isinstance(child, tuple):
                decl.alias = child[1]
            elif isinstance(child, Token) and child.type == "PARAMS":
                decl.params = child.value
            elif isinstance(child, Token) and child.type == "DOC":
                decl.doc = str(child.value)
        return decl

    def alias(self, children: list[Token]) -> tuple[str, str]:
        return ("alias", str(children[1].value))

    def statement(self, children: list[Any]) -> Statement:
        elements = [
            c for c in children if not (isinstance(c, Token) and c.type in ("ARROW", "SEMI"))
        ]
        return Statement(elements=elements, pos=_element_pos(elements[0]))

    def label(self, children: list[Token]) -> Label:
        return Label(str(children[0].value), _pos(children[0]))

    def merge_label(self, children: list[Token]) -> Label:
        return Label(str(children[1].value), _pos(children[0]), merge=True)

    def resource(self, children: list[Token]) -> Resource:
        params = children[1].value if len(children) > 1 else None
        return Resource(str(children[0].value), params, _pos(children[0]))

    def merge_resource(self, children: list[Token]) -> Resource:
        resource = self.resource(children[1:])
        resource.pos, resource.merge = _pos(children[0]), True
        return resource

    def resource_literal(self, children: list[Token]) -> ResourceLiteral:
        return ResourceLiteral(children[0].value, _pos(children[0]))

    def step(self, children: list[Any]) -> Step:
        target_at = next(i for i, c in enumerate(children) if isinstance(c, (list, Subflow)))
        target = children[target_at]
        before, after = children[:target_at], children[target_at + 1 :]
        first = children[0]
        pos = first.pos if isinstance(first, (Guard, Subflow)) else _target_pos(first, target)
        step = Step(target=target, pos=pos, end_line=self._end_line(target))
        for child in before:
            if isinstance(child, Guard):
                step.guard = child
            elif isinstance(child, Token) and child.type == "LABEL":
                step.in_label = Label(str(child.value), _pos(child))
            elif isinstance(child, Token) and child.type == "STAR":
                step.iterate = True
            elif isinstance(child, Token) and child.type == "MERGE":
                step.merge = True
        if after:
            step.out_label = Label(str(after[0].value), _pos(after[0]))
        return step

    def _end_line(self, target: list[Task] | Subflow) -> int:
        if isinstance(target, Subflow):
            return target.pos.line if not target.statements else _last_line(target)
        last = target[-1]
        if last.params is not None:
            return last.params.pos.line + last.params.text.count("\n")
        return last.pos.line

    def guard(self, children: list[Token]) -> Guard:
        return Guard(str(children[1].value), _pos(children[0]))

    def modifier(self, children: list[Token]) -> Token:
        return children[0]

    def tasks(self, children: list[Any]) -> list[Task]:
        return [c for c in children if isinstance(c, Task)]

    def task(self, children: list[Token]) -> Task:
        params = children[1].value if len(children) > 1 else None
        return Task(str(children[0].value), params, _pos(children[0]))

    def subflow(self, children: list[Any]) -> Subflow:
        opener, closer = children[0], children[-1]
        statements = [c for c in children if isinstance(c, Statement)]
        subflow = Subflow(statements, str(opener.value), _pos(opener))
        subflow.end_pos = _pos(closer)  # type: ignore[attr-defined]
        return subflow


def _last_line(subflow: Subflow) -> int:
    end = getattr(subflow, "end_pos", None)
    return end.line if end is not None else subflow.pos.line


def _element_pos(element: Any) -> Pos:
    return element.pos  # type: ignore[no-any-return]


def _target_pos(first: Any, target: list[Task] | Subflow) -> Pos:
    if isinstance(first, Token):
        return _pos(first)
    if isinstance(target, Subflow):
        return target.pos
    return target[0].pos
