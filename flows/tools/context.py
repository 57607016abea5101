"""What one tool call may use besides its params (spec/11 §1.2, §7): `ToolContext`, shared by
every kind's module (flows/tools/), and the rules they share: a call's `timeout_ms`, bounded,
and the small error payloads."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from aos.flows.tools.duckdb import DuckdbSettings
from aos.flows.tools.file import FILE_BYTES_MAX_DEFAULT
from aos.flows.tools.keychain import (
    Grants,
    Keychain,
)
from aos.flows.tools.outcomes import ToolInvalidError
from aos.flows.tools.postgres import PostgresSettings
from aos.flows.tools.shell import ShellSettings
from aos.kernel.adapters.builtin.http import (
    HTTP_BODY_BYTES_MAX_DEFAULT,
    HTTP_BODY_BYTES_MAX_MAX,
    HTTP_TIMEOUT_S_MAX,
)
from aos.kernel.adapters.builtin.python_fn import (
    PYTHON_TIMEOUT_S_MAX,
)
from aos.kernel.adapters.builtin.python_limits import PythonLimits
from aos.kernel.adapters.sdk import AdapterConfigInvalidError

HTTP_TIMEOUT_S_MAX_DEFAULT = 120.0
PYTHON_TIMEOUT_S_MAX_DEFAULT = 300.0
RESULT_INLINE_BYTES_CAP_DEFAULT = 512 * 1024
"""The most any call may inline, whatever its params say: half the world's default receipt
limit, leaving room for the envelope."""
ERROR_TEXT_CHARS_MAX = 256
"""Error payloads stay small: each value (and the start of a response body) is clipped to
this many characters."""


def _no_blob(data: bytes) -> str:
    raise AdapterConfigInvalidError("this tool context cannot store blobs")


@dataclass(frozen=True)
class ToolContext:
    """What one tool call may use besides its params.

    `intent` is the intent hash, passed on as the idempotency key; `put_blob` stores bytes in
    the world's CAS and returns their hash (`Adapter.put_blob`, `World.put_blob`).
    `python_allow` are the module prefixes the python tool's `function` form may import (a
    prefix admits the module itself and its submodules; none: nothing is allowed) and
    `python_paths` the folders put first on its `sys.path`; `python_code` whether inline
    `code` may run (an adapter serving untrusted deployers turns it off); `python_limits` the
    memory, CPU and user of the processes both forms run in. A tool's `timeout_ms` is bounded by the `*_timeout_s_max`;
    `http_response_bytes_max` bounds the response body read; no call inlines more than
    `result_inline_bytes_cap` bytes of result. The file tool works inside `file_base` (none:
    it refuses every call) on files of at most `file_bytes_max` bytes."""

    intent: str
    put_blob: Callable[[bytes], str] = _no_blob
    python_allow: tuple[str, ...] = ()
    python_paths: tuple[Path, ...] = ()
    python_timeout_s_max: float = PYTHON_TIMEOUT_S_MAX_DEFAULT
    python_executable: str = sys.executable
    python_code: bool = True
    python_limits: PythonLimits = field(default_factory=PythonLimits)
    http_timeout_s_max: float = HTTP_TIMEOUT_S_MAX_DEFAULT
    http_response_bytes_max: int = HTTP_BODY_BYTES_MAX_DEFAULT
    http_transport: httpx.BaseTransport | None = None
    result_inline_bytes_cap: int = RESULT_INLINE_BYTES_CAP_DEFAULT
    keychain: Keychain | None = None
    grants: Grants = field(default_factory=Grants)
    postgres: PostgresSettings = field(default_factory=PostgresSettings)
    duckdb: DuckdbSettings = field(default_factory=DuckdbSettings)
    shell: ShellSettings = field(default_factory=ShellSettings)
    file_base: Path | None = None
    file_bytes_max: int = FILE_BYTES_MAX_DEFAULT
    flow_format: int = 1
    execution_context: Any = None

    def __post_init__(self) -> None:
        if isinstance(self.python_allow, str):
            raise AdapterConfigInvalidError("python_allow is a list of module prefixes")
        object.__setattr__(self, "python_allow", tuple(self.python_allow))
        object.__setattr__(self, "python_paths", tuple(Path(p) for p in self.python_paths))
        for prefix in self.python_allow:
            if not isinstance(prefix, str) or not all(p.isidentifier() for p in prefix.split(".")):
                raise AdapterConfigInvalidError(
                    f"python allow prefix {prefix!r} is a dotted module name (say acme.tools)"
                )
        for path in self.python_paths:
            if not path.is_dir():
                raise AdapterConfigInvalidError(f"python module path {path} is not a directory")
        if not 0 < self.python_timeout_s_max <= PYTHON_TIMEOUT_S_MAX:
            raise AdapterConfigInvalidError(
                f"python_timeout_s_max is in (0, {PYTHON_TIMEOUT_S_MAX:g}]"
            )
        if not 0 < self.http_timeout_s_max <= HTTP_TIMEOUT_S_MAX:
            raise AdapterConfigInvalidError(f"http_timeout_s_max is in (0, {HTTP_TIMEOUT_S_MAX:g}]")
        if not 0 <= self.http_response_bytes_max <= HTTP_BODY_BYTES_MAX_MAX:
            raise AdapterConfigInvalidError(
                f"http_response_bytes_max is 0..{HTTP_BODY_BYTES_MAX_MAX}"
            )
        if not 0 <= self.result_inline_bytes_cap <= RESULT_INLINE_BYTES_CAP_DEFAULT:
            raise AdapterConfigInvalidError(
                f"result_inline_bytes_cap is 0..{RESULT_INLINE_BYTES_CAP_DEFAULT}"
            )

    def for_intent(self, intent: str) -> ToolContext:
        """This context for a call of `intent`. Not checked again, as `replace` would: only the
        intent differs, and checking the rest re-reads the file system (the python paths) on
        every call."""
        return self._with(intent=intent)

    def for_call(self, flow_format: int, execution_context: Any) -> ToolContext:
        """This context for one call's own `flow_format` and `execution_context`."""
        return self._with(flow_format=flow_format, execution_context=execution_context)

    def _with(self, **changes: Any) -> ToolContext:
        call = copy.copy(self)
        for name, value in changes.items():
            object.__setattr__(call, name, value)
        return call

    def with_grants(self, grants: Grants) -> ToolContext:
        """This context for a call with the keychain grants `grants` (as `for_intent`)."""
        return self._with(grants=grants)

    def python_allows(self, module: str) -> bool:
        return any(module == p or module.startswith(p + ".") for p in self.python_allow)


class ToolCallInvalidError(ToolInvalidError):
    """The tool spec or the call's params are malformed (an `error`, `tool.invalid`)."""


def timeout_s_of(tool: dict[str, Any], default_s: float, max_s: float) -> float:
    """`timeout_ms` in seconds (the default when absent), at most `max_s`."""
    value = tool.get("timeout_ms")
    if value is None:
        return min(default_s, max_s)
    if type(value) is not int or value < 1:
        raise ToolCallInvalidError(
            f"timeout_ms is a whole number of milliseconds >= 1, not {value!r}"
        )
    return min(value / 1000, max_s)
