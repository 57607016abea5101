"""`aos flow check` (spec/11 §1.6, issue 32 item 7): every problem of a file in one pass, each
where it is written (FILE:LINE:COLUMN), and warnings of template references that nothing
provides, which upstream NoETL playbooks never trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from aos.cli.main import main
from aos.flows.define.document import load_flow, source_warnings
from aos.flows.define.positions import Position, SourcePositions, path_parts
from aos.flows.errors import FlowCheckError
from aos.kernel.errors import AosError
from tests.playbooks.driver import PLAYBOOKS

BROKEN = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: broken
  path: demo/broken
workflow:
  - step: start
    next:
      - step: fetch
  - step: fetch
    tool:
      kind: http
      url: "https://example.com"
      bogus_field: 1
  - step: end
"""
MISSPELT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: misspelt
  path: demo/misspelt
workload:
  base: https://example.com
workflow:
  - step: start
    tool: {kind: noop}
    next:
      spec: {mode: exclusive}
      arcs:
        - step: use
          args: {page: 1}
  - step: use
    loop:
      in: "{{ workload.items }}"
      iterator: row
    tool:
      kind: python
      code: |
        def main(x, y, z):
            return x
      args:
        x: "{{ usee.data }}"
        y: "{{ execution.idd }}"
        z: "{% set n = 2 %}{{ n }} {{ row }} {{ page }} {{ base }} {{ loop_index }} {{ execution.id }}"
    next:
      spec: {mode: exclusive}
      arcs:
        - step: end
  - step: end
    tool: {kind: noop}
"""


def aos(*args: Any) -> Result:
    return CliRunner().invoke(main, [str(arg) for arg in args])


def checked(path: Path, *options: str) -> tuple[int, dict[str, Any]]:
    result = aos("flow", "check", path, "--json", *options)
    [report] = json.loads(result.stdout)
    return result.exit_code, report


def test_every_problem_of_a_playbook_is_reported_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    code, report = checked(path)
    assert code == 1 and report["ok"] is False
    found = {(p["code"], p["line"], p["column"]) for p in report["problems"]}
    assert found == {
        ("playbook.tool_missing", 7, 5),  # the step `start`
        ("playbook.next_list", 8, 5),  # its `next:` key
        ("playbook.tool_field_unknown", 14, 7),  # the key `bogus_field`
        ("playbook.tool_missing", 15, 5),  # the step `end`
    }
    text = aos("flow", "check", path).stdout
    assert f"{path}:14:7" in text and "bogus_field" in text


def test_a_misspelt_reference_is_a_warning_at_its_line_with_the_name_meant(
    tmp_path: Path,
) -> None:
    path = tmp_path / "misspelt.yaml"
    path.write_text(MISSPELT)
    code, report = checked(path)
    assert code == 0 and report["ok"] is True  # NoETL runs it: a warning, not a refusal
    warnings = [(w["line"], w["message"].split(" (compiled")[0]) for w in report["warnings"]]
    assert warnings == [
        (
            26,
            "`usee` is no step, task, workload key, arc argument, loop item or namespace "
            "of the interpreter; did you mean `use`?",
        ),
        (27, "`execution` has no field `idd`; it has definition, flow, id, version"),
    ]
    assert {w["code"] for w in report["warnings"]} == {"flow.template_reference_unknown"}
    strict, _ = checked(path, "--strict")
    assert strict == 1


def test_every_syntax_error_of_a_flow_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "two.flow"
    path.write_text('a -> b\nb: python(code="x") =>\nc -> d\nd -> ((\n')
    code, report = checked(path)
    assert code == 1
    where = [(p["code"], p["line"], p["column"]) for p in report["problems"]]
    assert where[:2] == [("flow.lang.syntax", 2, 10), ("flow.lang.syntax", 4, 6)]
    assert all(p["path"].startswith(f"{path}:") for p in report["problems"])


def test_positions_follow_a_path_as_far_as_the_file_goes() -> None:
    text = "a:\n  'b c':\n    - x\n    - {d: 1}\n"
    positions = SourcePositions(text)
    assert path_parts("$.a['b c'][1].d") == ["a", "b c", 1, "d"]
    assert positions.of("$.a['b c'][1].d") == Position(4, 8)
    assert positions.of("$.a['b c'][1].e.f") == Position(4, 7)  # a default: its map
    assert positions.of("$.a['b c'][5]") == Position(2, 3)
    assert positions.of("/f.flow:1:2") is None
    assert SourcePositions("a: [").of("$.a") is None  # its own error says where


def test_upstream_playbooks_that_check_have_no_reference_warnings() -> None:
    """NoETL's own fixtures read only names the interpreter provides: the warning has no
    false alarms on playbooks nobody here wrote."""
    read = 0
    for path in sorted(PLAYBOOKS.rglob("*.yaml")):
        data = path.read_bytes()
        try:
            definition = load_flow(data, source=str(path))
        except (FlowCheckError, AosError):
            continue
        read += 1
        assert source_warnings(data, definition, source=str(path)) == [], path
    assert read >= 10
