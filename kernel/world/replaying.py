"""The replaying world: a scratch world fed a recorded journal (spec/05-snapshots-replay.md §2).

A replay (an audit, a recovery, a governance shadow) rebuilds a world from its journal in a
scratch store. Everything a live world takes from outside (the stamp of an input, the genesis
record, the head to start from) a replaying world takes from the record instead, so these
verbs live here and not on `World`:

- `force_stamp`: the next input gets its recorded stamp instead of a fresh one;
- `genesis_at`: genesis with the recorded genesis stamp;
- `restore_snapshot`: start from a recorded snapshot's content;
- `readmit`: admit a recorded event again, whatever the idempotency keys remembered (the
  record is the admission; a duplicate was never journaled).

The replay (replayer.py) sees every record it appends, with its canonical bytes, through its
journaler's `on_append`, and compares it with the recorded one. A live `World` has none of
these verbs: nothing outside a replay can give an input a stamp it did not take now.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aos.kernel.hashing import Hash
from aos.kernel.world.results import Admitted
from aos.kernel.world.stamps import Stamp
from aos.kernel.world.world import World


class ReplayingWorld(World):
    """A scratch world (`World.scratch`) that takes its inputs' stamps, its genesis and its
    starting head from a recorded journal."""

    def force_stamp(self, stamp: Stamp | None) -> None:
        """Give the next input this recorded stamp instead of a fresh one; None drops one
        that was not used."""
        self._timers.force(stamp)

    def genesis_at(self, stamp: Stamp, module_bytes: Callable[[Hash], bytes]) -> None:
        """Genesis with the recorded genesis stamp."""
        self.force_stamp(stamp)
        self.genesis(module_bytes)

    def restore_snapshot(self, content: dict[str, Any], world_id: str) -> None:
        """Start from a snapshot's content (the scratch store's journal starts at its
        height)."""
        self.world_id = world_id
        self._restore(content)

    def readmit(self, schema: str, value: Any, idempotency_key: str | None = None) -> Admitted:
        """Admit a recorded event (or a recorded refusal) again: checked, stamped and routed
        as `ingress` does, without answering from the idempotency keys remembered."""
        self.require_open()
        event = self._ingress.check_event(self._runtime, schema, value, idempotency_key)
        return self._admit(event)
