"""The built-in `python` adapter: runs a configured `module:function` per intent, each call in
a fresh subprocess, so a crash, a hang or a leak in the function cannot touch the adapter.

The function gets the intent's params as JSON (bytes as `{"$bytes": "<hex>"}`) and returns a
JSON value, which becomes the receipt payload (`{"$bytes": ...}` becomes bytes again). The
intent hash is in the environment as `AOS_INTENT` (the idempotency key), the effect name as
`AOS_EFFECT`. What the function prints goes to the adapter's stderr.

    returns            -> ok       payload: the value
    raises             -> error    {message, type}
    runs past timeout  -> timeout  {message} (the process group is killed)
    crosses a limit    -> error    {message, code: python.memory_exceeded | python.cpu_exceeded
                                    | python.output_too_large}
    crashes / garbage  -> error    {message, exit_code, stderr}

The child runs `python -I` (no user site, no PYTHON* variables) with the configured module
paths first on `sys.path`, confined as kernel/adapters/builtin/python_limits.py says: not as
root (under a root adapter, as `worker_user`; the module paths must be readable by it), with
at most `memory_bytes_max` of address space and `cpu_s_max` of CPU time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from aos.kernel import cbor
from aos.kernel.adapters.builtin.python_limits import CPU_EXIT_CODE, PythonLimits, confine
from aos.kernel.adapters.sdk import AdapterConfigInvalidError, Lease, Result

PYTHON_TIMEOUT_S_DEFAULT = 30.0
PYTHON_TIMEOUT_S_MAX = 3600.0
PYTHON_OUTPUT_BYTES_MAX = 1024 * 1024
"""Most bytes of the function's JSON result read back; more is an `error` receipt."""
PYTHON_STDERR_CHARS_MAX = 2000
"""The tail of the child's stderr kept for a crash report (and echoed to ours)."""
_READ_CHUNK_BYTES = 64 * 1024
_EXIT_RAISED = 3  # the runner's own code for "the function raised"
PYTHON_LIMIT_CODES = frozenset(
    {"python.memory_exceeded", "python.cpu_exceeded", "python.output_too_large"}
)
"""The `code` of an error payload whose process crossed one of its limits."""

# Runs in the child; stdlib only, so the child imports nothing of aos.
_RUNNER = r"""
import importlib, json, sys, traceback
out = sys.stdout
sys.stdout = sys.stderr  # the function's prints must not mix with the result
ref, paths = sys.argv[1], sys.argv[2:]
sys.path[:0] = paths
try:
    params = json.load(sys.stdin)
    module_name, _, function_name = ref.partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    text = json.dumps({"result": function(params)}, allow_nan=False)
except BaseException as error:  # SystemExit too: the function must return a value
    traceback.print_exc()
    out.write(json.dumps({"error": {"type": type(error).__name__, "message": str(error)}}))
    out.flush()
    sys.exit(EXIT_RAISED)
out.write(text)
out.flush()
""".replace("EXIT_RAISED", str(_EXIT_RAISED))


@dataclass(frozen=True)
class PythonOptions:
    """`functions` maps an effect to `module:function`; `"*"` is the function for effects
    without their own entry."""

    functions: Mapping[str, str]
    module_paths: Sequence[Path] = ()
    timeout_s: float = PYTHON_TIMEOUT_S_DEFAULT
    python: str = field(default=sys.executable)
    limits: PythonLimits = field(default_factory=PythonLimits)

    def __post_init__(self) -> None:
        if not self.functions:
            raise AdapterConfigInvalidError("name at least one function (module:function)")
        for effect, ref in self.functions.items():
            module_name, sep, function_name = ref.partition(":")
            if not sep or not module_name or not function_name.isidentifier():
                raise AdapterConfigInvalidError(f"{effect}: function {ref!r} is module:function")
        for path in self.module_paths:
            if not Path(path).is_dir():
                raise AdapterConfigInvalidError(f"module path {path} is not a directory")
        if not 0 < self.timeout_s <= PYTHON_TIMEOUT_S_MAX:
            raise AdapterConfigInvalidError(f"timeout_s is in (0, {PYTHON_TIMEOUT_S_MAX}]")


def parse_functions(entries: Sequence[str]) -> dict[str, str]:
    """`[EFFECT=]module:function` entries, as the CLI takes them; a bare one is `"*"`."""
    functions: dict[str, str] = {}
    for entry in entries:
        effect, sep, ref = entry.rpartition("=")
        functions[effect if sep else "*"] = ref
    return functions


class PythonFunctionEffect:
    """The handler (`(params, lease) -> Result`)."""

    def __init__(self, options: PythonOptions) -> None:
        self.options = options
        self.confined = confine(options.python, options.limits)

    def __call__(self, params: Any, lease: Lease) -> Result:
        ref = self.options.functions.get(lease.effect) or self.options.functions.get("*")
        if ref is None:
            return Result.error(f"no function is configured for {lease.effect}")
        request = json.dumps(cbor.to_json(params), allow_nan=False).encode()
        paths = [str(Path(p).resolve()) for p in self.options.module_paths]
        env = {**os.environ, "AOS_INTENT": lease.intent, "AOS_EFFECT": lease.effect}
        runner = self.confined.prelude(self.options.limits.cpu_s_max) + _RUNNER
        process = subprocess.Popen(
            [self.confined.python, "-I", "-c", runner, ref, *paths],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group, so a timeout kills its children too
            **self.confined.popen_options(),
        )
        stdout = _Drain(process.stdout, keep_head=True)
        stderr = _Drain(process.stderr, keep_head=False)
        # On a thread: a child that never reads its stdin must still meet the timeout.
        threading.Thread(target=_feed, args=(process.stdin, request), daemon=True).start()
        try:
            code = process.wait(timeout=self.options.timeout_s)
        except subprocess.TimeoutExpired:
            _kill(process)
            return Result.timeout(f"{ref} ran over {self.options.timeout_s} s")
        finally:
            stdout.join()
            stderr.join()
        return _result(ref, code, stdout, stderr, self.options.limits)


def _result(ref: str, code: int, stdout: _Drain, stderr: _Drain, limits: PythonLimits) -> Result:
    tail = stderr.text()
    if tail:
        sys.stderr.write(tail if tail.endswith("\n") else tail + "\n")
    if stdout.overflow:
        message = f"{ref} returned over {PYTHON_OUTPUT_BYTES_MAX} bytes of JSON"
        return Result.error(message, code="python.output_too_large")
    if code == CPU_EXIT_CODE:  # the kernel's, at the CPU limit (a timeout kills it ourselves)
        message = f"{ref} used over {limits.cpu_s_max} s of CPU (cpu_s_max)"
        return Result.error(message, code="python.cpu_exceeded")
    try:
        answer = json.loads(stdout.data)
    except ValueError:
        answer = None
    if code == 0 and isinstance(answer, dict) and "result" in answer:
        try:
            return Result("ok", cbor.from_json(answer["result"]))
        except cbor.CborError as error:
            return Result.error(f"{ref} returned a value with no CBOR form: {error}")
    if code == _EXIT_RAISED and isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        raised = answer["error"]
        if raised.get("type") == "MemoryError":
            message = f"{ref} ran out of memory (memory_bytes_max {limits.memory_bytes_max} bytes)"
            return Result.error(message, code="python.memory_exceeded")
        return Result.error(
            f"{ref} raised {raised.get('type')}: {raised.get('message')}", type=raised.get("type")
        )
    how = f"signal {-code}" if code < 0 else f"exit code {code}"
    return Result.error(f"{ref} crashed ({how})", exit_code=code, stderr=tail[-500:])


def _feed(pipe: IO[bytes] | None, data: bytes) -> None:
    assert pipe is not None
    try:
        pipe.write(data)
        pipe.close()
    except (BrokenPipeError, ValueError):
        pass  # it exited (or was killed) before reading; its exit code tells why


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


class _Drain(threading.Thread):
    """Reads a pipe to its end so the child never blocks on a full pipe, keeping a bounded
    part: the head (stdout, the JSON result) or the tail (stderr)."""

    def __init__(self, pipe: IO[bytes] | None, *, keep_head: bool) -> None:
        super().__init__(daemon=True)
        assert pipe is not None
        self._pipe = pipe
        self._keep_head = keep_head
        self.data = b""
        self.overflow = False
        self.start()

    def run(self) -> None:
        limit = PYTHON_OUTPUT_BYTES_MAX if self._keep_head else PYTHON_STDERR_CHARS_MAX * 4
        while chunk := os.read(self._pipe.fileno(), _READ_CHUNK_BYTES):
            if self._keep_head:
                if len(self.data) + len(chunk) > limit:
                    self.overflow = True
                else:
                    self.data += chunk
            else:
                self.data = (self.data + chunk)[-limit:]
        self._pipe.close()

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")[-PYTHON_STDERR_CHARS_MAX:]
