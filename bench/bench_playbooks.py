"""Playbooks: aos against NoETL 2.13.1 itself on the same v10 playbooks (issue 13's measure),
each side as a user runs it, rounds interleaved (aos round i, then NoETL round i).

* `playbooks.hello_world`: `bench/playbooks/hello_world.yaml`, three python steps in a chain.
* `playbooks.loop20`: `bench/playbooks/loop20.yaml`, a sequential loop over 20 items with one
  python task per item, then an end step (21 python tasks).

The aos side: a durable flow world (`aos flow world create`, sync on) served by `aos node up`,
and the python tool adapter in its own process (`aos adapter run tool-python`); the bench
deploys each file over the node's API (what `aos flow run FILE --node URL` does: the node loads
it with the flow loader) and starts an execution. The NoETL side: `bench/peers/noetl_stack.py`
(PostgreSQL, NATS JetStream, `noetl.server`, `noetl.worker`, all on 127.0.0.1), the playbook
registered in its catalog and executed over its REST API. On both sides an execution is timed
from the request that starts it until the side reports its end, as each side's client learns
it best: aos answers the start request once the execution ended (`wait_ms`, its long-poll:
spec/11 §9.1), NoETL's status endpoint (which has no wait) is polled every `POLL_S`. Its
results are checked afterwards, outside the timer.

A third row, the aos floor, is the same with `bench/peers/aos_python_inprocess.py` as the
python adapter, which calls each function inside its own process: it tells the engine's cost
from the cost of starting an interpreter per call. Without NoETL (`make bench-noetl-setup`)
the module gives no rows and says why on stderr.

Both sides run the same playbook files: aos compiles them with its playbook front end and its
python adapter runs their inline code in a worker it reuses (spec/12). The canonical-flow
stand-ins in `bench/playbooks/cfd/` (each python task a function of
`bench/playbooks/tasks.py`) are kept as a cross-check that the compiled playbooks have the
same steps and workload.

A round's sample is the mean of `EXECUTIONS` runs; rows are medians over rounds. The baseline
of each group is aos; the NoETL row carries its ratio to aos round by round
(`extra.ratio_per_round`), and the target is its median at least `TARGET_RATIO_MIN`.
bench/README.md ("playbooks") says what each side makes durable.
"""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from aos.flows.serve.flow_client import NodeFlows
from aos.flows.serve.flow_operations import TERMINAL_STATUSES
from aos.kernel.node.metrics import BATCH_PHASES
from bench.harness import Contender, Row, interleaved, round_ratios
from bench.peers import noetl_stack
from bench.proc_cpu import tree_cpu_s
from tests import pg_cluster

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PLAYBOOKS = HERE / "playbooks"
CASES = ("hello_world", "loop20")
NOETL_FILES = {case: PLAYBOOKS / f"{case}.yaml" for case in CASES}
AOS_FILES = NOETL_FILES  # the same playbook files on both sides
PYTHON_ALLOW = "bench.playbooks"  # the module prefix the aos python adapter admits
ROUNDS = {True: 5, False: 9}  # by quick
EXECUTIONS = {True: 1, False: 3}  # runs per round of each side (a sample is their mean)
WARMUP = 2  # runs of each side and case before the rounds (NoETL's first claim is slow)
POLL_S = noetl_stack.POLL_S  # how often NoETL's status endpoint is polled
TARGET_RATIO_MIN = 10.0
START_S_MAX = 120.0
EXECUTION_S_MAX = 120.0
STOP_S_MAX = 20.0

LOOP_ITEMS = 20
EXPECTED: dict[str, dict[str, Any]] = {
    "hello_world": {
        "greet": {"greeting": "Hello World"},
        "shout": {"shout": "HELLO WORLD"},
        "end": {"done": True, "length": 11},
    },
    "loop20": {"end": {"done": True}},
}
"""The results each execution must end with, by step (both sides)."""
LOOP_CALLS = {"hello_world": {}, "loop20": {"square": LOOP_ITEMS}}
"""Steps whose python task must have completed this many times in each execution."""

_environment: dict[str, Any] = {}


def environment() -> dict[str, Any]:
    """What the runner records about the peer (it runs its own interpreter and services)."""
    return dict(_environment)


class BenchCheckError(AssertionError):
    """An execution ended without the results its playbook computes."""


# --------------------------------------------------------------------------------------------
# Checking results (pure: the tests feed them what each side answers)


def check_results(case: str, results: dict[str, Any], calls: dict[str, int]) -> None:
    """`results`: the result of each step by name; `calls`: completed python tasks by step.
    Raises BenchCheckError unless they are what `case` computes."""
    for step, expected in EXPECTED[case].items():
        if results.get(step) != expected:
            raise BenchCheckError(f"{case}: step {step} ended with {results.get(step)!r}")
    for step, count in LOOP_CALLS[case].items():
        if calls.get(step, 0) != count:
            raise BenchCheckError(f"{case}: {calls.get(step, 0)} calls in {step}, not {count}")


def noetl_results(status: dict[str, Any]) -> dict[str, Any]:
    """Each step's result from NoETL's full status: 2.13.1 keeps a step's variables as
    `{status, context: RESULT}`, with the command's id added to the result."""
    found: dict[str, Any] = {}
    for name, value in status.get("variables", {}).items():
        if isinstance(value, dict) and isinstance(value.get("context"), dict):
            found[name] = {k: v for k, v in value["context"].items() if k != "command_id"}
    return found


def noetl_calls(events: list[dict[str, Any]]) -> dict[str, int]:
    """Completed commands (one python task each) by step, from NoETL's events."""
    calls: dict[str, int] = {}
    for event in events:
        if event.get("event_type") == "command.completed":
            step = str(event.get("node_name"))
            calls[step] = calls.get(step, 0) + 1
    return calls


def aos_results(status: dict[str, Any]) -> dict[str, Any]:
    """Each step's result from an aos execution's status (`aos flow status`)."""
    business = status.get("business")
    steps = business.get("steps") if isinstance(business, dict) else None
    return dict(steps) if isinstance(steps, dict) else {}


def aos_calls(events: list[dict[str, Any]]) -> dict[str, int]:
    """Finished tasks (one python call each) by step, from an aos execution's history
    (`aos flow events`)."""
    calls: dict[str, int] = {}
    for event in events:
        if event.get("event") == "task.done":
            step = str(event.get("step"))
            calls[step] = calls.get(step, 0) + 1
    return calls


# --------------------------------------------------------------------------------------------
# The aos side: a node and the python tool adapter, each its own process


@dataclass
class _Child:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(STOP_S_MAX)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()

    def first_line(self) -> str:
        deadline = time.monotonic() + START_S_MAX
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            if "\n" in text:
                return text.split("\n", 1)[0]
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.popen.returncode}): {text[-2000:]}")
            time.sleep(POLL_S)
        raise RuntimeError(f"{self.name} printed nothing in {START_S_MAX:g} s")


class AosNode:
    """`aos node up` on a new durable flow world, and a python tool adapter process against
    it: `aos adapter run tool-python` (a fresh interpreter per call), or with `in_process` the
    bench's `bench/peers/aos_python_inprocess.py` (each call inside the adapter process).
    `concurrency`: the tool-python adapter's `--concurrency` (its default when None)."""

    def __init__(
        self, folder: Path, *, in_process: bool = False, concurrency: int | None = None
    ) -> None:
        self.folder = folder
        self.in_process = in_process
        self.concurrency = concurrency
        self.children: list[_Child] = []
        self.client = NodeFlows("http://unstarted")
        self.token = ""  # the world's first admin's (every route of a node needs one)

    @classmethod
    @contextmanager
    def started(
        cls, folder: Path, *, in_process: bool = False, concurrency: int | None = None
    ) -> Iterator[AosNode]:
        folder.mkdir(parents=True, exist_ok=True)
        node = cls(folder, in_process=in_process, concurrency=concurrency)
        try:
            node._start()
            yield node
        finally:
            node.client.close()
            for child in reversed(node.children):
                child.stop()

    def _aos(self, *args: str) -> list[str]:
        return [str(Path(sys.executable).parent / "aos"), *args]

    def _spawn(self, name: str, command: list[str]) -> _Child:
        log = self.folder / f"{name}.out"
        with log.open("wb") as out, (self.folder / f"{name}.err").open("wb") as err:
            popen = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        child = _Child(name, popen, log)
        self.children.append(child)
        return child

    def _start(self) -> None:
        world = self.folder / "world"
        created = subprocess.run(
            self._aos("flow", "world", "create", str(world), "--json"),
            check=True,
            capture_output=True,
            timeout=START_S_MAX,
        )
        self.token = str(json.loads(created.stdout)["admin_token"])
        node = self._spawn(
            "node",
            self._aos("node", "up", "--world", str(world), "--bind", "127.0.0.1:0", "--json"),
        )
        url = str(json.loads(node.first_line())["url"])
        self.client = NodeFlows(url, token=self.token)
        key = world.with_name("world.keys") / "python.key"
        options = ["--node", url, "--key", str(key), "--allow", PYTHON_ALLOW]
        options += ["--module-path", str(REPO)]
        if self.in_process:
            module = "bench.peers.aos_python_inprocess"
            self._spawn("adapter", [sys.executable, "-m", module, *options]).first_line()
        else:
            if self.concurrency is not None:
                options += ["--concurrency", str(self.concurrency)]
            self._spawn("adapter", [*self._aos("adapter", "run", "tool-python", *options)])

    def register(self, file: Path) -> str:
        """Deploy the file (the node loads it with the flow loader); the flow's name."""
        return self.client.deploy_text(file.read_text(), source=str(file)).name

    def execute(self, name: str) -> tuple[float, str]:
        started = time.perf_counter()
        ended = self.client.run(name, None, wait_s=EXECUTION_S_MAX)
        execution, status = ended.exec, ended.status
        seconds = time.perf_counter() - started
        if status not in TERMINAL_STATUSES:
            raise BenchCheckError(f"{name}: execution {execution} overran")
        if status != "completed":
            raise BenchCheckError(f"{name}: execution {execution} ended {status}")
        return seconds, execution

    def host_figures(self) -> dict[str, float]:
        """The node's host batches (count, seconds, seconds by phase), single operations and
        store commits (count, seconds), from its metrics."""
        headers = {"authorization": f"Bearer {self.token}"}
        text = httpx.get(f"{self.client.url}/metrics", timeout=START_S_MAX, headers=headers).text
        found = {
            (sample.name, sample.labels.get("phase", "")): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }
        figures = {
            "batches": found["aos_host_batch_seconds_count", ""],
            "batch_s": found["aos_host_batch_seconds_sum", ""],
            "operations": found["aos_host_operations_total", ""],
            "commits": found["aos_store_commit_seconds_count", ""],
            "commit_s": found["aos_store_commit_seconds_sum", ""],
        }
        for phase in BATCH_PHASES:
            figures[f"{phase}_s"] = found["aos_host_batch_phase_seconds_sum", phase]
        return figures

    def check(self, case: str, execution: str) -> None:
        results = aos_results(self.client.status(execution).model_dump())
        events = [event.model_dump() for event in self.client.events(execution)]
        check_results(case, results, aos_calls(events))


# --------------------------------------------------------------------------------------------
# Contenders


@dataclass
class Side:
    """One side's contender for one case: runs `EXECUTIONS` executions per round, keeps their
    ids, and checks every one's results once the rounds are over."""

    name: str
    case: str
    execute: Callable[[], tuple[float, str]]
    check: Callable[[str], None]
    pids: Callable[[], dict[str, int]]  # the side's processes by name (descendants count)
    syncs: Callable[[], int] | None = None  # the side's count of fsyncs, if it has one
    # The aos node's own figures (its GET /metrics): what its host thread did.
    host: Callable[[], dict[str, float]] | None = None

    def __post_init__(self) -> None:
        self.executions: list[str] = []
        self.cpu_s: dict[str, float] = {}

    def contender(self, per_round: int) -> Contender:
        """Call once the warm-up is over: the fsync count starts here."""
        synced = self.syncs() if self.syncs is not None else 0
        hosted = self.host() if self.host is not None else {}

        def run(r: int) -> float:
            seconds = []
            cpu_s = self._cpu_s()
            for _ in range(per_round):
                elapsed, execution = self.execute()
                seconds.append(elapsed)
                self.executions.append(execution)
            for name, spent in self._cpu_s().items():
                self.cpu_s[name] = self.cpu_s.get(name, 0.0) + spent - cpu_s.get(name, spent)
            return statistics.fmean(seconds)

        def extra() -> dict[str, object]:
            found: dict[str, object] = {
                "executions_checked": len(self.executions),
                "cpu_s_per_execution": round(sum(self.cpu_s.values()) / len(self.executions), 4),
                "cpu_s_per_execution_by_process": {
                    name: round(spent / len(self.executions), 4)
                    for name, spent in sorted(self.cpu_s.items())
                },
            }
            if self.syncs is not None:
                time.sleep(noetl_stack.STATS_SETTLE_S)
                per = (self.syncs() - synced) / len(self.executions)
                found["wal_syncs_per_execution"] = round(per, 1)
            if self.host is not None:
                found.update(_per_execution(self.host(), hosted, len(self.executions)))
            return found

        return Contender(self.name, run, extra)

    def _cpu_s(self) -> dict[str, float]:
        return {name: tree_cpu_s([pid]) for name, pid in self.pids().items()}

    def check_all(self) -> None:
        for execution in self.executions:
            self.check(execution)


def _per_execution(
    now: dict[str, float], then: dict[str, float], executions: int
) -> dict[str, Any]:
    """The node's host figures per execution over the rounds: its batches (group commits:
    admitted, stepped, flushed, published, answered), their milliseconds (in all, and a
    batch's mean by phase), the operations it ran one at a time (a run's start among them),
    and the store's durable commits with their mean milliseconds (the syncs)."""
    batches = now["batches"] - then["batches"]

    def ms(name: str, per: float) -> float:
        return round((now[name] - then[name]) * 1000 / max(per, 1), 3)

    return {
        "host_batches_per_execution": round(batches / executions, 2),
        "host_batch_ms_per_execution": ms("batch_s", executions),
        "host_batch_ms_mean": ms("batch_s", batches),
        "host_batch_phase_ms_mean": {phase: ms(f"{phase}_s", batches) for phase in BATCH_PHASES},
        "store_commits_per_execution": round((now["commits"] - then["commits"]) / executions, 2),
        "store_commit_ms_mean": ms("commit_s", now["commits"] - then["commits"]),
        "host_operations_per_execution": round(
            (now["operations"] - then["operations"]) / executions, 2
        ),
    }


def _aos_side(node: AosNode, case: str) -> Side:
    name = node.register(AOS_FILES[case])
    what = "aos durable, node + `aos adapter run tool-python` (inline code in a reused worker)"
    if node.in_process:
        what = "aos durable floor, node + python adapter calling in its own process"
    return Side(
        f"{what}, {AOS_FILES[case].relative_to(REPO)}",
        case,
        lambda: node.execute(name),
        lambda execution: node.check(case, execution),
        lambda: {child.name: child.popen.pid for child in node.children},
        host=node.host_figures,
    )


def _noetl_side(stack: noetl_stack.NoetlStack, case: str) -> Side:
    path = stack.register(NOETL_FILES[case])

    def check(execution: str) -> None:
        completed = stack.events(execution, event_type="command.completed")
        check_results(case, noetl_results(stack.status(execution)), noetl_calls(completed))

    what = f"NoETL {stack.versions['noetl']}, server + worker, PostgreSQL + NATS JetStream"
    return Side(
        f"{what}, {NOETL_FILES[case].relative_to(REPO)}",
        case,
        lambda: stack.execute(path),
        check,
        stack.pids,
        stack.wal_syncs,
    )


def _measure(sides: list[Side], quick: bool) -> list[Row]:
    for side in sides:
        for _ in range(WARMUP):
            side.execute()
    rows = interleaved(
        f"playbooks.{sides[0].case}",
        "execution",
        [side.contender(EXECUTIONS[quick]) for side in sides],
        ROUNDS[quick],
    )
    for side in sides:
        side.check_all()
    return rows


def _noetl_or_none(stack: ExitStack) -> noetl_stack.NoetlStack | None:
    why = noetl_stack.unavailable()
    if why is None:
        try:
            found = stack.enter_context(noetl_stack.NoetlStack.start())
        except (noetl_stack.NoetlError, pg_cluster.PgClusterError, OSError) as error:
            why = f"NoETL did not start: {error}"
        else:
            _environment.update(found.versions)
            return found
    print(f"# bench_playbooks: {why}: left out", file=sys.stderr, flush=True)
    _environment["noetl"] = f"not run: {why}"
    return None


def run(quick: bool) -> list[Row]:
    """Every row, or none when NoETL cannot run here (the module measures against it)."""
    rows: list[Row] = []
    with ExitStack() as stack:
        noetl = _noetl_or_none(stack)
        if noetl is None:
            return rows
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="aos-bench-pb-")))
        node = stack.enter_context(AosNode.started(folder / "tool-python"))
        floor = stack.enter_context(AosNode.started(folder / "in-process", in_process=True))
        for case in CASES:
            found = _measure(
                [_aos_side(node, case), _noetl_side(noetl, case), _aos_side(floor, case)], quick
            )
            # NoETL against the floor too: what the ratio becomes once python calls cost what
            # they cost in the adapter's own process.
            ratios = round_ratios(found[1].samples_s, found[2].samples_s)
            found[2].extra.update({f"noetl_{k}": v for k, v in ratios.items()})
            for row in found:
                row.extra.update(case=case, target_ratio_min=TARGET_RATIO_MIN, poll_s=POLL_S)
            rows += found
    return rows
