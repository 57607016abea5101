"""Names a definition's templates may read (spec/11 §1.6, `flow.template_reference_unknown`):
a template that reads a name no step, task, workload key, arc argument, loop item or
namespace of the interpreter provides renders as nothing at run time (NoETL's lenient
contexts) or fails the step; either way the author misspelled something, and `aos flow
check` says so where it is written, with the closest known name.

The namespace (modules/flow/aos_flow/run.py `Run.scope`): the definition's workload keys, step results
by step name, an arc's `args` keys, a loop's item (its iterator's name) and a `repeat`'s
`as`, finished tasks by task name (`aos.flow/2`), and the named namespaces below, which the
interpreter always provides. Fields are checked only where the interpreter gives the value
its shape (`execution`, `event`): a step's result, and a task's `outcome`, carry whatever its
tool answered (NoETL's `outcome.http.status`, `outcome.response`), known only when it runs.

A workload key given only at run time, never declared in the definition's `workload`, is
unknown here: declare it (with a default) so that readers and this check see it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from jinja2 import nodes

if TYPE_CHECKING:
    from aos.flows.define.cfd import FlowDefinition, Task

NAMESPACES = frozenset(
    {
        "execution_id",
        "workload",
        "ctx",
        "steps",
        "business_ref",
        "keychain",
        "execution",
        "args",
        "inputs",
        "iter",
        "loop_index",
        "event",
        "_prev",
        "results",
        # policy rules (modules/flow/aos_flow/frames.py) and the step's own set_ctx
        "outcome",
        "_task",
        "_attempt",
        # the interpreter's template functions (modules/flow/aos_flow/expressions.py) and Jinja's
        "range",
        "dict",
        "lipsum",
        "cycler",
        "joiner",
        "namespace",
        "tojson",
        "b64encode",
        "coalesce",
        "length",
        "upper",
        "first",
        "merge_objects",
        "loop",
    }
)
SHAPES: dict[str, frozenset[str]] = {
    "execution": frozenset({"id", "flow", "version", "definition"}),
    "event": frozenset({"name", "step", "payload"}),
}
"""Values whose fields the interpreter sets: a template may read only these."""
SUGGESTIONS_MAX = 1


class KnownNames:
    """What one definition's templates may read at their top level."""

    def __init__(self, defn: FlowDefinition) -> None:
        self.authored = frozenset(_authored_names(defn))
        self.names = self.authored | NAMESPACES

    def problems(self, template: nodes.Template) -> list[str]:
        """What is wrong with the names `template` reads: one message each, in name order."""
        declared = _declared(template)
        read = {node.name for node in template.find_all(nodes.Name) if node.ctx == "load"}
        found = [
            _unknown_name(name, self.authored) for name in sorted(read - declared - self.names)
        ]
        for root, *fields in sorted(set(_field_chains(template))):
            if root not in declared:
                found.extend(_unknown_fields(root, fields))
        return list(dict.fromkeys(found))  # `a.b.c` reads `a.b` too: one message


def _authored_names(defn: FlowDefinition) -> Iterator[str]:
    yield from (key for key in defn.workload if isinstance(key, str))
    for step in defn.steps:
        yield step.name
        if step.loop is not None:
            yield step.loop.iterator
        for arc in step.next.arcs:
            if isinstance(arc.args, dict):
                yield from (key for key in arc.args if isinstance(key, str))
        for task in _tasks(step.tasks):
            yield task.name
            yield task.name.split(".", 1)[0]
            if task.do == "repeat":
                yield task.as_


def _tasks(tasks: Iterable[Task]) -> Iterator[Task]:
    for task in tasks:
        yield task
        lists = getattr(task, "task_lists", None)
        if lists is not None:
            for _, inner in lists():
                yield from _tasks(inner)


def _unknown_name(name: str, authored: frozenset[str]) -> str:
    close = difflib.get_close_matches(name, sorted(authored), n=SUGGESTIONS_MAX)
    hint = f"; did you mean `{close[0]}`?" if close else ""
    return (
        f"`{name}` is no step, task, workload key, arc argument, loop item or namespace of "
        f"the interpreter{hint}"
    )


def _unknown_fields(root: str, fields: list[str]) -> Iterator[str]:
    path = root
    for field in fields:
        shape = SHAPES.get(path)
        if shape is None:
            return
        if field not in shape:
            yield f"`{path}` has no field `{field}`; it has {', '.join(sorted(shape))}"
            return
        path = f"{path}.{field}"


def _field_chains(template: nodes.Template) -> Iterator[tuple[str, ...]]:
    """Every `name.field.field` (or `name['field']`) the template reads, outermost first."""
    for node in template.find_all((nodes.Getattr, nodes.Getitem)):
        chain = _chain(node)
        if chain is not None and len(chain) > 1:
            yield chain


def _chain(node: Any) -> tuple[str, ...] | None:
    fields: list[str] = []
    while True:
        if isinstance(node, nodes.Getattr):
            fields.append(node.attr)
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
            if not isinstance(node.arg.value, str):
                return None
            fields.append(node.arg.value)
        elif isinstance(node, nodes.Name):
            return (node.name, *reversed(fields))
        else:
            return None
        node = node.node


def _declared(template: nodes.Template) -> set[str]:
    """Names the template binds itself (`{% set %}`, `{% for %}` targets, macro arguments):
    they shadow the namespace wherever they are read (Jinja's own scoping is finer, and its
    analysis needs every filter the interpreter adds: this check errs towards silence)."""
    return {node.name for node in template.find_all(nodes.Name) if node.ctx in ("store", "param")}
