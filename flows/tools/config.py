"""The flow world's tool config (spec/11 §2.1): what the tool adapters of one world may do
and where its keychain's secrets come from. A YAML file kept beside the world (never in it:
it may name a secrets file), read by `aos adapter run tool-KIND|keychain --config FILE` and
`aos flow run --local --config FILE`; without one, the defaults below hold (secrets from
`AOS_SECRET_<NAME>` environment variables, the shell tool refused).

    keychain:
      file: secrets.yaml        # NAME: text | {field: text}; relative to this file
      env_prefix: AOS_SECRET_   # null: no secrets from the environment
    shell:
      enabled: false            # the shell tool runs only where the world says so
      timeout_s_max: 60
      output_bytes_max: 65536
    postgres: {timeout_s_max: 3600, rows_max: 10000, result_bytes_max: 8388608}
    duckdb:
      timeout_s_max: 3600
      rows_max: 10000
      result_bytes_max: 8388608
      data_dir: null            # a folder for database files (null: in memory only)
      external_access: false    # let SQL read files and URLs, load extensions
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aos.flows.tools.duckdb import (
    DUCKDB_RESULT_BYTES_MAX_DEFAULT,
    DUCKDB_ROWS_MAX_DEFAULT,
    DUCKDB_TIMEOUT_S_MAX,
    DuckdbSettings,
)
from aos.flows.tools.keychain import ENV_PREFIX_DEFAULT, Keychain
from aos.flows.tools.postgres import (
    POSTGRES_RESULT_BYTES_MAX_DEFAULT,
    POSTGRES_ROWS_MAX_DEFAULT,
    POSTGRES_TIMEOUT_S_MAX,
    PostgresSettings,
)
from aos.flows.tools.shell import (
    SHELL_OUTPUT_BYTES_MAX_CEILING,
    SHELL_OUTPUT_BYTES_MAX_DEFAULT,
    SHELL_TIMEOUT_S_MAX_CEILING,
    SHELL_TIMEOUT_S_MAX_DEFAULT,
    ShellSettings,
)
from aos.kernel.adapters.sdk import AdapterConfigInvalidError
from aos.kernel.errors import InvalidInputError
from aos.kernel.text import yamltext

CONFIG_BYTES_MAX = 64 * 1024
ROWS_MAX_CEILING = 1_000_000
RESULT_BYTES_MAX_CEILING = 256 * 1024 * 1024


class ToolConfigInvalidError(AdapterConfigInvalidError):
    code = "adapter.tool_config_invalid"
    hint = "fix the tool config file (spec/11 §2.1)"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _KeychainConfig(_Model):
    file: str | None = None
    env_prefix: str | None = Field(
        default=ENV_PREFIX_DEFAULT, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
    )


class _ShellConfig(_Model):
    enabled: bool = False
    timeout_s_max: float = Field(
        default=SHELL_TIMEOUT_S_MAX_DEFAULT, gt=0, le=SHELL_TIMEOUT_S_MAX_CEILING
    )
    output_bytes_max: int = Field(
        default=SHELL_OUTPUT_BYTES_MAX_DEFAULT, ge=0, le=SHELL_OUTPUT_BYTES_MAX_CEILING
    )


class _PostgresConfig(_Model):
    timeout_s_max: float = Field(default=POSTGRES_TIMEOUT_S_MAX, gt=0, le=POSTGRES_TIMEOUT_S_MAX)
    rows_max: int = Field(default=POSTGRES_ROWS_MAX_DEFAULT, ge=0, le=ROWS_MAX_CEILING)
    result_bytes_max: int = Field(
        default=POSTGRES_RESULT_BYTES_MAX_DEFAULT, ge=0, le=RESULT_BYTES_MAX_CEILING
    )


class _DuckdbConfig(_Model):
    data_dir: str | None = None
    external_access: bool = False
    timeout_s_max: float = Field(default=DUCKDB_TIMEOUT_S_MAX, gt=0, le=DUCKDB_TIMEOUT_S_MAX)
    rows_max: int = Field(default=DUCKDB_ROWS_MAX_DEFAULT, ge=0, le=ROWS_MAX_CEILING)
    result_bytes_max: int = Field(
        default=DUCKDB_RESULT_BYTES_MAX_DEFAULT, ge=0, le=RESULT_BYTES_MAX_CEILING
    )


class _ToolConfig(_Model):
    keychain: _KeychainConfig = Field(default_factory=_KeychainConfig)
    shell: _ShellConfig = Field(default_factory=_ShellConfig)
    postgres: _PostgresConfig = Field(default_factory=_PostgresConfig)
    duckdb: _DuckdbConfig = Field(default_factory=_DuckdbConfig)


class ToolConfig:
    """The settings a tool context takes from a config (`ToolContext(**config.context())`)."""

    def __init__(self, model: _ToolConfig, base: Path) -> None:
        file = model.keychain.file
        self.keychain = Keychain(
            file=None if file is None else (base / file),
            env_prefix=model.keychain.env_prefix,
        )
        self.shell = ShellSettings(**model.shell.model_dump())
        self.postgres = PostgresSettings(**model.postgres.model_dump())
        duckdb = model.duckdb.model_dump()
        data_dir = duckdb.pop("data_dir")
        self.duckdb = DuckdbSettings(
            **duckdb, data_dir=None if data_dir is None else (base / data_dir)
        )

    def context(self) -> dict[str, Any]:
        return {
            "keychain": self.keychain,
            "shell": self.shell,
            "postgres": self.postgres,
            "duckdb": self.duckdb,
        }


def default_config() -> ToolConfig:
    return ToolConfig(_ToolConfig(), Path.cwd())


def load_config(path: Path | None) -> ToolConfig:
    """The config in `path` (None: the defaults). Bad input is a typed error."""
    if path is None:
        return default_config()
    try:
        with path.open("rb") as stream:
            data = stream.read(CONFIG_BYTES_MAX + 1)
    except OSError as error:
        raise ToolConfigInvalidError(f"tool config {path}: {error.strerror}") from None
    if len(data) > CONFIG_BYTES_MAX:
        raise ToolConfigInvalidError(f"tool config {path} is over {CONFIG_BYTES_MAX} bytes")
    try:
        loaded = yamltext.parse(data.decode("utf-8"))
        model = _ToolConfig.model_validate(loaded or {})
    except (InvalidInputError, UnicodeDecodeError) as error:
        raise ToolConfigInvalidError(f"tool config {path} is not YAML: {error!s:.200}") from None
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc']) or '$'}: {item['msg']}"
            for item in error.errors()
        )
        raise ToolConfigInvalidError(f"tool config {path}: {problems}") from None
    return ToolConfig(model, path.resolve().parent)
