"""The interpreter under test is modules/flow (a component's source tree, not a package):
its directory goes first on sys.path, as it is the component's."""

from __future__ import annotations

import sys
from pathlib import Path

FLOW_DIR = Path(__file__).resolve().parents[2] / "modules" / "flow"
if str(FLOW_DIR) not in sys.path:
    sys.path.insert(0, str(FLOW_DIR))
