"""The world host (`aos node up`): one world served over HTTP to clients and adapters.

    node.py    Node: the operations the API offers, each run on the host thread
    host.py    WorldHost: the single writer thread; publishing intents; timer ticks
    leases.py  LeaseManager: leases, expiry, long-polls
    human.py   the human adapter (task inbox) hosted by the node
    app.py     the FastAPI app; models.py its bodies; errors.py codes and HTTP statuses
    limits.py  NodeLimits and their defaults

See spec/04-effects.md.

`Node` and `NodeLimits` are imported when first asked for, so that a client that needs only
the node's models or error codes (the CLI, kernel/client.py) does not load the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aos.kernel.node.limits import NodeLimits
    from aos.kernel.node.node import Node

__all__ = ["Node", "NodeLimits"]


def __getattr__(name: str) -> Any:
    if name == "Node":
        from aos.kernel.node.node import Node

        return Node
    if name == "NodeLimits":
        from aos.kernel.node.limits import NodeLimits

        return NodeLimits
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
