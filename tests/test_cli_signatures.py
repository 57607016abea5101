"""No function of the CLI takes more than `PARAMETERS_MAX` parameters (issue 33 item 6): a
command with many options receives them as one settings object (`cli.common.pass_settings`),
and its limits as their `*Limits` dataclass (`cli.limit_options.limit_options`), so a new
limit is one field and not an option, a parameter and a constructor argument as well.

An AST walk over cli/ counts each function's parameters (`self` and `cls` not counted,
`*args` and `**kwargs` counted as one each)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARAMETERS_MAX = 8


def parameter_counts(folder: Path) -> dict[str, int]:
    """`file:line name` -> parameters, for every function under `folder`."""
    counts = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                given = node.args
                names = [a.arg for a in (*given.posonlyargs, *given.args, *given.kwonlyargs)]
                count = len(names) + (given.vararg is not None) + (given.kwarg is not None)
                count -= bool(names) and names[0] in ("self", "cls")
                counts[f"{path.relative_to(folder)}:{node.lineno} {node.name}"] = count
    return counts


def test_no_cli_function_takes_more_than_eight_parameters() -> None:
    counts = parameter_counts(ROOT / "cli")
    assert counts, "no functions found: the walk looks in the wrong place"
    over = {name: count for name, count in counts.items() if count > PARAMETERS_MAX}
    assert over == {}


def test_the_walk_counts_what_a_signature_takes(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        "def f(a, b, /, c, *args, d, **kwargs): ...\nclass C:\n    def m(self, a): ...\n"
    )
    counts = {name.split(" ")[1]: n for name, n in parameter_counts(tmp_path).items()}
    assert counts == {"f": 6, "m": 1}
