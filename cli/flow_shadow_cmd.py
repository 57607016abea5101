"""`aos flow shadow` and `aos flow migrate` (spec/11-flows.md §10).

    aos flow shadow TARGET [--version N] [--exec EXEC]...   replay the history with another
                                                            definition beside each execution
    aos flow migrate EXEC [--to N] [--dry-run]              move a running execution to a
                                                            version that reproduces its history

Both go through the flow client (flows/serve/flow_client.py): on a world opened here the shadow reads
its store read-only, so it works while a node serves it, and `migrate` writes through that
node when one does; with `--node` the node shadows in a worker process.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from aos.cli.common import (
    emit_json,
    handles_errors,
    json_option,
    pass_settings,
    progress_bar,
    table,
    world_option,
)
from aos.cli.flow_cmd import flow_client, flow_group, node_option, read_definition, workbook_option
from aos.cli.remote import node_target
from aos.flows.serve import flow_operations as ops
from aos.flows.serve import migration
from aos.flows.serve.flow_shadow import SHADOW_EXECUTIONS_LIMIT, SHADOW_EXECUTIONS_MAX_DEFAULT

SHOWN_CHARS_MAX = 300
"""How much of a differing value a line of the text report shows (`--json` has it whole)."""


@dataclass(frozen=True)
class _ShadowSettings:
    """What `aos flow shadow` was given."""

    target: str
    version: int | None
    execs: tuple[str, ...]
    executions_max: int
    strict: bool
    workbook: Path | None
    world_path: str
    node_url: str | None
    as_json: bool


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
@pass_settings(_ShadowSettings)
def shadow_command(settings: _ShadowSettings) -> None:
    """Replay the world's history (read-only) with another definition of a flow beside each
    of its executions: which would have made the same decisions on the same inputs, and
    where the others first differ. TARGET is a deployed flow's name (its latest version, or
    --version), or a definition file not deployed. Nothing is journaled; a shadow promises
    nothing about branches the history never took."""
    target, version = settings.target, settings.version
    is_file = Path(target).is_file()
    if is_file and version is not None:
        raise ops.FlowRequestInvalidError("--version names a deployed version; TARGET is a file")
    definition = read_definition(Path(target), settings.workbook) if is_file else None
    with (
        flow_client(settings.world_path, settings.node_url) as client,
        progress_bar("shadowing", as_json=settings.as_json) as progress,
    ):
        report = client.shadow_flow(
            definition.name if definition is not None else target,
            version=version,
            definition=definition,
            execs=settings.execs,
            executions_max=settings.executions_max,
            progress=progress,
        )
    if settings.as_json:
        emit_json(report)
    else:
        _echo_report(report)
    if settings.strict and report["summary"]["diverge"]:
        sys.exit(1)


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
    if dry_run and node_target(world_path, node_url) is not None:
        raise ops.FlowRequestInvalidError("--dry-run shadows here: give --world, not --node")
    ask = _MigrateAsk(version, dry_run, executions_max, world_path, node_url, as_json)
    if exec_id is not None:
        _migrate_one(exec_id, ask)
    elif flow is not None:
        _migrate_flow(flow, ask)


@dataclass(frozen=True)
class _MigrateAsk:
    """What a migrate command asks for, for one execution or a whole flow. A dry run plans
    here (a read-only shadow) and journals nothing; the others go through the client."""

    version: int | None
    dry_run: bool
    executions_max: int
    world_path: str
    node_url: str | None
    as_json: bool


def _migrate_one(exec_id: str, ask: _MigrateAsk) -> None:
    with progress_bar("shadowing", as_json=ask.as_json) as progress:
        if ask.dry_run:
            planned = migration.plan(ask.world_path, exec_id, ask.version, progress=progress)
            body = planned.to_value()
        else:
            with flow_client(ask.world_path, ask.node_url) as client:
                body = client.migrate(exec_id, ask.version, progress)
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


def _migrate_flow(flow: str, ask: _MigrateAsk) -> None:
    with progress_bar("shadowing", as_json=ask.as_json) as progress:
        if ask.dry_run:
            body = migration.plan_flow(
                ask.world_path,
                flow,
                ask.version,
                executions_max=ask.executions_max,
                progress=progress,
            ).to_value()
        else:
            with flow_client(ask.world_path, ask.node_url) as client:
                body = client.migrate_flow(
                    flow, ask.version, executions_max=ask.executions_max, progress=progress
                )
    if ask.as_json:
        emit_json(body)
    else:
        _echo_flow_migration(body, ask.dry_run)


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
