"""Drawing flows: the Mermaid state diagram (compared as sets of states and edges) and the
text outline."""

from __future__ import annotations

import re

from aos.flows.define.cfd import load_definition
from aos.flows.define.draw import to_mermaid, to_text

FORK_JOIN_LOOP = """
name: tests/draw
steps:
  - name: start
    next:
      mode: inclusive
      arcs: [{to: left, when: "ctx.go"}, right]
  - name: left
    loop: {in: [1, 2], mode: parallel}
    tasks: [{name: work, do: call, tool: {kind: echo}, timeout_s: 2}]
    next: merge
  - name: right
    next: merge
  - name: merge
    join: all
    next: [{to: done, when: "$.ctx.ok"}, other.step]
  - name: done
  - name: other.step
"""

_EDGE = re.compile(r"^(\S+) --> (\S+)(?: : (.*))?$")
_STATE = re.compile(r'^state "(.*)" as (\S+)$')
_PSEUDO = re.compile(r"^state (\S+) <<(fork|join)>>$")


def parse(
    diagram: str,
) -> tuple[set[tuple[str, str, str | None]], dict[str, str], set[tuple[str, str]]]:
    """Edges (source, target, label), state labels by id, and pseudo-states (id, kind)."""
    lines = diagram.splitlines()
    assert lines[0] == "stateDiagram-v2"
    edges: set[tuple[str, str, str | None]] = set()
    states: dict[str, str] = {}
    pseudo: set[tuple[str, str]] = set()
    for line in (line.strip() for line in lines[1:]):
        if match := _EDGE.match(line):
            edges.add((match[1], match[2], match[3]))
        elif match := _STATE.match(line):
            states[match[2]] = match[1]
        elif match := _PSEUDO.match(line):
            pseudo.add((match[1], match[2]))
        else:
            raise AssertionError(f"unexpected line {line!r}")
    return edges, states, pseudo


def test_mermaid_has_the_fork_the_join_and_the_loop() -> None:
    edges, states, pseudo = parse(to_mermaid(load_definition(FORK_JOIN_LOOP)))
    assert states == {
        "start": "start",
        "left": "left (loop parallel)",
        "right": "right",
        "merge": "merge",
        "done": "done",
        "other_step": "other.step",
    }
    assert pseudo == {("fork_start", "fork"), ("join_merge", "join")}
    assert edges == {
        ("[*]", "start", None),
        ("start", "fork_start", None),
        ("fork_start", "left", "ctx.go"),
        ("fork_start", "right", None),
        ("left", "join_merge", None),
        ("right", "join_merge", None),
        ("join_merge", "merge", None),
        ("merge", "done", "$.ctx.ok"),
        ("merge", "other_step", None),
        ("done", "[*]", None),
        ("other_step", "[*]", None),
    }


def test_mermaid_ids_stay_distinct_and_labels_safe() -> None:
    text = """
name: tests/ids
policy: {final_step: fork_a}
steps:
  - name: a
    next:
      mode: inclusive
      arcs: [{to: a.b, when: '"y;z" in x'}, a_b]
  - name: a.b
  - name: a_b
  - name: fork_a
"""
    edges, states, pseudo = parse(to_mermaid(load_definition(text)))
    assert states == {"a": "a", "a_b": "a.b", "a_b_2": "a_b", "fork_a": "fork_a (final)"}
    assert pseudo == {("fork_a_2", "fork")}
    assert ("fork_a_2", "a_b", "#quot;y#59;z#quot; in x") in edges
    assert ("fork_a_2", "a_b_2", None) in edges


def test_long_guards_are_cut() -> None:
    text = f"""
name: tests/long
steps:
  - name: a
    next: [{{to: a, when: "{"x" * 100}"}}]
"""
    edges, _, _ = parse(to_mermaid(load_definition(text)))
    label = next(label for _, _, label in edges if label)
    assert len(label) == 60
    assert label.endswith("...")


def test_drawing_is_deterministic() -> None:
    defn = load_definition(FORK_JOIN_LOOP)
    assert to_mermaid(defn) == to_mermaid(load_definition(FORK_JOIN_LOOP))
    assert to_text(defn) == to_text(load_definition(FORK_JOIN_LOOP))


def test_text_outline() -> None:
    text = """
name: tests/outline
steps:
  - name: a
    admit: "ctx.ready"
    tasks:
      - name: pay
        do: call
        tool: {kind: http}
        timeout_s: 1.5
        policy: {rules: [{then: {do: retry}}]}
        branches:
          error: [{do: fail}]
      - name: pick
        do: branch
        cases: [{when: x, tasks: [{do: wait_signal, signal: go}]}]
    next: b
  - name: b
    join: all
"""
    lines = to_text(load_definition(text)).splitlines()
    assert lines == [
        "flow tests/outline  (aos.flow/1, entry a)",
        "step a  [admit ctx.ready]",
        "    pay: call http, timeout 1500 ms  [1 rule]",
        "        error:",
        "            pay.error.task_1: fail",
        "    pick: branch",
        "        case 1:",
        "            pick.case_1.task_1: wait_signal go",
        "    next exclusive",
        "        -> b",
        "step b  [join all]",
        "    end",
    ]
