"""Ids by unique prefix: wherever a user gives an id (a proposal's or an intent's hash, a
human task's intent, an execution id), a prefix that names exactly one of them stands for it
(docs/worlds.md; spec/04 §11).

A hash is matched on its digits, with or without `blake3:`. A prefix that names none is the
caller's own "unknown" error; one that names several is `id.ambiguous` (or a subclass with
its own code) listing at most `CANDIDATES_SHOWN_MAX` of them, so the user can give more
characters. The candidates are looked at lazily and the search stops once it has found more
than can be shown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aos.kernel.errors import AosError

CANDIDATES_SHOWN_MAX = 10
HASH_PREFIX = "blake3:"


class IdAmbiguousError(AosError):
    code = "id.ambiguous"
    hint = "give more characters of the id: the candidates are listed"


def matching(text: str, candidates: Iterable[str], *, hashes: bool = False) -> list[str]:
    """The candidates `text` is a prefix of (an exact one alone, when there is one), at most
    one more than can be shown. With `hashes`, `blake3:` is optional on both sides."""
    wanted = _digits(text) if hashes else text
    found: list[str] = []
    for candidate in candidates:
        name = _digits(candidate) if hashes else candidate
        if name == wanted:
            return [candidate]
        if name.startswith(wanted) and candidate not in found:
            found.append(candidate)
            if len(found) > CANDIDATES_SHOWN_MAX:
                break
    return found


def resolve(
    text: str,
    candidates: Iterable[str],
    *,
    what: str,
    unknown: Callable[[str], AosError],
    ambiguous: type[IdAmbiguousError] = IdAmbiguousError,
    hashes: bool = False,
) -> str:
    """The one candidate `text` names; `unknown(message)` when none, `ambiguous` when many."""
    found = matching(text, candidates, hashes=hashes)
    if len(found) == 1:
        return found[0]
    if not found:
        raise unknown(f"no {what} {text}")
    many = f"more than {CANDIDATES_SHOWN_MAX}" if len(found) > CANDIDATES_SHOWN_MAX else len(found)
    raise ambiguous(
        f"{text} names {many} {what}s: {', '.join(found[:CANDIDATES_SHOWN_MAX])}",
        candidates=found[:CANDIDATES_SHOWN_MAX],
    )


def _digits(text: str) -> str:
    return text.removeprefix(HASH_PREFIX)
