"""The `aos` command: a group per noun, each in its own module, imported only when used.

`aos --help` and `aos cbor ...` must start fast, so the command modules (which pull in
wasmtime, pydantic, fastapi, httpx) are imported when their command runs; the help lines
shown by `aos --help` are kept here (a test checks they match each command's own).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

import click


@dataclass(frozen=True)
class CommandRef:
    """Where a top-level command lives: `modules` are imported in order (later ones attach
    subcommands to the first one's group), then `attribute` of the first is the command."""

    modules: tuple[str, ...]
    attribute: str
    help: str


# The order here is the order in `aos --help`.
COMMANDS: dict[str, CommandRef] = {
    "cbor": CommandRef(
        ("aos.cli.cbor_cmd",), "cbor_group", "Canonical CBOR: encode JSON, decode hex."
    ),
    "hash": CommandRef(("aos.cli.hash_cmd",), "hash_command", "Print the BLAKE3 hash of FILE."),
    "air": CommandRef(
        ("aos.cli.air_cmd",),
        "air_group",
        "AIR definitions: check an authored folder, export JSON Schemas.",
    ),
    "module": CommandRef(
        ("aos.cli.module_cmd",),
        "module_group",
        "Workflow modules: build Python or C sources into WASM.",
    ),
    "world": CommandRef(
        ("aos.cli.world_group",),
        "world_group",
        "A world: create it, send it events, inspect cells, journal and traces.",
    ),
    "node": CommandRef(
        ("aos.cli.node_cmd",),
        "node_group",
        "The world host: serve one world to clients and adapters over HTTP.",
    ),
    "task": CommandRef(
        ("aos.cli.node_cmd",),
        "task_group",
        "Human tasks: open intents of the human adapter a node hosts.",
    ),
    "identity": CommandRef(
        ("aos.cli.identity_cmd",),
        "identity_group",
        "Identities: tokens with scopes and roles for a world's node.",
    ),
    "adapter": CommandRef(
        ("aos.cli.adapter_cmd",),
        "adapter_group",
        "Adapter identities (Ed25519 keys) and the built-in adapters.",
    ),
    "gov": CommandRef(
        ("aos.cli.gov_cmd",),
        "gov_group",
        "Governance: propose, shadow, approve or reject, and apply manifest changes.",
    ),
    "flow": CommandRef(
        ("aos.cli.flow_cmd", "aos.cli.flow_shadow_cmd"),
        "flow_group",
        "Declarative flows: definitions, executions, their history (spec/11-flows.md).",
    ),
    "schedule": CommandRef(
        ("aos.cli.schedule_cmd",),
        "schedule_group",
        "Schedules: start a deployed flow by cron or interval, exactly once per slot.",
    ),
    "trigger": CommandRef(
        ("aos.cli.trigger_cmd",),
        "trigger_group",
        "Triggers: start a flow on a domain event or a webhook, once per key.",
    ),
    "errors": CommandRef(
        ("aos.cli.errors_cmd",),
        "errors_command",
        "List every error code with its HTTP status, meaning and hint.",
    ),
}


def load_command(name: str) -> click.Command:
    ref = COMMANDS[name]
    # Importing the later modules attaches their subcommands to the first one's group.
    modules = [importlib.import_module(module) for module in ref.modules]
    command = getattr(modules[0], ref.attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{ref.modules[0]}.{ref.attribute} is not a click command")
    return command


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, ref.help) for name, ref in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """The package version and the flow interpreter it runs (the version names it)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    from aos.flows.interpreter import describe

    click.echo(f"aos, version {version('aos')}\n{describe()}")
    ctx.exit()


# The TLS files every client of a node uses (kernel/node/tls.py reads them from these
# variables, which the commands' child processes inherit too).
TLS_OPTIONS = (
    ("--ca", "AOS_CA", "Verify an https:// node against this CA bundle (PEM), not the system's."),
    ("--client-cert", "AOS_CLIENT_CERT", "Present this certificate (PEM) to a node (mutual TLS)."),
    ("--client-key", "AOS_CLIENT_KEY", "The client certificate's private key (PEM)."),
)


def _tls_options(fn: click.decorators.FC) -> click.decorators.FC:
    for flag, variable, text in reversed(TLS_OPTIONS):
        fn = click.option(
            flag,
            variable.lower(),
            envvar=variable,
            metavar="FILE",
            # Checked when a node is reached over https (tls.config_invalid), so a stale
            # variable does not stop the commands that never use it.
            type=click.Path(dir_okay=False),
            help=f"{text} (env {variable})",
        )(fn)
    return fn


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_show_version,
    help="Show the version and the flow interpreter it runs, and exit.",
)
@_tls_options
def main(**tls_files: str | None) -> None:
    """aos: a deterministic, event-sourced workflow kernel."""
    for name, path in tls_files.items():
        if path is not None:
            os.environ[name.upper()] = os.path.abspath(path)
