"""Properties: a random well-formed flow printed by `fmt` parses back to the same graph, and
random bytes or text given as a `.flow` file give a flow or a typed error, nothing else."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aos.flows.define import flowlang
from aos.flows.define.cfd import load_definition
from aos.flows.define.flowlang.graph import Graph
from aos.kernel.errors import AosError
from tests.strategies import examples_times

NAMES = st.sampled_from(["A", "B", "c-1", "my:peel-banana", "echo", "x_2"])
PARAMS = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["a", "b", "dry-run"]), st.integers(-5, 5) | st.booleans(), max_size=2
    ),
    st.lists(st.integers(0, 9), max_size=3),
)
GUARDS = st.one_of(st.none(), st.sampled_from(["$[?(@.status=0)]", "$[?(@.x>1)]"]))


def _params(value: Any) -> str:
    if value is None:
        return ""
    return f" ({json.dumps(value)})"


@st.composite
def steps(draw: st.DrawFn, depth: int) -> str:
    guard = draw(GUARDS)
    parts = [f"? `{guard}`"] if guard else []
    if draw(st.booleans()):
        parts.append("*")
    if draw(st.booleans()):
        parts.append(">")
    kind = draw(st.sampled_from(["task", "list", "subflow"] if depth < 2 else ["task", "list"]))
    if kind == "task":
        parts.append(draw(NAMES) + _params(draw(PARAMS)))
    elif kind == "list":
        parts.append("|".join(draw(st.lists(NAMES, min_size=2, max_size=3))))
    else:
        inner = draw(st.lists(statements(depth + 1), min_size=0, max_size=3))
        parts.append("{ " + " ".join(f"{s};" for s in inner) + " }")
    return " ".join(parts)


@st.composite
def statements(draw: st.DrawFn, depth: int = 0) -> str:
    chain = draw(st.lists(steps(depth), min_size=1, max_size=4))
    if draw(st.booleans()):
        chain.insert(0, '<{"k": 1}>')
    return " → ".join(chain)


@st.composite
def flows(draw: st.DrawFn) -> str:
    body = draw(st.lists(statements(), min_size=1, max_size=4))
    labelled = [f"{s} :l{i}" if "}" not in s.split("→")[-1] else s for i, s in enumerate(body)]
    extra = [f":l{i} → {draw(NAMES)}" for i, s in enumerate(labelled) if s.endswith(f":l{i}")]
    return "\n".join(f"{s};" for s in labelled + extra)


def _shape(graph: Graph) -> tuple[Any, ...]:
    nodes = [
        (n.number, n.kind, n.name, repr(n.params), n.guard, n.iterate, n.merge, n.gates)
        for n in graph.nodes.values()
    ]
    return (sorted(nodes), sorted(graph.edges))


@settings(max_examples=50)  # costly: a flow parsed, printed and parsed again, up to 0.8 s
@given(flows())
def test_fmt_round_trips_to_the_same_graph(text: str) -> None:
    graph = flowlang.graph_of(text)
    printed = flowlang.format_text(text)
    assert _shape(flowlang.graph_of(printed)) == _shape(graph)
    assert flowlang.format_text(printed) == printed


ALPHABET = st.sampled_from([*"AB:→->;|*?`{}[]()<'\"@=# \n-x$", "(-", "-)", "({", "})", "<-", "->"])


@examples_times(1.5)  # cheap: one parse of a short random input (300 under ci)
@given(st.one_of(st.binary(max_size=200), st.lists(ALPHABET, max_size=40).map("".join)))
def test_random_input_gives_a_flow_or_a_typed_error(data: bytes | str) -> None:
    try:
        load_definition(data, source="random.flow")
    except AosError as error:
        assert error.code.startswith("flow.")


@settings(max_examples=15)  # costly: a flow compiled and checked, up to 5 s
@given(flows())
def test_every_well_formed_flow_compiles_to_a_valid_definition(text: str) -> None:
    names = flowlang.graph_of(text).task_names()
    workbook = [{"name": name, "tool": {"kind": "echo"}} for name in names]
    definition = flowlang.load_flow(text, source="random.flow", workbook=workbook)
    assert definition.entry == "_start_"
