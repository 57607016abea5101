"""A flow graph as a canonical flow definition (CFD, spec/11-flows.md §1): one step per
node, one arc per edge, on the CFD's existing constructs only.

- **Data on edges.** Every arc carries the source step's result as `args.value`. A node with
  one predecessor takes that value as its input; a node with several is a `join: all` step
  whose first task aggregates `inputs` by seed 004's rules (empty objects merge into one, are
  dropped beside a non-empty input; several inputs form a list) with a `branch`.
- **Merge `>`**: a `noop` merging the input's maps (`merge_objects`).
- **Guards**: the JSONPath runs over a one-item list holding the input (so the seed's
  `$[?(@.status=0)]` selects the input when it matches; `=` is read as `==`); a false guard
  skips the `call`, and the step's result stays its input. A guarded subflow writes its
  gate and input into `ctx` (`gate_N`, `origin_N`); its tasks run only while every gate
  around them holds, and its join gives back the origin when its gate is false.
- **Iteration `*`**: a `repeat` over the input, one `call` per item, results in order.
- **Tasks** are `call`s of the tool they are bound to (`binding`), with the input as `args`.
- **Resources**: `file` or `http` tool calls (`resources`); a sink passes its input on."""

from __future__ import annotations

import re
from typing import Any

from aos.flows.define.flowlang.binding import Binding
from aos.flows.define.flowlang.graph import END, START, Graph, Node
from aos.flows.define.flowlang.resources import sink_tool, source_tasks

_STEP_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_FLOW_UNSAFE = re.compile(r"[^a-z0-9._/-]")
STEP_NAME_LENGTH_MAX = 100
_NON_EMPTY = "inputs | map(attribute='value') | reject('none') | reject('equalto', {}) | list"


def compile_graph(graph: Graph, binding: Binding, *, name_hint: str) -> dict[str, Any]:
    names = {number: step_name(node) for number, node in graph.nodes.items()}
    reachable_end = bool(graph.predecessors(END))
    steps = []
    for number in sorted(graph.nodes, key=graph.order):
        if number == END and not reachable_end:
            continue
        steps.append(_step(graph, graph.nodes[number], names, binding))
    definition: dict[str, Any] = {
        "format": "aos.flow/1",
        "name": flow_name(graph.name or name_hint),
        "entry": names[START],
        "steps": steps,
    }
    if graph.doc:
        definition["description"] = graph.doc.strip()
    return definition


def flow_name(text: str) -> str:
    name = _FLOW_UNSAFE.sub("-", text.lower()).strip("-./") or "flow"
    if not name[0].isalnum():
        name = "f" + name
    return name[:128]


def step_name(node: Node) -> str:
    if node.number == START:
        return "_start_"
    if node.number == END:
        return "_end_"
    if node.kind == "fork":
        return f"_start_{node.number}_"
    if node.kind == "join":
        return f"_end_{node.number}_"
    base = (
        node.name if node.kind == "task" else ("resource" if node.kind != "literal" else "literal")
    )
    base = _STEP_UNSAFE.sub("_", base)[:STEP_NAME_LENGTH_MAX]
    if not (base[0].isalpha() or base[0] == "_"):
        base = "t_" + base
    return f"{base}.{node.number}"


def _step(graph: Graph, node: Node, names: dict[int, str], binding: Binding) -> dict[str, Any]:
    predecessors = graph.predecessors(node.number)
    step: dict[str, Any] = {"name": names[node.number], "tasks": []}
    if node.doc:
        step["description"] = node.doc.strip()
    tasks: list[dict[str, Any]] = step["tasks"]
    if node.number == START:
        tasks.append(_noop("input", "{{ workload }}"))
    elif node.kind == "literal":
        tasks.append(_noop("input", node.params))
    elif node.kind == "source":
        tasks.extend(source_tasks(node, _run_when(node, own=False)))
    else:
        if len(predecessors) > 1:
            step["join"] = "all"
        tasks.extend(_input_tasks(node, predecessors))
        tasks.extend(_body(graph, node, binding))
    if node.kind == "sink":
        step["result"] = _current(node)
    successors = sorted(graph.successors(node.number), key=graph.order)
    if successors:
        arcs = [{"to": names[s], "args": {"value": "{{ event.payload }}"}} for s in successors]
        step["next"] = {"mode": "inclusive", "arcs": arcs}
    return step


def _noop(name: str, result: Any) -> dict[str, Any]:
    return {"name": name, "do": "noop", "result": result}


def _input_tasks(node: Node, predecessors: list[int]) -> list[dict[str, Any]]:
    """`input`: the node's input (aggregated when it has several predecessors); `merged`
    after it for a merge; `doc`, `guard`, `pass` for a guard (`pass` leaves the input as the
    running result, so a skipped call passes it on)."""
    if not predecessors:
        tasks = [_noop("input", {})]
    elif len(predecessors) == 1:
        tasks = [_noop("input", "{{ args.value }}")]
    else:
        tasks = [_aggregate(len(predecessors))]
    current = "input"
    if node.merge:
        tasks.append(_noop("merged", _MERGE))
        current = "merged"
    if node.guard is not None:
        tasks += [
            _noop("doc", [_ref(f"results.{current}")]),
            {
                "name": "guard",
                "do": "branch",
                "cases": [
                    {
                        "when": {"jsonpath": guard_query(node.guard)},
                        "tasks": [_noop("holds", True)],
                    }
                ],
                "else": [_noop("fails", False)],
            },
        ]
    if node.kind == "fork" and node.guard is not None:
        gate = _conjunction(["results.guard", *(f"ctx.gate_{g}" for g in node.gates)])
        origin = _ref(f"results.{current}")
        tasks.append(
            {
                "name": "gate",
                "do": "assign",
                "set": {f"gate_{node.number}": gate, f"origin_{node.number}": origin},
            }
        )
    if node.guard is not None:
        tasks.append(_noop("pass", _ref(f"results.{current}")))
    return tasks


_MERGE = (
    "{{ merge_objects(*(results.input if results.input is sequence and results.input is not "
    "string and results.input is not mapping else [results.input])) | tojson }}"
)


def _aggregate(count: int) -> dict[str, Any]:
    """Seed 004's rules as a branch over the `join: all` inputs: no non-empty input gives
    `{}`, exactly one gives it (natively, by its index), more give the list of them."""
    cases: list[dict[str, Any]] = [
        {"when": _ref(f"({_NON_EMPTY} | length) == 0"), "tasks": [_noop("empty", {})]}
    ]
    for index in range(count):
        value = f"inputs[{index}].value"
        when = _ref(f"({_NON_EMPTY} | length) == 1 and {value} is not none and {value} != {{}}")
        cases.append({"when": when, "tasks": [_noop(f"only_{index}", _ref(value))]})
    many = _noop("many", _ref(f"{_NON_EMPTY} | tojson"))
    return {"name": "input", "do": "branch", "cases": cases, "else": [many]}


def _ref(expression: str) -> str:
    """A template of one expression (a plain path renders natively)."""
    return "{{ " + expression + " }}"


def _conjunction(terms: list[str]) -> str:
    return _ref(" and ".join(terms))


def _run_when(node: Node, *, own: bool) -> str | None:
    terms = (["results.guard"] if own and node.guard is not None else []) + [
        f"ctx.gate_{g}" for g in node.gates
    ]
    return _conjunction(terms) if terms else None


def _current(node: Node) -> str:
    return "{{ results.merged }}" if node.merge else "{{ results.input }}"


def _body(graph: Graph, node: Node, binding: Binding) -> list[dict[str, Any]]:
    if node.kind == "task":
        return [_run(node, binding)]
    if node.kind == "sink":
        call = {
            "name": "run",
            "do": "call",
            "tool": sink_tool(node),
            "args": _current(node),
        }
        when = _run_when(node, own=False)
        if when is not None:
            call["when"] = when
        return [call]
    if node.kind == "join" and node.fork is not None and graph.nodes[node.fork].guard:
        gate = f"ctx.gate_{node.fork}"
        pick = {
            "when": _ref(f"not {gate}"),
            "tasks": [_noop("origin", _ref(f"ctx.origin_{node.fork}"))],
        }
        return [{"name": "pick", "do": "branch", "cases": [pick]}]
    return []


def _run(node: Node, binding: Binding) -> dict[str, Any]:
    tool, args = binding.call_for(node, _current(node))
    call: dict[str, Any] = {"name": "run", "do": "call", "tool": tool}
    call["args"] = binding.call_for(node, "{{ item }}")[1] if node.iterate else args
    task = call
    if node.iterate:
        task = {
            "name": "each",
            "do": "repeat",
            "over": _current(node),
            "as": "item",
            "tasks": [call],
        }
    when = _run_when(node, own=True)
    if when is not None:
        task["when"] = when
    return task


def guard_query(expression: str) -> str:
    """The seed's guard as an RFC 9535 query over `results.doc` (the one-item list holding
    the input): `$` is rooted there, and a lone `=` is the seed's equality (`==`)."""
    out: list[str] = []
    quote: str | None = None
    text = expression.strip()
    for index, char in enumerate(text):
        if quote is not None:
            out.append(char)
            if char == quote and text[index - 1] != "\\":
                quote = None
            continue
        if char in "'\"":
            quote = char
            out.append(char)
        elif char == "$":
            out.append("$.results.doc")
        elif (
            char == "="
            and text[index - 1 : index] not in ("=", "!", "<", ">")
            and text[index + 1 : index + 2] != "="
        ):
            out.append("==")
        else:
            out.append(char)
    return "".join(out)
