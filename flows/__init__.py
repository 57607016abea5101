"""Flows: canonical flow definitions, their world, operations and tool adapters (spec/11-flows.md)."""
