"""Restate: aos against Restate 1.7.12 (issue 34's peer, the fastest durable-execution engine
we can run here) on one workload, three steps of Python that return small dicts, each side as
a user runs it, every process on 127.0.0.1.

* **Restate**: `bench/peers/restate_stack.py`, the server as shipped and the service
  `bench/peers/restate_service.py` (three `ctx.run` steps, served by hypercorn over h2c);
  an execution is `POST /ThreeSteps/run` on the ingress, answered at its end.
* **aos code-first**: `aos node up` on a durable world of `bench/workflows/three_steps_py` (a
  Python workflow module, built by `aos world create`) and the SDK adapter
  `bench/peers/aos_steps_adapter.py`, each its own process: a `POST /v1/events` starts the
  cell, whose steps emit one effect each; the execution has ended when the adapter's receipt
  for the last step is answered (its last step is then durable), which the adapter prints.
* **aos declarative**: the `hello_world` playbook (`bench/playbooks/hello_world.yaml`, the
  same three steps) on a flow world served by `aos node up` with `aos adapter run tool-python`
  (bench_playbooks' `AosNode`); an execution is `POST /v1/flows/NAME/run` with `wait_ms`,
  answered once it ended.

Groups (Restate the baseline of each: ratios read aos / Restate):

* `restate.three_steps`: one execution at a time; a round's sample is the median of its
  `LATENCY_EXECUTIONS`; `extra` has the p90 over every execution, and CPU per execution of
  the engine process (`aos node up`, `restate-server`) and of every process of the side.
* `restate.throughput`: `THROUGHPUT_CLIENTS` clients each running executions one after
  another for `THROUGHPUT_S`; the sample is `THROUGHPUT_S` over the executions that ended
  within it (seconds per execution), `extra.executions_per_s` the rate, `extra.rate_ratio_*`
  aos's rate over Restate's.
* `restate.fanout`: `FANOUT` executions started together; the sample is the time until the
  last ended.

Rounds are interleaved (round r of every side, then r + 1) and every execution's results are
checked after the rounds, outside the timers. All three sides use one bench client, an
`httpx.Client` with a pool large enough for the fan-out. Without `make bench-restate-setup`
the module gives no rows and says why on stderr. bench/README.md ("restate") says what each
side makes durable.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from bench import bench_playbooks
from bench.bench_playbooks import AOS_FILES, AosNode, BenchCheckError
from bench.harness import Contender, Row, interleaved, round_ratios, sampled, with_ratios
from bench.peers import restate_stack
from bench.proc_cpu import tree_cpu_s

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CASE = "hello_world"  # the playbook whose three steps every side runs
WORLD = HERE / "workflows" / "three_steps_py"
START = "bench/ThreeStepsStart@1"
WORKFLOW = "bench/three_steps@1"
MESSAGE = restate_stack.WORKLOAD["message"]
STEPS = ("greet", "shout", "end")

WARMUP = 5  # executions of each side before any round
LATENCY_ROUNDS = {True: 5, False: 9}  # by quick
LATENCY_EXECUTIONS = {True: 10, False: 20}  # per round and side, one at a time
THROUGHPUT_CLIENTS = 32
THROUGHPUT_S = 10.0
THROUGHPUT_ROUNDS = {True: 2, False: 3}
FANOUT = 100
FANOUT_ROUNDS = {True: 3, False: 5}
P90 = 90  # percent
# Issue 34's targets, aos / Restate: time ratios at most, rate ratios at least.
TARGET_TIME_RATIO_MAX = {
    "three_steps": {"code-first": 0.7, "declarative": 1.0},
    "fanout": {"code-first": 1.0, "declarative": 1.0},
}
TARGET_RATE_RATIO_MIN = {"code-first": 1.5, "declarative": 1.0}

EXECUTION_S_MAX = 120.0
START_S_MAX = 600.0  # creating the code-first world builds its module the first time
STOP_S_MAX = 20.0
WAIT_MS = 20_000  # the declarative run's long-poll
POLL_S = 0.01  # how often the node's first line is looked for

_environment: dict[str, Any] = {}


def environment() -> dict[str, Any]:
    """What the runner records about the peer and the machine's load while the module ran."""
    return dict(_environment)


# --------------------------------------------------------------------------------------------
# Pure parts (the tests feed them numbers and answers)


def percentile(values: list[float], percent: int) -> float:
    """The nearest-rank percentile: the smallest of the values that at least `percent` % of
    them are at or below."""
    if not values or not 0 < percent <= 100:
        raise ValueError(f"a percentile of {len(values)} values at {percent} %")
    ordered = sorted(values)
    return ordered[-(-len(ordered) * percent // 100) - 1]  # the rank, rounded up, from 1


def ended_within(ends_s: list[float], deadline_s: float) -> int:
    """How many executions ended by the deadline (ends and deadline on one clock)."""
    return sum(1 for end in ends_s if end <= deadline_s)


def rate_ratios(aos_s: list[float], restate_s: list[float]) -> dict[str, object]:
    """aos's rate over Restate's, round by round, from seconds per execution: the inverse of
    the time ratios (`rate_ratio_per_round`, `rate_ratio_median`)."""
    ratios = round_ratios(restate_s, aos_s)
    return {
        "rate_ratio_per_round": ratios["ratio_per_round"],
        "rate_ratio_median": ratios["ratio_median"],
    }


def code_first_results(state: dict[str, Any]) -> dict[str, Any]:
    """Each step's result from the code-first cell's state (`GET /v1/state`)."""
    value = state.get("state")
    found = value if isinstance(value, dict) else {}
    return {step: found[step] for step in STEPS if found.get(step) is not None}


def adapter_line(line: str) -> tuple[str, bool, str]:
    """The code-first adapter's line about an execution: (execution, ended well, why not)."""
    value = json.loads(line)
    if not isinstance(value, dict):
        raise BenchCheckError(f"the adapter printed {line!r}")
    if "done" in value:
        return str(value["done"]), True, ""
    if "failed" in value:
        return str(value["failed"]), False, str(value.get("why", ""))
    raise BenchCheckError(f"the adapter printed {line!r}")


def check_results(side: str, execution: str, results: dict[str, Any]) -> None:
    """Raise BenchCheckError unless an execution ended with the three steps' results."""
    try:
        bench_playbooks.check_results(CASE, results, {})
    except BenchCheckError as error:
        raise BenchCheckError(f"{side}, execution {execution}: {error}") from None


# --------------------------------------------------------------------------------------------
# The sides


@dataclass
class Side:
    """One contender: `execute(id)` runs one execution to its end and returns its seconds;
    `check` looks at the results of every execution it ran, once the rounds are over."""

    name: str
    short: str  # "restate", "code-first", "declarative"
    execute_one: Callable[[str], float]
    check_one: Callable[[str], None]
    pids: Callable[[], dict[str, int]]  # the side's processes by name (descendants count)
    engine: str  # which of them is the engine: aos's node, Restate's server
    executions: list[str] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=itertools.count, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def execute(self) -> float:
        with self._lock:
            execution = f"{self.short}-{next(self._ids)}"
            self.executions.append(execution)
        return self.execute_one(execution)

    def cpu_s(self) -> dict[str, float]:
        return {name: tree_cpu_s([pid]) for name, pid in self.pids().items()}

    def check_all(self) -> None:
        for execution in self.executions:
            self.check_one(execution)


def cpu_extra(side: Side, spent: dict[str, float], executions: int) -> dict[str, object]:
    """CPU milliseconds per execution from the CPU seconds `spent` by each of the side's
    processes over `executions`: the engine's, the side's in all, and each process's."""
    per = max(executions, 1)
    return {
        "engine_cpu_ms_per_execution": round(spent.get(side.engine, 0.0) * 1000 / per, 3),
        "cpu_ms_per_execution": round(sum(spent.values()) * 1000 / per, 3),
        "cpu_ms_per_execution_by_process": {
            name: round(s * 1000 / per, 3) for name, s in sorted(spent.items())
        },
    }


def _spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, after[name]) for name in after}


def _add(total: dict[str, float], more: dict[str, float]) -> None:
    for name, seconds in more.items():
        total[name] = total.get(name, 0.0) + seconds


def bearer(token: str | None) -> dict[str, str]:
    """The headers that present an aos node's caller `token` (spec/04 §9.8)."""
    return {} if token is None else {"authorization": f"Bearer {token}"}


KEEPALIVE_S = 1.0
"""How long the bench client keeps an idle connection."""


class BenchClient:
    """The bench's one client for every side."""

    def __init__(self) -> None:
        limits = httpx.Limits(
            max_connections=restate_stack.CONNECTIONS_MAX,
            max_keepalive_connections=restate_stack.CONNECTIONS_MAX,
            # Under either server's keep-alive (the node's was uvicorn's 5 s, httpx's default
            # expiry too, before `idle_connection_s`): a connection idle since the last round
            # is dropped here before a server closes it, not raced (`Server disconnected
            # without sending a response` in a fan-out).
            keepalive_expiry=KEEPALIVE_S,
        )
        self.client = httpx.Client(timeout=EXECUTION_S_MAX, limits=limits, trust_env=False)

    def post(self, url: str, body: Any, token: str | None = None) -> dict[str, Any]:
        """POST `body`; `token` the aos node's caller's (Restate's ingress takes none)."""
        response = self.client.post(url, json=body, headers=bearer(token))
        if not response.is_success:
            raise BenchCheckError(f"POST {url}: {response.status_code} {response.text[:500]}")
        answer = response.json()
        if not isinstance(answer, dict):
            raise BenchCheckError(f"POST {url}: not an object: {answer!r}")
        return answer


def restate_side(stack: restate_stack.RestateStack) -> Side:
    answers: dict[str, dict[str, Any]] = {}

    def execute(execution: str) -> float:
        seconds, answers[execution] = stack.invoke(execution)
        return seconds

    versions = _environment.get("versions", {})
    return Side(
        f"Restate {versions.get('restate_server', '?')} as shipped, server + Python service "
        f"(restate-sdk {versions.get('restate_sdk', '?')}, hypercorn h2c), 3 ctx.run steps",
        "restate",
        execute,
        lambda execution: check_results("restate", execution, answers.get(execution, {})),
        stack.pids,
        "restate-server",
    )


def declarative_side(node: AosNode, http: BenchClient) -> Side:
    name = node.register(AOS_FILES[CASE])
    url = f"{node.client.url}/v1/flows/{name}/run"

    def execute(execution: str) -> float:
        started = time.perf_counter()
        body = {"workload": None, "exec": execution, "wait_ms": WAIT_MS}
        answer = http.post(url, body, node.token)
        seconds = time.perf_counter() - started
        if answer.get("status") != "completed":
            raise BenchCheckError(f"declarative, execution {execution}: {answer.get('status')}")
        return seconds

    return Side(
        f"aos declarative, node + `aos adapter run tool-python`, {AOS_FILES[CASE].relative_to(REPO)}",
        "declarative",
        execute,
        lambda execution: node.check(CASE, execution),
        lambda: {child.name: child.popen.pid for child in node.children},
        "node",
    )


class CodeFirstNode:
    """`aos node up` on a new durable world of `bench/workflows/three_steps_py` and the SDK
    adapter `bench/peers/aos_steps_adapter.py`, each its own process; a thread reads the
    adapter's lines and wakes whoever waits for the execution it names."""

    def __init__(self, folder: Path, http: BenchClient) -> None:
        self.folder = folder
        self.http = http
        self.url = ""
        self.token = ""  # the world's first admin's
        self.processes: dict[str, subprocess.Popen[str]] = {}
        self._waiting: dict[str, threading.Event] = {}
        self._failed: dict[str, str] = {}
        self._lock = threading.Lock()
        self.broken = ""  # why the adapter's lines stopped, once they have

    @classmethod
    @contextmanager
    def started(cls, folder: Path, http: BenchClient) -> Iterator[CodeFirstNode]:
        folder.mkdir(parents=True, exist_ok=True)
        node = cls(folder, http)
        try:
            node._start()
            yield node
        finally:
            for popen in reversed(list(node.processes.values())):
                _stop(popen)

    def _start(self) -> None:
        aos = str(Path(sys.executable).parent / "aos")
        world = self.folder / "world"
        create = [aos, "world", "create", str(world), "--manifest", str(WORLD), "--json"]
        created = subprocess.run(create, check=True, capture_output=True, timeout=START_S_MAX)
        self.token = str(json.loads(created.stdout)["admin_token"])
        up = [aos, "node", "up", "--world", str(world), "--bind", "127.0.0.1:0", "--json"]
        out = self.folder / "node.out"  # a file: nobody reads the node's output after its URL
        with out.open("w") as sink:
            node = self._spawn("node", up, sink)
        self.url = str(json.loads(_first_line(node, out))["url"])
        module = "bench.peers.aos_steps_adapter"
        command = [sys.executable, "-m", module, "--node", self.url]
        adapter = self._spawn("adapter", [*command, "--concurrency", str(FANOUT)], subprocess.PIPE)
        assert adapter.stdout is not None
        if not adapter.stdout.readline():  # {"ready": true, ...}
            raise RuntimeError(f"the adapter exited ({adapter.wait()}): see {self.folder}")
        threading.Thread(target=self.follow, args=(adapter.stdout,), daemon=True).start()

    def _spawn(self, name: str, command: list[str], out: IO[str] | int) -> subprocess.Popen[str]:
        with (self.folder / f"{name}.err").open("w") as err:
            popen = subprocess.Popen(
                command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True, cwd=REPO
            )
        self.processes[name] = popen
        return popen

    def follow(self, stream: IO[str]) -> None:
        """Wake each execution's waiter as the adapter names it; when the adapter's output
        ends or makes no sense, fail every execution still waiting and every later one."""
        try:
            for line in stream:
                execution, ok, why = adapter_line(line)
                self._wake(execution, None if ok else why)
            broken = "the adapter exited"
        except (BenchCheckError, ValueError) as error:
            broken = f"the adapter's output: {error}"
        with self._lock:
            self.broken = broken
            waiting = list(self._waiting)
        for execution in waiting:
            self._wake(execution, broken)

    def _wake(self, execution: str, failed: str | None) -> None:
        with self._lock:
            if failed is not None:
                self._failed[execution] = failed
            waiter = self._waiting.pop(execution, None)
        if waiter is not None:
            waiter.set()

    def expect(self, execution: str) -> threading.Event:
        """The event `follow` sets when the adapter names `execution` (or has stopped)."""
        ended = threading.Event()
        with self._lock:
            self._waiting[execution] = ended
            if self.broken:
                self._failed[execution] = self.broken
                ended.set()
        return ended

    def failure(self, execution: str) -> str | None:
        """Why `execution` did not end well, once its event is set (None: it did)."""
        with self._lock:
            return self._failed.get(execution)

    def execute(self, execution: str) -> float:
        """POST the start, then wait for the adapter to say its last step was answered."""
        ended = self.expect(execution)  # before the start: it may end before the POST does
        started = time.perf_counter()
        self.http.post(
            f"{self.url}/v1/events",
            {"schema": START, "value": {"id": execution, "message": MESSAGE}},
            self.token,
        )
        if not ended.wait(EXECUTION_S_MAX):
            raise BenchCheckError(f"code-first, execution {execution} overran")
        seconds = time.perf_counter() - started
        failed = self.failure(execution)
        if failed is not None:
            raise BenchCheckError(f"code-first, execution {execution}: {failed}")
        return seconds

    def check(self, execution: str) -> None:
        key = json.dumps(execution)
        url = f"{self.url}/v1/state/{WORKFLOW}"
        response = self.http.client.get(url, params={"key": key}, headers=bearer(self.token))
        state = response.json() if response.is_success else {}
        check_results("code-first", execution, code_first_results(state))

    def pids(self) -> dict[str, int]:
        return {name: popen.pid for name, popen in self.processes.items()}


def code_first_side(node: CodeFirstNode) -> Side:
    return Side(
        f"aos code-first, node + SDK adapter, {WORLD.relative_to(REPO)} (one effect per step)",
        "code-first",
        node.execute,
        node.check,
        node.pids,
        "node",
    )


def _first_line(popen: subprocess.Popen[str], out: Path) -> str:
    """The first line the process wrote to `out`, once it has."""
    deadline = time.monotonic() + START_S_MAX
    while time.monotonic() < deadline:
        text = out.read_text(errors="replace")
        if "\n" in text:
            return text.split("\n", 1)[0]
        if popen.poll() is not None:
            raise RuntimeError(
                f"{popen.args[:3]} exited ({popen.returncode}) before its first line"
            )
        time.sleep(POLL_S)
    raise RuntimeError(f"{popen.args[:3]} printed nothing in {START_S_MAX:g} s")


def _stop(popen: subprocess.Popen[str]) -> None:
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(STOP_S_MAX)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()


# --------------------------------------------------------------------------------------------
# The workloads


def latency_rows(sides: list[Side], quick: bool) -> list[Row]:
    """`restate.three_steps`: executions one at a time, rounds interleaved."""
    seconds: dict[str, list[float]] = {side.short: [] for side in sides}
    spent: dict[str, dict[str, float]] = {side.short: {} for side in sides}
    per_round = LATENCY_EXECUTIONS[quick]

    def contender(side: Side) -> Contender:
        def run(r: int) -> float:
            before = side.cpu_s()
            found = [side.execute() for _ in range(per_round)]
            _add(spent[side.short], _spent(before, side.cpu_s()))
            seconds[side.short] += found
            return statistics.median(found)

        def extra() -> dict[str, object]:
            every = seconds[side.short]
            found: dict[str, object] = {"executions": len(every), "p90_s": percentile(every, P90)}
            return found | cpu_extra(side, spent[side.short], len(every))

        return Contender(side.name, run, extra)

    rows = interleaved(
        "restate.three_steps", "execution", [contender(s) for s in sides], LATENCY_ROUNDS[quick]
    )
    for side, row in zip(sides[1:], rows[1:], strict=True):
        row.extra["target_ratio_max"] = TARGET_TIME_RATIO_MAX["three_steps"][side.short]
    return rows


def run_for(side: Side, pool: ThreadPoolExecutor, clients: int, seconds: float) -> int:
    """`clients` clients each running executions one after another until `seconds` have
    passed; how many ended by then (those still running are waited for, not counted)."""
    deadline = time.perf_counter() + seconds

    def client() -> list[float]:
        ends = []
        while time.perf_counter() < deadline:
            side.execute()
            ends.append(time.perf_counter())
        return ends

    futures = [pool.submit(client) for _ in range(clients)]
    return sum(ended_within(future.result(), deadline) for future in futures)


def run_together(side: Side, pool: ThreadPoolExecutor, count: int) -> float:
    """`count` executions started at once: the seconds until the last ended."""
    started = time.perf_counter()
    for future in [pool.submit(side.execute) for _ in range(count)]:
        future.result()
    return time.perf_counter() - started


@dataclass
class _Measured:
    """A workload's samples by side, and the CPU and executions they took."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    spent: dict[str, dict[str, float]] = field(default_factory=dict)
    executions: dict[str, int] = field(default_factory=dict)

    def cpu_extra(self, side: Side) -> dict[str, object]:
        return cpu_extra(side, self.spent[side.short], self.executions[side.short])


def _rounds(sides: list[Side], rounds: int, measure: Callable[[Side], float]) -> _Measured:
    """Round r of every side, then r + 1: each side's samples, and the CPU and executions
    its rounds took (every execution they ran, counted or not)."""
    found = _Measured()
    for side in sides:
        found.samples[side.short], found.spent[side.short] = [], {}
        found.executions[side.short] = 0
    for _ in range(rounds):
        for side in sides:
            before, ran = side.cpu_s(), len(side.executions)
            found.samples[side.short].append(measure(side))
            _add(found.spent[side.short], _spent(before, side.cpu_s()))
            found.executions[side.short] += len(side.executions) - ran
    return found


def throughput_rows(sides: list[Side], pool: ThreadPoolExecutor, quick: bool) -> list[Row]:
    """`restate.throughput`: executions per second with `THROUGHPUT_CLIENTS` clients."""
    ended: dict[str, list[int]] = {side.short: [] for side in sides}

    def measure(side: Side) -> float:
        count = run_for(side, pool, THROUGHPUT_CLIENTS, THROUGHPUT_S)
        ended[side.short].append(count)
        return THROUGHPUT_S / max(count, 1)

    found = _rounds(sides, THROUGHPUT_ROUNDS[quick], measure)
    per = f"execution ({THROUGHPUT_CLIENTS} clients, {THROUGHPUT_S:g} s)"
    rows = []
    for i, side in enumerate(sides):
        rates = [round(count / THROUGHPUT_S, 1) for count in ended[side.short]]
        extra: dict[str, object] = {"executions_per_s": rates, "clients": THROUGHPUT_CLIENTS}
        extra |= found.cpu_extra(side)
        samples = found.samples[side.short]
        rows.append(
            sampled("restate.throughput", side.name, samples, per, baseline=i == 0, **extra)
        )
    with_ratios(rows)
    for side, row in zip(sides[1:], rows[1:], strict=True):
        row.extra |= rate_ratios(row.samples_s, rows[0].samples_s)
        row.extra["target_rate_ratio_min"] = TARGET_RATE_RATIO_MIN[side.short]
    return rows


def fanout_rows(sides: list[Side], pool: ThreadPoolExecutor, quick: bool) -> list[Row]:
    """`restate.fanout`: `FANOUT` executions started together, time to the last."""
    found = _rounds(sides, FANOUT_ROUNDS[quick], lambda side: run_together(side, pool, FANOUT))
    per = f"{FANOUT} executions"
    rows = [
        sampled(
            "restate.fanout",
            side.name,
            found.samples[side.short],
            per,
            baseline=i == 0,
            **found.cpu_extra(side),
        )
        for i, side in enumerate(sides)
    ]
    with_ratios(rows)
    for side, row in zip(sides[1:], rows[1:], strict=True):
        row.extra["target_ratio_max"] = TARGET_TIME_RATIO_MAX["fanout"][side.short]
    return rows


# --------------------------------------------------------------------------------------------
# Running


def _restate_or_none(stack: ExitStack) -> restate_stack.RestateStack | None:
    why = restate_stack.unavailable()
    if why is None:
        _environment["versions"] = restate_stack.versions()
        try:
            return stack.enter_context(restate_stack.RestateStack.start())
        except (restate_stack.RestateError, OSError) as error:
            why = f"Restate did not start: {error}"
    print(f"# bench_restate: {why}: left out", file=sys.stderr, flush=True)
    _environment["restate"] = f"not run: {why}"
    return None


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(quick: bool) -> list[Row]:
    """Every row, or none when Restate is not set up (the module measures against it)."""
    _environment.update(load_average_at_start=_load(), cpu_count=os.cpu_count())
    rows: list[Row] = []
    with ExitStack() as stack:
        restate = _restate_or_none(stack)
        if restate is None:
            return rows
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="aos-bench-rs-")))
        http = BenchClient()
        stack.callback(http.client.close)
        node = stack.enter_context(AosNode.started(folder / "declarative", concurrency=FANOUT))
        code_first = stack.enter_context(CodeFirstNode.started(folder / "code-first", http))
        sides = [restate_side(restate), code_first_side(code_first), declarative_side(node, http)]
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=FANOUT))
        for side in sides:  # warm: first calls, and the first time FANOUT run at once
            for _ in range(WARMUP):
                side.execute()
            run_together(side, pool, FANOUT)
        rows += latency_rows(sides, quick)
        rows += throughput_rows(sides, pool, quick)
        rows += fanout_rows(sides, pool, quick)
        for side in sides:
            side.check_all()
        checked = {side.name: len(side.executions) for side in sides}
        for row in rows:
            row.extra["executions_checked"] = checked[row.name]
    _environment["load_average_at_end"] = _load()
    return rows
