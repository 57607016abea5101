"""Schedules: flows that start themselves, exactly once per slot (spec/11-flows.md §12)."""
