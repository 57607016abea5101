"""Errors of schedules (spec/11-flows.md §12.6): each refusal changes nothing."""

from __future__ import annotations

from aos.flows.errors import FlowError


class ScheduleError(FlowError):
    code = "schedule.invalid"
    hint = "aos schedule create --help lists the options"


class ScheduleUnknownError(ScheduleError):
    code = "schedule.unknown"
    hint = "aos schedule ls lists the schedules"


class ScheduleExistsError(ScheduleError):
    code = "schedule.exists"
    hint = "schedule names are unique: delete it first, or choose another name"


class ScheduleLimitError(ScheduleError):
    code = "schedule.limit"
    hint = "raise the named limit, or ask for less"
