"""The `human` adapter, hosted by the node: open intents of effects that list it are tasks in
an inbox; completing one signs a receipt with the adapter's key and settles the intent like
any other receipt (so the journal shows who vouched for the human's answer).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aos.kernel.adapters.signing import public_key_of, signed_receipt
from aos.kernel.air.model import DefAdapter
from aos.kernel.node.errors import HumanAdapterError
from aos.kernel.node.leases import PublishedIntent

TASK_STATUSES = ("ok", "error")


@dataclass(frozen=True)
class HumanAdapter:
    name: str
    seed: bytes

    def check(self, adapters: Mapping[str, DefAdapter]) -> None:
        """Refuse to start with a key the manifest would not accept: every completion would
        be rejected as forged."""
        definition = adapters.get(self.name)
        if definition is None:
            raise HumanAdapterError(f"the manifest defines no adapter {self.name}")
        if definition.public_key_bytes != public_key_of(self.seed):
            raise HumanAdapterError(f"the key file is not {self.name}'s key (public keys differ)")

    def receipt(
        self, world_id: str, task: PublishedIntent, status: str, payload: Any
    ) -> dict[str, Any]:
        """A signed receipt for a completed task: it started when the task was published and
        finished now."""
        finished_ns = time.time_ns()
        started_ns = min(task.published_unix_ms * 1_000_000, finished_ns)
        body = {
            "world": world_id,
            "intent": task.intent,
            "status": status,
            "payload": payload,
            "adapter": self.name,
            "started_ns": started_ns,
            "finished_ns": finished_ns,
        }
        return signed_receipt(self.seed, body)
