"""`aos adapter ...`: adapter identities and the built-in adapters (spec/10-adapters.md).

    aos adapter keygen NAME [--out FILE]               new key file; prints the public key
    aos adapter run http|python --node URL --key FILE --name ADAPTER --effect NAME ...
    aos adapter run tool-echo|tool-http|tool-python --node URL --key FILE [--name ADAPTER]
    aos adapter run tool-postgres|tool-duckdb|tool-shell|keychain --node URL --key FILE
        [--config FILE]                                  the world's tool config (spec/11 §2.1)

`run` serves the node until SIGINT/SIGTERM (or, with `--once`, for one lease request) and
prints one line per settled intent: human text, or JSON lines with `--json`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from aos.cli.common import emit_json, handles_errors, json_option, pass_settings
from aos.cli.limit_options import LIMITS_EPILOG, limit_given, limit_options, option_name
from aos.flows.define.tool_schema import TOOL_KINDS
from aos.flows.tools.config import load_config
from aos.flows.tools.context import HTTP_TIMEOUT_S_MAX_DEFAULT, PYTHON_TIMEOUT_S_MAX_DEFAULT
from aos.flows.tools.dispatch import make_adapter
from aos.flows.tools.keychain import make_keychain_adapter
from aos.kernel.adapters.builtin import python_limits
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
from aos.kernel.adapters.builtin.python_limits import PythonLimits
from aos.kernel.adapters.sdk import (
    CONCURRENCY_DEFAULT,
    CONCURRENCY_MAX,
    LEASE_WAIT_MS_DEFAULT,
    LEASE_WAIT_MS_MAX,
    RETRY_ATTEMPTS_MAX_DEFAULT,
    Adapter,
    AdapterConfigInvalidError,
    AdapterError,
    Handler,
    Outcome,
    RetryPolicy,
    RunSummary,
)
from aos.kernel.air.names import name_problem
from aos.kernel.limits_config import limit_fields
from aos.kernel.signing.keys import read_seed, write_seed
from aos.kernel.signing.signatures import generate_seed, public_key_of

BUILTIN_KINDS = ("http", "python")
TOOL_PREFIX = "tool-"
TOOL_ADAPTER_KINDS = tuple(f"{TOOL_PREFIX}{kind}" for kind in TOOL_KINDS)
"""The flow world's tool adapters (spec/11-flows.md, `flows/tools/dispatch.py`)."""
KEYCHAIN_KIND = "keychain"
"""The flow world's keychain adapter (`flows/tools/keychain.py`)."""
KINDS = (*BUILTIN_KINDS, *TOOL_ADAPTER_KINDS, KEYCHAIN_KIND)
PYTHON_KINDS = ("python", "tool-python")
"""The kinds that run python tasks in confined processes (python_limits.py)."""
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


def _optional_adapter_name(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> str | None:
    return None if value is None else _adapter_name(ctx, param, value)


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


@dataclass(frozen=True)
class _RunSettings:
    """What `aos adapter run` was given: its options, the python limits resolved from theirs."""

    kind: str
    nodes: tuple[str, ...]
    key_file: Path
    name: str | None
    effects: tuple[str, ...]
    concurrency: int
    lease_wait_ms: int
    retries: int
    once: bool
    timeout_s: float | None
    timeout_s_max: float | None
    body_bytes_inline_max: int | None
    body_bytes_max: int | None
    url_map: tuple[str, ...]
    functions: tuple[str, ...]
    module_paths: tuple[Path, ...]
    allow: tuple[str, ...]
    config_file: Path | None
    file_base: Path | None
    no_code: bool
    as_json: bool
    python: PythonLimits


@adapter_group.command("run", epilog=LIMITS_EPILOG)
@click.argument("kind", type=click.Choice(KINDS))
@click.option(
    "--node",
    "nodes",
    required=True,
    multiple=True,
    metavar="URL",
    help="The node, http://HOST:PORT. Repeatable: when the node in use goes away, the adapter "
    "asks these where its world is served now and follows it.",
)
@click.option(
    "--key",
    "key_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The adapter's key file (aos adapter keygen).",
)
@click.option(
    "--name",
    "name",
    callback=_optional_adapter_name,
    help="Its defadapter (required for http and python; tool-KIND: aos/KIND@1).",
)
@click.option(
    "--effect",
    "effects",
    multiple=True,
    help="http, python: an effect to serve (repeatable, at least one). A tool-KIND adapter "
    "serves aos/tool.KIND@1.",
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
    "--timeout-s-max",
    type=click.FloatRange(min=0, min_open=True),
    help="tool-http, tool-python: the most a tool's timeout_ms may ask for; a longer one is "
    f"cut to it (tool-http: {HTTP_TIMEOUT_S_MAX_DEFAULT:g}, "
    f"tool-python: {PYTHON_TIMEOUT_S_MAX_DEFAULT:g}).",
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
    help=f"http, tool-http: largest response body read at all [{HTTP_BODY_BYTES_MAX_DEFAULT}].",
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
    help="python, tool-python: a folder to import functions from (repeatable).",
)
@click.option(
    "--allow",
    "allow",
    multiple=True,
    metavar="PREFIX",
    help="tool-python: a module prefix whose functions flows may call (repeatable; PREFIX "
    "admits the module and its submodules). Without any, every `function` call is refused.",
)
@click.option(
    "--no-code",
    "no_code",
    is_flag=True,
    help="tool-python: refuse inline `code` (python.code_refused); only --allow functions run.",
)
@click.option(
    "--config",
    "config_file",
    envvar="AOS_FLOW_TOOLS",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="tool-KIND, keychain: the world's tool config (YAML: keychain source, shell.enabled, "
    "limits; spec/11 §2.1; env AOS_FLOW_TOOLS). Default: secrets from AOS_SECRET_NAME "
    "variables, shell refused.",
)
@click.option(
    "--file-base",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="tool-file: the folder flow resources are read from and written to (required).",
)
@json_option
@handles_errors
@limit_options(PythonLimits, into="python")
@pass_settings(_RunSettings)
def run_command(settings: _RunSettings) -> None:
    """Run a built-in adapter of KIND against a node: lease the intents of its effects,
    perform them, and post receipts signed with the key in --key.

    \b
    http         params {method, url, headers, body?} -> payload {status, headers, body, body_ref?}
    python       params as JSON -> MODULE:FUNCTION(params) in a subprocess -> payload
    tool-echo    aos/tool.echo@1 (flows): the result is the call's args
    tool-http    aos/tool.http@1: the tool's HTTP request -> {status, headers, json|text|body}
    tool-python  aos/tool.python@1: inline code (args as variables, `result` out) in a reused
                 worker process, or a function(args) in a subprocess (--allow only)
    tool-postgres  aos/tool.postgres@1: SQL on PostgreSQL, auth from the keychain
    tool-duckdb  aos/tool.duckdb@1: SQL on an embedded DuckDB
    tool-shell   aos/tool.shell@1: a command, refused unless the config enables it
    keychain     aos/keychain.resolve@1: keychain names -> references, never secrets
    tool-file    aos/tool.file@1: read or write a file inside --file-base (flow resources)
    tool-transfer  aos/tool.transfer@1: rows from http, postgres or duckdb into a table
    """
    for url in settings.nodes:
        if not url.startswith(("http://", "https://")):
            raise click.BadParameter(f"{url!r} is not http(s)://HOST:PORT", param_hint="--node")
    _check_kind_options(settings.kind, _options_given(settings), settings.name)
    logging.basicConfig(level=logging.WARNING, format="adapter: %(message)s", stream=sys.stderr)
    seed = read_seed(settings.key_file)
    printer = _Printer(settings.as_json)
    if settings.kind in PYTHON_KINDS:
        _check_key_hidden(settings.key_file, settings.python, printer)
    options: dict[str, Any] = {
        "seed": seed,
        "node": settings.nodes[0],
        "name": settings.name,
        "concurrency": settings.concurrency,
        "lease_wait_ms": settings.lease_wait_ms,
        "retry": RetryPolicy(attempts_max=settings.retries),
        "nodes": settings.nodes[1:],
        "on_outcome": printer.outcome,
    }
    if settings.kind == KEYCHAIN_KIND:
        keychain = load_config(settings.config_file).keychain
        adapter = make_keychain_adapter(keychain=keychain, **options)
    elif settings.kind in TOOL_ADAPTER_KINDS:
        adapter = _tool_adapter(settings, options, printer)
    else:
        _run_builtin(settings, options, printer)
        return
    with adapter:
        _serve(adapter, once=settings.once, printer=printer, kind=settings.kind)


def _options_given(settings: _RunSettings) -> dict[str, bool]:
    """Which kind-specific options the command line gave."""
    return {
        "--effect": bool(settings.effects),
        "--timeout-s": settings.timeout_s is not None,
        "--timeout-s-max": settings.timeout_s_max is not None,
        "--body-bytes-inline-max": settings.body_bytes_inline_max is not None,
        "--body-bytes-max": settings.body_bytes_max is not None,
        "--url-map": bool(settings.url_map),
        "--function": bool(settings.functions),
        "--module-path": bool(settings.module_paths),
        "--allow": bool(settings.allow),
        # From the environment it is for whichever kind reads it; given here, it must fit.
        "--config": _given_here("config_file"),
        "--file-base": settings.file_base is not None,
        "--no-code": settings.no_code,
        # A settings file may serve adapters of every kind; an option or --limit must fit.
        **{option_name(name): limit_given(name) for name in _PYTHON_LIMITS},
    }


def _tool_adapter(settings: _RunSettings, options: dict[str, Any], printer: _Printer) -> Adapter:
    tool = settings.kind.removeprefix(TOOL_PREFIX)
    tool_limits: dict[str, Any] = {}
    if settings.timeout_s_max is not None:
        tool_limits[f"{tool}_timeout_s_max"] = settings.timeout_s_max
    if settings.body_bytes_max is not None:
        tool_limits["http_response_bytes_max"] = settings.body_bytes_max
    if settings.kind == "tool-file":
        if settings.file_base is None:
            raise click.BadParameter("tool-file needs --file-base DIR", param_hint="--file-base")
        tool_limits["file_base"] = settings.file_base
    if settings.kind == "tool-python" and not settings.allow:
        printer.note("no --allow PREFIX: every `function` call is refused (python.not_allowed)")
    return make_adapter(
        tool,
        python_allow=settings.allow,
        python_paths=settings.module_paths,
        config=load_config(settings.config_file),
        python_code=not settings.no_code,
        python_limits=settings.python,
        **tool_limits,
        **options,
    )


def _run_builtin(settings: _RunSettings, options: dict[str, Any], printer: _Printer) -> None:
    assert settings.name is not None  # _check_kind_options
    adapter = Adapter(**options)
    with adapter:
        if settings.kind == "http":
            handler, close = _http_handler(adapter, settings)
        else:
            handler = _python_handler(settings)
            close = _close_nothing
        try:
            for effect in settings.effects:
                adapter.effect(effect)(handler)
            _serve(adapter, once=settings.once, printer=printer, kind=settings.kind)
        finally:
            close()


_PYTHON_LIMITS = tuple(field.name for field in limit_fields(PythonLimits))


_OPTION_KINDS: dict[str, tuple[str, ...]] = {
    "--effect": BUILTIN_KINDS,
    "--timeout-s": BUILTIN_KINDS,
    "--timeout-s-max": ("tool-http", "tool-python"),
    "--body-bytes-inline-max": ("http",),
    "--body-bytes-max": ("http", "tool-http"),
    "--url-map": ("http",),
    "--function": ("python",),
    "--module-path": ("python", "tool-python"),
    "--allow": ("tool-python",),
    "--config": (*TOOL_ADAPTER_KINDS, KEYCHAIN_KIND),
    "--file-base": ("tool-file",),
    "--no-code": ("tool-python",),
    **{option_name(name): PYTHON_KINDS for name in _PYTHON_LIMITS},
}
"""The kinds each kind-specific option is for."""


def _given_here(param: str) -> bool:
    source = click.get_current_context().get_parameter_source(param)
    return source is click.core.ParameterSource.COMMANDLINE


def _check_kind_options(kind: str, given: dict[str, bool], name: str | None) -> None:
    for option, present in given.items():
        kinds = _OPTION_KINDS[option]
        if present and kind not in kinds:
            raise click.UsageError(f"{option} is for {', '.join(kinds)} adapters, not {kind}")
    if kind in BUILTIN_KINDS:
        if name is None:
            raise click.UsageError(f"the {kind} adapter needs --name ADAPTER (its defadapter)")
        if not given["--effect"]:
            raise click.UsageError(f"the {kind} adapter needs --effect NAME (at least one)")
    if kind == "python" and not given["--function"]:
        raise click.UsageError("a python adapter needs --function [EFFECT=]MODULE:FUNCTION")


def _http_handler(adapter: Adapter, settings: _RunSettings) -> tuple[Handler, Callable[[], None]]:
    inline_max, body_max = settings.body_bytes_inline_max, settings.body_bytes_max
    http = HttpEffect(
        HttpOptions(
            timeout_s=settings.timeout_s or HTTP_TIMEOUT_S_DEFAULT,
            body_bytes_inline_max=(
                HTTP_BODY_BYTES_INLINE_MAX_DEFAULT if inline_max is None else inline_max
            ),
            body_bytes_max=HTTP_BODY_BYTES_MAX_DEFAULT if body_max is None else body_max,
            url_map=parse_url_map(settings.url_map),
        ),
        put_blob=adapter.put_blob,  # large bodies go to the world's CAS, named by hash
    )
    return http, http.close


def _python_handler(settings: _RunSettings) -> Handler:
    options = PythonOptions(
        functions=parse_functions(settings.functions),
        module_paths=settings.module_paths,
        timeout_s=settings.timeout_s or PYTHON_TIMEOUT_S_DEFAULT,
        limits=settings.python,
    )
    return PythonFunctionEffect(options)


def _close_nothing() -> None:
    return None


def _check_key_hidden(key_file: Path, limits: PythonLimits, printer: _Printer) -> None:
    """Python tasks must not read the adapter's key, with which they could sign receipts.
    A root adapter runs them as the worker user: a key that user can read is refused. One
    that is not root runs them as itself, and says so."""
    if os.geteuid() != 0:
        printer.note(
            "python tasks run as this adapter's user and can read what it can, its key file "
            "too: run the adapter as a user of its own, or as root (tasks then run as "
            f"{limits.worker_user})"
        )
        return
    user = python_limits.worker(limits.worker_user)
    if python_limits.can_reach(key_file, user, os.R_OK):
        raise AdapterConfigInvalidError(
            f"{user.pw_name}, who python tasks run as, can read the key file {key_file}: "
            "make it readable by its owner only (chmod 600; aos adapter keygen writes it so)"
        )


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
