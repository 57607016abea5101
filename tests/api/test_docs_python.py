"""The guide's "Use aos from Python" page (docs/python.md) runs as written, from the
repository's root: each `python` block of those sections, the
printed lines being what its comments say; the test file under pytest with the plugin the
package registers."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("## The API", "## Testing flows")


def blocks(section: str) -> list[str]:
    text = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")
    body = text.split(section + "\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, flags=re.DOTALL)


def printed_comments(block: str) -> list[str]:
    """What each `print(...)  # ...` line says it prints."""
    return [
        line.split("  # ", 1)[1]
        for line in block.splitlines()
        if line.lstrip().startswith("print(") and "  # " in line
    ]


@pytest.mark.parametrize("index", [0, 1])
def test_the_use_from_python_examples_print_what_they_say(
    index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = blocks(SECTIONS[0])[index]
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, f"docs/python.md block {index}", "exec"), {})
    assert out.getvalue().splitlines() == printed_comments(block)


def test_the_testing_flows_example_passes_under_pytest(tmp_path: Path) -> None:
    (block,) = blocks(SECTIONS[1])
    test_file = tmp_path / "test_checkout.py"
    test_file.write_text(block, encoding="utf-8")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)]
    command += ["--basetemp", str(tmp_path / "pt"), "-p", "no:xdist"]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
