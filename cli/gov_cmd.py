"""`aos gov ...`: change a world's manifest safely (spec/06-governance.md).

    aos gov propose PATCH | DIR      a patch file, or a changed manifest folder (diffed)
    aos gov shadow ID                replay the live history against the proposal, cell by cell
    aos gov approve ID --approver NAME --reason TEXT    (and `reject`)
    aos gov apply ID                 approved, shadowed at the current state, strict quiescence
    aos gov ls | show ID

ID is a proposal hash or a unique prefix of it (with or without `blake3:`). Every action is a
journaled input, so `aos world replay --verify` replays governance history too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from aos.cli.common import (
    emit_json,
    fail,
    handles_errors,
    json_option,
    progress_bar,
    table,
    world_option,
)
from aos.cli.remote import node_option, world_client
from aos.cli.world_cmd import read_world
from aos.cli.world_text import cell_text as _cell
from aos.cli.world_text import key_text as _key
from aos.cli.world_text import short
from aos.kernel import cbor
from aos.kernel.air import AirCheckError
from aos.kernel.air.loader import load_manifest_dir, read_document
from aos.kernel.air.model import (
    AddDefOp,
    AddSubscriptionOp,
    Patch,
    RemoveDefOp,
    RemoveSubscriptionOp,
    ReplaceDefOp,
    SetRefsOp,
    SetRoutingOp,
    def_hash,
)
from aos.kernel.errors import AosError
from aos.kernel.governance import proposals
from aos.kernel.governance.proposals import (
    GovAlreadyDecidedError,
    GovNotQuiescentError,
    GovPatchInvalidError,
)
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.world.modules import building_resolver
from aos.kernel.world.world import World

CELLS_SHOWN_DEFAULT = 50
"""Most cells the shadow table lists (divergent cells first); `--json` gives them all."""
BLOCKERS_SHOWN_MAX = 50
DIFFERENCE_CHARS_MAX = 80
_CLOSED = ("applied", "rejected")


@click.group("gov")
def gov_group() -> None:
    """Governance: propose, shadow, approve or reject, and apply manifest changes."""


# --------------------------------------------------------------------------------------------
# propose


@gov_group.command("propose")
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--expect-hash",
    "expected_hash",
    metavar="HASH",
    help="Refuse the patch unless its content hashes to HASH (gov.patch_tampered).",
)
@click.option(
    "--wasm",
    "wasm_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A module binary a PATCH file refers to by hash (repeatable).",
)
@node_option
@world_option
@json_option
@handles_errors
def propose_command(
    source: Path,
    expected_hash: str | None,
    wasm_files: tuple[Path, ...],
    node_url: str | None,
    world_path: str,
    as_json: bool,
) -> None:
    """Propose SOURCE: a patch document (.json/.yaml) against the world's manifest, or a
    changed manifest folder, whose patch against the world's manifest is computed (module
    sources are built) and printed as a readable diff. Prints the proposal id. Through the
    node while one serves the world."""
    blobs: dict[Hash, bytes] = {}
    for file in wasm_files:
        data = file.read_bytes()
        blobs[hash_bytes(data)] = data
    with read_world(world_path) as world:
        if source.is_dir():
            patch_value, lines, built = _folder_patch(world, source, as_json=as_json)
            blobs.update(built)
        else:
            patch_value = read_document(source)
            lines = []
    with world_client(world_path, node_url) as client:
        answer = client.propose(patch_value, list(blobs.values()), expected_hash)
    proposal, height = answer.proposal, answer.seq
    entry = answer.model_dump(exclude={"proposal", "seq"})
    lines = lines or _patch_lines(patch_value)
    if as_json:
        emit_json({"proposal": proposal, **entry, "diff": lines, "seq": height})
        return
    click.echo(f"proposed  {proposal}")
    click.echo(f"base      {entry['base']}")
    click.echo(f"manifest  {entry['manifest']}")
    for line in lines:
        click.echo(f"  {line}")
    click.echo(f"next: aos gov shadow {short(proposal)}")


def _folder_patch(
    world: World, folder: Path, *, as_json: bool
) -> tuple[Any, list[str], dict[Hash, bytes]]:
    """The patch from the world's manifest to the folder's, its diff lines, and the bytes of
    every module the folder builds (the world stores those it does not have)."""
    built: dict[Hash, Path] = {}
    try:
        loaded = load_manifest_dir(folder, artifact_resolver=building_resolver(built))
    except AirCheckError as error:
        if not as_json:
            rows = [[i.code, i.path, i.message, i.file or ""] for i in error.issues]
            click.echo(table(["CODE", "PATH", "MESSAGE", "FILE"], rows))
        raise
    patch_value, lines = proposals.diff(world.runtime.loaded, loaded)
    if not patch_value["ops"]:
        raise GovPatchInvalidError(f"{folder} is the world's manifest: nothing changes")
    return patch_value, lines, {h: path.read_bytes() for h, path in built.items()}


def _patch_lines(patch_value: Any) -> list[str]:
    """One line per change of a patch document (nothing for one that does not validate)."""
    try:
        patch = Patch.model_validate(patch_value)
    except ValueError:
        return []
    lines: list[str] = []
    for op in patch.ops:
        if isinstance(op, AddDefOp):
            new = op.add_def.def_
            lines.append(f"+ {new.kind} {new.name}  {def_hash(new).short()}")
        elif isinstance(op, ReplaceDefOp):
            new, pre_hash = op.replace_def.def_, op.replace_def.pre_hash
            before = f"{Hash(pre_hash).short()} -> " if pre_hash else ""
            lines.append(f"~ {new.kind} {new.name}  {before}{def_hash(new).short()}")
        elif isinstance(op, RemoveDefOp):
            lines.append(f"- {op.remove_def.name}")
        elif isinstance(op, SetRoutingOp):
            lines.append(f"= routing: {len(op.set_routing.subscriptions)} subscriptions")
        elif isinstance(op, AddSubscriptionOp | RemoveSubscriptionOp):
            mark, route = (
                ("+", op.add_subscription)
                if isinstance(op, AddSubscriptionOp)
                else ("-", op.remove_subscription)
            )
            lines.append(f"{mark} route {route.event} -> {route.workflow}")
        elif isinstance(op, SetRefsOp):
            lines.extend(f"+ ref {r.kind} {r.name}" for r in op.set_refs.add)
            lines.extend(f"- ref {r.kind} {r.name}" for r in op.set_refs.remove)
    return lines


# --------------------------------------------------------------------------------------------
# shadow


@gov_group.command("shadow")
@click.argument("ident", metavar="ID")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=CELLS_SHOWN_DEFAULT,
    show_default=True,
    help="Most cells to list (divergent first).",
)
@node_option
@world_option
@json_option
@handles_errors
def shadow_command(
    ident: str, limit: int, node_url: str | None, world_path: str, as_json: bool
) -> None:
    """Replay the world's history against proposal ID, cell by cell (read-only), and journal
    the report: which cells the proposed workflows reproduce, where the others diverge, the
    effects they would now emit, open intents affected, routing and allowlist differences.
    A shadow promises nothing about branches the history never took. While a node serves
    the world, the node runs the shadow (in a worker process) and journals it."""
    with read_world(world_path) as world:
        proposal = proposals.resolve_proposal(world, ident)
        status = world.proposals[proposal]["status"]
        if status in _CLOSED:
            raise GovAlreadyDecidedError(f"{proposal} is {status}")
    with (
        world_client(world_path, node_url) as client,
        progress_bar("shadowing", as_json=as_json) as progress,
    ):
        answer = client.shadow(proposal, progress)
    report_value, height = answer.report, answer.seq
    if as_json:
        emit_json(report_value)
        return
    _echo_report(report_value, limit=limit)
    click.echo("")
    click.echo(f"recorded  seq {height}, report {answer.report_hash}")


def _echo_report(report: dict[str, Any], *, limit: int) -> None:
    summary = report["summary"]
    click.echo(
        f"shadow of {short(report['proposal'])} against the history up to seq "
        f"{report['state_height']}"
    )
    click.echo(
        f"cells {summary['cells']}: {summary['reproduce']} reproduce, {summary['diverge']} "
        f"diverge; new effects {summary['new_effects']}, intents affected "
        f"{summary['intents_affected']}, routes changed {summary['routes_changed']}, "
        f"allowlist changes {summary['allowlist_changes']}"
    )
    _echo_cells(report["cells"], limit=limit)
    _echo_differences(report)


def _echo_cells(cells: list[dict[str, Any]], *, limit: int) -> None:
    """The per-cell table, divergent cells first (a stable sort keeps the report's order)."""
    ordered = sorted(cells, key=lambda c: c["diverged_at"] is None)
    if not ordered or not limit:
        return
    shown = ordered[:limit]
    click.echo("")
    click.echo(
        table(
            ["WORKFLOW", "KEY", "OUTCOME", "STEPS", "DIVERGED AT", "DIFFERENCE", "NEW EFFECTS"],
            [_cell_row(cell) for cell in shown],
        )
    )
    if len(shown) < len(ordered):
        click.echo(f"... {len(ordered) - len(shown)} more cells (raise --limit; --json)")


def _echo_differences(report: dict[str, Any]) -> None:
    """What the shadow finds from the head and the two manifests, beside the cells."""
    if report["removed_workflows"]:
        click.echo("")
        click.echo(f"removed workflows: {', '.join(report['removed_workflows'])}")
    if report["intents_affected"]:
        click.echo("")
        rows = [
            [short(i["intent"]), i["effect"], _cell(i["workflow"], i["key"]), i["reason"]]
            for i in report["intents_affected"]
        ]
        click.echo("open intents affected:")
        click.echo(table(["INTENT", "EFFECT", "CELL", "REASON"], rows))
    routes = [("+", r) for r in report["routing"].get("added", [])]
    routes += [("-", r) for r in report["routing"].get("removed", [])]
    if routes:
        click.echo("")
        click.echo("routing:")
        for mark, route in routes:
            key = f" (key {route['key_field']})" if route.get("key_field") else ""
            click.echo(f"  {mark} {route['event']} -> {route['workflow']}{key}")
    if report["allowlists"]:
        click.echo("")
        click.echo("allowlists:")
        for change in report["allowlists"]:
            click.echo(f"  {_allowlist_line(change)}")


def _cell_row(cell: dict[str, Any]) -> list[Any]:
    difference = cell["difference"] or "-"
    if len(difference) > DIFFERENCE_CHARS_MAX:
        difference = difference[: DIFFERENCE_CHARS_MAX - 3] + "..."
    effects = sorted({e["effect"] for e in cell["new_effects"]})
    new_effects = f"{len(cell['new_effects'])} ({', '.join(effects)})" if effects else "-"
    diverged = cell["diverged_at"] if cell["diverged_at"] is not None else "-"
    return [
        cell["workflow"],
        _key(cell["key"]),
        cell["outcome"],
        cell["steps"],
        diverged,
        difference,
        new_effects,
    ]


def _allowlist_line(change: dict[str, Any]) -> str:
    if "workflow" in change:
        what, added, removed = "effects", change["effects_added"], change["effects_removed"]
        subject = f"workflow {change['workflow']}"
    else:
        what, added, removed = "adapters", change["adapters_added"], change["adapters_removed"]
        subject = f"effect {change['effect']}"
    parts = [f"+{name}" for name in added] + [f"-{name}" for name in removed]
    return f"{subject} {what}: {' '.join(parts)}"


# --------------------------------------------------------------------------------------------
# approve, reject, apply


def _decision_options(fn: Any) -> Any:
    fn = click.option("--reason", required=True, help="Why (journaled).")(fn)
    return click.option("--approver", required=True, help="Who decides (journaled).")(fn)


@gov_group.command("approve")
@click.argument("ident", metavar="ID")
@_decision_options
@node_option
@world_option
@json_option
@handles_errors
def approve_command(
    ident: str, approver: str, reason: str, node_url: str | None, world_path: str, as_json: bool
) -> None:
    """Approve proposal ID (once; journaled with the approver and the reason; through the
    node while one serves the world)."""
    _decide(
        ident,
        approve=True,
        approver=approver,
        reason=reason,
        node_url=node_url,
        world_path=world_path,
    )
    _echo_decision(ident, world_path, as_json=as_json)


@gov_group.command("reject")
@click.argument("ident", metavar="ID")
@_decision_options
@node_option
@world_option
@json_option
@handles_errors
def reject_command(
    ident: str, approver: str, reason: str, node_url: str | None, world_path: str, as_json: bool
) -> None:
    """Reject proposal ID (final; journaled with the approver and the reason; through the
    node while one serves the world)."""
    _decide(
        ident,
        approve=False,
        approver=approver,
        reason=reason,
        node_url=node_url,
        world_path=world_path,
    )
    _echo_decision(ident, world_path, as_json=as_json)


def _decide(
    ident: str, *, approve: bool, approver: str, reason: str, node_url: str | None, world_path: str
) -> None:
    with world_client(world_path, node_url) as client:
        client.decide(ident, approve=approve, approver=approver, reason=reason)


def _echo_decision(ident: str, world_path: str, *, as_json: bool) -> None:
    with read_world(world_path) as world:
        proposal = proposals.resolve_proposal(world, ident)
        entry = dict(world.proposals[proposal])
        height = world.height
    decision = entry["decision"]
    if as_json:
        emit_json({"proposal": proposal, **entry, "seq": height})
        return
    click.echo(f"{decision['action']:<9} {proposal}")
    click.echo(f"by        {decision['approver']}: {decision['reason']}")
    if decision["action"] == "approved" and entry["shadow"] is None:
        click.echo(f"next: aos gov shadow {short(proposal)}")
    elif decision["action"] == "approved":
        click.echo(f"next: aos gov apply {short(proposal)}")


@gov_group.command("apply")
@click.argument("ident", metavar="ID")
@node_option
@world_option
@json_option
@handles_errors
def apply_command(ident: str, node_url: str | None, world_path: str, as_json: bool) -> None:
    """Switch the world to proposal ID's manifest, atomically. Needs an approved proposal
    whose shadow ran at the world's current state, and strict quiescence (no open intents,
    no queued work); otherwise it is refused with what blocks it. Through the node while
    one serves the world."""
    try:
        with world_client(world_path, node_url) as client:
            answer = client.apply(ident)
    except AosError as error:
        if error.code != GovNotQuiescentError.code:
            raise
        _fail_blocked(error, as_json=as_json)
        return
    if as_json:
        emit_json(answer.model_dump())
        return
    click.echo(f"applied   {answer.proposal}")
    click.echo(f"manifest  {answer.manifest}")
    click.echo(f"seq       {answer.seq}")


def _fail_blocked(error: AosError, *, as_json: bool) -> None:
    if as_json:
        fail(error, as_json=True)
    blocking = list(error.detail.get("blockers", []))
    click.echo(f"error[{error.code}]: {error}", err=True)
    for item in blocking[:BLOCKERS_SHOWN_MAX]:
        click.echo(f"  blocked by {item}", err=True)
    if len(blocking) > BLOCKERS_SHOWN_MAX:
        click.echo(f"  ... and {len(blocking) - BLOCKERS_SHOWN_MAX} more", err=True)
    click.echo(f"  hint: {error.hint}", err=True)
    sys.exit(1)


# --------------------------------------------------------------------------------------------
# ls, show


@gov_group.command("ls")
@world_option
@json_option
@handles_errors
def ls_command(world_path: str, as_json: bool) -> None:
    """List proposals: id, status, base manifest, shadow state and decision."""
    with read_world(world_path) as world:
        current = str(world.manifest_hash)
        state_height = world.state_height
        listed = [
            _entry_json(proposal, entry, state_height)
            for proposal, entry in sorted(world.proposals.items())
        ]
    if as_json:
        emit_json({"manifest": current, "state_height": state_height, "proposals": listed})
        return
    rows = [
        [
            short(p["proposal"]),
            p["status"],
            short(p["base"]) + _base_note(p, current),
            _shadow_text(p),
            _decision_text(p["decision"]),
        ]
        for p in listed
    ]
    click.echo(table(["ID", "STATUS", "BASE", "SHADOW", "DECISION"], rows))


@gov_group.command("show")
@click.argument("ident", metavar="ID")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=CELLS_SHOWN_DEFAULT,
    show_default=True,
    help="Most cells of the shadow report to list.",
)
@world_option
@json_option
@handles_errors
def show_command(ident: str, limit: int, world_path: str, as_json: bool) -> None:
    """Everything about proposal ID: status, base and proposed manifests, the patch, the
    decision, and the stored shadow report."""
    with read_world(world_path) as world:
        proposal = proposals.resolve_proposal(world, ident)
        body = _entry_json(proposal, world.proposals[proposal], world.state_height)
        body["patch"] = cbor.to_json(world.store.cas.get_value(Hash(proposal)))
        shadowed = body["shadow"]
        report = world.store.cas.get_value(Hash(shadowed["report"])) if shadowed else None
        body["report"] = cbor.to_json(report)
        body["base_current"] = body["base"] == str(world.manifest_hash)
    if as_json:
        emit_json(body)
        return
    click.echo(f"proposal  {proposal}")
    click.echo(f"status    {body['status']}")
    click.echo(
        f"base      {body['base']}" + ("  (the world's manifest)" if body["base_current"] else "")
    )
    click.echo(f"manifest  {body['manifest']}")
    lines = _patch_lines(body["patch"])
    click.echo(f"patch     {len(lines)} change{'' if len(lines) == 1 else 's'}")
    for line in lines:
        click.echo(f"  {line}")
    click.echo(f"shadow    {_shadow_text(body)}")
    click.echo(f"decision  {_decision_text(body['decision'], reason=True)}")
    if body["report"] is not None:
        click.echo("")
        _echo_report(body["report"], limit=limit)


def _entry_json(proposal: str, entry: dict[str, Any], state_height: int) -> dict[str, Any]:
    shadowed = entry["shadow"]
    current = shadowed is not None and shadowed["state_height"] == state_height
    return {"proposal": proposal, **entry, "shadow_current": current}


def _base_note(entry: dict[str, Any], current: str) -> str:
    if entry["base"] == current:
        return " (current)"
    return "" if entry["status"] in _CLOSED else " (stale)"


def _shadow_text(entry: dict[str, Any]) -> str:
    shadowed = entry["shadow"]
    if shadowed is None:
        return "-"
    text = f"at {shadowed['state_height']}"
    if entry["status"] in _CLOSED:
        return text
    return text + (" (current)" if entry["shadow_current"] else " (stale: shadow again)")


def _decision_text(decision: dict[str, Any] | None, *, reason: bool = False) -> str:
    if decision is None:
        return "-"
    text = f"{decision['action']} by {decision['approver']}"
    return f"{text}: {decision['reason']}" if reason else text
