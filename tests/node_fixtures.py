"""Fixtures for tests of a node in process (FastAPI's TestClient over the scripted world).
Import the fixture functions into a test module; they register as `world_path`, `node` and
`client` (a client of that node, signed as the scripted world's adapter: import `node_fixture`
with it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aos.kernel.node import Node
from tests.test_node import TestClient, make_world, open_node, signed_client


@pytest.fixture(name="world_path")
def world_path_fixture(tmp_path: Path) -> Path:
    return make_world(tmp_path / "w")


@pytest.fixture(name="node")
def node_fixture(world_path: Path) -> Iterator[Node]:
    with open_node(world_path) as node:
        yield node


@pytest.fixture(name="client")
def client_fixture(node: Node) -> TestClient:
    return signed_client(node)
