"""A schedule's spec and its slots (spec/11-flows.md §12.1): cron expressions through
`croniter`, interval schedules by arithmetic, time zones through `zoneinfo` (DST included).

Only the host computes slots, when a schedule command is admitted or a slot fires, and the
result is journaled: a cron library's answers may change between its versions (which is why
`croniter` is pinned), and replay reads the journaled slot instead of computing it again.

    spec = ScheduleSpec.parse({"flow": "hello", "cron": "*/15 * * * *"})
    spec.slots_after(0, 2)   # the first two slots after 1970-01-01T00:00Z, in ns
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from aos.flows.serve.schedules.errors import ScheduleError
from aos.kernel import cbor
from aos.kernel.hashing import hash_bytes

NS_PER_S = 1_000_000_000
OVERLAP_POLICIES = ("skip", "buffer-one", "allow", "cancel-previous")
CATCH_UP_POLICIES = ("none", "last", "all")
SCHEDULE_NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
CRON_EXPRESSION_BYTES_MAX = 256
"""Longest cron expression taken: five fields with lists and ranges fit many times over."""
SCHEDULE_WORKLOAD_BYTES_MAX = 65_536
"""A schedule's workload, canonical CBOR: it is copied into every execution it starts."""
INTERVAL_NS_MIN = NS_PER_S
TIMEZONE_BYTES_MAX = 64
_DURATION = re.compile(r"(?:(\d{1,9})d)?(?:(\d{1,9})h)?(?:(\d{1,9})m)?(?:(\d{1,9})s)?")
_UNIT_NS = (86_400 * NS_PER_S, 3_600 * NS_PER_S, 60 * NS_PER_S, NS_PER_S)


def parse_duration(text: str, field: str) -> int:
    """`1d2h30m15s` (any of the parts, in that order) in ns."""
    found = _DURATION.fullmatch(text.strip()) if len(text) <= 40 else None
    if not text.strip() or found is None:
        raise ScheduleError(f"{field} {text!r} is not a duration like 15m, 1h30m, 1d", path=field)
    return sum(int(part or 0) * unit for part, unit in zip(found.groups(), _UNIT_NS, strict=True))


def parse_time(text: str, zone: ZoneInfo, field: str) -> int:
    """An ISO 8601 time in ns since the epoch; one without an offset is in `zone`."""
    try:
        at = datetime.fromisoformat(text[:64])
    except ValueError:
        raise ScheduleError(f"{field} {text[:64]!r} is not an ISO 8601 time", path=field) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=zone)
    return _ns(at)


def _ns(at: datetime) -> int:
    delta = at.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta // timedelta(microseconds=1)) * 1000


def _datetime(ns: int, zone: ZoneInfo) -> datetime:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)).astimezone(zone)


def utc_text(ns: int) -> str:
    return _datetime(ns, ZoneInfo("UTC")).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ScheduleSpec:
    """What a schedule starts and when: its canonical value is journaled at create."""

    flow: str
    version: int | None = None
    cron: str | None = None
    every_ns: int | None = None
    timezone: str = "UTC"
    start_ns: int | None = None
    end_ns: int | None = None
    jitter_ns: int = 0
    workload: Any = None
    overlap: str = "skip"
    catch_up: str = "last"

    @classmethod
    def parse(cls, value: dict[str, Any]) -> ScheduleSpec:
        """Check a spec from outside (CLI, API): bounded before anything is computed."""
        spec = cls(**{key: value[key] for key in cls.__dataclass_fields__ if key in value})
        spec.check()
        return spec

    def to_value(self) -> dict[str, Any]:
        return {**self.__dict__}

    def zone(self) -> ZoneInfo:
        try:
            return ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ScheduleError(f"no time zone {self.timezone!r}", path="timezone") from None

    def check(self) -> None:
        if (self.cron is None) == (self.every_ns is None):
            raise ScheduleError("give exactly one of cron and every", path="cron")
        if self.overlap not in OVERLAP_POLICIES:
            raise ScheduleError(f"overlap is one of {', '.join(OVERLAP_POLICIES)}", path="overlap")
        if self.catch_up not in CATCH_UP_POLICIES:
            raise ScheduleError(
                f"catch-up is one of {', '.join(CATCH_UP_POLICIES)}", path="catch_up"
            )
        if len(self.timezone.encode()) > TIMEZONE_BYTES_MAX:
            raise ScheduleError("timezone is too long", path="timezone")
        self.zone()
        if self.cron is not None:
            _check_cron(self.cron)
        if self.every_ns is not None and self.every_ns < INTERVAL_NS_MIN:
            raise ScheduleError("every is at least 1s", path="every")
        if self.jitter_ns < 0 or (self.every_ns is not None and self.jitter_ns >= self.every_ns):
            raise ScheduleError("jitter is at least 0 and less than the interval", path="jitter")
        if self.start_ns is not None and self.end_ns is not None and self.end_ns < self.start_ns:
            raise ScheduleError("end is before start", path="end")
        if len(cbor.encode(self.workload)) > SCHEDULE_WORKLOAD_BYTES_MAX:
            raise ScheduleError(
                f"the workload is over {SCHEDULE_WORKLOAD_BYTES_MAX} bytes", path="workload"
            )

    def slots_after(self, after_ns: int, count: int) -> list[int]:
        """The next `count` slots strictly after `after_ns` (fewer when the schedule ends)."""
        found: list[int] = []
        for slot in self._iter_after(after_ns):
            if len(found) == count:
                break
            found.append(slot)
        return found

    def slots_between(self, after_ns: int, until_ns: int, count_max: int) -> tuple[list[int], int]:
        """Slots in (after_ns, until_ns], the first `count_max` of them, and how many more
        there are, counted up to `count_max` again (so the walk is bounded)."""
        found: list[int] = []
        more = 0
        for slot in self._iter_after(after_ns):
            if slot > until_ns or more >= count_max:
                break
            if len(found) < count_max:
                found.append(slot)
            else:
                more += 1
        return found, more

    def jittered(self, name: str, slot_ns: int) -> int:
        """When slot `slot_ns` fires: the slot plus a delay below `jitter_ns` that is a hash
        of the schedule and the slot, never randomness, so every node and replay agree."""
        if self.jitter_ns == 0:
            return slot_ns
        digest = hash_bytes(cbor.encode([name, slot_ns])).digest
        return slot_ns + int.from_bytes(digest[:8], "big") % self.jitter_ns

    def _iter_after(self, after_ns: int) -> Iterator[int]:
        begin = after_ns if self.start_ns is None else max(after_ns, self.start_ns - 1)
        for slot in self._raw_after(begin):
            if self.end_ns is not None and slot > self.end_ns:
                return
            yield slot

    def _raw_after(self, after_ns: int) -> Iterator[int]:
        if self.every_ns is not None:
            origin = self.start_ns or 0
            index = max(0, (after_ns - origin) // self.every_ns + 1)
            while True:
                yield origin + index * self.every_ns
                index += 1
        zone = self.zone()
        walker = croniter(self.cron, _datetime(after_ns, zone))
        while True:
            yield _ns(walker.get_next(datetime))


def _check_cron(expression: str) -> None:
    if len(expression.encode()) > CRON_EXPRESSION_BYTES_MAX:
        raise ScheduleError(
            f"the cron expression is over {CRON_EXPRESSION_BYTES_MAX} bytes", path="cron"
        )
    if len(expression.split()) != 5 or not croniter.is_valid(expression):
        raise ScheduleError(f"{expression!r} is not a five-field cron expression", path="cron")
