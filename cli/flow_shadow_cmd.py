"""`aos flow shadow` and `aos flow migrate` (spec/11-flows.md §10).

    aos flow shadow TARGET [--version N] [--exec EXEC]...   replay the history with another
                                                            definition beside each execution
    aos flow migrate EXEC [--to N] [--dry-run]              move a running execution to a
                                                            version that reproduces its history

Without `--node` both read the world's store read-only, so they work while a node serves it;
`migrate` then writes through the node that serves the world, if one does.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from aos.cli.common import (
    emit_json,
    handles_errors,
    json_option,
    progress_bar,
    table,
    world_option,
)
from aos.cli.flow_cmd import (
    flow_group,
    node_client,
    node_option,
    read_definition,
    sent_to_node,
    workbook_option,
)
from aos.cli.remote import serving_node
from aos.cli.world_cmd import opened_world
from aos.flows import migration
from aos.flows import operations as ops
from aos.flows.shadow import (
    SHADOW_EXECUTIONS_LIMIT,
    SHADOW_EXECUTIONS_MAX_DEFAULT,
    ShadowTarget,
    check_execs,
    deployed_target,
    file_target,
    shadow_flow,
)
from aos.kernel import cbor
from aos.kernel.world.world import World

SHOWN_CHARS_MAX = 300
"""How much of a differing value a line of the text report shows (`--json` has it whole)."""


@flow_group.command("shadow")
@click.argument("target")
@click.option("--version", type=click.IntRange(min=1), default=None, help="A deployed version.")
@click.option("--exec", "execs", multiple=True, help="Only this execution (repeatable).")
@click.option(
    "--executions-max",
    type=click.IntRange(1, SHADOW_EXECUTIONS_LIMIT),
    default=SHADOW_EXECUTIONS_MAX_DEFAULT,
    show_default=True,
    help="Most executions to shadow (the first started); the report says when there were more.",
)
@click.option("--strict", is_flag=True, help="Exit 1 when any execution diverges.")
@workbook_option
@world_option
@node_option
@json_option
@handles_errors
def shadow_command(
    target: str,
    version: int | None,
    execs: tuple[str, ...],
    executions_max: int,
    strict: bool,
    workbook: Path | None,
    world_path: str,
    node_url: str | None,
    as_json: bool,
) -> None:
    """Replay the world's history (read-only) with another definition of a flow beside each
    of its executions: which would have made the same decisions on the same inputs, and
    where the others first differ. TARGET is a deployed flow's name (its latest version, or
    --version), or a definition file not deployed. Nothing is journaled; a shadow promises
    nothing about branches the history never took."""
    ask = _Ask(target, Path(target).is_file(), version, execs, executions_max, workbook)
    if ask.is_file and version is not None:
        raise ops.FlowRequestInvalidError("--version names a deployed version; TARGET is a file")
    if node_url:
        report = _shadow_on_node(node_url, ask)
    else:
        with progress_bar("shadowing", as_json=as_json) as progress:
            report = _shadow_here(world_path, ask, progress)
    if as_json:
        emit_json(report)
    else:
        _echo_report(report)
    if strict and report["summary"]["diverge"]:
        sys.exit(1)


@dataclass(frozen=True)
class _Ask:
    """What a shadow command asks for, whoever computes it."""

    target: str
    is_file: bool
    version: int | None
    execs: tuple[str, ...]
    executions_max: int
    workbook: Path | None


def _shadow_here(
    world_path: str, ask: _Ask, progress: Callable[[int, int], None] | None
) -> dict[str, Any]:
    with World.reading(world_path) as world:
        shadowed: ShadowTarget
        if ask.is_file:
            shadowed = file_target(world, read_definition(Path(ask.target), ask.workbook))
        else:
            shadowed = deployed_target(world, ask.target, ask.version)
        check_execs(world, shadowed.flow, ask.execs)
    report = shadow_flow(
        world_path,
        shadowed,
        execs=ask.execs,
        executions_max=ask.executions_max,
        progress=progress,
    )
    return dict(cbor.to_json(report.to_value()))


def _shadow_on_node(node_url: str, ask: _Ask) -> dict[str, Any]:
    with node_client(node_url) as client:
        if not ask.is_file:
            return client.shadow(
                ask.target, version=ask.version, execs=ask.execs, executions_max=ask.executions_max
            )
        definition = read_definition(Path(ask.target), ask.workbook)
        text, source = sent_to_node(Path(ask.target), ask.workbook, definition)
        return client.shadow(
            definition.name,
            text=text,
            source=source,
            execs=ask.execs,
            executions_max=ask.executions_max,
        )


def _echo_report(report: dict[str, Any]) -> None:
    version = f"v{report['version']}" if report["version"] is not None else "(not deployed)"
    since = report["from_snapshot"]
    start = "" if since is None else f", replayed from the snapshot at seq {since}"
    click.echo(
        f"shadow of {report['flow']} {version} ({report['definition']}) against the history "
        f"up to seq {report['state_height']}{start}"
    )
    summary = report["summary"]
    click.echo(
        f"executions {summary['executions']}: {summary['reproduce']} reproduce, "
        f"{summary['diverge']} diverge; {summary['on_target']} already run it"
        + ("; more were not shadowed (--executions-max)" if report["more"] else "")
    )
    if not report["executions"]:
        return
    click.echo("")
    headers = ["EXECUTION", "VERSION", "STATUS", "STEPS", "OUTCOME", "AT", "MIGRATABLE"]
    click.echo(table(headers, [_row(e) for e in report["executions"]]))
    for shadowed in report["executions"]:
        if shadowed["diverged_at"] is not None:
            click.echo("")
            click.echo(
                f"{shadowed['exec']} at seq {shadowed['diverged_at']}: {shadowed['difference']}"
            )
            click.echo(f"  recorded  {_shown(shadowed['recorded'])}")
            click.echo(f"  shadow    {_shown(shadowed['shadow'])}")


def _row(shadowed: dict[str, Any]) -> list[Any]:
    at = shadowed["diverged_at"]
    return [
        shadowed["exec"],
        shadowed["version"],
        shadowed["status"],
        shadowed["steps"],
        shadowed["outcome"],
        "-" if at is None else at,
        "yes" if shadowed["migratable"] else "-",
    ]


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= SHOWN_CHARS_MAX else text[: SHOWN_CHARS_MAX - 3] + "..."


@flow_group.command("migrate")
@click.argument("exec_id", metavar="[EXEC]", required=False)
@click.option(
    "--flow",
    default=None,
    help="Instead of EXEC: every running execution of this flow that one shadow allows.",
)
@click.option(
    "--to",
    "version",
    type=click.IntRange(min=1),
    default=None,
    help="A deployed version [the latest].",
)
@click.option(
    "--dry-run", is_flag=True, help="Shadow and say whether it may move; journal nothing."
)
@click.option(
    "--executions-max",
    type=click.IntRange(1, SHADOW_EXECUTIONS_LIMIT),
    default=SHADOW_EXECUTIONS_MAX_DEFAULT,
    show_default=True,
    help="With --flow: most executions to shadow (the first started).",
)
@world_option
@node_option
@json_option
@handles_errors
def migrate_command(
    exec_id: str | None,
    flow: str | None,
    version: int | None,
    dry_run: bool,
    executions_max: int,
    world_path: str,
    node_url: str | None,
    as_json: bool,
) -> None:
    """Move the running execution EXEC (or, with --flow, every running execution of a flow)
    to another deployed version of its flow. Allowed only where a shadow shows that version
    reproduces the execution's whole recorded history, each decision and the state it
    reached; then one input is journaled and the history records `execution.migrated`."""
    if (exec_id is None) == (flow is None):
        raise click.UsageError("give EXEC or --flow NAME, not both")
    if dry_run and node_url is not None:
        raise ops.FlowRequestInvalidError("--dry-run shadows here: give --world, not --node")
    ask = _MigrateAsk(version, dry_run, executions_max, world_path, node_url, as_json)
    if exec_id is not None:
        _migrate_one(exec_id, ask)
    elif flow is not None:
        _migrate_flow(flow, ask)


@dataclass(frozen=True)
class _MigrateAsk:
    """What a migrate command asks for, for one execution or a whole flow."""

    version: int | None
    dry_run: bool
    executions_max: int
    world_path: str
    node_url: str | None
    as_json: bool

    def node(self) -> str | None:
        """The node to migrate through (a dry run shadows here and journals nothing)."""
        return None if self.dry_run else serving_node(self.world_path, self.node_url)


def _migrate_one(exec_id: str, ask: _MigrateAsk) -> None:
    if (url := ask.node()) is not None:
        with node_client(url) as client:
            body = client.migrate(exec_id, ask.version)
    else:
        with progress_bar("shadowing", as_json=ask.as_json) as progress:
            planned = migration.plan(ask.world_path, exec_id, ask.version, progress=progress)
        body = planned.to_value() if ask.dry_run else _apply_here(ask.world_path, planned)
    if ask.as_json:
        emit_json(body)
        return
    verb = "would move" if ask.dry_run else "migrated"
    steps = f"{body['steps']} recorded step" + ("" if body["steps"] == 1 else "s")
    click.echo(
        f"{verb}  {body['exec']}  {body['flow']} v{body['from_version']} -> v{body['version']}"
        f"  (a shadow reproduced its {steps})"
    )
    if "status" in body:
        click.echo(f"status    {body['status']}")


def _apply_here(world_path: str, planned: migration.MigrationPlan) -> dict[str, Any]:
    with opened_world(world_path) as world:
        return migration.apply(world, planned)


def _migrate_flow(flow: str, ask: _MigrateAsk) -> None:
    if (url := ask.node()) is not None:
        with node_client(url) as client:
            body = client.migrate_flow(flow, ask.version, executions_max=ask.executions_max)
    else:
        with progress_bar("shadowing", as_json=ask.as_json) as progress:
            planned = migration.plan_flow(
                ask.world_path,
                flow,
                ask.version,
                executions_max=ask.executions_max,
                progress=progress,
            )
        body = planned.to_value() if ask.dry_run else _apply_flow_here(ask.world_path, planned)
    if ask.as_json:
        emit_json(body)
    else:
        _echo_flow_migration(body, ask.dry_run)


def _apply_flow_here(world_path: str, planned: migration.FlowMigrationPlan) -> dict[str, Any]:
    with opened_world(world_path) as world:
        return migration.apply_flow(world, planned)


def _echo_flow_migration(body: dict[str, Any], dry_run: bool) -> None:
    moved = [p["exec"] for p in body["plans"]] if dry_run else body["migrated"]
    verb = "would move" if dry_run else "migrated"
    listed = f": {', '.join(moved)}" if moved else ""
    click.echo(f"{verb}  {len(moved)} of {body['flow']} to v{body['version']}{listed}")
    for stale in body.get("stale", []):
        click.echo(f"stale     {stale['exec']}: {stale['reason']}")
    for refused in body["refused"]:
        click.echo(f"stays     {refused['exec']}: {refused['reason']}")
    if body["more"]:
        click.echo("more executions were not shadowed (--executions-max)")
