"""The list of expected differences from NoETL (tests/conformance/expected.yaml) is well
formed, names only playbooks of the corpus, and spec/12 §11 is generated from it; the corpus
itself is complete. None of this needs NoETL."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance import expected
from tests.conformance.cases import CASES, FIXTURES, OWN, QUICK, by_name
from tests.conformance.normalize import Difference


def test_spec_12_section_11_is_generated_from_the_list() -> None:
    # Regenerate with `.venv/bin/python -m tests.conformance.expected --write`.
    text = expected.SPEC.read_text(encoding="utf-8")
    assert expected.spec_section(text) == expected.markdown(expected.load())


def test_every_entry_names_playbooks_of_the_corpus_and_an_upstream_function() -> None:
    names = by_name()
    for entry in expected.load():
        assert entry.parts, entry.id
        for case, parts in entry.parts.items():
            assert case in names, (entry.id, case)
            assert parts and all(
                p == "status" or p.startswith(("steps.", "requests")) for p in parts
            )
        assert entry.upstream.startswith("noetl/") and ":" in entry.upstream, entry.id


def test_a_malformed_list_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "expected.yaml"
    for text in (
        "{}",
        "- {id: x}",
        "- {id: x, kind: other, title: t, reason: r, upstream: u, cases: {}}",
    ):
        bad.write_text(text)
        with pytest.raises(expected.ExpectedListError):
            expected.load(bad)
    entry = "{id: x, kind: noetl-fault, title: t, reason: r, upstream: u, cases: {a: [status]}}"
    bad.write_text(f"- {entry}\n- {entry}\n")
    with pytest.raises(expected.ExpectedListError, match="twice"):
        expected.load(bad)


def test_judge_explains_listed_parts_and_fails_on_others_and_on_stale_ones() -> None:
    entry = expected.Expected(
        "fault", "noetl-fault", "t", "r", "noetl/x.py: f", {"pb": ("status", "steps.a")}
    )
    differences = [Difference("status", "no end", "completed"), Difference("steps.b", 1, 2)]
    verdict = expected.judge([entry], "pb", differences)
    assert verdict.explained == {"status": "fault"}
    assert [d.part for d in verdict.unexpected] == ["steps.b"]
    assert verdict.stale == ["steps.a"] and not verdict.ok
    assert expected.judge([entry], "other", []).ok
    race = expected.Expected("race", "noetl-race", "t", "r", "noetl/x.py: f", {"pb": ("status",)})
    assert expected.judge([race], "pb", []).ok
    assert expected.judge([race], "pb", differences[:1]).explained == {"status": "race"}


def test_write_spec_replaces_only_its_section(tmp_path: Path) -> None:
    spec = tmp_path / "12.md"
    spec.write_text("# 12\n\n## 10. Before\n\ntext\n")
    entries = expected.load()
    expected.write_spec(entries, spec)
    expected.write_spec(entries, spec)
    text = spec.read_text()
    assert text.startswith("# 12\n\n## 10. Before\n\ntext\n\n")
    assert text.count(expected.SECTION) == 1 and expected.spec_section(text) == expected.markdown(
        entries
    )


def test_every_corpus_playbook_and_every_own_playbook_is_a_case() -> None:
    files = {case.file for case in CASES} | {c for case in CASES for c in case.children}
    assert set(FIXTURES.rglob("*.yaml")) <= files
    assert set(OWN.glob("*.yaml")) <= files
    assert all(file.is_file() for file in files)
    assert len(by_name()) == len(CASES)


def test_the_quick_slice_names_cases() -> None:
    assert set(QUICK) <= set(by_name()) and len(set(QUICK)) == len(QUICK)


def test_each_numbered_behaviour_that_a_playbook_shows_has_a_case() -> None:
    origins = " ".join(case.origin for case in CASES)
    for number in range(1, 9):
        assert f"behaviour {number}" in origins, number
