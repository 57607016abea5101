"""Where a tool call may have secrets put in (spec/11 §1.7): the call's keychain grants.

A template of a call's tool that names `keychain.NAME` renders to NAME's placeholder, and the
adapter running the call replaces it by the secret. So that a placeholder arriving in a
value (a workload, a signal, a result) never becomes a secret, the call carries, beside the
rendered tool, where its definition put which entries: for each template of the definition's
tool that reads `keychain.NAME` (or `keychain['NAME']`) of an entry the flow declares, the
template's path in the tool and those names. The adapter replaces a placeholder only inside
the value rendered at such a path and only of those names; any other is text."""

from __future__ import annotations

from typing import Any

from aos_flow.expressions import is_template, names_read
from aos_flow.run import Run

NAMESPACE = "keychain"


def of_call(run: Run, tool: dict[str, Any]) -> list[dict[str, Any]]:
    """The grants of a call whose definition's tool is `tool`: `[{path, names}]` in the
    definition's order (empty for a flow that declares no keychain)."""
    declared = {entry["name"] for entry in run.defn.keychain} if run.defn is not None else set()
    found: list[dict[str, Any]] = []
    if declared:
        for key, value in tool.items():
            if key != "kind":
                _walk(value, [key], declared, found)
    return found


def _walk(value: Any, path: list[Any], declared: set[str], found: list[dict[str, Any]]) -> None:
    if is_template(value):
        names = [name for name in names_read(value, NAMESPACE) if name in declared]
        if names:
            found.append({"path": list(path), "names": names})
    elif type(value) is dict:
        for key, item in value.items():
            _walk(item, [*path, key], declared, found)
    elif type(value) is list:
        for index, item in enumerate(value):
            _walk(item, [*path, index], declared, found)
