"""Definition names: `namespace/name@version`.

* namespace: one or more dot-separated lowercase segments, each starting with a letter
  (`demo`, `com.acme`); the namespace `sys` is reserved for the kernel's built-ins;
* name: a letter, then letters, digits, `.`, `_` or `-` (`CounterEvent`, `order.step`);
* version: a positive decimal integer without leading zeros (`@1`, `@12`).

The whole name is at most `NAME_LENGTH_MAX` characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME_LENGTH_MAX = 128
VERSION_MAX = 999_999_999

SYS_NAMESPACE = "sys"

_SEGMENT = r"[a-z][a-z0-9_-]*"
_NAME_RE = re.compile(
    rf"^(?P<namespace>{_SEGMENT}(?:\.{_SEGMENT})*)/(?P<local>[A-Za-z][A-Za-z0-9._-]*)"
    r"@(?P<version>[1-9][0-9]*)$"
)

NAME_PATTERN = rf"^{_SEGMENT}(?:\.{_SEGMENT})*/[A-Za-z][A-Za-z0-9._-]*@[1-9][0-9]*$"
"""The name grammar without named groups, for JSON Schemas (ECMA-262 regular expressions);
length and version bounds are checked separately."""


@dataclass(frozen=True)
class ParsedName:
    """The three parts of a valid name."""

    namespace: str
    local: str
    version: int

    def __str__(self) -> str:
        return f"{self.namespace}/{self.local}@{self.version}"


def name_problem(text: object) -> str | None:
    """Why `text` is not a valid name, or None when it is."""
    if not isinstance(text, str):
        return f"a name is text, not {type(text).__name__}"
    if len(text) > NAME_LENGTH_MAX:
        return f"a name is at most {NAME_LENGTH_MAX} characters, this one has {len(text)}"
    match = _NAME_RE.match(text)
    if match is None:
        return (
            f"{text!r} is not namespace/name@version (namespace: dotted lowercase segments, "
            "name: a letter then letters, digits, '.', '_' or '-', version: a positive integer)"
        )
    if int(match["version"]) > VERSION_MAX:
        return f"version {match['version']} is larger than {VERSION_MAX}"
    return None


def parse_name(text: str) -> ParsedName:
    """Split a valid name; raises ValueError with the reason otherwise."""
    problem = name_problem(text)
    if problem is not None:
        raise ValueError(problem)
    match = _NAME_RE.match(text)
    assert match is not None
    return ParsedName(match["namespace"], match["local"], int(match["version"]))


def is_sys_name(text: str) -> bool:
    """True for names in the reserved `sys` namespace (the kernel's built-ins)."""
    return text.startswith(SYS_NAMESPACE + "/")
