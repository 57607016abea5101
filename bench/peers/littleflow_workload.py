"""The littleflow side of `bench/bench_flowlang.py`. It runs in the bench's own virtualenv
(`.venv-bench`, with `littleflow` pinned by bench/peers/requirements.txt), never in the
project's, and imports nothing from aos.

    python bench/peers/littleflow_workload.py serve
        First line: {"ready": true, "littleflow": VERSION}; then one JSON command per stdin
        line, one JSON answer per stdout line:
        {"op": "compile", "text": T, "repeat": N}   parse + compile T N times (one parser)
        {"op": "run", "text": T, "repeat": N}       run T N times in memory, tasks echo
        {"op": "graph", "text": T}                  T's graph (`graph`), or null if refused
        {"op": "quit"}

Answers carry the mean seconds per repetition measured inside this process, or `error` for
a text littleflow refuses."""

from __future__ import annotations

import json
import sys
import time
from importlib import metadata
from typing import Any

from littleflow import Compiler, Context, FunctionTaskContext, Parser, Runner
from littleflow.flow import InvokeFlow, InvokeTask, Sink, Source, StartFlow


def _echo(value: Any, **_: Any) -> Any:
    return value


_echo.__invocation__ = ["input"]  # type: ignore[attr-defined]  # littleflow: pass the input


class _Echoes(dict):  # type: ignore[type-arg]
    """Every task name is the echo function."""

    def get(self, key: Any, default: Any = None) -> Any:
        return _echo


def _compile(parser: Parser, text: str, repeat: int) -> float:
    compiler = Compiler()
    started = time.perf_counter()
    for _ in range(repeat):
        compiler.compile(parser.parse(text))
    return (time.perf_counter() - started) / repeat


def _run(parser: Parser, text: str, repeat: int) -> tuple[float, Any]:
    flow = Compiler().compile(parser.parse(text))
    output: Any = None
    started = time.perf_counter()
    for _ in range(repeat):
        # A fresh cache each run: littleflow's default is one dict shared by every context.
        context = Context(flow, cache={}, task_context=FunctionTaskContext(_Echoes()))
        runner = Runner()
        runner.start(context, input={"n": 1})
        while not context.ending.empty():
            runner.next(context, context.ending.get())
        output = context.input_for(len(flow) - 1)
    return (time.perf_counter() - started) / repeat, output


def graph(text: str) -> dict[str, Any] | None:
    """littleflow's graph of `text` as plain data (None when it refuses the text): per node
    in its numbering `[index, kind, detail, merge]` (kind start, end, join, fork, task or
    literal; detail a task's name or a literal's repr), and the edges `[from, to]`, sorted.
    tests/flowlang compares aos's graphs with these (recorded by littleflow_graphs.py, and
    live by `make conformance-littleflow`)."""
    try:
        flow = Compiler().compile(Parser().parse(text))
    except Exception:  # littleflow refuses with any exception type
        return None
    last = len(flow) - 1
    nodes: list[list[Any]] = []
    for index in range(len(flow)):
        node = flow[index]
        if isinstance(node, StartFlow):
            nodes.append([index, "start", "", False])
        elif isinstance(node, Sink):
            nodes.append([index, "end" if index == last else "join", "", bool(node.merge)])
        elif isinstance(node, InvokeFlow):
            nodes.append([index, "fork", "", bool(node.merge)])
        elif isinstance(node, InvokeTask):
            nodes.append([index, "task", node.name, bool(node.merge)])
        else:
            assert isinstance(node, Source)
            nodes.append([index, "literal", repr(node.value), False])
    size = range(len(flow))
    edges = sorted([a, b] for a in size for b in size if flow.F[a, b])
    return {"nodes": nodes, "edges": edges}


def main() -> int:
    parser = Parser()
    print(json.dumps({"ready": True, "littleflow": metadata.version("littleflow")}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "quit":
            break
        try:
            if command["op"] == "compile":
                answer: dict[str, Any] = {
                    "seconds": _compile(parser, command["text"], command["repeat"])
                }
            elif command["op"] == "graph":
                answer = {"graph": graph(command["text"])}
            else:
                seconds, output = _run(parser, command["text"], command["repeat"])
                answer = {"seconds": seconds, "output": output}
        except Exception as error:  # a text littleflow does not support
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer, default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
