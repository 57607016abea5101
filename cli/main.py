"""The `aos` command: a group per noun, each in its own module."""

from __future__ import annotations

import importlib
from importlib import metadata

import click

# Each module defines `register(group)`; the order here is the order in `aos --help`.
_COMMAND_MODULES = [
    "aos.cli.cbor_cmd",
    "aos.cli.hash_cmd",
    "aos.cli.air_cmd",
    "aos.cli.module_cmd",
    "aos.cli.world_cmd",
    "aos.cli.node_cmd",
    "aos.cli.audit_cmd",
    "aos.cli.adapter_cmd",
    "aos.cli.gov_cmd",
    "aos.cli.flow_cmd",
    "aos.cli.errors_cmd",
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(metadata.version("aos"), "--version", prog_name="aos")
def main() -> None:
    """aos: a deterministic, event-sourced workflow kernel."""


for _name in _COMMAND_MODULES:
    importlib.import_module(_name).register(main)
