"""The flow language's tokens, read by hand and handed to the Lark parser.

By hand because the literals are not regular: a JSON literal `({ ... })` ends where its JSON
value ends (which may contain `})`), so it is read with a JSON decoder; a YAML literal runs
to its closing `-)` / `->` untouched (seed 004: "no preprocessing"). Everything else is one
or two characters, a name or a label."""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterator
from typing import Any

from lark import Token
from lark.lexer import Lexer

from aos.flows.define.document import read_document
from aos.flows.define.flowlang.errors import FlowLangLimitError, FlowSyntaxError, LiteralError
from aos.flows.define.flowlang.syntax import LiteralKind, LiteralValue, Pos
from aos.flows.errors import FlowError
from aos.flows.limits import DefinitionLimits

NESTING_MAX = 32
"""Subflows inside subflows (`{ { ... } }`): a deeper text is refused before parsing."""

TERMINALS = (
    "ARROW SEMI BAR STAR MERGE QMARK EQ LBRACE RBRACE LSQB RSQB EXPR LABEL DECLARE NAME "
    "PARAMS RESLIT URI DOC"
)
_SINGLE = {
    ";": "SEMI",
    "|": "BAR",
    "*": "STAR",
    ">": "MERGE",
    "?": "QMARK",
    "=": "EQ",
    "{": "LBRACE",
    "}": "RBRACE",
    "[": "LSQB",
    "]": "RSQB",
}
_OPENERS = {"{": 1, "[": 1, "}": -1, "]": -1}
_DECODER = json.JSONDecoder()


_BLANKS = " \t\r\f\ufeff"
"""What separates tokens besides newlines (littleflow's grammar ignores form feeds too)."""


def is_name_char(char: str) -> bool:
    """Letters and digits of any script (littleflow's `\\w`), `_`, `-` and `:`."""
    return char.isalnum() or char in "_-:"


class Source:
    """The text and where each offset is (1-based line and column)."""

    def __init__(
        self,
        text: str,
        name: str | None,
        limits: DefinitionLimits,
        nesting_max: int = NESTING_MAX,
    ) -> None:
        self.text = text
        self.name = name
        self.limits = limits
        self.nesting_max = nesting_max
        self.line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def pos(self, offset: int) -> Pos:
        line = bisect.bisect_right(self.line_starts, offset)
        return Pos(line, offset - self.line_starts[line - 1] + 1)

    def syntax(self, message: str, offset: int) -> FlowSyntaxError:
        pos = self.pos(offset)
        return FlowSyntaxError(message, pos.line, pos.column, source=self.name)


class FlowLexer(Lexer):
    """Lark's custom-lexer protocol: `lex` yields tokens; the text is a `Source`."""

    def __init__(self, lexer_conf: Any) -> None:
        pass

    def lex(self, data: Any, parser_state: Any = None) -> Iterator[Token]:
        # Lark hands a custom lexer the object given to `parse` as it is: a Source here.
        source = data if isinstance(data, Source) else Source(str(data), None, DefinitionLimits())
        yield from tokens(source)


def tokens(source: Source) -> Iterator[Token]:
    """The tokens of the text. Lines are counted as the text is read (a token's place is
    its first character); only errors look a place up."""
    text, at, depth = source.text, 0, 0
    size = len(text)
    line, line_start = 1, 0
    while at < size:
        char = text[at]
        start = at
        value: Any
        if char == "\n":
            at += 1
            line, line_start = line + 1, at
            continue
        if char in _BLANKS:
            at += 1
            continue
        if char == "#":
            end = text.find("\n", at)
            at = size if end < 0 else end
            continue
        if char == "→" or text.startswith("->", at):
            at += 1 if char == "→" else 2
            kind, value = "ARROW", text[start:at]
        elif char in _SINGLE:
            depth += _OPENERS.get(char, 0)
            if depth > source.nesting_max:
                pos = source.pos(at)
                message = f"subflows nest deeper than {source.nesting_max}"
                raise FlowLangLimitError(message, pos.line, pos.column, source=source.name)
            at += 1
            kind, value = _SINGLE[char], char
        elif char == "`":
            end = text.find("`", at + 1)
            if end < 0:
                raise source.syntax("a guard's backquote is never closed", at)
            at = end + 1
            kind, value = "EXPR", text[start + 1 : end]
        elif char in ":@":
            at = _name_end(text, at + 1)
            if at == start + 1:
                what = "a label" if char == ":" else "a declaration"
                raise source.syntax(f"{what} needs a name after {char!r}", start)
            kind, value = ("LABEL" if char == ":" else "DECLARE"), text[start + 1 : at]
        elif is_name_char(char) and char not in "-:":
            at = _name_end(text, at)
            kind, value = "NAME", text[start:at]
        elif char == "(":
            value, at = _parameter(source, at)
            kind = "PARAMS"
        elif char == "<":
            kind, value, at = _angle(source, at)
        elif text.startswith("'''", at) or text.startswith('"""', at):
            end = text.find(text[at : at + 3], at + 3)
            if end < 0:
                raise source.syntax("a documentation comment is never closed", at)
            at = end + 3
            kind, value = "DOC", text[start + 3 : end]
        else:
            raise source.syntax(f"unexpected character {char!r}", at)
        yield Token(kind, value, start_pos=start, line=line, column=start - line_start + 1)
        newlines = text.count("\n", start, at)
        if newlines:
            line, line_start = line + newlines, text.rfind("\n", start, at) + 1


def _name_end(text: str, at: int) -> int:
    """Names are letters, digits, `_`, `-` and `:`; a `-` that starts `->` is an arrow."""
    end = at
    while end < len(text) and is_name_char(text[end]):
        if text[end] == "-" and text.startswith("->", end):
            break
        end += 1
    return end


def _blank_to(text: str, at: int, closer: str) -> int | None:
    """Where `closer` ends when only blanks and newlines lie between `at` and it."""
    end = at
    while end < len(text) and (text[end] in _BLANKS or text[end] == "\n"):
        end += 1
    return end + 1 if text.startswith(closer, end) else None


def _parameter(source: Source, at: int) -> tuple[LiteralValue, int]:
    text = source.text
    second = text[at + 1 : at + 2]
    empty = _blank_to(text, at + 1, ")")
    if empty is not None:  # `()`, `( )`: littleflow's empty parameter literal
        return LiteralValue("empty", text[at + 1 : empty - 1], {}, source.pos(at)), empty
    if second == "-":
        return _yaml(source, at, "-)")
    if second in "{[":
        return _json(source, at, ")", "json_object" if second == "{" else "json_array")
    raise source.syntax("a parameter literal is (- YAML -), ({ JSON }) or ([ JSON ])", at)


def _angle(source: Source, at: int) -> tuple[str, Any, int]:
    text = source.text
    second = text[at + 1 : at + 2]
    empty = _blank_to(text, at + 1, ">")
    if empty is not None:  # `<>`, `< >`: an empty resource literal, `{}`
        return "RESLIT", LiteralValue("empty", text[at + 1 : empty - 1], {}, source.pos(at)), empty
    if second == "-":
        literal, end = _yaml(source, at, "->")
        return "RESLIT", literal, end
    if second in ("{", "["):
        literal, end = _json(source, at, ">", "json_object" if second == "{" else "json_array")
        return "RESLIT", literal, end
    end = at + 1
    while end < len(text) and text[end] not in "> \t\r\n":
        end += 1
    if end >= len(text) or text[end] != ">" or end == at + 1:
        raise source.syntax("a resource is a URI in angle brackets: <data.json>", at)
    return "URI", text[at + 1 : end], end + 1


def _yaml(source: Source, at: int, closer: str) -> tuple[LiteralValue, int]:
    end = source.text.find(closer, at + 2)
    if end < 0:
        raise source.syntax(f"a YAML literal is never closed with {closer!r}", at)
    body = source.text[at + 2 : end]
    value = _value(source, body, at) if body.strip() else {}
    return LiteralValue("yaml", body, value, source.pos(at)), end + 2


def _json(source: Source, at: int, closer: str, kind: LiteralKind) -> tuple[LiteralValue, int]:
    text = source.text
    try:
        _, end = _DECODER.raw_decode(text, at + 1)
    except (ValueError, RecursionError) as error:
        detail = getattr(error, "msg", None) or "too deeply nested"
        pos = source.pos(getattr(error, "pos", at))
        raise LiteralError(
            f"not a JSON literal: {detail}", pos.line, pos.column, source=source.name
        ) from None
    close = end
    while close < len(text) and text[close] in " \t\r\n":
        close += 1
    if not text.startswith(closer, close):
        raise source.syntax(f"a JSON literal ends with {closer!r}", close)
    body = text[at + 1 : end]
    return LiteralValue(kind, body, _value(source, body, at), source.pos(at)), close + 1


def _value(source: Source, body: str, at: int) -> Any:
    """The literal's value, read strictly and within the definition bounds (no duplicate
    keys, no YAML-only types); any problem is a `flow.lang.literal` at the literal."""
    try:
        value = read_document(body, source="literal", limits=source.limits)
    except FlowError as error:
        pos = source.pos(at)
        message = str(error).removeprefix("literal: ")
        raise LiteralError(message, pos.line, pos.column, source=source.name) from None
    return {} if value is None else value
