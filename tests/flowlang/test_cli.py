"""`aos flow check | draw | fmt | compile | run` on `.flow` files: every file of the
littleflow corpus checks (bound to `echo` by a workbook), the `errors/` ones fail with the
error their name says, and without a binding every unbound task is listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from aos.cli.main import main
from aos.flows.errors import FlowCheckError
from tests.flowlang.mermaid_graph import read
from tests.flowlang.test_seed_diagrams import SHARED

CORPUS = SHARED / "corpora" / "littleflow" / "tests"
GOOD = sorted(p for p in CORPUS.rglob("*.flow") if p.parent.name != "errors")
BAD = {
    "ambiguous-meet.flow": "flow.lang.ambiguous_meet",
    "same-output-label.flow": "flow.lang.duplicate_output_label",
}


def aos(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def workbook(tmp_path: Path) -> Path:
    path = tmp_path / "workbook.yaml"
    path.write_text("".join(f"- {{name: {n}, tool: {{kind: echo}}}}\n" for n in "ABCDEF"))
    return path


def test_every_corpus_file_checks(workbook: Path) -> None:
    result = aos("flow", "check", "--workbook", workbook, *GOOD, "--json")
    assert result.exit_code == 0, result.output
    assert len(GOOD) == 13 and all(r["ok"] for r in json.loads(result.output))


def test_the_corpus_error_files_fail_as_named(workbook: Path) -> None:
    files = sorted((CORPUS / "errors").glob("*.flow"))
    assert {f.name for f in files} == set(BAD)
    result = aos("flow", "check", "--workbook", workbook, *files, "--json")
    assert result.exit_code == 1
    for checked in json.loads(result.output):
        (problem,) = checked["problems"]
        assert problem["code"] == BAD[Path(checked["file"]).name]


def test_unbound_tasks_are_listed_at_check_time(tmp_path: Path) -> None:
    path = tmp_path / "f.flow"
    path.write_text("load → echo → store\nscore\n")
    result = aos("flow", "check", path, "--json")
    assert result.exit_code == 1
    (problem,) = json.loads(result.output)[0]["problems"]
    assert problem["code"] == "flow.lang.task_unbound"
    assert "load, score, store" in problem["message"]


def test_a_task_declared_with_a_tool_is_bound(tmp_path: Path) -> None:
    path = tmp_path / "f.flow"
    path.write_text("@task load (- tool: {kind: echo} -)\nload → echo\n")
    result = aos("flow", "compile", path)
    assert result.exit_code == 0, result.output
    steps = json.loads(result.output)["steps"]
    assert [s["name"] for s in steps] == ["_start_", "load.1", "echo.2", "_end_"]


def test_draw_writes_the_seed_layout(workbook: Path) -> None:
    result = aos("flow", "draw", CORPUS / "spec" / "example-7.flow", "--format", "mermaid")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("stateDiagram-v2\n  direction LR\n")
    states, edges = read(result.output)
    assert states["_start_2_"] == "<<fork>>" and ("_end_5_", "D.6") in edges


def test_fmt_prints_the_canonical_layout_and_keeps_the_graph(tmp_path: Path) -> None:
    path = tmp_path / "f.flow"
    path.write_text("# a comment\nA :x → B → C;\n   :x → D\n")
    result = aos("flow", "fmt", path)
    assert result.exit_code == 0, result.output
    assert result.output == "A :x → B → C;\n:x → D;\n"
    assert aos("flow", "fmt", "--write", path).exit_code == 0
    assert path.read_text() == result.output


def test_a_bad_file_is_a_typed_error_with_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.flow"
    path.write_text("A → B\nC → (- [unclosed -)\n")
    result = aos("flow", "fmt", path, "--json")
    assert result.exit_code != 0
    assert "flow.lang." in result.output and ":2:" in result.output
    path.write_bytes(b"\xff\xfe")
    assert "flow.decode" in aos("flow", "fmt", path, "--json").output


def test_run_local_runs_a_flow_file(tmp_path: Path, workbook: Path) -> None:
    path = tmp_path / "m.flow"
    path.write_text('<{"fruit": "banana"}> → A → :x > B;\n<{"animal": "monkey"}> → C → :x\n')
    result = aos("flow", "run", path, "--local", "--workbook", workbook, "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["status"] == "completed"
    assert body["result"] == {"fruit": "banana", "animal": "monkey"}


def test_deploying_a_bad_flow_file_changes_nothing(tmp_path: Path, workbook: Path) -> None:
    from aos.kernel.world.world import World

    world = tmp_path / "w"
    assert aos("flow", "world", "create", world).exit_code == 0
    with World.open(world) as opened:
        height = opened.height
    good, bad = tmp_path / "good.flow", tmp_path / "bad.flow"
    good.write_text("A → B\n")
    bad.write_text("A :x → B → C :x → D\n")
    result = aos("flow", "deploy", bad, "--workbook", workbook, "--world", world, "--json")
    assert result.exit_code != 0 and "flow.lang.duplicate_output_label" in result.output
    result = aos("flow", "deploy", good, "--world", world, "--json")  # A, B unbound
    assert result.exit_code != 0 and "flow.lang.task_unbound" in result.output
    with World.open(world) as opened:
        assert opened.height == height
    result = aos("flow", "deploy", good, "--workbook", workbook, "--world", world, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["version"] == 1


def test_the_readme_examples_check_and_run(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parents[2] / "flows" / "examples"
    result = aos("flow", "check", examples / "merge.flow", examples / "items.flow")
    assert result.exit_code == 0, result.output
    result = aos("flow", "run", examples / "merge.flow", "--local", "--json")
    assert json.loads(result.output)["result"] == {"fruit": "banana", "animal": "monkey"}
    (tmp_path / "items.json").write_text((examples / "items.json").read_text())
    result = aos("flow", "run", examples / "items.flow", "--local", "--file-base", tmp_path)
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "out" / "scores.json").read_text())
    assert written == [{"x": 12, "y": 24}, {"x": 3, "y": 96}, {"x": 7, "y": 12}]


def test_declared_documentation_and_defaults_reach_the_definition(tmp_path: Path) -> None:
    path = tmp_path / "d.flow"
    path.write_text(
        "@flow docs '''The flow.'''\n"
        "@task A (- {tool: {kind: echo}, dry-run: false} -) '''Task A.''';\n"
        "A (- dry-run: true -) → A\n"
    )
    result = aos("flow", "compile", path)
    assert result.exit_code == 0, result.output
    compiled = json.loads(result.output)
    assert compiled["description"] == "The flow."
    steps = {s["name"]: s for s in compiled["steps"]}
    assert steps["A.1"]["description"] == "Task A."
    assert steps["A.1"]["tasks"][-1]["tool"] == {"kind": "echo"}


def test_arrow_text_without_a_flow_name_is_the_flow_language() -> None:
    from aos.flows.define.cfd import load_definition
    from aos.flows.define.flowlang.errors import UnboundTasksError

    definition = load_definition("echo → echo", source="<request>")
    assert [s.name for s in definition.steps] == ["_start_", "echo.1", "echo.2", "_end_"]
    with pytest.raises(UnboundTasksError):
        load_definition("A → B", source="<request>")
    with pytest.raises(FlowCheckError):  # one YAML string that is no flow: not a definition
        load_definition("hello", source="<request>")
