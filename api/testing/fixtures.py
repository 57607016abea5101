"""aos.testing's pytest plugin (registered by the package's `pytest11` entry point): the
fixtures `aos_world`, a test world kept in the test's `tmp_path` (`aos_world.path`), with
its doubles (`aos_world.doubles`), and `aos_flows`, its `Flows` handle, closed after the
test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    # Imported by the fixtures when a test uses them: every pytest run loads the plugin.
    from aos._flows import Flows
    from aos.testing._doubles import ToolDoubles


@dataclass
class AosWorld:
    """A test world: its directory, its doubles (add to `doubles.tasks` or `doubles.kinds`
    before running), and its handle."""

    path: Path
    doubles: ToolDoubles
    flows: Flows


@pytest.fixture
def aos_world(tmp_path: Path) -> Iterator[AosWorld]:
    from aos.testing import ToolDoubles, test_world

    doubles = ToolDoubles(tasks={}, kinds={})
    path = tmp_path / "aos-world"
    with test_world(doubles, path=path) as flows:
        yield AosWorld(path, doubles, flows)


@pytest.fixture
def aos_flows(aos_world: AosWorld) -> Flows:
    return aos_world.flows
