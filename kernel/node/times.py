"""When a journal record happened (spec/03-world.md §4, spec/04-effects.md §9.5), for reads
that show times: wall and logical time, as ISO 8601 instants and durations.

The kernel reads a clock once per input from outside, at ingress, and journals it in the
input's `stamp` (`wall_ns`, the host's clock; `logical_ns`, the world's logical time). A
record the kernel derived carries no stamp of its own: its time is its input's, found by
following its links (a step's or a fault's `input`, an emitted event's or an intent's `cause`,
a timer receipt's `cause`, the `time` record) back to a stamped record, at most
`TIME_LINKS_MAX` links. Nothing here is on the step path; it only reads the journal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aos.kernel.world import records
from aos.kernel.world.timers import CLOCK_WALL
from aos.kernel.world.world import World

TIME_LINKS_MAX = 64
"""Links followed from a record to the stamped input it came from (a chain of emitted events
is as long as the workflows made it); past it the record's time is unknown."""
RECORD_TIMES_CACHED_MAX = 4096
"""Records whose time one `RecordTimes` remembers (a page resolves a few hundred)."""
NS_PER_S = 1_000_000_000
_LINKS = {
    records.STEP: "input",
    records.STEP_FAULT: "input",
    records.DELIVERY_DROPPED: "input",
    records.DOMAIN_EVENT: "cause",
    records.EFFECT_INTENT: "cause",
    records.EFFECT_RECEIPT: "cause",
}
"""The field that names the record a derived record came from, by kind."""


@dataclass(frozen=True)
class At:
    """When a record happened: its input's wall time (the host's clock at ingress) and the
    world's logical time then (what workflows read as `now_ns`)."""

    wall_ns: int
    logical_ns: int


def time_json(found: At | None) -> dict[str, int] | None:
    """A time as the reads answer it: `{wall_ns, logical_ns}`, or null when unknown."""
    return None if found is None else {"wall_ns": found.wall_ns, "logical_ns": found.logical_ns}


class RecordTimes:
    """The times of a world's records, each looked up at most once (a page's records share
    their inputs). Use it on the host thread, within one read."""

    def __init__(self, world: World) -> None:
        self.world = world
        self._known: dict[int, At | None] = {}

    def at(self, seq: int, record: Mapping[Any, Any] | None = None) -> At | None:
        """The time of record `seq` (`record`, when the caller has it decoded); None when no
        stamped input is within `TIME_LINKS_MAX` links (a snapshot, a genesis of old)."""
        followed: list[int] = []
        found: At | None = None
        for _ in range(TIME_LINKS_MAX):
            if seq in self._known:
                found = self._known[seq]
                break
            followed.append(seq)
            record = record if record is not None else self._record(seq)
            found = _stamped(record)
            link = _LINKS.get(str(record.get("kind"))) if found is None else None
            target = record.get(link) if link is not None else None
            if found is not None or not isinstance(target, int) or not 0 < target < seq:
                break
            seq, record = target, None
        for each in followed:
            self._remember(each, found)
        return found

    def _record(self, seq: int) -> Mapping[Any, Any]:
        head = self.world.store.journal.head()
        if not 0 < seq <= head:
            return {}
        value = next(iter(self.world.store.journal.read(seq, seq)))[1]
        return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}

    def _remember(self, seq: int, found: At | None) -> None:
        if len(self._known) >= RECORD_TIMES_CACHED_MAX:
            self._known.clear()
        self._known[seq] = found


def _stamped(record: Mapping[Any, Any]) -> At | None:
    stamp = record.get("stamp")
    if not isinstance(stamp, dict):
        return None
    wall, logical = stamp.get("wall_ns"), stamp.get("logical_ns")
    if isinstance(wall, int) and isinstance(logical, int):
        return At(wall, logical)
    return None


# --------------------------------------------------------------------------------------------
# As text


def iso_instant(ns: int | None) -> str:
    """An instant as ISO 8601 in UTC to the millisecond, `2026-11-28T05:12:59.724Z`."""
    if ns is None:
        return ""
    seconds, rest = divmod(ns, NS_PER_S)
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{rest // 1_000_000:03d}Z"


def iso_duration(ns: int | None) -> str:
    """A duration as ISO 8601, to the millisecond: `PT0.105S`, `PT2M3.5S`, `P1DT2H`; a
    negative one with a leading `-` (a wall clock set back)."""
    if ns is None:
        return ""
    sign = "-" if ns < 0 else ""
    ms = abs(ns) // 1_000_000
    days, ms = divmod(ms, 86_400_000)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    seconds, ms = divmod(ms, 1000)
    clock = "".join(f"{value}{unit}" for value, unit in ((hours, "H"), (minutes, "M")) if value)
    if seconds or ms or not (days or clock):
        clock += f"{seconds}.{ms:03d}".rstrip("0").rstrip(".") + "S"
    return sign + "P" + (f"{days}D" if days else "") + (f"T{clock}" if clock else "")


def logical_text(ns: int | None, clock: str) -> str:
    """A logical time as a person reads it: on a `wall` clock world an instant (it follows the
    host's clock); on a `manual` one, which starts at 0 and moves only when told, the time
    since that start (`+PT1H`)."""
    if ns is None:
        return ""
    return iso_instant(ns) if clock == CLOCK_WALL else "+" + iso_duration(ns)
