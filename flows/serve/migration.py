"""Migrating a running execution to another deployed version of its flow (spec/11 §10.2).

An execution is pinned at its start to one definition. Moving it is allowed only where a
shadow (`shadow.py`) shows the other definition reproduces the execution's whole recorded
history, every decision and the state it reached (but for the definition it names), so that
going on under it is exactly as if the execution had run it from its start. Then one input is
journaled, `aos/FlowMigrate@1`, and the interpreter swaps the definition, recording
`execution.migrated` in the history.

A migration is planned read-only (`plan`: the shadow, which may take as long as a replay)
and applied on the writer (`apply`). Between the two the execution may move on; `apply`
refuses then (`flow.migration_stale`, nothing journaled) and the interpreter would record a
`migrate.stale` for an input that raced past that check, its state untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos.flows.errors import FlowError
from aos.flows.serve.flow_operations import (
    STATUS_RUNNING,
    ExecutionEndedError,
    FlowRequestInvalidError,
    status,
)
from aos.flows.serve.flow_shadow import (
    SHADOW_EXECUTIONS_MAX_DEFAULT,
    ExecutionShadow,
    ShadowTarget,
    deployed_target,
    shadow_flow,
)
from aos.flows.serve.flow_world import MIGRATE_EVENT
from aos.kernel.wasm import WasmEngine
from aos.kernel.world.world import World


class MigrationRefusedError(FlowError):
    code = "flow.migration_refused"
    hint = "aos flow shadow FLOW --version N shows where the version departs from the history"


class MigrationStaleError(FlowError):
    code = "flow.migration_stale"
    hint = "the execution moved on since its shadow: run the migration again"


@dataclass(frozen=True)
class MigrationPlan:
    """What a shadow allowed: move `exec` from `from_definition` to `definition` while it is
    at engine version `expect_version`."""

    exec: str
    flow: str
    from_version: int
    from_definition: str
    version: int
    definition: str
    expect_version: int
    steps: int  # recorded steps the shadow reproduced

    def event(self) -> dict[str, Any]:
        return {
            "exec": self.exec,
            "flow": self.flow,
            "version": self.version,
            "definition": self.definition,
            "from_definition": self.from_definition,
            "expect_version": self.expect_version,
        }

    def to_value(self) -> dict[str, Any]:
        return {
            "exec": self.exec,
            "flow": self.flow,
            "from_version": self.from_version,
            "from_definition": self.from_definition,
            "version": self.version,
            "definition": self.definition,
            "expect_version": self.expect_version,
            "steps": self.steps,
        }


def plan(
    world_dir: str | Path,
    exec_id: str,
    version: int | None = None,
    *,
    engine: WasmEngine | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> MigrationPlan:
    """Shadow `version` (the flow's latest when None) against the execution's recorded
    history, read-only, and say whether it may move there."""
    with World.reading(world_dir, engine=engine) as world:
        state = _running(world, exec_id)
        target = deployed_target(world, str(state["flow"]), version)
    if target.definition == state["definition"]:
        raise FlowRequestInvalidError(
            f"{exec_id} already runs version {state['version']} ({target.definition})",
            path="$.version",
        )
    report = shadow_flow(world_dir, target, execs=(exec_id,), engine=engine, progress=progress)
    shadowed = next((e for e in report.executions if e.exec == exec_id), None)
    if shadowed is None:  # its start is not in the replayed history: nothing to rely on
        raise MigrationRefusedError(f"the shadow did not meet {exec_id}'s start", exec=exec_id)
    _check_reproduced(shadowed, target.version)
    return _plan_of(shadowed, target)


@dataclass
class FlowMigrationPlan:
    """Every running execution of a flow a shadow allowed to move to one version (`plans`),
    and why each other running one may not (`refused`: `{exec, reason}`)."""

    flow: str
    version: int
    definition: str
    plans: list[MigrationPlan]
    refused: list[dict[str, Any]]
    more: bool  # executions past `executions_max` were not shadowed

    def to_value(self) -> dict[str, Any]:
        return {
            "flow": self.flow,
            "version": self.version,
            "definition": self.definition,
            "plans": [p.to_value() for p in self.plans],
            "refused": self.refused,
            "more": self.more,
        }

    @staticmethod
    def from_value(value: dict[str, Any]) -> FlowMigrationPlan:
        return FlowMigrationPlan(
            flow=value["flow"],
            version=value["version"],
            definition=value["definition"],
            plans=[MigrationPlan(**p) for p in value["plans"]],
            refused=list(value["refused"]),
            more=bool(value["more"]),
        )


def plan_flow(
    world_dir: str | Path,
    flow: str,
    version: int | None = None,
    *,
    executions_max: int = SHADOW_EXECUTIONS_MAX_DEFAULT,
    engine: WasmEngine | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FlowMigrationPlan:
    """One shadow of `version` (the flow's latest when None) against the flow's executions,
    read-only: a plan for each running one it reproduces, the reason for each other."""
    with World.reading(world_dir, engine=engine) as world:
        target = deployed_target(world, flow, version)
    report = shadow_flow(
        world_dir, target, executions_max=executions_max, engine=engine, progress=progress
    )
    plans, refused = [], []
    for shadowed in report.executions:
        if shadowed.status != STATUS_RUNNING or shadowed.definition == target.definition:
            continue  # ended, or moved to the target already
        try:
            _check_reproduced(shadowed, target.version)
        except MigrationRefusedError as refusal:
            refused.append({"exec": shadowed.exec, "reason": refusal.message})
        else:
            plans.append(_plan_of(shadowed, target))
    assert target.version is not None
    return FlowMigrationPlan(
        target.flow, target.version, target.definition, plans, refused, report.more
    )


def apply_flow(world: World, planned: FlowMigrationPlan) -> dict[str, Any]:
    """Journal each planned migration whose execution is still where its shadow left it;
    each is its own input, so one that moved on (`stale`) leaves the others to go."""
    migrated, stale = [], []
    for one in planned.plans:
        try:
            apply(world, one)
        except (MigrationStaleError, ExecutionEndedError) as refusal:
            stale.append({"exec": one.exec, "code": refusal.code, "reason": refusal.message})
        else:
            migrated.append(one.exec)
    return {
        "flow": planned.flow,
        "version": planned.version,
        "definition": planned.definition,
        "migrated": migrated,
        "stale": stale,
        "refused": planned.refused,
        "more": planned.more,
        "seq": world.height,
    }


def _plan_of(shadowed: ExecutionShadow, target: ShadowTarget) -> MigrationPlan:
    assert target.version is not None and shadowed.engine_version is not None
    return MigrationPlan(
        exec=shadowed.exec,
        flow=target.flow,
        from_version=shadowed.version,
        from_definition=shadowed.definition,
        version=target.version,
        definition=target.definition,
        expect_version=shadowed.engine_version,
        steps=shadowed.steps,
    )


def apply(world: World, planned: MigrationPlan) -> dict[str, Any]:
    """Journal the migration, if the execution is still where its shadow left it; the plan
    with the execution's status after it and the journal's height (what the CLI and the
    node answer)."""
    state = _running(world, planned.exec)
    moved = (state["definition"], state["engine_version"]) != (
        planned.from_definition,
        planned.expect_version,
    )
    if moved:
        raise MigrationStaleError(
            f"{planned.exec} is at version {state['engine_version']} now; its shadow ended at "
            f"{planned.expect_version}",
            exec=planned.exec,
        )
    world.send(MIGRATE_EVENT, planned.event())
    status_after = status(world, planned.exec)["status"]
    return {**planned.to_value(), "status": status_after, "seq": world.height}


def _running(world: World, exec_id: str) -> dict[str, Any]:
    state = status(world, exec_id)
    if state["status"] != STATUS_RUNNING:
        raise ExecutionEndedError(
            f"execution {exec_id} has ended ({state['status']}): only a running one migrates",
            exec=exec_id,
        )
    return state


def _check_reproduced(shadowed: ExecutionShadow, version: int | None) -> None:
    if shadowed.diverged_at is not None:
        raise MigrationRefusedError(
            f"version {version} departs from {shadowed.exec}'s history at seq "
            f"{shadowed.diverged_at} ({shadowed.difference})",
            exec=shadowed.exec,
            seq=shadowed.diverged_at,
            difference=shadowed.difference,
        )
    if not shadowed.migratable:
        raise MigrationRefusedError(
            f"version {version} makes {shadowed.exec}'s decisions but reaches another engine "
            "state (its waits, tokens or loops differ)",
            exec=shadowed.exec,
        )
