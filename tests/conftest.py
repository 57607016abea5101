"""Shared test fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


def shared_file(*parts: str) -> Path:
    """A file under ../shared (public vectors and corpora); fail loudly when it is missing,
    because a conformance test that silently finds nothing proves nothing."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"missing {path}: the conformance tests need ../shared beside the repository")
    return path


def shared_json(*parts: str) -> Any:
    return json.loads(shared_file(*parts).read_text())
