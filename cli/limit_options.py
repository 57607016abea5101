"""Limits from one place (spec/04-effects.md §10.1): a command's options for a `*Limits`
dataclass are generated from its fields (kernel/limits_config.py), and each limit can be set
three ways, the first that sets it winning:

1. its own option, `--field-name VALUE` (`request_bytes_max` is `--request-bytes-max`);
2. `--limit NAME=VALUE` (repeatable), NAME the field's name;
3. a settings file, `--limits-file FILE`: TOML whose `[limits]` table maps names to values;

and otherwise its default. A name that is no limit is `cli.limit_unknown`; a value of the
wrong type or out of the limit's range is `cli.limit_invalid`; a file that is not TOML, too
large or unreadable is `cli.limits_file_invalid`. Each is refused before anything starts.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from aos.kernel.errors import AosError
from aos.kernel.limits_config import LimitField, limit_fields

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

LIMIT_PAIRS_MAX = 256
"""`--limit` options one command takes."""
LIMIT_PAIR_CHARS_MAX = 1024
"""Characters of one `--limit NAME=VALUE`."""
LIMITS_FILE_BYTES_MAX = 64 * 1024
"""Bytes of a settings file, checked before it is read."""
LIMITS_TABLE = "limits"
PRECEDENCE_HELP = "An option beats --limit, which beats --limits-file, which beats the default."
LIMITS_EPILOG = (
    "Limits: each is an option (--field-name VALUE), --limit NAME=VALUE (NAME: field_name) or "
    "a NAME = VALUE line in the [limits] table of a TOML --limits-file. " + PRECEDENCE_HELP
)
_EXPLICIT = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)


class LimitUnknownError(AosError):
    code = "cli.limit_unknown"
    hint = "name a limit by its field name: --request-bytes-max is request_bytes_max (--help)"


class LimitInvalidError(AosError):
    code = "cli.limit_invalid"
    hint = "give --limit NAME=VALUE, the value of the limit's type and within its range"


class LimitsFileInvalidError(AosError):
    code = "cli.limits_file_invalid"
    hint = "a settings file is TOML of at most 64 KiB with one [limits] table of NAME = VALUE"


def limit_options(cls: type[T], into: str) -> Callable[[F], F]:
    """Decorate a click command with an option per limit of `cls`, `--limit` and
    `--limits-file`; the command receives the resolved `cls` instance as keyword `into`."""
    fields = limit_fields(cls)

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            context = click.get_current_context()
            options = {}
            for field in fields:
                value = kwargs.pop(field.name)
                if context.get_parameter_source(field.name) in _EXPLICIT:
                    options[field.name] = value
            pairs, file = kwargs.pop("limit_pairs"), kwargs.pop("limits_file")
            kwargs[into] = resolve_limits(cls, options, pairs, file)
            return fn(*args, **kwargs)

        for field in reversed(fields):
            command = _limit_option(field)(command)
        command = click.option(
            "--limit",
            "limit_pairs",
            multiple=True,
            metavar="NAME=VALUE",
            help="Set a limit by its name (the option's, with '_' for '-'); repeatable. "
            + PRECEDENCE_HELP,
        )(command)
        return click.option(
            "--limits-file",
            "limits_file",
            type=click.Path(dir_okay=False, path_type=Path),
            help="A TOML settings file whose [limits] table sets limits by name.",
        )(command)  # type: ignore[return-value]

    return decorate


def option_name(name: str) -> str:
    """The option of limit `name`: `request_bytes_max` is `--request-bytes-max`."""
    return "--" + name.replace("_", "-")


def limit_given(name: str) -> bool:
    """Whether the running command's limit `name` was set by its option or by `--limit`."""
    context = click.get_current_context()
    if context.get_parameter_source(name) in _EXPLICIT:
        return True
    return any(pair.partition("=")[0].strip() == name for pair in context.params["limit_pairs"])


def resolve_limits(
    cls: type[T], options: Mapping[str, Any], pairs: tuple[str, ...], file: Path | None
) -> T:
    """`cls` from explicit options over `--limit` pairs over the settings file."""
    values = {} if file is None else read_limits_file(cls, file)
    values.update(parse_limit_pairs(cls, pairs))
    values.update(options)
    return cls(**values)


def parse_limit_pairs(cls: type, pairs: tuple[str, ...]) -> dict[str, Any]:
    """The values of `--limit NAME=VALUE` options, typed and checked."""
    if len(pairs) > LIMIT_PAIRS_MAX:
        raise LimitInvalidError(f"--limit given {len(pairs)} times; at most {LIMIT_PAIRS_MAX}")
    known = {field.name: field for field in limit_fields(cls)}
    values: dict[str, Any] = {}
    for pair in pairs:
        if len(pair) > LIMIT_PAIR_CHARS_MAX:
            raise LimitInvalidError(f"--limit is over {LIMIT_PAIR_CHARS_MAX} characters")
        name, equals, text = (part.strip() for part in pair.partition("="))
        if not equals or not name:
            raise LimitInvalidError(f"--limit {pair!r} is not NAME=VALUE")
        field = _known(known, name, "--limit")
        if name in values:
            raise LimitInvalidError(f"--limit {name} given twice")
        values[name] = _checked(field, _typed(field, text), "--limit")
    return values


def read_limits_file(cls: type, file: Path) -> dict[str, Any]:
    """The `[limits]` table of a settings file, typed and checked; its size is bounded
    before it is read."""
    where = str(file)
    try:
        if file.stat().st_size > LIMITS_FILE_BYTES_MAX:
            raise LimitsFileInvalidError(f"over {LIMITS_FILE_BYTES_MAX} bytes", path=where)
        with file.open("rb") as stream:
            data = stream.read(LIMITS_FILE_BYTES_MAX + 1)
    except OSError as error:
        raise LimitsFileInvalidError(f"cannot read it: {error.strerror}", path=where) from None
    if len(data) > LIMITS_FILE_BYTES_MAX:  # it grew since its size was read
        raise LimitsFileInvalidError(f"over {LIMITS_FILE_BYTES_MAX} bytes", path=where)
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as error:
        raise LimitsFileInvalidError(f"not TOML: {error}", path=where) from None
    others = sorted(set(document) - {LIMITS_TABLE})
    if others:
        raise LimitsFileInvalidError(f"unknown keys or tables: {', '.join(others)}", path=where)
    table = document.get(LIMITS_TABLE, {})
    if not isinstance(table, dict):
        raise LimitsFileInvalidError(f"{LIMITS_TABLE} is not a table", path=where)
    known = {field.name: field for field in limit_fields(cls)}
    return {name: _checked(_known(known, name, where), v, where) for name, v in table.items()}


def _known(known: Mapping[str, LimitField], name: str, where: str) -> LimitField:
    if name not in known:
        raise LimitUnknownError(f"no limit {name!r}", path=where, known=sorted(known))
    return known[name]


def _typed(field: LimitField, text: str) -> Any:
    if field.kind is str:
        return text
    try:
        return field.kind(text)
    except ValueError:
        raise LimitInvalidError(
            f"{field.name}={text!r} is not {field.kind.__name__}", path="--limit"
        ) from None


def _checked(field: LimitField, value: Any, where: str) -> Any:
    problem = field.problem(value)
    if problem is not None:
        raise LimitInvalidError(problem, path=where)
    return value


def _limit_option(field: LimitField) -> Callable[[F], F]:
    kind: Any = click.STRING
    if field.kind is int:
        kind = click.IntRange(min=field.minimum, max=field.maximum)
    return click.option(
        option_name(field.name),
        field.name,
        type=kind,
        metavar="N" if field.kind is int else "TEXT",
        default=field.default,
        show_default=True,
        help=field.help,
    )
