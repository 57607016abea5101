"""Without OpenTelemetry (the `otel` extra not installed) a flow runs as before, traces
nothing and imports nothing of it (spec/11 §14): a process where `opentelemetry` cannot be
imported runs a playbook through the public API."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import aos
from aos.flows.serve.tracing import installed
from aos.kernel.adapters.trace_context import in_trace_context

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


def test_the_opentelemetry_namespace_without_the_sdk_traces_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plain install may hold `opentelemetry` (the API, from another distribution) but not
    the SDK: nothing is traced and nothing fails."""
    real = importlib.util.find_spec

    def without_sdk(name: str, package: str | None = None) -> Any:
        if name in ("opentelemetry.sdk", "opentelemetry.trace"):
            raise ModuleNotFoundError(name)
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_sdk)
    assert not installed("opentelemetry.sdk")
    with in_trace_context("00-" + "1" * 32 + "-" + "2" * 16 + "-01") as entered:
        assert entered is None
    with aos.create() as flows:
        assert flows.adapters is not None and flows.adapters.tracer is None
        assert flows.run(ROOT / "flows/examples/hello.yaml").wait().ok
