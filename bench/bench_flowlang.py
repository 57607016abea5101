"""The flow language (`.flow`, seed 004) against its reference implementation, littleflow
0.12.0 (run by `.venv-bench`'s interpreter, `bench/peers/littleflow_workload.py`, never in
the project's environment), on the same texts, rounds interleaved (littleflow's round r, then
aos's round r).

* Compile: parse + compile of every littleflow corpus file both implementations accept (per
  file), of a 3-task flow, and of a generated 1,000-task flow. littleflow's compile is its
  parser (reused) and compiler (a numpy transition matrix); aos's is `flowlang.compile_text`
  (the Lark parser reused: tokens, syntax tree, graph, CFD data), and, in its own row, that
  plus the CFD check (`definition_from_value`, what `aos flow check` does).
* Run: the 3-task flow `A → B → C`, every task an echo, end to end: littleflow's in-memory
  runner against an execution on an aos flow world (start, every tool intent performed in
  process, signed receipts settled, the execution completed), no-sync and durable.

Ratios are aos over littleflow, round by round (`extra.ratio_per_round`); below 1 is faster.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from aos.flows.define import flowlang
from aos.flows.define.cfd import definition_from_value
from aos.flows.limits import DefinitionLimits
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import create_flow_world
from aos.flows.serve.local import LocalAdapters
from bench.harness import Row, quit_child

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpora" / "littleflow" / "tests"
PEER_PYTHON = Path(
    os.environ.get("AOS_BENCH_LITTLEFLOW_PYTHON", REPO / ".venv-bench" / "bin" / "python")
)
PEER_WORKLOAD = REPO / "bench" / "peers" / "littleflow_workload.py"
ROUNDS = {True: 5, False: 11}  # by quick
COMPILE_REPEAT = {True: 100, False: 500}
LARGE_REPEAT = {True: 3, False: 10}
CHECK_SHARE = 10
"""The rows with the CFD check repeat 1/CHECK_SHARE as often (the check is ~10x the compile)."""
RUN_REPEAT = {True: 20, False: 50}
LARGE_TASKS = 1000
SMALL = "A → B → C"
PEER_S_MAX = 120.0
LIMITS = DefinitionLimits(steps_max=10 * LARGE_TASKS)


def large_flow(tasks: int = LARGE_TASKS) -> str:
    """Chains of ten tasks, every fifth statement with a two-task subflow in the middle."""
    lines, made = [], 0
    while made < tasks:
        if len(lines) % 5 == 4:
            lines.append(f"T{made} → {{ T{made + 1} T{made + 2} }} → T{made + 3};")
            made += 4
        else:
            lines.append(" → ".join(f"T{made + i}" for i in range(10)) + ";")
            made += 10
    return "\n".join(lines) + "\n"


class _Peer:
    def __init__(self) -> None:
        self.popen = subprocess.Popen(
            [str(PEER_PYTHON), str(PEER_WORKLOAD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.ready = self.ask(None)

    def ask(self, command: dict[str, Any] | None) -> dict[str, Any]:
        assert self.popen.stdin is not None and self.popen.stdout is not None
        if command is not None:
            self.popen.stdin.write(json.dumps(command) + "\n")
        line = self.popen.stdout.readline()
        if not line:
            raise RuntimeError(f"the littleflow workload exited ({self.popen.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        quit_child(self.popen, PEER_S_MAX)


def _workbook(text: str) -> list[dict[str, Any]]:
    names = flowlang.graph_of(text).task_names()
    return [{"name": name, "tool": {"kind": "echo"}} for name in names]


def _aos_compile(text: str, repeat: int, *, check: bool) -> float:
    workbook = _workbook(text)
    if check:
        repeat = max(1, repeat // CHECK_SHARE)
    started = time.perf_counter()
    for _ in range(repeat):
        value = flowlang.compile_text(text, workbook=workbook, limits=LIMITS)
        if check:
            definition_from_value(value, limits=LIMITS)
    return (time.perf_counter() - started) / repeat


def _texts(peer: _Peer) -> tuple[list[str], int]:
    """The corpus files both accept (littleflow refuses some of the language), and how many
    it refused."""
    accepted, refused = [], 0
    for path in sorted(CORPUS.rglob("*.flow")):
        if path.parent.name == "errors":
            continue
        text = path.read_text()
        if peer.ask({"op": "compile", "text": text, "repeat": 1}).get("error"):
            refused += 1
        else:
            accepted.append(text)
    return accepted, refused


def _interleaved(
    group: str,
    per: str,
    contenders: list[tuple[str, Callable[[], float]]],
    rounds: int,
    **extra: Any,
) -> list[Row]:
    samples: dict[str, list[float]] = {name: [] for name, _ in contenders}
    for _, fn in contenders:
        fn()  # warm-up, not measured
    for _ in range(rounds):
        for name, fn in contenders:
            samples[name].append(fn())
    rows = []
    base = samples[contenders[0][0]]
    for index, (name, _) in enumerate(contenders):
        row = Row(group, name, statistics.median(samples[name]), per, rounds, index == 0)
        row.samples_s = samples[name]
        row.extra = dict(extra)
        if index:
            ratios = [s / b for s, b in zip(samples[name], base, strict=True)]
            row.extra["ratio_per_round"] = [float(f"{x:.4g}") for x in ratios]
            row.extra["ratio_median"] = float(f"{statistics.median(ratios):.4g}")
        rows.append(row)
    return rows


def _compile_rows(peer: _Peer, quick: bool) -> list[Row]:
    rounds, repeat = ROUNDS[quick], COMPILE_REPEAT[quick]
    corpus, refused = _texts(peer)
    large = large_flow()
    rows: list[Row] = []
    cases = [
        (f"corpus ({len(corpus)} files; littleflow refused {refused})", corpus, repeat, "file"),
        ("3-task flow", [SMALL], repeat, "flow"),
        (f"{LARGE_TASKS}-task flow", [large], LARGE_REPEAT[quick], "flow"),
    ]
    for what, texts, times, per in cases:

        def peer_fn(texts: list[str] = texts, times: int = times) -> float:
            answers = [peer.ask({"op": "compile", "text": t, "repeat": times}) for t in texts]
            return sum(float(a["seconds"]) for a in answers) / len(texts)

        def aos_fn(texts: list[str] = texts, times: int = times, check: bool = False) -> float:
            return sum(_aos_compile(t, times, check=check) for t in texts) / len(texts)

        contenders = [
            (f"littleflow parse + compile, {what}", peer_fn),
            (f"aos parse + compile to CFD data, {what}", aos_fn),
            (f"aos parse + compile + CFD check, {what}", lambda f=aos_fn: f(check=True)),
        ]
        rows += _interleaved(f"flowlang.compile {what}", per, contenders, rounds)
    return rows


def _aos_runner(sync: bool, stack: ExitStack) -> Callable[[], float]:
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="aos-bench-flowlang-")))
    world, keys = create_flow_world(folder / "w", clock="manual", sync=sync)
    stack.enter_context(world)
    adapters = LocalAdapters(world, keys)
    workbook = _workbook(SMALL)
    definition = flowlang.load_flow(SMALL, source="small.flow", workbook=workbook)
    name = ops.deploy(world, definition).name
    count = iter(range(10**9))

    def run() -> float:
        started = time.perf_counter()
        exec_id = f"x{next(count)}"
        ops.start(world, name, workload={"n": 1}, exec_id=exec_id)
        adapters.drain()
        elapsed = time.perf_counter() - started
        assert ops.status(world, exec_id)["status"] == "completed"
        return elapsed

    return run


def _run_rows(peer: _Peer, quick: bool) -> list[Row]:
    rounds, repeat = ROUNDS[quick], RUN_REPEAT[quick]
    with ExitStack() as stack:
        nosync, durable = _aos_runner(False, stack), _aos_runner(True, stack)

        def mean(fn: Callable[[], float]) -> Callable[[], float]:
            return lambda: sum(fn() for _ in range(repeat)) / repeat

        contenders = [
            (
                "littleflow in memory",
                lambda: float(peer.ask({"op": "run", "text": SMALL, "repeat": repeat})["seconds"]),
            ),
            ("aos no-sync world", mean(nosync)),
            ("aos durable world (fsync per flush)", mean(durable)),
        ]
        return _interleaved("flowlang.run 3-task echo flow", "run", contenders, rounds)


def environment() -> dict[str, Any]:
    return {"littleflow_python": str(PEER_PYTHON)}


def run(quick: bool) -> list[Row]:
    if not PEER_PYTHON.is_file():
        print(f"# bench_flowlang: no {PEER_PYTHON} (make bench-setup)", file=sys.stderr)
        return []
    peer = _Peer()
    try:
        return _compile_rows(peer, quick) + _run_rows(peer, quick)
    finally:
        peer.close()
