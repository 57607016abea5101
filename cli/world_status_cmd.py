"""`aos world status`: height, manifest, logical time, cells and failed cells per workflow,
open intents and queued deliveries, read without opening the world (kernel/world/
world_status.py: no manifest assembled, no wasm engine), so that it answers in a fraction of
a second and works beside a node that serves the world. Its own module, loaded alone by the
world group (world_group.py), for the same reason."""

from __future__ import annotations

from typing import Any

import click

# The flows layer's reader of an execution's status, so that a failed flow execution counts
# as failed here as in every other view (flows/serve/cell_status.py).
import aos.flows.serve.cell_status  # noqa: F401
from aos.cli.common import emit_json, handles_errors, json_option, table, world_option
from aos.cli.world_group import world_group
from aos.cli.world_text import cell_text, key_json, short, time_text
from aos.kernel.world.world_status import read_status

STATUS_INTENTS_MAX = 100
"""Most open intents `status` lists (it always counts them all)."""


@world_group.command("status")
@world_option
@json_option
@handles_errors
def status_command(world_path: str, as_json: bool) -> None:
    """Height, manifest, logical time, cells and failed cells per workflow, open intents and
    queued deliveries."""
    found = read_status(world_path)
    status, intents = found.summary(), found.open_intents
    listed = [_intent_json(intent) for intent in intents[:STATUS_INTENTS_MAX]]
    if as_json:
        emit_json({"world": world_path, **status, "intents": listed})
        return
    click.echo(f"world         {world_path}")
    click.echo(f"height        {status['height']}")
    click.echo(f"manifest      {status['manifest']}")
    click.echo(f"logical time  {time_text(status['logical_ns'])}  (clock {status['clock']})")
    click.echo(f"open intents  {status['open_intents']}")
    click.echo(f"queued        {status['queued']}")
    rows = [[name, w["cells"], w["failed"]] for name, w in status["workflows"].items()]
    click.echo("")
    click.echo(table(["WORKFLOW", "CELLS", "FAILED"], rows))
    if intents:
        click.echo("")
        click.echo(table(["INTENT", "EFFECT", "CELL", "SEQ"], [_intent_row(i) for i in listed]))
        if len(intents) > len(listed):
            click.echo(f"... and {len(intents) - len(listed)} more")


def _intent_json(intent: dict[str, Any]) -> dict[str, Any]:
    return {**intent, "key": key_json(intent["key"])}


def _intent_row(intent: dict[str, Any]) -> list[Any]:
    """A table row of an intent as `_intent_json` gives it (its key already decoded)."""
    cell = cell_text(intent["workflow"], intent["key"])
    return [short(intent["intent"]), intent["effect"], cell, intent["seq"]]
