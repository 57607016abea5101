"""NoETL canonical v10 playbooks (seeds 000 and 003) compiled onto the canonical flow
definition (spec/11, spec/12-playbooks.md).

`definition_of(value)` takes a parsed playbook document and returns the checked
`FlowDefinition`, or raises `FlowCheckError` with every problem, each at its path in the
playbook with a one-line fix. `aos.flows.define.document.load_flow` dispatches files here.
"""

from __future__ import annotations

import re
from typing import Any

from aos.flows.define.cfd import DEFAULT_LIMITS, FlowDefinition, definition_from_value
from aos.flows.define.document import check_values
from aos.flows.define.playbook.authored import AuthoredDefinition
from aos.flows.define.playbook.compile import EVENT_ALIASES, Compiled, compile_playbook, is_playbook
from aos.flows.define.playbook.problems import Problems
from aos.flows.define.playbook.spec import merge as merge_specs
from aos.flows.define.playbook.tasks import PLAYBOOK_TOOL_KINDS
from aos.flows.errors import FlowCheckError, Problem
from aos.flows.limits import DefinitionLimits

__all__ = [
    "EVENT_ALIASES",
    "PLAYBOOK_TOOL_KINDS",
    "compile_value",
    "definition_of",
    "is_playbook",
    "merge_specs",
    "playbook_problem",
]

_CFD_TASK = re.compile(r"^\$\.steps\[(\d+)\]\.tasks\[(\d+)\]")
_CFD_STEP = re.compile(r"^\$\.steps\[(\d+)\]")


def compile_value(doc: Any, *, source: str = "<playbook>") -> AuthoredDefinition:
    """The authored CFD value of a playbook document (before the CFD's own checks). Raises
    FlowCheckError with the playbook's problems."""
    return _compiled(doc, source).value


def definition_of(
    doc: Any, *, source: str = "<playbook>", limits: DefinitionLimits = DEFAULT_LIMITS
) -> FlowDefinition:
    """The checked canonical definition of a playbook document. Problems the CFD's checks
    find (a jump to no task, a template that does not parse...) name the playbook's paths."""
    problems = check_values(doc, limits)
    if problems:
        raise FlowCheckError(problems, source=source)
    compiled = _compiled(doc, source)
    try:
        return definition_from_value(
            compiled.value, source=source, limits=limits, unreachable=False
        )
    except FlowCheckError as error:
        mapped = [playbook_problem(p) for p in error.problems]
        raise FlowCheckError(mapped, source=source) from None


def _compiled(doc: Any, source: str) -> Compiled:
    problems = Problems()
    if not isinstance(doc, dict):
        problems.add(
            "playbook.schema", (), "a playbook is a map", "start with `apiVersion: noetl.io/v2`"
        )
        raise FlowCheckError(problems.found, source=source)
    compiled = compile_playbook(doc, problems)
    if problems:
        raise FlowCheckError(problems.found, source=source)
    return compiled


def playbook_problem(problem: Problem) -> Problem:
    """A CFD problem at the playbook's path (`$.steps[1].tasks[0]` is `$.workflow[1].tool[0]`),
    the CFD path kept in the message."""
    task = _CFD_TASK.match(problem.path)
    if task is not None:
        path = f"$.workflow[{task.group(1)}].tool[{task.group(2)}]" + problem.path[task.end() :]
    elif (step_match := _CFD_STEP.match(problem.path)) is not None:
        path = f"$.workflow[{step_match.group(1)}]" + problem.path[step_match.end() :]
    else:
        path = problem.path
    return Problem(problem.code, path, f"{problem.message} (compiled: {problem.path})")
