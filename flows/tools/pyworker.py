"""The python tool's inline `code` form (spec/12-playbooks.md §6): code run in a worker
subprocess that is **reused between calls**, not spawned per call.

A worker is `python -I -c WORKER`: stdlib only, it imports nothing of aos. It reads one JSON
request per line on its stdin (`{code, args, libs, seed}`) and writes one JSON answer per line
on a private copy of its stdout; the code's own prints are dropped, and anything written to
file descriptor 1 lands on stderr, so nothing the code does can corrupt the protocol. Each
call gets fresh globals: `json`, `datetime`, `uuid`, `os` and `random` (as NoETL's worker
offers them; `random` seeded from the call's `seed`, the intent hash, so re-running one intent
draws the same numbers), each `libs` entry (`alias: module`) imported, then every key of
`args` as given, and `input_data` and `context` as the whole args map unless the args hold
keys of those names (spec/12 §6). The value of `result` after the code ran is the output.
Code with a top-level `return` (as upstream fixtures write) runs as a function body instead,
and what it returns (else its `result`) is the output; code that defines `main` has it called
with its parameters from the args, as NoETL 2.13.1 does, and what it returns is the output.
Compiled code is cached in the worker. Keys no code could receive as given are refused before
a request is sent (`tool_schema.python_args_problems`).

The host side (`WorkerPool`) keeps idle workers, starts at most `workers_max` at once, bounds
every answer (`output_bytes_max`) and every call (its timeout: past it the worker is killed and
replaced), and retires a worker after `worker_calls_max` calls. A worker is confined
(kernel/adapters/builtin/python_limits.py): under a root adapter it runs as `worker_user`,
never root; its environment is `PATH` and `LANG` only; its address space is
`memory_bytes_max` (a `MemoryError` is `python.memory_exceeded`) and each call's CPU time
`cpu_s_max` (`python.cpu_exceeded`); a worker that crossed a limit is replaced. Answers:

    {"ok": VALUE}                                  the result, as JSON ($bytes for bytes)
    {"error": {"type", "message"}}                 the code raised (or its result is not data)
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aos.kernel import cbor
from aos.kernel.adapters.builtin.python_limits import (
    CPU_EXIT_CODE,
    CPU_KILL_GRACE_S,
    CPU_WATCH_S,
    WORKER_CPU_S_MAX,
    WORKER_ENV,
    PythonLimits,
    confine,
    cpu_seconds,
)

WORKERS_MAX_DEFAULT = 4
"""Workers one pool runs at once (calls beyond wait for an idle one)."""
WORKER_CALLS_MAX_DEFAULT = 10_000
"""Calls a worker serves before it is replaced (bounds what code can leak into it)."""
OUTPUT_BYTES_MAX_DEFAULT = 16 * 1024 * 1024
"""Most bytes of one answer; more kills the worker and fails the call. A node's
`blob_bytes_max`: a result over the inline limit goes by reference (spec/11 §7), as a blob."""
CODE_CACHE_MAX = 256
"""Compiled code objects a worker keeps."""
_READ_CHUNK_BYTES = 64 * 1024

WORKER = r"""
import ast, asyncio, builtins, datetime, decimal, importlib, inspect, io, json, keyword, linecache
import math, os, random, sys, traceback, uuid
proto_in = sys.stdin.buffer
proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
os.dup2(2, 1)  # stray writes to fd 1 go to stderr, never into the protocol
CACHE_MAX, DEPTH_MAX = int(sys.argv[1]), 64
TRACEBACK_CHARS_MAX = 4000  # kernel/node/models.py's: what an answer shows of one
CACHE = {}
NOT_GIVEN = "Code executed without explicit result variable"


def get_val(data, keys, default=None):
    # NoETL's helper: data[k0][k1]... along `keys`, or `default` where the walk stops.
    for key in keys or ():
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return default
    return data


def deep_merge(base, over):
    # NoETL's helper: maps merge key by key, lists of named maps merge by name, other
    # lists concatenate, anything else `over` wins.
    if isinstance(base, dict) and isinstance(over, dict):
        merged = dict(base)
        for key, value in over.items():
            mergeable = isinstance(merged.get(key), (dict, list)) and isinstance(value, (dict, list))
            merged[key] = deep_merge(merged[key], value) if mergeable else value
        return merged
    if isinstance(base, list) and isinstance(over, list):
        return merge_lists(base, over)
    return over


def merge_lists(base, over):
    named = all(isinstance(item, dict) for item in base + over)
    if not named or not any("name" in item for item in base + over):
        return base + over
    by_name = {item["name"]: item for item in over if "name" in item}
    merged = []
    for item in base:
        found = by_name.pop(item.get("name"), None) if "name" in item else None
        merged.append(item if found is None else deep_merge(item, found))
    return merged + list(by_name.values()) + [item for item in over if "name" not in item]


def make_serializable(value, depth=0):
    # NoETL's helper: datetimes as ISO text, decimals as floats, exceptions as text,
    # objects as the map of their attributes.
    if depth > DEPTH_MAX:
        return str(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, BaseException):
        return str(value)
    if isinstance(value, dict):
        return {k: make_serializable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [make_serializable(v, depth + 1) for v in value]
    if hasattr(value, "__dict__"):
        return {k: make_serializable(v, depth + 1) for k, v in vars(value).items()}
    return value


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc)


def format_iso8601(moment):
    return moment.astimezone(datetime.timezone.utc).isoformat()


# What NoETL 2.13.1's python tool offers every code without an import (random: seeded per
# call; the helpers are those of noetl.core.common it injects).
OFFERED = {
    "json": json, "datetime": datetime, "uuid": uuid, "os": os, "random": random,
    "get_val": get_val, "deep_merge": deep_merge, "make_serializable": make_serializable,
    "now_utc": now_utc, "format_iso8601": format_iso8601,
}


class Prints(io.TextIOBase):
    def writable(self):
        return True
    def write(self, text):
        return len(text)  # dropped: the output is `result`, and nothing grows per print


class NotData(Exception):
    pass


def json_key(key):
    # What json.dumps makes of a key, as NoETL's worker serializes a result: numbers, booleans
    # and None become text; anything else is not data.
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key, allow_nan=False)
    raise NotData("a map in the result has a key that is not text, a number or a boolean")


def to_wire(value, depth=0, json_keys=False):
    if depth > DEPTH_MAX:
        raise NotData("the result nests deeper than 64")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotData(f"{value} is not a finite number")
        return value
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, dict):
        if json_keys:
            keys = [json_key(k) for k in value]
            if len(set(keys)) != len(keys):
                raise NotData("two keys of a map in the result are one text (1 and '1', say)")
        elif all(isinstance(k, str) for k in value):
            keys = list(value)
        else:
            raise NotData("a map in the result has a key that is not text")
        items = zip(keys, value.values())
        return {k: to_wire(v, depth + 1, json_keys) for k, v in items}
    if isinstance(value, (list, tuple)):
        return [to_wire(v, depth + 1, json_keys) for v in value]
    raise NotData(f"a value of type {type(value).__name__} is not data (maps, lists, text, numbers)")


def from_wire(value):
    if isinstance(value, dict):
        if set(value) == {"$bytes"} and isinstance(value["$bytes"], str):
            return bytes.fromhex(value["$bytes"])
        return {k: from_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_wire(v) for v in value]
    return value


def compiled(code, names):
    key = (code, names)
    found = CACHE.get(key)
    if found is not None:
        return found
    try:
        found = (compile(code, "<code>", "exec"), False)
    except SyntaxError as error:
        if "outside function" not in str(error.msg):
            raise
        tree = ast.parse(code, "<code>")
        head = ast.parse("def __aos_main__(" + ", ".join(names) + "):\n    pass")
        tail = ast.parse("return locals().get('result')")
        function = head.body[0]
        function.body = tree.body + tail.body
        module = ast.fix_missing_locations(ast.Module(body=[function], type_ignores=[]))
        found = (compile(module, "<code>", "exec"), True)
    if len(CACHE) >= CACHE_MAX:
        CACHE.pop(next(iter(CACHE)))
    CACHE[key] = found
    return found


def variables(args, context):
    # Every key as given; `input_data` is the whole map unless passed, `context` the
    # execution's context when the call carries one (a playbook's), else the whole map.
    found = dict(args)
    found.setdefault("input_data", args)
    found.setdefault("context", args if context is None else context)
    return found


def imported(spec):
    # A `libs` entry: a module's name, or NoETL's {from: MODULE, import: NAME}.
    if isinstance(spec, str):
        return importlib.import_module(spec)
    module = importlib.import_module(spec["from"])
    try:
        return getattr(module, spec["import"])
    except AttributeError:
        return importlib.import_module(spec["from"] + "." + spec["import"])


def not_given(scope, before):
    # NoETL 2.13.1's answer for code that sets no `result` and has no `main`.
    bound = [k for k in scope if k not in before and not k.startswith("__")]
    return {"status": "success", "message": NOT_GIVEN, "locals_count": len(bound),
            "locals_keys": bound}


def call_main(main, given, args):
    # main(...) as NoETL calls it: each parameter from its key (else its default), every
    # other key into **kwargs.
    kwargs, rest = {}, False
    for param in inspect.signature(main).parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            raise TypeError(f"main(*{param.name}) is not supported: name its parameters")
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(f"main's parameter {param.name} is positional-only; args pass names")
        if param.kind is param.VAR_KEYWORD:
            rest = True
        elif param.name in given:
            kwargs[param.name] = given[param.name]
        elif param.default is param.empty:
            raise TypeError(f"main() needs `{param.name}`: pass it in the tool's args")
    if rest:
        kwargs.update((k, v) for k, v in args.items() if k not in kwargs)
    found = main(**kwargs)
    return asyncio.run(found) if inspect.iscoroutine(found) else found


def code_traceback(error, code):
    # The frames of the author's code only (from its first frame on), with its lines, and
    # the end of it when long: the worker's own frames say nothing to the author.
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != "<code>":
        tb = tb.tb_next
    linecache.cache["<code>"] = (len(code), None, code.splitlines(True), "<code>")
    text = "".join(traceback.format_exception(type(error), error, tb))
    return text[-TRACEBACK_CHARS_MAX:]


def run(request):
    args = request.get("args")
    args = args if isinstance(args, dict) else {"args": args}
    given = variables(args, request.get("context"))
    names = tuple(sorted(
        k for k in given if isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k)
    ))
    code, wrapped = compiled(request["code"], names)
    scope = {"__name__": "__aos_code__", "__builtins__": builtins, **OFFERED}
    libs = request.get("libs")
    for alias, spec in (libs.items() if isinstance(libs, dict) else ()):
        scope[alias] = imported(spec)
    random.seed(request.get("seed"))
    sys.stdout = Prints()
    try:
        scope.update(given)
        before = set(scope)
        exec(code, scope)
        if wrapped:
            return scope["__aos_main__"](**{name: given[name] for name in names})
        main = scope.get("main")
        if inspect.isfunction(main) and main.__code__.co_filename == "<code>":
            return call_main(main, given, args)
        if request.get("noetl") and "result" not in scope:
            return not_given(scope, before)
        return scope.get("result")
    finally:
        sys.stdout = sys.stderr


for line in proto_in:
    try:
        request = from_wire(json.loads(line))
        # A playbook's result goes as NoETL's worker sends it: as JSON, keys made text.
        answer = {"ok": to_wire(run(request), json_keys=bool(request.get("noetl")))}
    except BaseException as error:  # SystemExit too: the code must leave a result
        answer = {"error": {"type": type(error).__name__, "message": str(error)[:2000]}}
        if isinstance(error, Exception):
            code = str(json.loads(line).get("code", ""))
            answer["error"]["traceback"] = code_traceback(error, code)
    proto_out.write((json.dumps(answer, allow_nan=False) + "\n").encode())
"""


class WorkerError(Exception):
    """A call the worker could not answer: `code` says why (`python.timeout`,
    `python.crashed`, `python.output_too_large`, `python.memory_exceeded`,
    `python.cpu_exceeded`)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class PoolOptions:
    """How a pool runs its workers."""

    python: str = sys.executable
    workers_max: int = WORKERS_MAX_DEFAULT
    worker_calls_max: int = WORKER_CALLS_MAX_DEFAULT
    output_bytes_max: int = OUTPUT_BYTES_MAX_DEFAULT
    limits: PythonLimits = field(default_factory=PythonLimits)


class Worker:
    """One worker process and the calls it has served."""

    def __init__(self, options: PoolOptions) -> None:
        self.options = options
        self.calls = 0
        confined = confine(options.python, options.limits)
        self.process = subprocess.Popen(
            [
                confined.python,
                "-I",
                "-c",
                confined.prelude(WORKER_CPU_S_MAX) + WORKER,
                str(CODE_CACHE_MAX),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # the code's errors and stray writes reach the adapter's stderr
            env=WORKER_ENV,
            start_new_session=True,  # its own process group: a kill takes its children too
            **confined.popen_options(),
        )
        self._pending = b""

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def usable(self) -> bool:
        """Alive, with a whole call's CPU time left of its lifetime's `WORKER_CPU_S_MAX`."""
        if not self.alive():
            return False
        left_s = WORKER_CPU_S_MAX - cpu_seconds(self.pid)
        return left_s > self.options.limits.cpu_s_max + CPU_KILL_GRACE_S

    def call(self, request: dict[str, Any], timeout_s: float) -> Any:
        """The decoded answer to one request. Raises WorkerError (the worker is then dead)."""
        assert self.process.stdin is not None
        self.calls += 1
        line = json.dumps(cbor.to_json(request), allow_nan=False).encode() + b"\n"
        try:
            used_s = cpu_seconds(self.pid)
            self.process.stdin.write(line)
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError, FileNotFoundError):
            self.kill()
            raise WorkerError("python.crashed", "the python worker exited") from None
        answer = self._read_line(time.monotonic() + timeout_s, timeout_s, used_s)
        try:
            found = json.loads(answer)
        except ValueError:
            self.kill()
            raise WorkerError("python.crashed", "the python worker answered garbage") from None
        self._check_limits(found, used_s)
        return found

    def _check_limits(self, answer: Any, used_s: float) -> None:
        """A call that ran out of memory, or used more CPU than its limit between two looks,
        ends its worker: what it left behind is not trusted to the next call."""
        limits = self.options.limits
        raised = answer.get("error") if isinstance(answer, dict) else None
        if isinstance(raised, dict) and raised.get("type") == "MemoryError":
            self.kill()
            raise WorkerError(
                "python.memory_exceeded",
                f"the code ran out of memory (memory_bytes_max {limits.memory_bytes_max} bytes)",
            )
        self._check_cpu(used_s)

    def _check_cpu(self, used_s: float) -> None:
        if cpu_seconds(self.pid) - used_s > self.options.limits.cpu_s_max:
            self.kill()
            raise _cpu_exceeded(self.options.limits)

    def _read_line(self, deadline: float, timeout_s: float, used_s: float) -> bytes:
        """The next answer line, watching the call's time, CPU time and size as it comes."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        data = self._pending
        while b"\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerError("python.timeout", f"the code ran over {timeout_s:g} s")
            if not select.select([fd], [], [], min(left, CPU_WATCH_S))[0]:
                self._check_cpu(used_s)
                continue
            chunk = os.read(fd, _READ_CHUNK_BYTES)
            if not chunk:
                code = self.process.wait()
                if code == CPU_EXIT_CODE:  # the kernel's, at the CPU limit
                    raise _cpu_exceeded(self.options.limits)
                raise WorkerError("python.crashed", f"the python worker exited ({code})")
            data += chunk
            if len(data) > self.options.output_bytes_max:
                self.kill()
                raise WorkerError(
                    "python.output_too_large",
                    f"the result is over {self.options.output_bytes_max} bytes",
                )
        line, _, self._pending = data.partition(b"\n")
        return line

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def close(self) -> None:
        """Let it finish (its stdin closes), or kill it."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self.kill()


def _cpu_exceeded(limits: PythonLimits) -> WorkerError:
    return WorkerError(
        "python.cpu_exceeded", f"the code used over {limits.cpu_s_max} s of CPU (cpu_s_max)"
    )


class WorkerPool:
    """Idle workers, reused call after call; at most `workers_max` run at once."""

    def __init__(self, options: PoolOptions | None = None) -> None:
        self.options = options or PoolOptions()
        self._idle: list[Worker] = []
        self._running = 0
        self._ready = threading.Condition()
        self.started = 0  # workers started so far (tests assert reuse with it)

    def run(self, request: dict[str, Any], timeout_s: float) -> Any:
        worker = self._acquire()
        healthy = False
        try:
            answer = worker.call(request, timeout_s)
            healthy = True
            return answer
        finally:
            self._release(worker, healthy)

    def _acquire(self) -> Worker:
        spent: list[Worker] = []  # dead, or near the end of their CPU time: closed outside
        reused: Worker | None = None
        with self._ready:
            while not self._idle and self._running >= self.options.workers_max:
                self._ready.wait()
            self._running += 1
            while self._idle and reused is None:
                worker = self._idle.pop()
                if worker.usable():
                    reused = worker
                else:
                    spent.append(worker)
        for worker in spent:
            worker.close()
        if reused is not None:
            return reused
        try:
            worker = Worker(self.options)
        except BaseException:
            self._release(None, False)
            raise
        self.started += 1
        return worker

    def _release(self, worker: Worker | None, healthy: bool) -> None:
        retire = worker is not None and (
            not healthy or worker.calls >= self.options.worker_calls_max
        )
        if worker is not None and retire:
            worker.close()
        with self._ready:
            self._running -= 1
            if worker is not None and not retire:
                self._idle.append(worker)
            self._ready.notify()

    def close(self) -> None:
        with self._ready:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


_POOLS: dict[PoolOptions, WorkerPool] = {}
_POOLS_LOCK = threading.Lock()


def pool_for(options: PoolOptions) -> WorkerPool:
    """The process-wide pool for these options (made on first use, closed at exit)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(options)
        if pool is None:
            pool = _POOLS[options] = WorkerPool(options)
        return pool


@atexit.register
def _close_pools() -> None:
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()
