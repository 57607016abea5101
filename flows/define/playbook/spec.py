"""Spec layering (seed 003 §3): the effective spec of a task is
`merge(kind_defaults, executor.spec, step.spec, loop.spec, task.spec)`, inner over outer.
Scalars: the inner wins. Maps: deep-merged. Lists: the inner replaces the outer."""

from __future__ import annotations

from typing import Any


def merge(*layers: Any) -> dict[str, Any]:
    """The layers (outermost first; a layer that is not a map is skipped) merged into a new
    map; no layer is modified."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if isinstance(layer, dict):
            merged = _over(merged, layer)
    return merged


def _over(base: dict[str, Any], inner: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in inner.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _over(merged[key], value)
        elif isinstance(value, dict):
            merged[key] = _over({}, value)
        elif isinstance(value, list):
            merged[key] = list(value)
        else:
            merged[key] = value
    return merged


def as_map(value: Any) -> dict[str, Any]:
    """`value` when it is a map, else an empty one (a wrong shape is reported elsewhere)."""
    return value if isinstance(value, dict) else {}
