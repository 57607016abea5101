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

from aos.flows.document import read_document
from aos.flows.errors import FlowError
from aos.flows.flowlang.errors import FlowLangLimitError, FlowSyntaxError, LiteralError
from aos.flows.flowlang.syntax import LiteralKind, LiteralValue, Pos
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


def is_name_char(char: str) -> bool:
    return char.isascii() and (char.isalnum() or char in "_-:")


class Source:
    """The text and where each offset is (1-based line and column)."""

    def __init__(self, text: str, name: str | None, limits: DefinitionLimits) -> None:
        self.text = text
        self.name = name
        self.limits = limits
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
    text, at, depth = source.text, 0, 0
    size = len(text)
    while at < size:
        char = text[at]
        if char in " \t\r\n\ufeff":
            at += 1
        elif char == "#":
            end = text.find("\n", at)
            at = size if end < 0 else end
        elif char == "→" or text.startswith("->", at):
            step = 1 if char == "→" else 2
            yield _token(source, "ARROW", text[at : at + step], at, at + step)
            at += step
        elif char in _SINGLE:
            depth += _OPENERS.get(char, 0)
            if depth > NESTING_MAX:
                pos = source.pos(at)
                message = f"subflows nest deeper than {NESTING_MAX}"
                raise FlowLangLimitError(message, pos.line, pos.column, source=source.name)
            yield _token(source, _SINGLE[char], char, at, at + 1)
            at += 1
        elif char == "`":
            end = text.find("`", at + 1)
            if end < 0:
                raise source.syntax("a guard's backquote is never closed", at)
            yield _token(source, "EXPR", text[at + 1 : end], at, end + 1)
            at = end + 1
        elif char in ":@":
            end = _name_end(text, at + 1)
            if end == at + 1:
                what = "a label" if char == ":" else "a declaration"
                raise source.syntax(f"{what} needs a name after {char!r}", at)
            kind = "LABEL" if char == ":" else "DECLARE"
            yield _token(source, kind, text[at + 1 : end], at, end)
            at = end
        elif is_name_char(char) and char not in "-:":
            end = _name_end(text, at)
            yield _token(source, "NAME", text[at:end], at, end)
            at = end
        elif char == "(":
            literal, end = _parameter(source, at)
            yield _token(source, "PARAMS", literal, at, end)
            at = end
        elif char == "<":
            kind, value, end = _angle(source, at)
            yield _token(source, kind, value, at, end)
            at = end
        elif text.startswith("'''", at) or text.startswith('"""', at):
            end = text.find(text[at : at + 3], at + 3)
            if end < 0:
                raise source.syntax("a documentation comment is never closed", at)
            yield _token(source, "DOC", text[at + 3 : end], at, end + 3)
            at = end + 3
        else:
            raise source.syntax(f"unexpected character {char!r}", at)


def _name_end(text: str, at: int) -> int:
    """Names are letters, digits, `_`, `-` and `:`; a `-` that starts `->` is an arrow."""
    end = at
    while end < len(text) and is_name_char(text[end]):
        if text[end] == "-" and text.startswith("->", end):
            break
        end += 1
    return end


def _token(source: Source, kind: str, value: Any, start: int, end: int) -> Token:
    first, last = source.pos(start), source.pos(max(start, end - 1))
    return Token(
        kind,
        value,
        start_pos=start,
        line=first.line,
        column=first.column,
        end_line=last.line,
        end_column=last.column + 1,
        end_pos=end,
    )


def _parameter(source: Source, at: int) -> tuple[LiteralValue, int]:
    text = source.text
    second = text[at + 1 : at + 2]
    if second == ")":
        return LiteralValue("empty", "", {}, source.pos(at)), at + 2
    if second == "-":
        return _yaml(source, at, "-)")
    if second in "{[":
        return _json(source, at, ")", "json_object" if second == "{" else "json_array")
    raise source.syntax("a parameter literal is (- YAML -), ({ JSON }) or ([ JSON ])", at)


def _angle(source: Source, at: int) -> tuple[str, Any, int]:
    text = source.text
    second = text[at + 1 : at + 2]
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
