"""littleflow (the seed 004 language's reference implementation, 0.12.0) as an oracle, through
its graphs recorded as data (tests/flowlang/littleflow_graphs.py writes them in the bench's
virtualenv; `make test` never imports littleflow): every text it parses and compiles gives
our graph too — the same invocations, numbered alike, with the same merges and the same
edges — on the forms its grammar has that we once refused (`( )`, `<>`, `→ > :label`, names
past ASCII) and the corpus; the texts it refuses that we run still parse. Random texts of
its grammar are compared live by `make conformance-littleflow`
(tests/flowlang/live_littleflow.py).

Where we differ on purpose (spec/11 §11.7) a text is not compared: an alias is drawn as the
task it invokes (seed 004: `@task X = A` "is equivalent to" A), a declared subflow expands
(seed 004; littleflow keeps the declaration and runs `{ }` as a statement), littleflow reads
`A->B` as the name `A-` then a merge, and it draws an extra edge from a subflow's last task
when a label ends the statement right after the subflow."""

from __future__ import annotations

from typing import Any

import pytest

from aos.flows.define import flowlang
from aos.flows.define.flowlang.graph import END
from tests.flowlang.littleflow_graphs import (
    BEYOND,
    FORMS,
    SCRIPT,
    corpus_files,
    inputs,
    load_record,
    pinned_version,
)

Shape = tuple[dict[int, tuple[str, str, bool]], set[tuple[int, int]]]
RECORDED: dict[str, Any] = load_record()


def recorded_graph(name: str) -> Shape | None:
    """littleflow's recorded graph of the input `name`, or None when it refuses the text."""
    entry = RECORDED["graphs"].get(name)
    if entry is None or entry["text"] != inputs()[name]:
        pytest.fail(f"littleflow's graph of {name!r} is not recorded as it is: run {SCRIPT}")
    found = entry["graph"]
    if found is None:
        return None
    nodes = {index: (kind, detail, merge) for index, kind, detail, merge in found["nodes"]}
    return nodes, {(a, b) for a, b in found["edges"]}


def our_graph(text: str) -> Shape:
    graph = flowlang.graph_of(text)
    last = len(graph.nodes) - 1

    def number(n: int) -> int:
        return last if n == END else n

    nodes = {}
    for n, node in graph.nodes.items():
        detail = repr(node.params) if node.kind == "literal" else node.name
        nodes[number(n)] = (
            node.kind,
            detail if node.kind in ("task", "literal") else "",
            node.merge,
        )
    return nodes, {(number(a), number(b)) for a, b in graph.edges}


def assert_agrees(name: str) -> None:
    theirs = recorded_graph(name)
    text = RECORDED["graphs"][name]["text"]
    assert theirs is not None, f"littleflow refuses {text!r}"
    assert our_graph(text) == theirs, text


def test_the_recorded_graphs_are_current() -> None:
    recorded = {name: entry["text"] for name, entry in RECORDED["graphs"].items()}
    assert RECORDED["littleflow"] == pinned_version(), f"stale: run {SCRIPT}"
    assert recorded == inputs(), f"the recorded texts differ from the inputs: run {SCRIPT}"


@pytest.mark.parametrize("number", range(len(FORMS)), ids=lambda n: repr(FORMS[n]))
def test_the_forms_littleflow_accepts_agree_with_its_graph(number: int) -> None:
    assert_agrees(f"form {number}")


def test_a_merge_before_a_label_merges_into_the_labelled_task() -> None:
    graph = flowlang.graph_of("A → > :x;\nB → :x;\n:x C")
    merged = [node.name for node in graph.nodes.values() if node.merge]
    assert merged == ["C"]
    assert graph.nodes[END].merge is False
    assert flowlang.graph_of("A → > :end").nodes[END].merge is True


@pytest.mark.parametrize(
    "text",
    ["A → > :end", "A → > :x;\n:x B", "A → > <out.json>", "< > → A ( ) → B", "{ A → > :end }"],
)
def test_the_new_forms_format_and_read_back_to_the_same_graph(text: str) -> None:
    printed = flowlang.format_text(text)
    assert our_graph(printed) == our_graph(text)
    assert flowlang.format_text(printed) == printed


def test_a_merging_sink_writes_the_merged_input() -> None:
    workbook = [{"name": "A", "tool": {"kind": "echo"}}]
    value = flowlang.compile_text("A → > <out.json>", source="f.flow", workbook=workbook)
    [sink] = [step for step in value["steps"] if step["name"].startswith("resource")]
    assert [task["name"] for task in sink["tasks"]] == ["input", "merged", "run"]
    assert sink["tasks"][-1]["args"] == sink["result"] == "{{ results.merged }}"


def test_an_empty_resource_and_an_empty_parameter_are_empty_maps() -> None:
    graph = flowlang.graph_of("< > → A ( ) → B")
    assert [node.params for node in graph.nodes.values() if node.kind != "end"][1:3] == [{}, {}]


CORPUS_NAMES = [name for name in inputs() if name.startswith("corpus ")]


@pytest.mark.parametrize("name", CORPUS_NAMES, ids=lambda name: name.split("/")[-1])
def test_every_corpus_file_littleflow_accepts_agrees(name: str) -> None:
    if recorded_graph(name) is not None:
        assert_agrees(name)


def test_the_corpus_is_there() -> None:
    assert corpus_files(), "../shared/corpora/littleflow/tests holds the corpus"


@pytest.mark.parametrize("number", range(len(BEYOND)), ids=lambda n: repr(BEYOND[n]))
def test_littleflow_refusals_we_go_beyond_still_parse(number: int) -> None:
    # littleflow's grammar has these, then refuses them (ResourceSource, Iterate, `|`):
    # aos runs them (spec/11 §11.5).
    assert recorded_graph(f"beyond {number}") is None
    flowlang.graph_of(BEYOND[number])
