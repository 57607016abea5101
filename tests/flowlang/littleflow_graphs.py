"""littleflow's graphs, recorded as data for `make test` (tests/flowlang/test_littleflow.py),
which never imports littleflow: the texts it compares (`inputs()`: the forms of its grammar
we once refused, the texts it refuses that aos runs, and every `.flow` file of the corpus)
and, per text, the graph littleflow 0.12.0 compiles it to (or null: it refuses the text).

Run in the bench's own virtualenv, where littleflow is pinned (bench/peers/requirements.txt),
to write `littleflow_graphs.json` again when a text is added or the corpus changes:

    make littleflow-graphs      # .venv-bench/bin/python tests/flowlang/littleflow_graphs.py

The graph of a text is `bench/peers/littleflow_workload.py`'s `graph`; `make
conformance-littleflow` compares random texts of littleflow's grammar live."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "corpora" / "littleflow" / "tests"
RECORD = Path(__file__).with_name("littleflow_graphs.json")
REQUIREMENTS = REPO / "bench" / "peers" / "requirements.txt"
SCRIPT = "make littleflow-graphs (.venv-bench/bin/python tests/flowlang/littleflow_graphs.py)"

FORMS = (
    "A ( ) → B",
    "A (\n) → B",
    "A () → B",
    "<> → A",
    "<> → A → B;\n<- x: 1 -> → B",
    "A → > :end",
    "A → { B C } → D → > :end",
    "A → { B → > :end\n C → :end } → D",
    "A → B → > :x;\n:x C;\nD → :x",
    "café → B:ü → n_ñ ({})",
    "A\f→ B",
    "@task A (- x: 1 -)\n@task A (- x: 2 -)\nA → B",
    "A\n:x → B",
)
"""Forms littleflow's grammar accepts (`( )`, `<>`, `→ > :label`, names past ASCII...):
aos's graph of each is littleflow's."""
BEYOND = ("< > → A", "A → > <out.json>", "* A → B", "D → A|B|C")
"""Texts littleflow's grammar has and its compiler then refuses (ResourceSource, Iterate,
`|`): aos runs them (spec/11 §11.5)."""


def corpus_files() -> list[Path]:
    return sorted(CORPUS.rglob("*.flow"))


def inputs() -> dict[str, str]:
    """Every text compared, by a name: `form N`, `beyond N`, `corpus PATH`."""
    found = {f"form {n}": text for n, text in enumerate(FORMS)}
    found.update({f"beyond {n}": text for n, text in enumerate(BEYOND)})
    for path in corpus_files():
        found[f"corpus {path.relative_to(CORPUS).as_posix()}"] = path.read_text()
    return found


def pinned_version() -> str:
    """The littleflow version bench/peers/requirements.txt pins."""
    for line in REQUIREMENTS.read_text().splitlines():
        if line.startswith("littleflow=="):
            return line.split("==", 1)[1].strip()
    raise LookupError(f"{REQUIREMENTS} pins no littleflow")


def load_record() -> dict[str, Any]:
    """The recorded graphs: `{littleflow: VERSION, graphs: {name: {text, graph}}}`."""
    recorded: dict[str, Any] = json.loads(RECORD.read_text())
    return recorded


def main() -> int:
    from importlib import metadata

    sys.path.insert(0, str(REPO))
    from bench.peers.littleflow_workload import graph  # littleflow: .venv-bench only

    version = metadata.version("littleflow")
    if version != pinned_version():
        print(f"littleflow {version} is installed; {pinned_version()} is pinned", file=sys.stderr)
        return 1
    graphs = {name: {"text": text, "graph": graph(text)} for name, text in inputs().items()}
    RECORD.write_text(json.dumps({"littleflow": version, "graphs": graphs}, indent=1) + "\n")
    print(f"{RECORD}: {len(graphs)} texts, littleflow {version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
