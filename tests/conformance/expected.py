"""The differences between NoETL 2.13.1 and aos the differential run expects
(`expected.yaml`): each says what differs, why, and the upstream code that causes it, and
names the parts (`status`, `steps.NAME`, `requests`) of the playbooks it makes differ. Any
other difference fails the run, and so does an expected one that no longer shows (the list
stays exact). spec/12 §11 is generated from this list (`markdown`), and a test keeps them
equal:

    .venv/bin/python -m tests.conformance.expected --write   # rewrite spec/12 §11
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.conformance.normalize import Difference

HERE = Path(__file__).resolve().parent
LIST = HERE / "expected.yaml"
SPEC = HERE.parents[1] / "spec" / "12-playbooks.md"
SECTION = "## 11. Differences from NoETL"
KINDS = {
    "noetl-fault": "a NoETL 2.13.1 fault",
    "noetl-older": "NoETL 2.13.1 no longer does what the fixture was written for",
    "noetl-race": "a race in NoETL 2.13.1: the parts differ in some runs only",
    "aos-choice": "aos departs from NoETL 2.13.1 on purpose",
}
RACE = "noetl-race"  # its parts may differ or not; never counted as no longer seen


@dataclass(frozen=True)
class Expected:
    """One known difference."""

    id: str
    kind: str
    title: str
    reason: str
    upstream: str  # file: function, in github.com/noetl/noetl at the 2.13.1 release
    parts: dict[str, tuple[str, ...]]  # case name -> the parts it makes differ


class ExpectedListError(ValueError):
    """expected.yaml is not a list of well-formed entries."""


def load(path: Path = LIST) -> list[Expected]:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise ExpectedListError(f"{path}: not a list")
    found = [_entry(item, path) for item in raw]
    ids = [entry.id for entry in found]
    if len(set(ids)) != len(ids):
        raise ExpectedListError(f"{path}: an id is used twice")
    return found


def _entry(item: object, path: Path) -> Expected:
    fields = ("id", "kind", "title", "reason", "upstream", "cases")
    if not isinstance(item, dict) or set(item) != set(fields):
        raise ExpectedListError(f"{path}: each entry has exactly {', '.join(fields)}: {item!r}")
    if item["kind"] not in KINDS:
        raise ExpectedListError(f"{path}: {item['id']}: kind is one of {sorted(KINDS)}")
    cases = item["cases"]
    if not isinstance(cases, dict) or not all(isinstance(v, list) for v in cases.values()):
        raise ExpectedListError(f"{path}: {item['id']}: cases maps a playbook to its parts")
    parts = {str(case): tuple(str(p) for p in listed) for case, listed in cases.items()}
    texts = [str(item[k]).strip() for k in ("id", "title", "reason", "upstream")]
    return Expected(texts[0], str(item["kind"]), texts[1], texts[2], texts[3], parts)


def expected_parts(entries: list[Expected], case: str) -> dict[str, str]:
    """The parts of `case` expected to differ, each with the entry that says why."""
    return {part: entry.id for entry in entries for part in entry.parts.get(case, ())}


@dataclass(frozen=True)
class Verdict:
    """How one playbook's differences stand against the list."""

    explained: dict[str, str]  # part -> the entry that explains it
    unexpected: list[Difference]
    stale: list[str]  # parts the list expects to differ that did not

    @property
    def ok(self) -> bool:
        return not self.unexpected and not self.stale


def judge(entries: list[Expected], case: str, differences: list[Difference]) -> Verdict:
    wanted = expected_parts(entries, case)
    racing = {e.id for e in entries if e.kind == RACE}
    seen = {d.part for d in differences}
    return Verdict(
        {d.part: wanted[d.part] for d in differences if d.part in wanted},
        [d for d in differences if d.part not in wanted],
        [part for part, why in wanted.items() if part not in seen and why not in racing],
    )


# --------------------------------------------------------------------------------------------
# spec/12 §11


INTRODUCTION = (
    "Generated from `tests/conformance/expected.yaml` (`python -m tests.conformance.expected "
    "--write`). `make conformance-noetl` runs every playbook of its corpus (the upstream "
    "fixtures of `../shared/corpora/noetl`, the seed examples, one playbook per behaviour of "
    "issue 30 and per rule of FLOWS.md §3: `tests/conformance/cases.py`) on NoETL 2.13.1 and "
    "on aos, with a local HTTP server and PostgreSQL, and compares the final status, each "
    "step's result and the requests each side made. NoETL's side is read from its events; a "
    "result is compared as NoETL keeps it (its scalar fields and maps of scalars, under 16 "
    "KB), each tool's answer by what both engines' tools state (`tests/conformance/"
    "normalize.py`). The run fails on any difference not listed below, and on one listed "
    "below that no longer shows. Each entry is a difference aos keeps on purpose, with the "
    "upstream code that causes it."
)
WIDTH = 95


def markdown(entries: list[Expected]) -> str:
    """spec/12's section on the differences, from the list."""
    lines = [SECTION, "", _wrapped(INTRODUCTION), ""]
    for entry in entries:
        names = ", ".join(f"`{case}` ({', '.join(parts)})" for case, parts in entry.parts.items())
        lines += [f"### {entry.title}", ""]
        lines += [_wrapped(f"*{KINDS[entry.kind]}* (`{entry.id}`). {entry.reason}"), ""]
        lines += [_wrapped(f"Upstream: {entry.upstream}."), ""]
        lines += [_wrapped(f"Playbooks: {names}."), ""]
    return "\n".join(lines).rstrip() + "\n"


def _wrapped(text: str) -> str:
    return textwrap.fill(text, WIDTH, break_long_words=False, break_on_hyphens=False)


def spec_section(text: str) -> str:
    """The section as spec/12 has it: from its heading to the next `## ` or the end."""
    start = text.find(SECTION)
    if start < 0:
        return ""
    end = text.find("\n## ", start + len(SECTION))
    return text[start:] if end < 0 else text[start : end + 1]


def write_spec(entries: list[Expected], spec: Path = SPEC) -> None:
    text = spec.read_text(encoding="utf-8")
    current = spec_section(text)
    fresh = markdown(entries)
    text = text.replace(current, fresh) if current else text.rstrip() + "\n\n" + fresh
    spec.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite spec/12's section")
    options = parser.parse_args(argv)
    entries = load()
    if options.write:
        write_spec(entries)
    else:
        sys.stdout.write(markdown(entries))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
