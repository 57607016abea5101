"""Without OpenTelemetry (the `otel` extra not installed) a flow runs as before, traces
nothing and imports nothing of it (spec/11 §13): a process where `opentelemetry` cannot be
imported runs a playbook through the public API."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_without_opentelemetry_imports_none_of_it() -> None:
    code = (
        "import importlib.util, sys\n"
        "real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, package=None: (\n"
        "    None if name.split('.')[0] == 'opentelemetry' else real(name, package))\n"
        "class Blocked:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'opentelemetry':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Blocked())\n"
        "import aos\n"
        "with aos.create() as flows:\n"
        "    outcome = flows.run('flows/examples/hello.yaml').wait()\n"
        "assert outcome.ok, outcome\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'opentelemetry']\n"
        "print('untraced')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "untraced"
