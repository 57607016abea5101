"""`aos trigger`: start a flow on a domain event of the world or a webhook's JSON, once per
the key the trigger names (spec/11-flows.md §12.7). Opens the flow world (`--world DIR`, env
`AOS_WORLD`); a node serving it runs domain-event triggers itself and takes webhooks at
`POST /v1/triggers/{name}/webhook`.
"""

from __future__ import annotations

import json
from typing import Any

import click

from aos.cli.common import emit_json, handles_errors, json_option, table, world_option
from aos.cli.schedule_cmd import writing
from aos.flows.serve.schedules import triggers
from aos.flows.serve.schedules.errors import ScheduleError
from aos.kernel import cbor
from aos.kernel.world.world import World

VALUE_BYTES_MAX = 1024 * 1024


@click.group("trigger")
def trigger_group() -> None:
    """Triggers: start a flow on a domain event or a webhook, once per key."""


def _json(text: str | None, option: str) -> Any:
    if text is None:
        return None
    if len(text.encode()) > VALUE_BYTES_MAX:
        raise ScheduleError(f"{option} is over {VALUE_BYTES_MAX} bytes", path=option)
    try:
        return cbor.from_json(json.loads(text))
    except (json.JSONDecodeError, cbor.CborError) as error:
        raise ScheduleError(f"{option} is not JSON data: {error}", path=option) from None


@trigger_group.command("create")
@click.argument("name")
@click.option("--flow", required=True, help="The deployed flow it starts.")
@click.option("--key", required=True, metavar="JSONPATH", help="The value's idempotency key.")
@click.option("--event", default=triggers.WEBHOOK, show_default=True, help="An event schema.")
@click.option("--when", default=None, metavar="JSONPATH", help="Start only when it holds.")
@click.option("--workload", default=None, metavar="JSON", help="{field: JSONPath} to pick.")
@click.option("--version", type=int, default=None, help="Pin a version (default: the latest).")
@world_option
@json_option
@handles_errors
def create_command(world_path: str, as_json: bool, name: str, **options: Any) -> None:
    """Create trigger NAME; a domain-event trigger reads events journaled from now on."""
    workload = _json(options.pop("workload"), "--workload")
    if workload is not None and not isinstance(workload, dict):
        raise ScheduleError("--workload is a map of field to JSONPath", path="--workload")
    spec = triggers.TriggerSpec(workload=workload, **options)
    with writing(world_path) as world:
        made = triggers.create_trigger(world, name, spec)
    if as_json:
        emit_json(made)
    else:
        click.echo(f"trigger {name}: {spec.flow} on {spec.event}")


@trigger_group.command("ls")
@world_option
@json_option
@handles_errors
def ls_command(world_path: str, as_json: bool) -> None:
    """List the triggers and how many executions each started."""
    with World.reading(world_path) as world:
        found = triggers.listing(world)
    if as_json:
        emit_json(cbor.to_json({"triggers": found}))
        return
    rows = [[t["name"], t["flow"], t["event"], t["key"], t["fired"]] for t in found]
    click.echo(table(["NAME", "FLOW", "ON", "KEY", "STARTED"], rows))


@trigger_group.command("deliver")
@click.argument("name")
@click.option("--value", required=True, metavar="JSON", help="The webhook's JSON value.")
@world_option
@json_option
@handles_errors
def deliver_command(world_path: str, as_json: bool, name: str, value: str) -> None:
    """Deliver a webhook value to trigger NAME here (a node takes it over HTTP)."""
    posted = _json(value, "--value")
    with writing(world_path) as world:
        answer = triggers.deliver_webhook(world, name, posted)
    if as_json:
        emit_json(answer)
    else:
        again = " (a repeat: nothing new)" if answer.get("duplicate") else ""
        click.echo(f"{answer['exec'] or 'not started: when did not hold'}{again}")


@trigger_group.command("pump")
@world_option
@json_option
@handles_errors
def pump_command(world_path: str, as_json: bool) -> None:
    """Start what the domain events journaled since each trigger's cursor call for."""
    with writing(world_path) as world:
        moved = triggers.pump_triggers(world)
    if as_json:
        emit_json({"moved": moved})
    else:
        click.echo(f"moved: {', '.join(moved) or 'nothing'}")


@trigger_group.command("delete")
@click.argument("name")
@world_option
@json_option
@handles_errors
def delete_command(world_path: str, as_json: bool, name: str) -> None:
    """Delete trigger NAME (the executions it started stay)."""
    with writing(world_path) as world:
        answer = triggers.delete_trigger(world, name)
    if as_json:
        emit_json(answer)
    else:
        click.echo(f"deleted: {name}")
