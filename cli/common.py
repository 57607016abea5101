"""Conventions every `aos` command follows (DESIGN §13).

* `--json` prints exact JSON on stdout; otherwise a human table or text.
* Exit 0 on success, 1 on a user-facing error (its code and a one-line hint on stderr, or the
  error object on stdout with `--json`), 2 on bad usage (click's own handling).
* A command that waits for an execution (`aos flow run --local`, `run --wait`, `status
  --wait`) exits with what it saw: 0 completed, 3 failed (or partial: a branch failed), 4
  cancelled, 5 still running when the wait ended. `aos world send` exits 1 when its event
  faulted or was dropped in a cell it was routed to (it is journaled all the same).
* `--world PATH` (env `AOS_WORLD`, default `./.aos`) on every command that opens a world.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from aos.kernel.errors import AosError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_FAILED = 3
EXIT_CANCELLED = 4
EXIT_RUNNING = 5
EXIT_BY_STATUS = {
    "completed": EXIT_OK,
    "failed": EXIT_FAILED,
    "partial": EXIT_FAILED,
    "cancelled": EXIT_CANCELLED,
    "running": EXIT_RUNNING,
}
EXIT_CODES_HELP = (
    "Exit status: 0 completed, 3 failed (or partial), 4 cancelled, 5 still running when the "
    "wait ended; 1 an error, 2 bad usage."
)


def exit_for_execution(status: str, *, waited: bool) -> None:
    """Exit as an execution's status says (EXIT_BY_STATUS), once its answer is printed. A
    command that did not wait leaves a running execution with 0."""
    code = EXIT_BY_STATUS.get(status, EXIT_ERROR)
    if code == EXIT_RUNNING and not waited:
        code = EXIT_OK
    if code != EXIT_OK:
        sys.exit(code)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print exact JSON.")(fn)


def world_option(fn: F) -> F:
    return click.option(
        "--world",
        "world_path",
        envvar="AOS_WORLD",
        default="./.aos",
        show_default=True,
        type=click.Path(file_okay=False),
        help="World directory (env AOS_WORLD).",
    )(fn)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def fail(error: AosError, *, as_json: bool) -> None:
    """Report a user-facing error and exit 1."""
    if as_json:
        emit_json({"error": error.to_dict()})
    else:
        click.echo(f"error[{error.code}]: {error}", err=True)
        if error.hint:
            click.echo(f"  hint: {error.hint}", err=True)
    sys.exit(EXIT_ERROR)


def handles_errors(fn: F) -> F:
    """Turn `AosError` from a command body into the exit-1 report. The command must take an
    `as_json` keyword (from `json_option`)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AosError as error:
            fail(error, as_json=bool(kwargs.get("as_json")))

    return wrapper  # type: ignore[return-value]


def pass_settings(
    cls: Callable[..., Any],
) -> Callable[[Callable[[Any], None]], Callable[..., None]]:
    """Hand a click command its parameters as one settings object, `cls(**params)`, so that
    its signature stays short however many options it has. Put it under `handles_errors`,
    which reads `as_json` from the parameters."""

    def decorate(fn: Callable[[Any], None]) -> Callable[..., None]:
        @functools.wraps(fn)
        def command(**params: Any) -> None:
            fn(cls(**params))

        return command

    return decorate


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


@contextmanager
def progress_bar(label: str, *, as_json: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A replay's progress as a bar on stderr, when stderr is a terminal and the command does
    not answer JSON; None otherwise. Yields what `replay.verify_replay` and the shadows take as
    `progress`: called with the sequence reached and the last one."""
    if as_json or not sys.stderr.isatty():
        yield None
        return
    bar: Any = None

    def update(seq: int, end: int) -> None:
        nonlocal bar
        if bar is None:
            bar = click.progressbar(length=end, label=label, file=sys.stderr)
            bar.__enter__()
        bar.update(seq - bar.pos)

    try:
        yield update
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
