"""`aos adapter ...`: adapter identities and the built-in adapters (spec/10-adapters.md).

    aos adapter keygen NAME [--out FILE]               new key file; prints the public key
    aos adapter run http|python --node URL --key FILE --name ADAPTER --effect NAME ...

`run` serves the node until SIGINT/SIGTERM (or, with `--once`, for one lease request) and
prints one line per settled intent: human text, or JSON lines with `--json`.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from aos.cli.common import emit_json, handles_errors, json_option
from aos.kernel.adapters.builtin.http import (
    HTTP_BODY_BYTES_INLINE_MAX_DEFAULT,
    HTTP_BODY_BYTES_MAX_DEFAULT,
    HTTP_TIMEOUT_S_DEFAULT,
    HttpEffect,
    HttpOptions,
    parse_url_map,
)
from aos.kernel.adapters.builtin.python_fn import (
    PYTHON_TIMEOUT_S_DEFAULT,
    PythonFunctionEffect,
    PythonOptions,
    parse_functions,
)
from aos.kernel.adapters.keys import read_seed, write_seed
from aos.kernel.adapters.sdk import (
    CONCURRENCY_DEFAULT,
    CONCURRENCY_MAX,
    LEASE_WAIT_MS_DEFAULT,
    LEASE_WAIT_MS_MAX,
    RETRY_ATTEMPTS_MAX_DEFAULT,
    Adapter,
    AdapterError,
    Handler,
    Outcome,
    RetryPolicy,
    RunSummary,
)
from aos.kernel.adapters.signing import generate_seed, public_key_of
from aos.kernel.air.names import name_problem

KINDS = ("http", "python")
_SHORT_HASH_CHARS = 19  # "blake3:" and 12 digits


class AdapterUnsettledError(AdapterError):
    code = "adapter.unsettled"
    hint = "some receipts were refused by the node or not posted; see the lines above"


@click.group("adapter")
def adapter_group() -> None:
    """Adapter identities (Ed25519 keys) and the built-in adapters."""


# --------------------------------------------------------------------------------------------
# keygen


def _adapter_name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    problem = name_problem(value)
    if problem is not None:
        raise click.BadParameter(problem)
    return value


def default_key_file(name: str) -> Path:
    """`demo/http@1` -> `demo_http_1.key` in the current folder."""
    return Path(re.sub(r"[^A-Za-z0-9.-]+", "_", name) + ".key")


@adapter_group.command("keygen")
@click.argument("name", callback=_adapter_name)
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The key file to write (default: NAME with '/' and '@' as '_', plus .key).",
)
@click.option("--force", is_flag=True, help="Replace an existing key file.")
@json_option
@handles_errors
def keygen_command(name: str, out: Path | None, force: bool, as_json: bool) -> None:
    """Make a new identity for adapter NAME: write its private key seed to a key file (mode
    0600) and print its public key (64 hex digits) for the manifest's defadapter."""
    path = out or default_key_file(name)
    seed = generate_seed()
    write_seed(path, seed, overwrite=force)
    public_key = public_key_of(seed).hex()
    if as_json:
        emit_json({"name": name, "public_key": public_key, "key_file": str(path)})
        return
    click.echo(public_key)
    click.echo(
        f"wrote {path} (mode 0600, keep it private). In the manifest:\n"
        f"  $kind: defadapter\n  name: {name}\n  public_key: {public_key}\n"
        "and list the adapter in each defeffect it may settle (adapters: [...]).",
        err=True,
    )


# --------------------------------------------------------------------------------------------
# run


@adapter_group.command("run")
@click.argument("kind", type=click.Choice(KINDS))
@click.option("--node", "node", required=True, metavar="URL", help="The node, http://HOST:PORT.")
@click.option(
    "--key",
    "key_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The adapter's key file (aos adapter keygen).",
)
@click.option("--name", "name", required=True, callback=_adapter_name, help="Its defadapter.")
@click.option(
    "--effect", "effects", required=True, multiple=True, help="An effect to serve (repeatable)."
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, CONCURRENCY_MAX),
    default=CONCURRENCY_DEFAULT,
    show_default=True,
    help="Most intents handled at once.",
)
@click.option(
    "--lease-wait-ms",
    type=click.IntRange(0, LEASE_WAIT_MS_MAX),
    default=LEASE_WAIT_MS_DEFAULT,
    show_default=True,
    help="How long one lease request waits when nothing is open.",
)
@click.option(
    "--retries",
    type=click.IntRange(1, 100),
    default=RETRY_ATTEMPTS_MAX_DEFAULT,
    show_default=True,
    help="Attempts per request to the node (with exponential backoff between them).",
)
@click.option("--once", is_flag=True, help="One lease request, settle what it got, exit.")
@click.option(
    "--timeout-s",
    type=click.FloatRange(min=0, min_open=True),
    help=f"Per intent (http: {HTTP_TIMEOUT_S_DEFAULT:g}, python: {PYTHON_TIMEOUT_S_DEFAULT:g}).",
)
@click.option(
    "--body-bytes-inline-max",
    type=click.IntRange(min=0),
    help="http: largest response body inlined in the receipt; a larger one is uploaded to "
    f"the world's CAS and named by hash (body_ref) [{HTTP_BODY_BYTES_INLINE_MAX_DEFAULT}].",
)
@click.option(
    "--body-bytes-max",
    type=click.IntRange(min=0),
    help=f"http: largest response body read at all [{HTTP_BODY_BYTES_MAX_DEFAULT}].",
)
@click.option(
    "--url-map",
    "url_map",
    multiple=True,
    metavar="FROM=TO",
    help="http: send URLs starting with FROM to TO instead (repeatable).",
)
@click.option(
    "--function",
    "functions",
    multiple=True,
    metavar="[EFFECT=]MODULE:FUNCTION",
    help="python: the function to run (for one effect, or for all).",
)
@click.option(
    "--module-path",
    "module_paths",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="python: a folder to import functions from (repeatable).",
)
@json_option
@handles_errors
def run_command(
    kind: str,
    node: str,
    key_file: Path,
    name: str,
    effects: tuple[str, ...],
    concurrency: int,
    lease_wait_ms: int,
    retries: int,
    once: bool,
    timeout_s: float | None,
    body_bytes_inline_max: int | None,
    body_bytes_max: int | None,
    url_map: tuple[str, ...],
    functions: tuple[str, ...],
    module_paths: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Run a built-in adapter of KIND against a node: lease the intents of each --effect,
    perform them, and post receipts signed with the key in --key.

    \b
    http    params {method, url, headers, body?} -> payload {status, headers, body, body_ref?}
    python  params as JSON -> MODULE:FUNCTION(params) in a subprocess -> payload
    """
    if not node.startswith(("http://", "https://")):
        raise click.BadParameter(f"{node!r} is not http(s)://HOST:PORT", param_hint="--node")
    http_options = {
        "--body-bytes-inline-max": body_bytes_inline_max is not None,
        "--body-bytes-max": body_bytes_max is not None,
        "--url-map": bool(url_map),
    }
    _check_kind_options(kind, http_options, functions, module_paths)
    logging.basicConfig(level=logging.WARNING, format="adapter: %(message)s", stream=sys.stderr)
    seed = read_seed(key_file)
    printer = _Printer(as_json)
    adapter = Adapter(
        name=name,
        seed=seed,
        node=node,
        concurrency=concurrency,
        lease_wait_ms=lease_wait_ms,
        retry=RetryPolicy(attempts_max=retries),
        on_outcome=printer.outcome,
    )
    with adapter:
        if kind == "http":
            handler, close = _http_handler(
                adapter, timeout_s, body_bytes_inline_max, body_bytes_max, url_map
            )
        else:
            handler, close = _python_handler(timeout_s, functions, module_paths), lambda: None
        try:
            for effect in effects:
                adapter.effect(effect)(handler)
            _serve(adapter, once=once, printer=printer, kind=kind)
        finally:
            close()


def _check_kind_options(
    kind: str,
    http_options: dict[str, bool],
    functions: tuple[str, ...],
    module_paths: tuple[Path, ...],
) -> None:
    given = {
        "http": list(http_options.items()),
        "python": [("--function", bool(functions)), ("--module-path", bool(module_paths))],
    }
    for other, options in given.items():
        for option, present in options:
            if other != kind and present:
                raise click.UsageError(f"{option} is for {other} adapters, not {kind}")
    if kind == "python" and not functions:
        raise click.UsageError("a python adapter needs --function [EFFECT=]MODULE:FUNCTION")


def _http_handler(
    adapter: Adapter,
    timeout_s: float | None,
    body_bytes_inline_max: int | None,
    body_bytes_max: int | None,
    url_map: tuple[str, ...],
) -> tuple[Handler, Callable[[], None]]:
    http = HttpEffect(
        HttpOptions(
            timeout_s=timeout_s or HTTP_TIMEOUT_S_DEFAULT,
            body_bytes_inline_max=(
                HTTP_BODY_BYTES_INLINE_MAX_DEFAULT
                if body_bytes_inline_max is None
                else body_bytes_inline_max
            ),
            body_bytes_max=HTTP_BODY_BYTES_MAX_DEFAULT
            if body_bytes_max is None
            else body_bytes_max,
            url_map=parse_url_map(url_map),
        ),
        put_blob=adapter.put_blob,  # large bodies go to the world's CAS, named by hash
    )
    return http, http.close


def _python_handler(
    timeout_s: float | None, functions: tuple[str, ...], module_paths: tuple[Path, ...]
) -> Handler:
    options = PythonOptions(
        functions=parse_functions(functions),
        module_paths=module_paths,
        timeout_s=timeout_s or PYTHON_TIMEOUT_S_DEFAULT,
    )
    return PythonFunctionEffect(options)


def _serve(adapter: Adapter, *, once: bool, printer: _Printer, kind: str) -> None:
    printer.note(
        f"adapter {adapter.name} ({kind}) serving {', '.join(adapter.effects)} for world "
        f"{adapter.world_id} at {adapter.node}"
    )
    if once:
        outcomes = adapter.run_once(wait_ms=adapter.lease_wait_ms)
        summary = adapter.summary
        printer.summary(summary)
        unsettled = [o for o in outcomes if not o.settled]
        if unsettled:
            raise AdapterUnsettledError(f"{len(unsettled)} of {len(outcomes)} receipts unsettled")
        return
    summary = adapter.run()
    printer.summary(summary)


class _Printer:
    """One line per outcome on stdout (outcomes arrive from handler threads)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self._lock = threading.Lock()

    def note(self, text: str) -> None:
        click.echo(text, err=True)

    def outcome(self, outcome: Outcome) -> None:
        if self.as_json:
            line = json.dumps(_outcome_json(outcome), sort_keys=True)
        else:
            line = _outcome_text(outcome)
        with self._lock:
            click.echo(line)

    def summary(self, summary: RunSummary) -> None:
        if self.as_json:
            with self._lock:
                click.echo(json.dumps({"summary": vars(summary)}, sort_keys=True))
            return
        self.note(
            f"stopped: {summary.leases} leases, {summary.settled} settled, "
            f"{summary.duplicates} duplicates, {summary.refused} refused, "
            f"{summary.unposted} not posted"
        )


def _outcome_json(outcome: Outcome) -> dict[str, Any]:
    return {
        "intent": outcome.lease.intent,
        "effect": outcome.lease.effect,
        "issuer_ref": outcome.lease.issuer_ref,
        "status": outcome.result.status,
        "seq": outcome.seq,
        "duplicate": outcome.duplicate,
        "delivered": outcome.delivered,
        "refused": outcome.refused,
        "unposted": outcome.unposted,
    }


def _outcome_text(outcome: Outcome) -> str:
    intent = outcome.lease.intent[:_SHORT_HASH_CHARS]
    head = f"{outcome.lease.effect}  {intent}  {outcome.result.status:<7}"
    if outcome.refused is not None:
        return f"refused    {head}  {outcome.refused}"
    if outcome.unposted is not None:
        return f"unposted   {head}  {outcome.unposted}"
    if outcome.duplicate:
        return f"duplicate  {head}"
    return f"settled    {head}  seq {outcome.seq}"


def register(group: click.Group) -> None:
    group.add_command(adapter_group)
