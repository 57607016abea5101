"""Random texts of littleflow's grammar, compiled by littleflow itself and by aos, their
graphs compared (tests/flowlang/test_littleflow.py compares the forms and the corpus with the
graphs recorded from it). littleflow runs in the bench's virtualenv, served over stdin and
stdout (bench/peers/littleflow_workload.py), never in the project's: this file is not part of
`make test` (its name is not `test_*`); `make conformance-littleflow` builds `.venv-bench`
and runs it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.flowlang.littleflow_graphs import pinned_version
from tests.flowlang.test_littleflow import Shape, our_graph

REPO = Path(__file__).resolve().parents[2]
PEER_PYTHON = Path(
    os.environ.get("AOS_BENCH_LITTLEFLOW_PYTHON", REPO / ".venv-bench" / "bin" / "python")
)
PEER_WORKLOAD = REPO / "bench" / "peers" / "littleflow_workload.py"


class Peer:
    """littleflow in its own process: one `graph` command per line."""

    def __init__(self) -> None:
        self.popen = subprocess.Popen(
            [str(PEER_PYTHON), str(PEER_WORKLOAD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.ready = self._read()

    def _read(self) -> Any:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        assert line, "the littleflow peer exited"
        return json.loads(line)

    def graph(self, text: str) -> Shape | None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps({"op": "graph", "text": text}) + "\n")
        found = self._read()["graph"]
        if found is None:
            return None
        nodes = {index: (kind, detail, merge) for index, kind, detail, merge in found["nodes"]}
        return nodes, {(a, b) for a, b in found["edges"]}

    def close(self) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps({"op": "quit"}) + "\n")
        self.popen.stdin.close()
        self.popen.wait(timeout=30)


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    if not PEER_PYTHON.exists():
        pytest.fail(f"{PEER_PYTHON} is missing: `make bench-setup` builds it")
    started = Peer()
    try:
        yield started
    finally:
        started.close()


def test_the_peer_is_the_pinned_littleflow(peer: Peer) -> None:
    assert peer.ready == {"ready": True, "littleflow": pinned_version()}


NAMES = st.sampled_from(["A", "B", "c_1", "wait:delay", "x-y", "fü"])
PARAMS = st.sampled_from(["", " ()", " ( )", " ({})", ' ({"a": 1})', " ([1])", " (- a: 2 -)"])


@st.composite
def steps(draw: st.DrawFn, depth: int) -> str:
    parts = [">"] if draw(st.booleans()) else []
    if depth < 2 and draw(st.integers(0, 4)) == 0:
        inner = draw(st.lists(statements(depth + 1), min_size=1, max_size=3))
        parts.append("{ " + " ".join(f"{s};" for s in inner) + " }")
    else:
        parts.append(draw(NAMES) + draw(PARAMS))
    return " ".join(parts)


@st.composite
def statements(draw: st.DrawFn, depth: int) -> str:
    chain = draw(st.lists(steps(depth), min_size=1, max_size=3))
    start = draw(st.sampled_from(["", "<> → ", "<{}> → ", "<- k: 1 -> → ", ":start → "]))
    # Not after a subflow: littleflow then also draws an edge from the subflow's last task.
    ends = ["", " → :end", " → > :end"] if not chain[-1].endswith("}") else [""]
    return start + " → ".join(chain) + draw(st.sampled_from(ends))


@st.composite
def flows(draw: st.DrawFn) -> str:
    """Statements, and per label one consumer (`:p X` or `:p → X`) and producers of it."""
    body = draw(st.lists(statements(0), min_size=1, max_size=3))
    for label in draw(st.sampled_from([[], ["p"], ["p", "q"]])):
        into = draw(st.sampled_from([f":{label} ", f":{label} → "]))
        body.append(into + draw(NAMES))
        for _ in range(draw(st.integers(1, 2))):
            body.append(f"{draw(NAMES)} → {draw(st.sampled_from(['', '> ']))}:{label}")
    return "\n".join(f"{s};" for s in draw(st.permutations(body)))


@settings(max_examples=150)  # costly: each example is sent to littleflow, in its process
@given(text=flows())
def test_random_texts_of_littleflows_grammar_agree_where_it_accepts_them(
    peer: Peer, text: str
) -> None:
    theirs = peer.graph(text)
    if theirs is not None:
        assert our_graph(text) == theirs, text
