"""Every example of seed 004 with a diagram: `aos flow draw` gives the seed's graph (the same
states with the same labels, fork/join states and edges); the seed's error examples fail
with the error it names; and the examples of the spec text `littleflow.md` agree too."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from aos.flows.define import flowlang
from aos.flows.define.flowlang import errors
from tests.flowlang.mermaid_graph import read

SHARED = Path(__file__).resolve().parents[3] / "shared"
SPEC_TEXT = SHARED / "corpora" / "littleflow" / "littleflow.md"

# (flow, the seed's diagram) in the seed's order. Example 6 is written `:before A → B → C`
# in the seed's prose, but its diagram (no edge from the start into A) is that of
# `:before → A → B → C`, the corpus file `example-6.flow`: a label that begins a statement
# *as its source* takes the place of the start, while `:x C` (example 3) keeps the edge
# from the start, so the two prose forms cannot both give their diagrams.
SEED_EXAMPLES = [
    (
        "A → B → D\nC → D",
        """[*]-->A.1 [*]-->C.4 A.1-->B.2 B.2-->D.3 D.3-->[*] C.4-->D.5 D.5-->[*]""",
        {"A.1": "A", "B.2": "B", "D.3": "D", "C.4": "C", "D.5": "D"},
    ),
    (
        "A :x → B → C;\n:x → D",
        "[*]-->A.1 A.1-->B.2 A.1-->D.4 B.2-->C.3 C.3-->[*] D.4-->[*]",
        {"A.1": "A", "B.2": "B", "C.3": "C", "D.4": "D"},
    ),
    (
        "A :x → B → C → :x D",
        "[*]-->A.1 A.1-->B.2 A.1-->D.4 B.2-->C.3 C.3-->D.4 D.4-->[*]",
        {"A.1": "A", "B.2": "B", "C.3": "C", "D.4": "D"},
    ),
    (
        "A → :x;\nB → :x;\n:x C",
        "[*]-->A.1 [*]-->B.2 [*]-->C.3 A.1-->C.3 B.2-->C.3 C.3-->[*]",
        {"A.1": "A", "B.2": "B", "C.3": "C"},
    ),
    (
        "A → :meet C → D → E\nB → :meet",
        "[*]-->A.1 [*]-->B.5 A.1-->C.2 C.2-->D.3 D.3-->E.4 E.4-->[*] B.5-->C.2",
        {"A.1": "A", "C.2": "C", "D.3": "D", "E.4": "E", "B.5": "B"},
    ),
    (
        "A :out → C → D → E ;\n:out → B",
        "[*]-->A.1 A.1-->C.2 A.1-->B.5 C.2-->D.3 D.3-->E.4 E.4-->[*] B.5-->[*]",
        {"A.1": "A", "C.2": "C", "D.3": "D", "E.4": "E", "B.5": "B"},
    ),
    (
        ":before → A → B → C\nD → :before",
        "[*]-->D.4 A.1-->B.2 B.2-->C.3 C.3-->[*] D.4-->A.1",
        {"A.1": "A", "B.2": "B", "C.3": "C", "D.4": "D"},
    ),
    (
        "A → [ B C ] → D",
        "[*]-->A.1 A.1-->_start_2_ _start_2_-->B.3 _start_2_-->C.4 B.3-->_end_5_ "
        "C.4-->_end_5_ _end_5_-->D.6 D.6-->[*]",
        {"A.1": "A", "_start_2_": "<<fork>>", "B.3": "B", "C.4": "C", "_end_5_": "<<join>>"}
        | {"D.6": "D"},
    ),
    (
        "A → [ :start → B → C → :end ] → D",
        "[*]-->A.1 A.1-->_start_2_ _start_2_-->B.3 B.3-->C.4 C.4-->_end_5_ _end_5_-->D.6 D.6-->[*]",
        {"A.1": "A", "_start_2_": "<<fork>>", "B.3": "B", "C.4": "C", "_end_5_": "<<join>>"}
        | {"D.6": "D"},
    ),
    (
        "A → B → C\nD → E\nF → B",
        "[*]-->A.1 [*]-->D.4 [*]-->F.6 A.1-->B.2 B.2-->C.3 C.3-->[*] D.4-->E.5 E.5-->[*] "
        "F.6-->B.7 B.7-->[*]",
        {"A.1": "A", "B.2": "B", "C.3": "C", "D.4": "D", "E.5": "E", "F.6": "F", "B.7": "B"},
    ),
    (
        ":start → A → B → C → :end\n:start → D → E → :end\n:start → F → B → :end",
        "[*]-->A.1 [*]-->D.4 [*]-->F.6 A.1-->B.2 B.2-->C.3 C.3-->[*] D.4-->E.5 E.5-->[*] "
        "F.6-->B.7 B.7-->[*]",
        {"A.1": "A", "B.2": "B", "C.3": "C", "D.4": "D", "E.5": "E", "F.6": "F", "B.7": "B"},
    ),
    (
        "A → :x B\nC → :x",
        "[*]-->A.1 [*]-->C.3 A.1-->B.2 B.2-->[*] C.3-->B.2",
        {"A.1": "A", "B.2": "B", "C.3": "C"},
    ),
]
_FAN_IN = (
    "[*]-->_start_1_ _start_1_-->A.2 _start_1_-->B.3 _start_1_-->C.4 A.2-->_end_5_ "
    "B.3-->_end_5_ C.4-->_end_5_ _end_5_-->D.6 D.6-->[*]",
    {"_start_1_": "<<fork>>", "A.2": "A", "B.3": "B", "C.4": "C", "_end_5_": "<<join>>"}
    | {"D.6": "D"},
)
_FAN_OUT = (
    "[*]-->D.1 D.1-->_start_2_ _start_2_-->A.3 _start_2_-->B.4 _start_2_-->C.5 A.3-->_end_6_ "
    "B.4-->_end_6_ C.5-->_end_6_ _end_6_-->[*]",
    {"D.1": "D", "_start_2_": "<<fork>>", "A.3": "A", "B.4": "B", "C.5": "C"}
    | {"_end_6_": "<<join>>"},
)
SEED_EXAMPLES += [(text, *_FAN_IN) for text in ("A|B|C → D", "{ A B C } → D")]
SEED_EXAMPLES += [(text, *_FAN_OUT) for text in ("D → A|B|C", "D → { A B C }")]


def _graph(text: str) -> tuple[dict[str, str], set[tuple[str, str]]]:
    return read(flowlang.to_mermaid(flowlang.graph_of(text)))


@pytest.mark.parametrize(("text", "edges", "states"), SEED_EXAMPLES)
def test_the_seed_examples_draw_the_seeds_diagrams(
    text: str, edges: str, states: dict[str, str]
) -> None:
    drawn_states, drawn_edges = _graph(text)
    assert drawn_states == states
    assert drawn_edges == {tuple(edge.split("-->")) for edge in edges.split()}


def test_equivalent_forms_of_the_seed_give_equal_graphs() -> None:
    # "A → :meet D; B → :meet; C → :meet" is A|B|C → D without the subflow's fork and join.
    seed_equivalents = [
        ("@task X = A (- {fruit: banana} -) ;\nX → B", "A (- {fruit: banana} -) → B"),
        ("@task X {\n  A\n  B → C\n}\nX → D", "{\n  A\n  B → C\n} → D"),
        (
            "A → B → C\nD → E\nF → B",
            ":start → A → B → C → :end\n:start → D → E → :end\n:start → F → B → :end",
        ),
    ]
    for declared, inline in seed_equivalents:
        assert _graph(declared) == _graph(inline)
        assert _params(declared) == _params(inline)


def _params(text: str) -> list[object]:
    return [node.params for node in flowlang.graph_of(text).nodes.values()]


@pytest.mark.parametrize(
    ("text", "error", "where"),
    [
        ("A :x → B → C :x → D", errors.DuplicateOutputLabelError, (1, 14)),
        ("A :out → B\n:out → C", errors.AmbiguousMeetError, (2, 1)),
        ("A :start → B", errors.ReservedLabelError, (1, 3)),
        ("A → :end B", errors.ReservedLabelError, (1, 5)),
        (":end → A", errors.ReservedLabelError, (1, 1)),
        ("A → :start", errors.ReservedLabelError, (1, 5)),
        (":nowhere → A", errors.UnknownLabelError, (1, 1)),
    ],
)
def test_the_seeds_errors_are_named_with_line_and_column(
    text: str, error: type[errors.FlowLangError], where: tuple[int, int]
) -> None:
    with pytest.raises(error) as raised:
        flowlang.graph_of(text)
    assert (raised.value.line, raised.value.column) == where
    if error is errors.DuplicateOutputLabelError:
        assert "duplicate output label 'x'" in str(raised.value)


_FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)


def _spec_text_examples() -> list[tuple[str, str]]:
    """Each flow block of `littleflow.md` that a mermaid block follows."""
    blocks = _FENCE.findall(SPEC_TEXT.read_text())
    pairs = []
    for (kind, body), (next_kind, diagram) in itertools.pairwise(blocks):
        if kind == "" and next_kind == "mermaid" and "→" in body:
            pairs.append((body, diagram))
    return pairs


def test_the_spec_text_examples_agree_with_aos_flow_draw() -> None:
    pairs = _spec_text_examples()
    assert len(pairs) >= 10
    for text, diagram in pairs:
        if text.startswith(":before A"):
            text = text.replace(":before A", ":before → A")  # see SEED_EXAMPLES
        assert _graph(text) == read(diagram), text


def test_guards_show_in_the_diagram() -> None:
    drawn = flowlang.to_mermaid(flowlang.graph_of("A → ? `$[?(@.status=0)]` { B → C } → ? `$.x` D"))
    assert 'state "? D" as D.6' in drawn
    assert "A.1-->_start_2_ : ? $[?(@.status=0)]" in drawn
    states, edges = read(drawn)
    assert ("A.1", "_start_2_") in edges and states["_start_2_"] == "<<fork>>"
