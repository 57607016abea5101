"""A flow shadow, or a migration's plan, computed for a node in a process of its own.

Both replay the world's whole history, so the node runs neither on its writer thread nor
in its own process (LMDB forbids opening one environment twice in a process). It starts

    python -m aos.flows.serve.flow_shadow_worker WORLD_DIR

with one canonical CBOR map on stdin, `{"op": "shadow", "flow", "version", "execs",
"executions_max"}`, `{"op": "plan", "exec", "version"}` or `{"op": "plan_flow", "flow",
"version", "executions_max"}`; the worker opens the store read-only beside the serving writer
and answers `{"report": ...}` or `{"plan": ...}` on stdout, or
`{"error": {code, message, ...}}` (kernel/node/shadow_worker.py `run_worker`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from aos.flows.define.document import load_flow
from aos.flows.serve import migration
from aos.flows.serve.flow_operations import FlowRequestInvalidError
from aos.flows.serve.flow_shadow import (
    ShadowTarget,
    check_execs,
    deployed_target,
    file_target,
    shadow_flow,
)
from aos.kernel import cbor
from aos.kernel.errors import AosError
from aos.kernel.node.shadow_worker import run_worker
from aos.kernel.world.world import World

REQUEST_BYTES_MAX = 4 * 1024 * 1024
"""Largest request a worker reads: a definition's text (at most `definition_bytes_max`,
1 MiB) and up to 1,000 execution ids, with room to spare."""


async def shadow_in_worker(
    world_dir: Path,
    flow: str,
    version: int | None,
    execs: list[str],
    executions_max: int,
    *,
    text: str | None = None,
    source: str = "",
    timeout_ms: int,
) -> dict[str, Any]:
    """The report of `shadow_flow` for a deployed version of `flow`, or for the definition
    `text` (not deployed), as JSON."""
    request = {
        "op": "shadow",
        "flow": flow,
        "version": version,
        "text": text,
        "source": source,
        "execs": execs,
        "executions_max": executions_max,
    }
    found = await _run(world_dir, request, timeout_ms, f"the shadow of {flow}")
    return dict(found["report"])


async def plan_in_worker(
    world_dir: Path, exec_id: str, version: int | None, *, timeout_ms: int
) -> migration.MigrationPlan:
    """A migration's plan (`migration.plan`)."""
    request = {"op": "plan", "exec": exec_id, "version": version}
    found = await _run(world_dir, request, timeout_ms, f"the migration of {exec_id}")
    return migration.MigrationPlan(**found["plan"])


async def plan_flow_in_worker(
    world_dir: Path, flow: str, version: int | None, executions_max: int, *, timeout_ms: int
) -> migration.FlowMigrationPlan:
    """The plans for every running execution of a flow (`migration.plan_flow`)."""
    request = {
        "op": "plan_flow",
        "flow": flow,
        "version": version,
        "executions_max": executions_max,
    }
    found = await _run(world_dir, request, timeout_ms, f"the migration of {flow}")
    return migration.FlowMigrationPlan.from_value(found["plan"])


async def _run(world_dir: Path, request: dict[str, Any], timeout_ms: int, what: str) -> Any:
    return await run_worker(
        __name__, [str(world_dir)], timeout_ms=timeout_ms, what=what, stdin=cbor.encode(request)
    )


def answer(world_dir: str, request: Any) -> dict[str, Any]:
    """What the worker writes for `request`."""
    if not isinstance(request, dict):
        raise FlowRequestInvalidError("a worker request is a map")
    if request.get("op") == "plan":
        planned = migration.plan(world_dir, str(request["exec"]), request.get("version"))
        return {"plan": planned.to_value()}
    if request.get("op") == "plan_flow":
        flow_plan = migration.plan_flow(
            world_dir,
            str(request["flow"]),
            request.get("version"),
            executions_max=int(request["executions_max"]),
        )
        return {"plan": flow_plan.to_value()}
    if request.get("op") == "shadow":
        with World.reading(world_dir) as world:
            target = _target(world, request)
            execs = [str(e) for e in request.get("execs") or ()]
            check_execs(world, target.flow, execs)
        report = shadow_flow(
            world_dir, target, execs=execs, executions_max=int(request["executions_max"])
        )
        return {"report": cbor.to_json(report.to_value())}
    raise FlowRequestInvalidError(f"unknown worker operation {request.get('op')!r}")


def _target(world: World, request: dict[str, Any]) -> ShadowTarget:
    text = request.get("text")
    if text is None:
        return deployed_target(world, str(request["flow"]), request.get("version"))
    definition = load_flow(str(text), source=str(request.get("source") or "<request>"))
    if definition.name != request["flow"]:
        raise FlowRequestInvalidError(
            f"the definition is of {definition.name}, not {request['flow']}", path="$.text"
        )
    return file_target(world, definition)


def main(argv: list[str]) -> int:
    (world_dir,) = argv
    try:
        data = sys.stdin.buffer.read(REQUEST_BYTES_MAX + 1)
        if len(data) > REQUEST_BYTES_MAX:
            raise FlowRequestInvalidError(f"a worker request is over {REQUEST_BYTES_MAX} bytes")
        request = cbor.decode(data)
        found = answer(world_dir, request)
    except AosError as error:
        sys.stdout.buffer.write(cbor.encode({"error": error.to_dict()}))
        return 1
    sys.stdout.buffer.write(cbor.encode(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
