"""`aos world snapshot | replay | verify | export | gc`: snapshots, replay audits, chain and
CAS verification, signed exports, and garbage collection."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from aos.cli.common import (
    EXIT_ERROR,
    emit_json,
    handles_errors,
    json_option,
    progress_bar,
    world_option,
)
from aos.cli.remote import node_option, world_client
from aos.cli.world_cmd import opened_world, read_world
from aos.cli.world_group import world_group
from aos.kernel import cbor
from aos.kernel.audit import export, gc, integrity, replay
from aos.kernel.world import worldkey
from aos.kernel.world.worldkey import WorldKeyMissingError

if TYPE_CHECKING:
    from aos.kernel.node.models import TimeResponse


@world_group.command("snapshot")
@world_option
@json_option
@handles_errors
def snapshot_command(world_path: str, as_json: bool) -> None:
    """Run to idle and take a snapshot (spec/05-snapshots-replay.md)."""
    with opened_world(world_path) as world:
        world.run_to_idle()
        seq, snapshot_hash = world.snapshot()
    if as_json:
        emit_json({"seq": seq, "snapshot": str(snapshot_hash)})
    else:
        click.echo(f"snapshot  {snapshot_hash}\nrecord    {seq}")


@world_group.command("replay")
@click.option("--verify", is_flag=True, required=True, help="Compare everything (required).")
@click.option(
    "--from", "from_seq", type=click.IntRange(min=1), help="Start at the snapshot before SEQ."
)
@click.option(
    "--from-snapshot", "from_snapshot", metavar="ID", help="A snapshot hash or record seq."
)
@click.option(
    "--workers",
    "workers_max",
    type=int,
    default=replay.REPLAY_WORKERS_MAX_DEFAULT,
    show_default=True,
    help="Processes that re-run the steps on fresh instances (replay_workers_max); 1: all in "
    "this process. The report is the same whatever the number.",
)
@world_option
@json_option
@handles_errors
def replay_command(
    verify: bool,
    from_seq: int | None,
    from_snapshot: str | None,
    workers_max: int,
    world_path: str,
    as_json: bool,
) -> None:
    """Rebuild the world in a scratch store and compare every record and the head.

    Exits 1 at the first divergence, naming its sequence, cell, module and fields."""
    if from_seq is not None and from_snapshot is not None:
        raise click.UsageError("--from and --from-snapshot exclude each other")
    with progress_bar("replaying", as_json=as_json) as progress:
        report = replay.verify_replay(
            world_path,
            from_seq=from_seq,
            from_snapshot=from_snapshot,
            progress=progress,
            workers_max=workers_max,
        )
    if as_json:
        emit_json(report.to_value())
    else:
        start = f"snapshot {report.snapshot}" if report.snapshot else "genesis"
        click.echo(
            f"replayed {report.records} records from {start} (seq {report.start_seq}.."
            f"{report.end_seq}): {report.inputs} inputs, {report.steps} steps"
        )
        if report.ok:
            click.echo("ok: every record and the head match")
    if not report.ok:
        assert report.divergence is not None
        d = report.divergence
        if not as_json:
            click.echo(f"error[replay.diverged]: {d.message}", err=True)
            cell = f"{d.workflow}[{d.key}]" if d.workflow else "-"
            click.echo(f"  seq {d.seq}  kind {d.kind}  cell {cell}  module {d.module}", err=True)
            if d.fields:
                for name in d.fields:
                    click.echo(f"  {name}: recorded {_field(d.expected, name)}", err=True)
                    click.echo(f"  {' ' * len(name)}  replayed {_field(d.found, name)}", err=True)
        sys.exit(EXIT_ERROR)


def _field(record: Any, name: str) -> str:
    if not isinstance(record, dict):
        return "-"
    text = str(cbor.to_json(record.get(name)))
    return text if len(text) < 100 else text[:97] + "..."


_export_bytes_max = click.option(
    "--bytes-max",
    type=click.IntRange(min=1),
    default=export.EXPORT_BYTES_MAX_DEFAULT,
    show_default=True,
    help="The largest export file written or read (export_bytes_max).",
)


@world_group.command("verify")
@click.option(
    "--export",
    "export_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Verify this export file instead of the world (needs --public-key).",
)
@click.option("--public-key", metavar="HEX", help="The world's Ed25519 public key (64 hex).")
@_export_bytes_max
@world_option
@json_option
@handles_errors
def verify_command(
    export_file: Path | None,
    public_key: str | None,
    bytes_max: int,
    world_path: str,
    as_json: bool,
) -> None:
    """Check the journal chain from genesis and every blob the world names, without running
    a step; or, with --export, an export with only the public key. Exits 1 naming the first
    bad sequence (world.chain_broken) or blob (world.cas_broken)."""
    if export_file is not None:
        _verify_export(export_file, public_key, bytes_max, as_json=as_json)
        return
    if public_key is not None:
        raise click.UsageError("--public-key goes with --export")
    report = integrity.verify_integrity(world_path)
    if as_json:
        emit_json(report.to_value())
        return
    click.echo(
        f"ok: chain over {report.chain.end_seq} records matches {report.chain.witnesses} stored "
        f"heads ({report.chain.signed} signed); {report.blobs} blobs read back"
    )


def _verify_export(path: Path, public_key: str | None, bytes_max: int, *, as_json: bool) -> None:
    if public_key is None:
        raise click.UsageError("--export needs --public-key HEX")
    try:
        key = bytes.fromhex(public_key)
    except ValueError:
        raise click.BadParameter("not hex", param_hint="--public-key") from None
    report = export.verify_export(path, key, bytes_max=bytes_max)
    if as_json:
        emit_json({"ok": True, **report.to_value()})
        return
    click.echo(
        f"ok: {report.records} records chained; signatures check through seq "
        f"{report.authenticated_seq} ({report.signed} signed heads)"
    )


@world_group.command("export")
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@_export_bytes_max
@world_option
@json_option
@handles_errors
def export_command(out: Path, bytes_max: int, world_path: str, as_json: bool) -> None:
    """Write the journal, the signed chain heads and the public key to OUT as one canonical
    CBOR file, after checking the chain; `aos world verify --export OUT --public-key HEX`
    checks it anywhere."""
    report = export.export_world(world_path, out, bytes_max=bytes_max)
    if as_json:
        emit_json({"out": str(out), **report.to_value()})
        return
    click.echo(
        f"exported {report.records} records to {out} ({report.bytes} bytes); signed through "
        f"seq {report.authenticated_seq}"
    )


@world_group.command("key")
@world_option
@json_option
@handles_errors
def key_command(world_path: str, as_json: bool) -> None:
    """Print the world's Ed25519 public key (hex): what `verify --export` checks with."""
    with read_world(world_path) as world:
        public_key = world.store.meta.get(worldkey.META_PUBLIC_KEY, None)
    if not isinstance(public_key, bytes):
        raise WorldKeyMissingError(f"the world at {world_path} has no key")
    if as_json:
        emit_json({"public_key": public_key.hex()})
    else:
        click.echo(public_key.hex())


@world_group.command("gc")
@click.option("--apply", is_flag=True, help="Delete the garbage (default: a dry run).")
@click.option("--keep-snapshots", type=click.IntRange(min=0), help="Retain only the newest N.")
@world_option
@json_option
@handles_errors
def gc_command(apply: bool, keep_snapshots: int | None, world_path: str, as_json: bool) -> None:
    """Remove CAS objects no retained snapshot, head or manifest reaches."""
    report = gc.collect(world_path, apply=apply, keep_snapshots=keep_snapshots)
    if as_json:
        emit_json(report.to_value())
        return
    verb = "deleted" if apply else "would delete"
    click.echo(
        f"{report.objects} objects ({report.bytes} bytes): {report.live_objects} live, "
        f"{verb} {report.garbage_objects} ({report.garbage_bytes} bytes)"
    )
    if not apply:
        click.echo("dry run: pass --apply to delete")


@world_group.group("time")
def time_group() -> None:
    """Logical time of a development world (created with --clock manual)."""


def _report_time(answer: TimeResponse, as_json: bool) -> None:
    report = answer.report
    if as_json:
        emit_json(answer.model_dump())
    elif report is None:
        click.echo(f"logical_ns {answer.logical_ns}: no timer is pending")
    else:
        click.echo(
            f"logical_ns {answer.logical_ns}: {report.steps} steps, {report.faults} faults, "
            f"{report.intents} intents"
        )


@time_group.command("advance")
@click.argument("duration")
@node_option
@world_option
@json_option
@handles_errors
def time_advance_command(
    duration: str, node_url: str | None, world_path: str, as_json: bool
) -> None:
    """Move logical time forward by DURATION (ns, or text such as 30s, 250ms, 1h30m) and
    settle the kernel timers that fall due (through the node, while one serves the world)."""
    from aos.kernel.air.normalize import normalize
    from aos.kernel.air.types import parse_type

    amount: Any = int(duration) if duration.lstrip("-").isdigit() else duration
    by_ns = normalize(amount, parse_type({"duration": {}}))
    with world_client(world_path, node_url) as client:
        _report_time(client.advance_time(by_ns), as_json)


@time_group.command("jump-next")
@node_option
@world_option
@json_option
@handles_errors
def time_jump_next_command(node_url: str | None, world_path: str, as_json: bool) -> None:
    """Advance logical time to the earliest pending timer and settle what is due (through
    the node, while one serves the world)."""
    with world_client(world_path, node_url) as client:
        _report_time(client.jump_next_timer(), as_json)
