"""Bad `.flow` texts: each is a typed error (`flow.lang.*`) with its line and column, at
the edges of the language's bounds too."""

from __future__ import annotations

import pytest

from aos.flows.define import flowlang
from aos.flows.define.flowlang import errors
from aos.flows.define.flowlang.graph import INVOCATIONS_MAX, build_graph
from aos.flows.define.flowlang.lexer import NESTING_MAX
from aos.flows.define.flowlang.parser import parse


@pytest.mark.parametrize(
    ("text", "code", "where"),
    [
        ("A → ", "flow.lang.syntax", (1, 5)),
        ("A → B }", "flow.lang.syntax", (1, 7)),
        ("A → ? `$.x B", "flow.lang.syntax", (1, 7)),
        ('A ({"a": }) → B', "flow.lang.literal", (1, 10)),
        ("A (- [1, -) → B", "flow.lang.literal", (1, 3)),
        ("A (- {a: 1, a: 2} -)", "flow.lang.literal", (1, 3)),
        ("A → <bad uri>", "flow.lang.syntax", (1, 5)),
        ("A → % B", "flow.lang.syntax", (1, 5)),
        ("@flow a\n@flow b\nA", "flow.lang.declaration", (2, 1)),
        ("> :x → A\nB → :x", "flow.lang.syntax", (1, 1)),
        ("> <in.json> → A", "flow.lang.syntax", (1, 1)),
        ("A\n:x → B\nC → :x", "flow.lang.ambiguous_meet", (2, 1)),
        ("@task X = A { B }\nX", "flow.lang.declaration", (1, 1)),
        ("@task X { Y }\n@task Y { X }\nX", "flow.lang.declaration", (2, 11)),
        ("@thing X\nX", "flow.lang.declaration", (1, 1)),
        ("A → :x → B", "flow.lang.syntax", (1, 5)),
        (":x", "flow.lang.syntax", (1, 1)),
        ("A → <- x: 1 ->", "flow.lang.syntax", (1, 5)),
        (":x A;\n:x B;\nC → :x", "flow.lang.duplicate_input_label", (2, 1)),
    ],
)
def test_bad_texts_are_typed_errors_with_a_place(
    text: str, code: str, where: tuple[int, int]
) -> None:
    with pytest.raises(errors.FlowLangError) as raised:
        flowlang.graph_of(text)
    assert raised.value.code == code, raised.value
    assert (raised.value.line, raised.value.column) == where


def test_subflows_nest_up_to_the_bound() -> None:
    def nested(depth: int) -> str:
        return "{ " * depth + "A" + " }" * depth

    assert len(flowlang.graph_of(nested(NESTING_MAX)).nodes) == 2 * NESTING_MAX + 3
    with pytest.raises(errors.FlowLangLimitError):
        flowlang.graph_of(nested(NESTING_MAX + 1))


def test_declared_subflows_cannot_expand_without_bound() -> None:
    levels = ["@task L0 { A A }"] + [f"@task L{i} {{ L{i - 1} L{i - 1} }}" for i in range(1, 8)]
    fine = parse("\n".join(levels[:5]) + "\nL4")  # 2**5 tasks + 2 * 31 forks and joins
    assert len(build_graph(fine, invocations_max=94).nodes) == 96  # and the flow's start, end
    with pytest.raises(errors.FlowLangLimitError):
        build_graph(fine, invocations_max=93)
    assert INVOCATIONS_MAX < 40 * 766  # each L7 is 256 tasks and 255 forks and joins
    with pytest.raises(errors.FlowLangLimitError):
        flowlang.graph_of("\n".join(levels) + "\nL7" * 40)


def test_the_nesting_bound_can_be_lowered() -> None:
    parse("{ { A } }", nesting_max=2)
    with pytest.raises(errors.FlowLangLimitError):
        parse("{ { { A } } }", nesting_max=2)


def test_a_text_over_the_size_bound_is_refused_before_parsing() -> None:
    from aos.flows.define.cfd import load_definition
    from aos.flows.errors import FlowTooLargeError
    from aos.flows.limits import DefinitionLimits

    limits = DefinitionLimits(definition_bytes_max=4096)
    load_definition("echo → echo", source="f.flow", limits=limits)
    with pytest.raises(FlowTooLargeError) as raised:
        load_definition("echo → " * 600 + "echo", source="f.flow", limits=limits)
    assert "the definition is 4204 bytes" in str(raised.value)
