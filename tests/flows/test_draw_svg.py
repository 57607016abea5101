"""Drawing a flow as SVG for the inspector: well-formed, deterministic, every text escaped,
steps layered by distance from the entry, arcs back to an earlier step drawn around the side,
and an execution's marking on the steps."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

from aos.flows.define.cfd import load_definition
from aos.flows.define.draw_svg import STEPS_DRAWN_MAX, Marking, to_svg

SVG = "{http://www.w3.org/2000/svg}"
LOOPING = """
name: tests/svg
steps:
  - name: start
    next:
      mode: inclusive
      arcs: [{to: left, when: "ctx.n < 3 and ctx.tag == '<b>&'"}, right]
  - name: left
    next: [{to: start, when: "ctx.again"}, merge]
  - name: right
    next: merge
  - name: merge
    join: all
"""


def steps_of(svg: str) -> dict[str, tuple[float, str]]:
    """Each step's box: its y and its class."""
    root = ElementTree.fromstring(svg)  # well-formed XML, or this raises
    found = {}
    for group in root.iter(f"{SVG}g"):
        rect = group.find(f"{SVG}rect")
        assert rect is not None
        found[group.attrib["data-step"]] = (float(rect.attrib["y"]), group.attrib["class"])
    return found


def test_steps_are_layered_from_the_entry_and_text_is_escaped() -> None:
    svg = to_svg(load_definition(LOOPING))
    assert svg == to_svg(load_definition(LOOPING))  # deterministic
    boxes = steps_of(svg)
    assert boxes["start"][0] < boxes["left"][0] == boxes["right"][0] < boxes["merge"][0]
    assert "&lt;b&gt;&amp;" in svg and "ctx.n &lt; 3" in svg and "<b>" not in svg
    labels = [t.text for t in ElementTree.fromstring(svg).iter(f"{SVG}text")]
    assert "ctx.again" in labels and "join all, end" in labels
    # left -> start goes back up: a curve around the right-hand side, not through the boxes.
    assert len([p for p in ElementTree.fromstring(svg).iter(f"{SVG}path")]) >= 6


def test_the_marking_shows_tokens_done_and_failed_steps() -> None:
    state = {
        "engine": {
            "tokens": {"k1": {"step": "left"}, "k2": {"step": "left"}},
            "summary": {"failures": [{"step": "right"}]},
        },
        "business": {"steps": {"start": "ok"}},
    }
    marking = Marking.of_state(state)
    assert marking == Marking({"left": 2}, frozenset({"start"}), frozenset({"right"}))
    boxes = steps_of(to_svg(load_definition(LOOPING), marking))
    assert {name: cls for name, (_, cls) in boxes.items()} == {
        "start": "step done",
        "left": "step active",
        "right": "step failed",
        "merge": "step",
    }
    assert "2 tokens here" in to_svg(load_definition(LOOPING), marking)
    assert Marking.of_state({}) == Marking()  # a state without an engine: nothing marked


def test_a_huge_definition_is_drawn_up_to_its_bound() -> None:
    names = [f"s{n}" for n in range(STEPS_DRAWN_MAX + 5)]
    steps = "\n".join(
        f"  - name: {name}\n    next: {names[i + 1]}" if i + 1 < len(names) else f"  - name: {name}"
        for i, name in enumerate(names)
    )
    svg = to_svg(load_definition(f"name: tests/long\nsteps:\n{steps}\n"))
    assert len(steps_of(svg)) == STEPS_DRAWN_MAX
