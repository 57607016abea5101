"""The world host (`aos node up`): one world served over HTTP to clients and adapters.

    node.py    Node: the operations the API offers, each run on the host thread
    host.py    WorldHost: the single writer thread; publishing intents; timer ticks
    leases.py  LeaseManager: leases, expiry, long-polls
    human.py   the human adapter (task inbox) hosted by the node
    app.py     the FastAPI app; models.py its bodies; errors.py codes and HTTP statuses
    limits.py  NodeLimits and their defaults

See spec/04-effects.md.
"""

from aos.kernel.node.limits import NodeLimits
from aos.kernel.node.node import Node

__all__ = ["Node", "NodeLimits"]
