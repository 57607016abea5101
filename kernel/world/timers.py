"""A world's logical clock and its kernel timers (spec/03-world.md §4, spec/04-effects.md).

Every input gets a stamp: wall time, logical time, fresh entropy, the height it will have
and the manifest. Logical time follows the wall clock (`wall`) or moves only when told
(`manual`); it never goes back. A kernel timer is an open `sys/timer.set@1` intent with a
deadline; a `time` input settles the ones it makes due, with receipts the kernel writes.
"""

from __future__ import annotations

from typing import Any

from aos.kernel.air import TIMER_ADAPTER
from aos.kernel.world.errors import ClockManualOnlyError, TimeBackwardsError, TimeOutOfRangeError
from aos.kernel.world.intents import IntentTracker, OpenIntent
from aos.kernel.world.stamps import Stamp, StampSource

CLOCK_WALL = "wall"
CLOCK_MANUAL = "manual"

# Logical time stays in the signed 64-bit range that stamps, timers and most readers share; the
# rest of CBOR's u64 range is headroom for deadlines a workflow computes from it. A time input
# past it is refused before anything is stamped or journaled.
LOGICAL_NS_MAX = 2**63 - 1


class Timers:
    """Logical time, the stamps of inputs, and the kernel timers among the open intents."""

    def __init__(self, clock: str, stamps: StampSource, intents: IntentTracker) -> None:
        self.clock = clock
        self.logical_ns = 0
        self._stamps = stamps
        self._intents = intents
        # Set by a replay so the next input gets its recorded stamp instead of a fresh one.
        self._forced: Stamp | None = None

    def force(self, stamp: Stamp | None) -> None:
        self._forced = stamp

    def next_stamp(self, height: int, manifest: str) -> Stamp:
        """The stamp of the input that will be journaled at `height`."""
        if self._forced is not None:
            stamp, self._forced = self._forced, None
            return stamp
        wall = self._stamps.wall_ns()
        logical = max(self.logical_ns, wall) if self.clock == CLOCK_WALL else self.logical_ns
        return Stamp(
            wall_ns=wall,
            logical_ns=logical,
            entropy=self._stamps.entropy(),
            height=height,
            manifest=manifest,
        )

    def advanced_by(self, by_ns: int) -> int:
        """The logical time `by_ns` after now, for a `manual` clock."""
        self._require_manual()
        if by_ns < 0:
            raise TimeBackwardsError(f"cannot move time by {by_ns} ns")
        return _in_range(self.logical_ns + by_ns)

    def next_jump(self) -> int | None:
        """The logical time of the earliest timer deadline (now if it is past), for a
        `manual` clock; None when no timer is pending."""
        self._require_manual()
        deadline = self._intents.next_deadline()
        return None if deadline is None else _in_range(max(self.logical_ns, deadline))

    def wall_due(self) -> bool:
        """Whether a kernel timer is due at the current wall time (a `wall` clock)."""
        if self.clock != CLOCK_WALL:
            raise ClockManualOnlyError("tick is for wall-clock worlds; use advance_time")
        return self._intents.any_due(max(self.logical_ns, self._stamps.wall_ns()))

    def next_deadline(self) -> int | None:
        return self._intents.next_deadline()

    def due_receipts(self, world_id: str) -> list[tuple[OpenIntent, dict[str, Any]]]:
        """The receipt body of every timer due now, in settling order (deadline, intent)."""
        now = self.logical_ns
        due = []
        for intent in self._intents.due(now):
            open_intent = self._intents.get(intent)
            assert open_intent is not None
            body = {
                "world": world_id,
                "intent": intent,
                "status": "ok",
                "payload": {"delivered_at_ns": now, "key": open_intent.issuer_ref},
                "adapter": TIMER_ADAPTER,
                "started_ns": now,
                "finished_ns": now,
            }
            due.append((open_intent, body))
        return due

    def _require_manual(self) -> None:
        if self.clock != CLOCK_MANUAL:
            raise ClockManualOnlyError("this world's logical time follows the wall clock")


def _in_range(logical_ns: int) -> int:
    if logical_ns > LOGICAL_NS_MAX:
        raise TimeOutOfRangeError(
            f"logical time would be {logical_ns} ns; the most is {LOGICAL_NS_MAX}",
            logical_ns_max=LOGICAL_NS_MAX,
        )
    return logical_ns
