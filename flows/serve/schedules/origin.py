"""Which schedule or trigger started an execution (spec/11-flows.md §12.2, §12.7), read from
its id: `aos flow ls` and the inspector's flow pages show it. Imports nothing heavy, so the
CLI can name it at startup."""

from __future__ import annotations


def started_by(exec_id: str) -> str | None:
    """`schedule NAME` for `sched~NAME~...`, `trigger NAME` for `trig~NAME~...` (`~` is in
    no id a user gives), else None."""
    kind, _, rest = str(exec_id).partition("~")
    name = rest.partition("~")[0]
    if kind == "sched" and name:
        return f"schedule {name}"
    if kind == "trig" and name:
        return f"trigger {name}"
    return None
