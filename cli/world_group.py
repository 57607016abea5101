"""The `aos world` group, apart from its commands. The group imports only the module of the
command asked for when that command has a module of its own (`status`: world_status_cmd.py,
which reads a world without opening it), and every other world command's module otherwise,
so that `aos world status` does not pay for the imports of the rest (issue 32; a test checks
that it loads neither pydantic nor wasmtime)."""

from __future__ import annotations

import importlib

import click

WORLD_COMMAND_MODULES = (
    "aos.cli.world_cmd",
    "aos.cli.audit_cmd",
    "aos.cli.ops_cmd",
    "aos.cli.world_status_cmd",
)
"""Every module that attaches commands to the group."""
COMMANDS_ALONE = {"status": "aos.cli.world_status_cmd"}
"""The commands whose module is imported alone when the command is asked for."""


class WorldGroup(click.Group):
    """A group whose commands' modules are imported when a command is asked for."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        alone = COMMANDS_ALONE.get(cmd_name)
        for module in (alone,) if alone is not None else WORLD_COMMAND_MODULES:
            importlib.import_module(module)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for module in WORLD_COMMAND_MODULES:
            importlib.import_module(module)
        return super().list_commands(ctx)


@click.group("world", cls=WorldGroup)
def world_group() -> None:
    """A world: create it, send it events, inspect cells, journal and traces."""
