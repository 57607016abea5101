"""The shell tool (`aos/tool.shell@1`, spec/11 §1.2): one command in a child process, only on
a world that enables it.

    {kind: shell, command: TEXT | argv: [PROGRAM, ARG...], env: MAP, timeout_ms}
      -> {exit_code: 0, stdout, stderr}

Refused (`authorization`, `shell.disabled`) unless the adapter's config says `shell.enabled:
true`. `command` runs with `/bin/sh -c`; `argv` runs the program with no shell at all. A
`command` is fixed text: `aos flow check` (and a deploy) refuses one holding a template
(`flow.shell_templated`, flows/define/checks.py), so no rendered value is parsed by a shell. The
call's `args` never become command text: each top-level key of a map `args` (an identifier) is
an environment variable of the child (text as it is, anything else as JSON), so a command reads
them as `"$NAME"`; `env` adds variables too (keychain placeholders in its values are replaced
by their secrets here, the only place they go in, and only where the call's grants allow:
spec/11 §1.7). The child gets a small fixed environment (`PATH`, `LANG`, `HOME`) plus those,
never the adapter's own (which may hold secrets), runs in its own process group and a scratch
folder, and is killed when it runs past `timeout_ms` (a `timeout`) or writes more than
`output_bytes_max` bytes (`shell.too_large`). A non-zero exit is an error (`shell.exit`, with
`shell: {exit_code}` and the output's end).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

from aos.flows.define.tool_schema import TOOL_SCHEMAS
from aos.flows.tools.keychain import (
    Grants,
    Keychain,
    KeychainMissingError,
    KeychainSourceError,
    keychain_failure,
    scrubbed,
    substitute,
)
from aos.flows.tools.outcomes import (
    ToolInvalidError,
    ToolOutcome,
    check_fields,
    failure,
    timed_out,
)

SHELL_FIELDS = TOOL_SCHEMAS["shell"].accepted
SHELL_TIMEOUT_S_DEFAULT = 30.0
SHELL_TIMEOUT_S_MAX_DEFAULT = 60.0
SHELL_TIMEOUT_S_MAX_CEILING = 3600.0
SHELL_OUTPUT_BYTES_MAX_DEFAULT = 64 * 1024
SHELL_OUTPUT_BYTES_MAX_CEILING = 16 * 1024 * 1024
SHELL_COMMAND_BYTES_MAX = 64 * 1024
SHELL_ENV_VARS_MAX = 256
SHELL_ENV_BYTES_MAX = 64 * 1024
ERROR_TAIL_CHARS = 512
READ_CHUNK_BYTES = 8192
KILL_WAIT_S = 5.0
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@dataclass(frozen=True)
class ShellSettings:
    """Whether the world lets flows run commands, and their bounds."""

    enabled: bool = False
    timeout_s_max: float = SHELL_TIMEOUT_S_MAX_DEFAULT
    output_bytes_max: int = SHELL_OUTPUT_BYTES_MAX_DEFAULT


def run_shell(
    tool: dict[str, Any],
    args: Any,
    settings: ShellSettings,
    keychain: Keychain | None,
    grants: Grants,
    timeout_s: float,
) -> ToolOutcome:
    """Run the command (see the module's doc); `grants` are the call's keychain grants of
    its `env` field, the only place a secret goes (never `args`)."""
    check_fields(tool, SHELL_FIELDS)
    argv = _argv(tool)
    env = _env(tool.get("env"), args)
    if not settings.enabled:
        return failure(
            "shell.disabled",
            "the shell tool is not enabled on this world (its tool config: shell.enabled)",
            kind="authorization",
        )
    secrets: list[str] = []
    try:
        given = substitute(tool.get("env"), keychain, grants, secrets)
    except (KeychainMissingError, KeychainSourceError) as error:
        return keychain_failure(error)
    if secrets:
        env.update(_env(given, None))
    with tempfile.TemporaryDirectory(prefix="aos-shell-") as scratch:
        outcome = _run(argv, {**BASE_ENV, "HOME": scratch, **env}, scratch, settings, timeout_s)
    # A command that prints a secret it was given must not put it in the receipt.
    return scrubbed(outcome, secrets)


def _argv(tool: dict[str, Any]) -> list[str]:
    command, argv = tool.get("command"), tool.get("argv")
    if (command is None) == (argv is None):
        raise ToolInvalidError("a shell tool has command (text for /bin/sh) or argv, one of them")
    if command is not None:
        if not isinstance(command, str) or not command.strip():
            raise ToolInvalidError("command is text")
        words = ["/bin/sh", "-c", command]
    else:
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ToolInvalidError("argv is a non-empty list of text")
        words = list(argv)
    if sum(len(word.encode()) for word in words) > SHELL_COMMAND_BYTES_MAX:
        raise ToolInvalidError(f"the command is at most {SHELL_COMMAND_BYTES_MAX} bytes")
    if any("\0" in word for word in words):
        raise ToolInvalidError("the command holds a NUL character")
    return words


def _env(given: Any, args: Any) -> dict[str, str]:
    """`args` (a map) then `env`, each value as text (JSON for anything not text)."""
    env: dict[str, str] = {}
    for source, name in ((args, "args"), (given, "env")):
        if source is None or (name == "args" and not isinstance(source, dict)):
            continue
        if not isinstance(source, dict):
            raise ToolInvalidError("env is a map of variable names to values")
        for key, value in source.items():
            if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
                raise ToolInvalidError(f"{name} key {key!r} is not a variable name")
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            if "\0" in text:
                raise ToolInvalidError(f"{name}.{key} holds a NUL character")
            env[key] = text
    if len(env) > SHELL_ENV_VARS_MAX:
        raise ToolInvalidError(f"at most {SHELL_ENV_VARS_MAX} environment variables")
    if sum(len(k) + len(v.encode()) for k, v in env.items()) > SHELL_ENV_BYTES_MAX:
        raise ToolInvalidError(f"the environment is at most {SHELL_ENV_BYTES_MAX} bytes")
    return env


class _Output:
    """Both pipes read to their end in threads, stopping (and killing the child) once their
    total passes the limit."""

    def __init__(self, process: subprocess.Popen[bytes], limit: int) -> None:
        self.process = process
        self.limit = limit
        self.parts: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.too_large = False
        self.lock = threading.Lock()
        assert process.stdout is not None and process.stderr is not None
        self.threads = [
            threading.Thread(target=self._read, args=(process.stdout, "stdout"), daemon=True),
            threading.Thread(target=self._read, args=(process.stderr, "stderr"), daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _read(self, stream: IO[bytes], name: str) -> None:
        while chunk := stream.read1(READ_CHUNK_BYTES):  # type: ignore[attr-defined]
            with self.lock:
                total = sum(len(part) for part in self.parts.values()) + len(chunk)
                if total > self.limit:
                    self.too_large = True
                    _kill(self.process)
                    return
                self.parts[name] += chunk

    def join(self, timeout_s: float) -> None:
        for thread in self.threads:
            thread.join(timeout_s)

    def text(self, name: str) -> str:
        return bytes(self.parts[name]).decode("utf-8", "replace")


def _run(
    argv: list[str], env: dict[str, str], cwd: str, settings: ShellSettings, timeout_s: float
) -> ToolOutcome:
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,  # its own process group: a timeout kills its children too
        )
    except OSError as error:
        return failure("shell.start", f"{argv[0]}: {error.strerror}")
    output = _Output(process, settings.output_bytes_max)
    deadline = time.monotonic() + timeout_s
    try:
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(process)
        process.wait(KILL_WAIT_S)
        output.join(KILL_WAIT_S)
        return timed_out("shell.timeout", f"the command ran over {timeout_s:g} s")
    output.join(max(0.0, deadline - time.monotonic()) + KILL_WAIT_S)
    if output.too_large:
        return failure(
            "shell.too_large",
            f"the command wrote more than {settings.output_bytes_max} bytes (output_bytes_max)",
        )
    stdout, stderr = output.text("stdout"), output.text("stderr")
    if code != 0:
        return failure(
            "shell.exit",
            f"the command exited with {code}: {stderr[-ERROR_TAIL_CHARS:]}",
            shell={
                "exit_code": code,
                "stdout": stdout[-ERROR_TAIL_CHARS:],
                "stderr": stderr[-ERROR_TAIL_CHARS:],
            },
        )
    return ToolOutcome("ok", {"exit_code": 0, "stdout": stdout, "stderr": stderr})


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # it already ended
        os.killpg(process.pid, signal.SIGKILL)
