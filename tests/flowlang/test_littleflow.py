"""littleflow (the seed 004 language's reference implementation, 0.12.0) as an oracle: every
text it parses and compiles gives our graph too — the same invocations, numbered alike, with
the same merges and the same edges — on the forms its grammar has that we once refused
(`( )`, `<>`, `→ > :label`, names past ASCII), the corpus, and random texts of its grammar.

Where we differ on purpose (spec/11 §11.7) a text is not compared: an alias is drawn as the
task it invokes (seed 004: `@task X = A` "is equivalent to" A), a declared subflow expands
(seed 004; littleflow keeps the declaration and runs `{ }` as a statement), littleflow reads
`A->B` as the name `A-` then a merge, and it draws an extra edge from a subflow's last task
when a label ends the statement right after the subflow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from littleflow import Compiler, Parser
from littleflow.flow import InvokeFlow, InvokeTask, Sink, Source, StartFlow

from aos.flows import flowlang
from aos.flows.flowlang.graph import END

SHARED = Path(__file__).resolve().parents[3] / "shared"
CORPUS = SHARED / "corpora" / "littleflow" / "tests"

Shape = tuple[dict[int, tuple[str, str, bool]], set[tuple[int, int]]]


def littleflow_graph(text: str) -> Shape | None:
    """littleflow's graph of `text`, or None when it refuses the text."""
    try:
        flow = Compiler().compile(Parser().parse(text))
    except Exception:  # littleflow refuses with any exception type
        return None
    last = len(flow) - 1
    nodes = {}
    for index in range(len(flow)):
        node = flow[index]
        if isinstance(node, StartFlow):
            nodes[index] = ("start", "", False)
        elif isinstance(node, Sink):
            nodes[index] = ("end" if index == last else "join", "", node.merge)
        elif isinstance(node, InvokeFlow):
            nodes[index] = ("fork", "", node.merge)
        elif isinstance(node, InvokeTask):
            nodes[index] = ("task", node.name, node.merge)
        else:
            assert isinstance(node, Source)
            nodes[index] = ("literal", repr(node.value), False)
    edges = {(a, b) for a in range(len(flow)) for b in range(len(flow)) if flow.F[a, b]}
    return nodes, edges


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


def assert_agrees(text: str) -> None:
    theirs = littleflow_graph(text)
    assert theirs is not None, f"littleflow refuses {text!r}"
    assert our_graph(text) == theirs, text


@pytest.mark.parametrize(
    "text",
    [
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
    ],
)
def test_the_forms_littleflow_accepts_agree_with_its_graph(text: str) -> None:
    assert_agrees(text)


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


@pytest.mark.parametrize("path", sorted(CORPUS.rglob("*.flow")), ids=lambda p: p.name)
def test_every_corpus_file_littleflow_accepts_agrees(path: Path) -> None:
    text = path.read_text()
    if littleflow_graph(text) is not None:
        assert_agrees(text)


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


@settings(max_examples=150, deadline=None)
@given(flows())
def test_random_texts_of_littleflows_grammar_agree_where_it_accepts_them(text: str) -> None:
    if littleflow_graph(text) is not None:
        assert_agrees(text)


def _refuses(text: str) -> Any:
    return littleflow_graph(text) is None


def test_littleflow_refusals_we_go_beyond_still_parse() -> None:
    # littleflow's grammar has these, then refuses them (ResourceSource, Iterate, `|`):
    # aos runs them (spec/11 §11.5).
    for text in ("< > → A", "A → > <out.json>", "* A → B", "D → A|B|C"):
        assert _refuses(text), text
        flowlang.graph_of(text)
